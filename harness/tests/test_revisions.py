import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from meshgate.commands import ab as ab_command
from meshgate.gate import ab
from meshgate.system import build, revisions
from meshgate.system.revisions import RevisionBuildError, RevisionError

from .support import FIXTURES

GIT = shutil.which("git")


def git(repo, *args):
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com")
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env=env).stdout.strip()


def commit_files(repo, message, files):
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
        git(repo, "add", name)
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@unittest.skipIf(GIT is None, "git is not installed")
class RevisionBuildTest(unittest.TestCase):
    """runner_for against the fake cmake: what is configured and built where, and when not."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="meshgate-revisions-")
        self.addCleanup(tmp.cleanup)
        self.tmp = Path(tmp.name)
        self.repo = self.tmp / "repo"
        self.repo.mkdir()
        git(self.repo, "init", "-q", "-b", "main")
        self.one = commit_files(self.repo, "one", {"file.txt": "one"})
        self.two = commit_files(self.repo, "two", {"file.txt": "two"})
        # PATH holds only the fake cmake, git, python3 and (unless a test removes it) ccache.
        self.bin = self.tmp / "bin"
        self.bin.mkdir()
        (self.bin / "cmake").symlink_to(FIXTURES / "fake_cmake.py")
        (self.bin / "python3").symlink_to(sys.executable)
        (self.bin / "git").symlink_to(GIT)
        self.ccache = self.bin / "ccache"
        self.ccache.write_text("#!/bin/sh\nexec \"$@\"\n")
        self.ccache.chmod(0o755)
        self.log = self.tmp / "cmake.jsonl"
        self.context_log = self.tmp / "cmake-context.jsonl"
        self.env = {"PATH": str(self.bin), "FAKE_CMAKE_LOG": str(self.log),
                    "FAKE_CMAKE_CONTEXT_LOG": str(self.context_log), "FAKE_CMAKE_FAIL_WHEN": "broken"}
        self.out = io.StringIO()
        self.jobs = str(build.build_jobs(self.env))

    def runner_for(self, rev, preset="cpu", **env):
        return revisions.runner_for(self.repo, rev, preset, out=self.out, env=dict(self.env, **env))

    def contexts(self):
        if not self.context_log.exists():
            return []
        return [json.loads(line) for line in self.context_log.read_text().splitlines()]

    def test_builds_only_the_runner_with_tests_and_benchmarks_off_on_every_cpu(self):
        built = self.runner_for("HEAD~1")
        root = revisions.worktree_path(self.repo.resolve(), self.one)
        self.assertEqual(built, (self.one, root, [str(root / "build/cpu/harness/runner/meshgate-runner")]))
        configure, compile_ = self.contexts()
        self.assertEqual(configure["cwd"], str(root))
        self.assertEqual(configure["args"][:2], ["--preset", "cpu"])
        self.assertIn("-DMESHGATE_BUILD_TESTS=OFF", configure["args"])
        self.assertIn("-DMESHGATE_BUILD_BENCHMARKS=OFF", configure["args"])
        self.assertEqual(compile_["cwd"], str(root))
        self.assertEqual(compile_["args"], ["--build", "--preset", "cpu", "--target", "meshgate-runner",
                                            "-j", self.jobs])

    def test_build_folder_is_keyed_by_commit_and_preset(self):
        runners = {(rev, preset): self.runner_for(rev, preset).runner[0]
                   for rev, preset in (("HEAD~1", "cpu"), ("HEAD", "cpu"), ("HEAD~1", "asan"))}
        self.assertEqual(len(set(runners.values())), 3)
        for (rev, preset), runner in runners.items():
            commit = git(self.repo, "rev-parse", rev)
            self.assertEqual(Path(runner).relative_to(revisions.build_dir_for(self.repo.resolve(), commit, preset)),
                             Path("harness/runner/meshgate-runner"))
        configures = [c for c in self.contexts() if c["args"][0] == "--preset"]
        self.assertEqual(len(configures), 3)

    def test_a_second_call_runs_no_cmake(self):
        first = self.runner_for("HEAD")
        calls = len(self.contexts())
        again = self.runner_for("main")
        self.assertEqual(again, first)
        self.assertEqual(len(self.contexts()), calls)
        self.assertEqual(self.out.getvalue().count("meshgate: building"), 1)

    def test_a_changed_runner_is_built_again_without_configuring(self):
        first = self.runner_for("HEAD")
        Path(first.runner[0]).unlink()
        calls = len(self.contexts())
        self.assertEqual(self.runner_for("HEAD"), first)
        self.assertEqual([c["args"][0] for c in self.contexts()[calls:]], ["--build"])

    def test_an_edited_worktree_is_left_to_cmake(self):
        first = self.runner_for("HEAD")
        (first.root / "file.txt").write_text("edited")
        calls = len(self.contexts())
        self.runner_for("HEAD")
        self.runner_for("HEAD")
        self.assertEqual([c["args"][0] for c in self.contexts()[calls:]], ["--build", "--build"])

    def test_a_revision_that_does_not_build_names_its_commit(self):
        broken = commit_files(self.repo, "broken", {"broken": "x"})
        with self.assertRaises(RevisionBuildError) as e:
            self.runner_for("HEAD")
        self.assertIsInstance(e.exception, RevisionError)
        self.assertEqual(e.exception.commit, broken)
        self.assertIn(f"commit {broken[:12]} does not build", str(e.exception))
        self.assertFalse((revisions.build_dir_for(self.repo, broken, "cpu") / revisions.STAMP).exists())
        self.assertEqual(self.runner_for("HEAD~1").commit, self.two)  # its neighbour still builds

    def test_an_unknown_revision_is_not_a_build_error(self):
        with self.assertRaises(RevisionError) as e:
            self.runner_for("no-such-branch")
        self.assertNotIsInstance(e.exception, RevisionBuildError)
        self.assertIn("'no-such-branch'", str(e.exception))
        self.assertEqual(self.contexts(), [])

    def test_every_revision_shares_one_compiler_cache(self):
        self.runner_for("HEAD~1")
        self.runner_for("HEAD")
        contexts = self.contexts()
        self.assertEqual(len(contexts), 4)
        for context in contexts:
            self.assertEqual(context["env"], {"CCACHE_BASEDIR": str(self.repo.resolve()), "CCACHE_NOHASHDIR": "1"})
            self.assertTrue(Path(context["cwd"]).is_relative_to(self.repo.resolve()))
        for context in contexts[::2]:
            for lang in ("CXX", "C", "CUDA"):
                self.assertIn(f"-DCMAKE_{lang}_COMPILER_LAUNCHER={self.ccache}", context["args"])

    def test_no_launcher_without_ccache_and_a_chosen_launcher_is_kept(self):
        self.ccache.unlink()
        self.runner_for("HEAD~1")
        self.assertFalse(any("LAUNCHER" in a for a in self.contexts()[0]["args"]))
        self.ccache.symlink_to("/bin/true")
        self.runner_for("HEAD", CMAKE_CXX_COMPILER_LAUNCHER="distcc")
        args = self.contexts()[2]["args"]
        self.assertFalse(any(a.startswith("-DCMAKE_CXX_COMPILER_LAUNCHER") for a in args))
        self.assertIn(f"-DCMAKE_CUDA_COMPILER_LAUNCHER={self.ccache}", args)

    def test_meshgate_runner_does_not_stand_in_for_a_revision(self):
        built = self.runner_for("HEAD", MESHGATE_RUNNER="/bin/true")
        self.assertNotEqual(built.runner, ["/bin/true"])
        self.assertEqual(len(self.contexts()), 2)

    def test_a_build_writes_its_output_to_a_log_named_on_one_line(self):
        with mock.patch.dict(os.environ, {"MESHGATE_QUIET": ""}):
            built = self.runner_for("HEAD", FAKE_CMAKE_MODE="compile")
        log = revisions.build_dir_for(self.repo.resolve(), self.two, "cpu") / revisions.BUILD_LOG
        lines = self.out.getvalue().splitlines()
        self.assertEqual(lines[0], f"meshgate: building {self.two[:12]} (log: {log})")
        # Instead of silence while it builds, a compact progress line from the build tool's.
        progress = re.compile(rf"meshgate: built \d+ % of {self.two[:12]}, \d+:\d\d")
        self.assertTrue(lines[1:] and all(progress.fullmatch(line) for line in lines[1:]), lines)
        self.assertTrue(Path(built.runner[0]).is_relative_to(log.parent))
        text = log.read_text()
        for line in ("meshgate: configuring", "-- Configuring done", "Building CXX object",
                     "[100%] Built target meshgate-runner"):
            self.assertIn(line, text)

    def test_a_failed_build_shows_the_end_of_its_log(self):
        commit_files(self.repo, "broken", {"broken": "x"})
        with self.assertRaises(RevisionBuildError) as e:
            self.runner_for("HEAD")
        out = [line for line in self.out.getvalue().splitlines() if not line.startswith("meshgate: built ")]
        self.assertTrue(out[0].startswith(f"meshgate: building {e.exception.commit[:12]} (log: "))
        self.assertTrue(out[1].startswith("meshgate: the build failed; the end of "))
        self.assertIn("  main.cpp:3:1: error: expected ';'", out)  # the failing tool's words
        self.assertIn("fix the compile error above", str(e.exception))

    def test_the_first_compiler_error_is_shown_when_the_tail_has_scrolled_past_it(self):
        log = self.tmp / "build.log"
        log.write_text("a.cpp:1:1: error: first\n" + "".join(f"line {i}\n" for i in range(30)))
        tail = revisions.log_tail(log, lines=5)
        self.assertEqual(tail, ["a.cpp:1:1: error: first", "...", "line 25", "line 26", "line 27",
                                "line 28", "line 29"])
        self.assertEqual(revisions.log_tail(self.tmp / "no-such.log"), [])

    def test_verbose_builds_stream_the_tools_output(self):
        revisions.runner_for(self.repo, "HEAD", "cpu", out=self.out,
                             env=dict(self.env, FAKE_CMAKE_MODE="compile"), verbose=True)
        text = self.out.getvalue()
        self.assertNotIn("(log: ", text)
        self.assertIn("meshgate: configuring", text)
        self.assertIn("Building CXX object", text)

    def test_minus_v_of_ab_and_bisect_makes_builds_verbose(self):
        import argparse
        import unittest.mock

        from meshgate.commands import bisect as bisect_command

        parser = argparse.ArgumentParser()
        commands = parser.add_subparsers()
        ab_command.register(commands)
        bisect_command.register(commands)
        self.assertFalse(parser.parse_args(["ab", "--base", "HEAD~1", "--candidate", "HEAD"]).verbose)
        self.assertTrue(parser.parse_args(["bisect", "--good", "a", "--bad", "b", "--verbose"]).verbose)
        self.assertTrue(parser.parse_args(["ab", "-v", "--base", "HEAD~1", "--candidate", "HEAD"]).verbose)
        # The option reaches the build of each side.
        built = revisions.BuiltRevision(commit="0" * 40, root=self.repo, runner=["runner"])
        for verbose in (False, True):
            with unittest.mock.patch.object(revisions, "build_commit", return_value=built) as build_commit:
                ab.side_for(self.repo, "base", "HEAD", "cpu", verbose=verbose)
            self.assertEqual(build_commit.call_args.kwargs["verbose"], verbose)

    def test_worktree_is_created_then_reused(self):
        path = revisions.ensure_worktree(self.repo, self.one)
        self.assertEqual(path, self.repo / "build" / "ab" / self.one[:12])
        self.assertEqual((path / "file.txt").read_text(), "one")
        (path / "marker").write_text("kept")
        self.assertEqual(revisions.ensure_worktree(self.repo, self.one), path)
        self.assertEqual((path / "marker").read_text(), "kept")
        git(path, "checkout", "-q", "--detach", "main")
        with self.assertRaisesRegex(RevisionError, "git worktree remove"):
            revisions.ensure_worktree(self.repo, self.one)

    def test_ab_prepares_each_side_through_revisions(self):
        err = io.StringIO()
        with mock.patch.dict(os.environ, self.env, clear=True), contextlib.redirect_stderr(err):
            side = ab._prepare_side(self.repo, "base", "HEAD~1", ab.resolve_commit(self.repo, "HEAD~1"),
                                    "cpu", [])
            self.assertEqual((side.commit, side.runner), tuple(self.runner_for("HEAD~1")[::2]))
            self.assertEqual(side.env["MESHGATE_COMMIT"], self.one)
            self.assertEqual(side.case_paths, [str(side.root / "cases")])
            commit_files(self.repo, "broken", {"broken": "x"})
            with self.assertRaisesRegex(ab.AbError, r"candidate HEAD: commit [0-9a-f]{12} does not build"):
                ab._prepare_side(self.repo, "candidate", "HEAD", ab.resolve_commit(self.repo, "HEAD"),
                                 "cpu", [])
        self.assertIn(f"meshgate ab: base HEAD~1 = {self.one[:12]}", err.getvalue())


SCRATCH_CMAKE = """cmake_minimum_required(VERSION 3.20)
project(scratch LANGUAGES CXX)
option(MESHGATE_BUILD_TESTS "" ON)
add_library(core STATIC core.cpp)
add_executable(meshgate-runner main.cpp)
target_link_libraries(meshgate-runner PRIVATE core)
add_executable(not_needed not_needed.cpp)  # does not compile: only the runner target is built
if(MESHGATE_BUILD_TESTS)
  message(FATAL_ERROR "worktree builds configure with MESHGATE_BUILD_TESTS=OFF")
