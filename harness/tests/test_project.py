"""Projects of their own kinds (meshgate/system/project.py): meshgate.toml read by tomllib and
by the reader older Pythons use, the project file's keys and their errors, the runner built by
its steps (for `meshgate run` and for every revision of ab and bisect), its cases as the
default, and `meshgate run --runner`. The steps here are small Python scripts; the example projects
under examples/ are built for real by their READMEs' commands (tests/test_doc_commands.py)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path
from unittest import mock

from meshgate import cli
from meshgate.core import files
from meshgate.gate import ab
from meshgate.system import build, project, revisions

from .support import FAKE_RUNNER

REPO = Path(__file__).resolve().parents[2]
GIT = shutil.which("git")

try:
    import tomllib
except ImportError:  # Python < 3.11: the subset reader alone
    tomllib = None

# A step that leaves an executable runner at build/out/runner and appends a line to the log
# named by STEP_LOG (its working directory and CMAKE_PREFIX_PATH).
MAKE_RUNNER = textwrap.dedent("""\
    import json, os, pathlib, sys
    runner = pathlib.Path("build/out/runner")
    runner.parent.mkdir(parents=True, exist_ok=True)
    runner.write_text("#!/bin/sh\\necho runner\\n")
    runner.chmod(0o755)
    with open(os.environ["STEP_LOG"], "a") as log:
        log.write(json.dumps({"cwd": os.getcwd(), "argv": sys.argv[1:],
                              "prefix_path": os.environ.get("CMAKE_PREFIX_PATH", ""),
                              "jobs": os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL")}) + "\\n")
    """)

PROJECT_TOML = textwrap.dedent(f"""\
    # A project of its own kinds.
    [runner]
    build = [
      [{json.dumps(sys.executable)}, "make_runner.py", "first"],
      [{json.dumps(sys.executable)}, "make_runner.py", "second"],  # a trailing comma
    ]
    path = "build/out/runner"
    cases = "suites"
    """)


def write_project(root: Path, toml: str = PROJECT_TOML) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "meshgate.toml").write_text(toml)
    (root / "make_runner.py").write_text(MAKE_RUNNER)
    (root / "suites").mkdir(exist_ok=True)
    (root / "suites" / "a.yaml").write_text("suite: a\ncases: []\n")
    (root / ".gitignore").write_text("build/\n")


def parse_both(text: str) -> dict:
    """`text` by the subset reader, checked against tomllib where Python has it."""
    ours = project.parse_toml_subset(text)
    if tomllib is not None:
        assert ours == tomllib.loads(text), (ours, tomllib.loads(text))
    return ours


class TomlTest(unittest.TestCase):
    def test_the_example_project_files_read_alike(self):
        for path in REPO.glob("examples/*/meshgate.toml"):
            with self.subTest(path=path):
                document = parse_both(path.read_text())
                self.assertIsInstance(document["runner"]["build"], list)

    def test_what_a_project_file_uses(self):
        text = textwrap.dedent("""\
            top = 1   # before any table
            [runner]
            "quoted key" = 'C:\\literal'
            escapes = "tab\\tquote\\"backslash\\\\ \\u00e9"
            nested = [ ["a", "b"], [], ['c'], ]
            lines = [
              1,  # a comment inside
              -2,
              1_000,
            ]
            yes = true
            no = false
            hash = "# not a comment"
            [other-table]
            empty = ""
            """)
        self.assertEqual(parse_both(text), {
            "top": 1,
            "runner": {"quoted key": "C:\\literal", "escapes": "tab\tquote\"backslash\\ \u00e9",
                       "nested": [["a", "b"], [], ["c"]], "lines": [1, -2, 1000], "yes": True,
                       "no": False, "hash": "# not a comment"},
            "other-table": {"empty": ""}})

    def test_errors_name_the_line(self):
        # The last ones are TOML that a project file has no use for: tomllib reads them.
        for text, line, words, is_toml in [
            ('[runner]\npath = "unterminated\n', 2, "unterminated string", False),
            ("[runner]\npath\n", 2, "expected '='", False),
            ('[runner]\na = "x"\na = "y"\n', 3, "defined twice", False),
            ("[runner]\n[runner]\n", 2, "defined twice", False),
            ('[runner]\nbuild = ["a" "b"]\n', 2, "expected ',' or ']'", False),
            ('[runner]\npath = "a" "b"\n', 2, "after the value", False),
            ("[runner]\nbuild = [\n", 3, "unterminated array", False),
            ("[runner]\nratio = 1.5\n", 2, "unsupported value", True),
            ("[runner]\nsub.key = 1\n", 2, "dotted keys are not supported", True),
        ]:
            with self.subTest(text=text):
                with self.assertRaises(ValueError) as caught:
                    project.parse_toml_subset(text)
                self.assertIn(f"line {line}:", str(caught.exception))
                self.assertIn(words, str(caught.exception))
                if tomllib is not None and not is_toml:
                    with self.assertRaises(tomllib.TOMLDecodeError):
                        tomllib.loads(text)


class ProjectFileTest(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="meshgate-project-")
        self.addCleanup(tmp.cleanup)
        self.root = Path(tmp.name).resolve() / "proj"

    def test_a_project_file_names_its_steps_runner_and_cases(self):
        write_project(self.root)
        found = project.load(self.root)
        self.assertEqual(found.root, self.root)
        self.assertEqual(found.build_steps, [[sys.executable, "make_runner.py", "first"],
                                             [sys.executable, "make_runner.py", "second"]])
        self.assertEqual(found.runner, self.root / "build" / "out" / "runner")
        self.assertEqual(found.cases, self.root / "suites")

    def test_one_command_alone_and_the_default_cases(self):
        write_project(self.root, '[runner]\nbuild = ["make", "runner"]\npath = "runner"\n')
        found = project.load(self.root)
        self.assertEqual(found.build_steps, [["make", "runner"]])
        self.assertEqual(found.cases, self.root / "cases")

    def test_no_project_file_is_no_project(self):
        self.root.mkdir()
        self.assertIsNone(project.load(self.root))

    def test_unusable_files_say_which_key(self):
        for toml, words in [
            ('path = "x"\n', "unknown table or key 'path'"),
            ("[build]\n", "unknown table or key 'build'"),
            ("", "no [runner] table"),
            ('[runner]\nbuild = ["a"]\npath = "r"\nrunner = "x"\n', "unknown key 'runner'"),
            ('[runner]\npath = "r"\n', "build is required"),
            ('[runner]\nbuild = []\npath = "r"\n', "build is required"),
            ('[runner]\nbuild = "make"\npath = "r"\n', "build is required"),
            ('[runner]\nbuild = [["a"], "b"]\npath = "r"\n', "'b' is not a command"),
            ('[runner]\nbuild = [["a"], []]\npath = "r"\n', "[] is not a command"),
            ('[runner]\nbuild = [["a", 1]]\npath = "r"\n', "is not a command"),
            ('[runner]\nbuild = ["a"]\n', "path is required"),
            ('[runner]\nbuild = ["a"]\npath = "r"\ncases = ["c"]\n', "cases must be a folder"),
            ('[runner\n', "line 1"),
        ]:
            with self.subTest(toml=toml):
                write_project(self.root, toml)
                with self.assertRaises(project.ProjectError) as caught:
                    project.load(self.root)
                self.assertIn(str(self.root / "meshgate.toml"), str(caught.exception))
                self.assertIn(words, str(caught.exception))

    def test_found_from_a_folder_below_the_project(self):
        write_project(self.root)
        below = self.root / "src" / "deep"
        below.mkdir(parents=True)
        self.assertEqual(project.find(below), self.root)
        self.assertIsNone(project.find(self.root.parent))
        with mock.patch("pathlib.Path.cwd", return_value=below):
            self.assertEqual(files.source_root(), self.root)
            self.assertEqual(build.default_cases(files.source_root()), self.root / "suites")

    def test_a_folder_with_cases_of_its_own_inside_a_checkout_runs_those(self):
        """An example inside the checkout (no project file) runs its own cases/ from its folder;
        any other folder of the checkout runs the checkout's."""
        checkout = self.root
        (checkout / "cases").mkdir(parents=True)
        example = checkout / "examples" / "prog"
        (example / "cases").mkdir(parents=True)
        elsewhere = checkout / "docs"
        elsewhere.mkdir()
        with mock.patch("pathlib.Path.cwd", return_value=example):
            self.assertEqual(build.default_cases(checkout), example / "cases")
        with mock.patch("pathlib.Path.cwd", return_value=elsewhere):
            self.assertEqual(build.default_cases(checkout), checkout / "cases")


class BuildRunnerTest(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="meshgate-project-")
        self.addCleanup(tmp.cleanup)
        self.tmp = Path(tmp.name).resolve()
        self.root = self.tmp / "proj"
        write_project(self.root)
        self.log = self.tmp / "steps.jsonl"
        self.env = {"PATH": os.environ.get("PATH", ""), "STEP_LOG": str(self.log)}

    def steps(self) -> list[dict]:
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []

    def test_every_step_runs_in_the_project_with_the_installed_prefix_first(self):
        out = io.StringIO()
        prefix = self.tmp / "prefix"
        env = dict(self.env, CMAKE_PREFIX_PATH="/elsewhere")
        with mock.patch.object(project, "installed_prefix", return_value=prefix):
            runner = project.build_runner(project.load(self.root), env, out)
        self.assertEqual(runner, self.root / "build" / "out" / "runner")
        self.assertEqual([s["argv"] for s in self.steps()], [["first"], ["second"]])
        self.assertEqual({s["cwd"] for s in self.steps()}, {str(self.root)})
        self.assertEqual({s["prefix_path"] for s in self.steps()}, {f"{prefix}{os.pathsep}/elsewhere"})
        self.assertEqual({s["jobs"] for s in self.steps()}, {str(build.build_jobs(env))})
        self.assertEqual(out.getvalue(), "", "a build that prints nothing of note shows nothing")

    def test_the_prefix_of_an_installed_driver(self):
        # cmake --install puts the package in <prefix>/lib/meshgate/python/meshgate/, beside
        # <prefix>/lib/cmake/meshgate/meshgateConfig.cmake.
        prefix = self.tmp / "prefix"
        config = prefix / "lib" / "cmake" / "meshgate" / "meshgateConfig.cmake"
        config.parent.mkdir(parents=True)
        config.write_text("")
        installed = prefix / "lib" / "meshgate" / "python" / "meshgate" / "system" / "project.py"
        with mock.patch.object(project, "__file__", str(installed)):
            self.assertEqual(project.installed_prefix(), prefix)
        self.assertIsNone(project.installed_prefix(), "a checkout is no installed prefix")

    def test_a_failing_step_stops_the_build(self):
        write_project(self.root, PROJECT_TOML.replace('"second"', '"second"],\n  ["false"'))
        with self.assertRaises(build.BuildError) as caught:
            project.build_runner(project.load(self.root), self.env, io.StringIO())
        self.assertIn("`false` failed with exit code 1", str(caught.exception))

    def test_a_build_that_leaves_no_runner_says_which_key(self):
        write_project(self.root, PROJECT_TOML.replace("build/out/runner", "build/elsewhere"))
        with self.assertRaises(project.ProjectError) as caught:
            project.build_runner(project.load(self.root), self.env, io.StringIO())
        self.assertIn("left no executable", str(caught.exception))
        self.assertIn("[runner] path", str(caught.exception))

    def test_runner_command_builds_the_projects_runner_unless_meshgate_runner_is_set(self):
        command = build.runner_command(self.root, env=self.env, out=io.StringIO())
        self.assertEqual(command, [str(self.root / "build" / "out" / "runner")])
        self.assertEqual(len(self.steps()), 2)
        given = build.runner_command(self.root, env=dict(self.env, MESHGATE_RUNNER=str(FAKE_RUNNER)))
        self.assertEqual(given, [str(FAKE_RUNNER)])
        self.assertEqual(len(self.steps()), 2)

    def test_meshgate_plan_is_not_the_projects_to_build(self):
        with mock.patch.object(build, "installed_runner", return_value=Path("/p/bin/meshgate-plan")):
            command = build.runner_command(self.root, env=self.env, target=build.PLAN_TARGET,
                                           override="MESHGATE_PLAN")
        self.assertEqual(command, ["/p/bin/meshgate-plan"])
        self.assertEqual(self.steps(), [])


class RunnerOptionTest(unittest.TestCase):
    def run_driver(self, *argv: str) -> tuple[int, str]:
        err = io.StringIO()
        env = {k: v for k, v in os.environ.items() if k != "MESHGATE_RUNNER"}
        with mock.patch.dict(os.environ, env, clear=True), contextlib.redirect_stderr(err), \
                contextlib.redirect_stdout(io.StringIO()):
            code = cli.main(["run", *argv])
        return code, err.getvalue()

    def test_a_runner_that_is_not_an_executable_is_refused(self):
        code, err = self.run_driver("--runner", "/no/such/runner")
        self.assertEqual(code, 2)
        self.assertIn("--runner /no/such/runner is not an executable file", err)

    def test_the_given_runner_runs_without_any_build(self):
        with tempfile.TemporaryDirectory(prefix="meshgate-project-") as tmp:
            scenario = Path(tmp) / "scenario.json"
            scenario.write_text(json.dumps({"cases": [{"id": "s/a", "kind": "layout", "tags": ["smoke"], "outcome": "pass"}]}))
            log = Path(tmp) / "launches.jsonl"
            cases = Path(tmp) / "cases"
            cases.mkdir()
            with mock.patch.dict(os.environ, {"FAKE_RUNNER_SCENARIO": str(scenario),
                                              "FAKE_RUNNER_LOG": str(log)}), \
                    mock.patch.object(build, "runner_command", side_effect=AssertionError("built")):
                code, err = self.run_driver(str(cases), "--runner", str(FAKE_RUNNER),
                                            "--out", str(Path(tmp) / "run"))
            self.assertEqual(code, 0, err)
            self.assertTrue(log.read_text().strip())


def git(repo: Path, *args: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com")
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env=env).stdout.strip()


@unittest.skipIf(GIT is None, "git is not installed")
class RevisionProjectTest(unittest.TestCase):
    """A project's runner built at a revision, as `meshgate ab` and `bisect` build it."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="meshgate-project-")
        self.addCleanup(tmp.cleanup)
        self.tmp = Path(tmp.name).resolve()
        self.repo = self.tmp / "repo"
        self.repo.mkdir()
        git(self.repo, "init", "-q", "-b", "main")
        (self.repo / "README").write_text("before the project\n")
        git(self.repo, "add", "README")
        git(self.repo, "commit", "-q", "-m", "no project yet")
        self.before = git(self.repo, "rev-parse", "HEAD")
        self.log = self.tmp / "steps.jsonl"
        self.env = {"PATH": os.environ.get("PATH", ""), "STEP_LOG": str(self.log),
                    "MESHGATE_RUNNER": "/ignored/for/revisions"}

    def commit_project(self, folder: Path) -> str:
        write_project(folder)
        git(self.repo, "add", ".")
        git(self.repo, "commit", "-q", "-m", "project")
        return git(self.repo, "rev-parse", "HEAD")

    def steps(self) -> list[dict]:
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []

    def build(self, folder: Path, rev: str) -> revisions.BuiltRevision:
        preset = revisions.choose_preset(folder)
        self.assertEqual(preset, revisions.PROJECT_PRESET)
        return revisions.runner_for(folder, rev, preset, out=io.StringIO(), env=self.env)

    def test_each_revision_builds_its_own_runner_once(self):
        commit = self.commit_project(self.repo)
        built = self.build(self.repo, "HEAD")
        worktree = revisions.worktree_path(self.repo, commit)
        self.assertEqual(built, (commit, worktree, [str(worktree / "build" / "out" / "runner")]))
        self.assertEqual({s["cwd"] for s in self.steps()}, {str(worktree)})
        self.assertTrue((worktree / "build" / revisions.PROJECT_PRESET / revisions.BUILD_LOG).is_file())
        self.assertEqual(revisions.revision_cases(built.root), worktree / "suites")
        side = ab.side_for(self.repo, "base", "HEAD", None)
        self.assertEqual(side.case_paths, [str(worktree / "suites")])
        self.assertEqual(len(self.steps()), 2, "the second build of a clean revision is reused")

    def test_a_project_in_a_folder_of_its_repository(self):
        folder = self.repo / "kernels"
        commit = self.commit_project(folder)
        built = self.build(folder, "HEAD")
        worktree = revisions.worktree_path(folder, commit)
        self.assertEqual(built.root, worktree / "kernels")
        self.assertEqual(built.runner, [str(worktree / "kernels" / "build" / "out" / "runner")])

    def test_a_revision_without_the_project_file_does_not_build(self):
        self.commit_project(self.repo)
        with self.assertRaises(revisions.RevisionBuildError) as caught:
            self.build(self.repo, self.before)
        self.assertIn("it has no meshgate.toml", str(caught.exception))
        self.assertEqual(self.steps(), [])

    def test_a_revision_whose_project_file_is_unusable_does_not_build(self):
        self.commit_project(self.repo)
        (self.repo / "meshgate.toml").write_text("[runner]\n")
        git(self.repo, "commit", "-q", "-am", "broken")
        with self.assertRaises(revisions.RevisionBuildError) as caught:
            self.build(self.repo, "HEAD")
        self.assertIn("build is required", str(caught.exception))


if __name__ == "__main__":
    unittest.main()


@unittest.skipIf(GIT is None, "git is not installed")
class ProjectReportsTest(unittest.TestCase):
    """A project outside the checkout gets its reports in its own reports/, stamped with its own
    commit (meshgate's version stays in versions.meshgate)."""

    def test_a_projects_run_lands_in_the_project_stamped_with_its_commit(self):
        with tempfile.TemporaryDirectory(prefix="meshgate-project-") as tmp:
            proj = Path(tmp).resolve() / "proj"
            (proj / "cases").mkdir(parents=True)
            (proj / "meshgate.toml").write_text('[runner]\nbuild = [["true"]]\npath = "runner"\n')
            git(proj, "init", "-q")
            git(proj, "add", "meshgate.toml")
            git(proj, "commit", "-q", "-m", "project")
            head = git(proj, "rev-parse", "HEAD")
            scenario = Path(tmp) / "scenario.json"
            scenario.write_text(json.dumps({"cases": [{"id": "s/a", "kind": "layout", "tags": ["smoke"],
                                                       "outcome": "pass"}]}))
            env = {k: v for k, v in os.environ.items() if k not in ("MESHGATE_RUNNER", "MESHGATE_COMMIT")}
            env.update(FAKE_RUNNER_SCENARIO=str(scenario))
            with mock.patch.dict(os.environ, env, clear=True), contextlib.redirect_stderr(io.StringIO()) as err, \
                    contextlib.redirect_stdout(io.StringIO()):
                # Run from meshgate's checkout, on the project's cases.
                code = cli.main(["run", str(proj / "cases"), "--runner", str(FAKE_RUNNER)])
            self.assertEqual(code, 0, err.getvalue())
            runs = list((proj / "reports").iterdir())
            self.assertEqual(len(runs), 1, runs)
            self.assertTrue(runs[0].name.endswith("-" + head[:7]), runs[0].name)
            document = json.loads((runs[0] / "results.json").read_text())
            self.assertEqual(document["run"]["commit"], head)