endif()
"""
SCRATCH_PRESETS = {"version": 6, "configurePresets": [
    {"name": "cpu", "generator": "Unix Makefiles", "binaryDir": "${sourceDir}/build/${presetName}"}],
    "buildPresets": [{"name": "cpu", "configurePreset": "cpu"}]}


@unittest.skipIf(GIT is None or not all(shutil.which(t) for t in ("cmake", "ccache", "make", "c++")),
                 "needs git, cmake, make, c++ and ccache")
class RealCcacheTest(unittest.TestCase):
    """Two revisions of a scratch CMake project through the real cmake and ccache: the second
    worktree compiles its unchanged file from the first one's cache entry."""

    def test_second_revision_hits_the_cache(self):
        with tempfile.TemporaryDirectory(prefix="meshgate-ccache-") as tmp:
            tmp = Path(tmp)
            repo = tmp / "repo"
            repo.mkdir()
            git(repo, "init", "-q", "-b", "main")
            files = {"CMakeLists.txt": SCRATCH_CMAKE, "CMakePresets.json": json.dumps(SCRATCH_PRESETS),
                     "core.cpp": "int core() { return 1; }\n",
                     "main.cpp": "int core();\nint main() { return core() - 1; }\n",
                     "not_needed.cpp": "#error not a dependency of the runner\n"}
            commit_files(repo, "one", files)
            commit_files(repo, "two", {"main.cpp": "int core();\nint main() { return core() - 1 + 0; }\n"})
            env = {k: v for k, v in os.environ.items() if not k.startswith(("CCACHE_", "CMAKE_"))}
            env.update(CCACHE_DIR=str(tmp / "ccache"), CCACHE_NOHASHDIR="1")

            def stats():
                text = subprocess.run(["ccache", "--print-stats"], env=env, capture_output=True,
                                      text=True, check=True).stdout
                return {k: int(v) for k, v in (line.split("\t") for line in text.splitlines())}

            out = io.StringIO()
            first = revisions.runner_for(repo, "HEAD~1", "cpu", out=out, env=env)
            before = stats()
            second = revisions.runner_for(repo, "HEAD", "cpu", out=out, env=env)
            after = stats()
            hits = sum(after[k] - before[k] for k in ("direct_cache_hit", "preprocessed_cache_hit"))
            misses = after["cache_miss"] - before["cache_miss"]
            self.assertEqual((hits, misses), (1, 1), out.getvalue())
            for built in (first, second):
                self.assertEqual(subprocess.run(built.runner).returncode, 0)


if __name__ == "__main__":
    unittest.main()


@unittest.skipIf(GIT is None, "git is not installed")
class WorktreePruneTest(unittest.TestCase):
    """build/ab does not grow without bound: all but the most recently used worktrees are
    pruned, never one in use; `meshgate clean` removes them and says what that freed."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="meshgate-prune-")
        self.addCleanup(tmp.cleanup)
        self.repo = Path(tmp.name).resolve() / "repo"
        self.repo.mkdir()
        git(self.repo, "init", "-q", "-b", "main")
        self.commits = [commit_files(self.repo, f"c{i}", {"file.txt": f"{i}" * 1000}) for i in range(6)]
        for age, commit in enumerate(reversed(self.commits)):
            path = revisions.ensure_worktree(self.repo, commit)
            (path / "build").mkdir()
            (path / "build" / "blob").write_bytes(b"x" * 100_000)
            revisions.mark_used(self.repo, commit)
            marker = path.with_name(path.name + ".used")
            os.utime(marker, (1_000_000 - age, 1_000_000 - age))  # commits[5] newest ... commits[0] oldest

    def names(self):
        return [t.path.name for t in revisions.list_worktrees(self.repo)]

    def test_keeps_the_most_recently_used_and_those_in_use(self):
        self.assertEqual(self.names(), [c[:12] for c in reversed(self.commits)])
        # Another command holds commits[0] (the oldest): it stays.
        lock = open(revisions.worktree_path(self.repo, self.commits[0]).with_name(self.commits[0][:12] + ".lock"), "a")
        self.addCleanup(lock.close)
        import fcntl
        fcntl.flock(lock, fcntl.LOCK_SH)
        removed, kept = revisions.prune_worktrees(self.repo, keep=2, in_use=[self.commits[1]])
        self.assertEqual(sorted(t.path.name for t in removed), sorted(c[:12] for c in self.commits[2:4]))
        self.assertEqual(sorted(self.names()), sorted(c[:12] for c in (self.commits[5], self.commits[4],
                                                                       self.commits[1], self.commits[0])))
        self.assertTrue(all(t.bytes > 100_000 for t in removed))
        self.assertNotIn(self.commits[2][:12], git(self.repo, "worktree", "list"))
        note = revisions.disk_note(self.repo, removed, kept, keep=2)
        self.assertIn("build/ab: 4 worktrees", note)
        self.assertIn("(pruned 2,", note)

    def test_the_default_keep_comes_from_the_environment(self):
        self.assertEqual(revisions.keep_worktrees({}), revisions.KEEP_WORKTREES)
        self.assertEqual(revisions.keep_worktrees({"MESHGATE_KEEP_WORKTREES": "1"}), 1)
        with mock.patch.dict(os.environ, {"MESHGATE_KEEP_WORKTREES": "3"}):
            removed, _ = revisions.prune_worktrees(self.repo)
        self.assertEqual(len(removed), 3)

    def test_meshgate_clean_removes_them_all_and_says_what_it_freed(self):
        from meshgate import cli
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = cli.main(["clean", "--repo", str(self.repo)])
        self.assertEqual(code, 0)
        self.assertEqual(self.names(), [])
        self.assertIn("6 of 6 worktree(s) removed", out.getvalue())
        self.assertRegex(out.getvalue(), r"6 of 6 worktree\(s\) removed, 60\d\.\d KB freed")
