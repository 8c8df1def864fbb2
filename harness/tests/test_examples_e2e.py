"""The example projects of examples/ end to end, used as their READMEs say, with meshgate
installed by `cmake --install` of this build into a scratch prefix and nothing of the build tree
on PATH or in the environment:

- examples/cpp-kind (CppKindExample): its runner, meshgate's main and built-in kinds with the
  project's ring_allreduce kind, configured and built against the installed package; its cases
  run by `meshgate run` through its meshgate.toml, against its committed signals; then, in a git repository made of its files
  with a slowdown planted in the ring step among harmless commits, `meshgate ab` flags the
  regression and `meshgate bisect` names the planted commit.
- examples/python-command (PythonCommandExample): a Python all-reduce as `kind: command` cases,
  run by the installed `meshgate run`.

Runs only with MESHGATE_EXAMPLES_E2E=1 and MESHGATE_BUILD_DIR (CTest's example_cpp_kind and
example_python_command set both): it installs, builds and times, a minute or more."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
BUILD_DIR = os.environ.get("MESHGATE_BUILD_DIR", "")
# Few runs a side: a planted slowdown of several times is plain at the smallest k that can
# reach alpha (runs_per_side), and the test stays short.
RUNS = ["--runs", "5", "--max-runs", "5"]

# A busy loop of 0.3 ms in every ring step: the perf case's call takes several times as long.
PLANTED_INCLUDE = ("#include <cstring>\n", "#include <chrono>\n#include <cstring>\n")
PLANTED_LOOP = (
    "const float* RingAllReduce::exchange(Communicator& comm, const float* data, int send_chunk) {\n",
    "const float* RingAllReduce::exchange(Communicator& comm, const float* data, int send_chunk) {\n"
    "  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(300);\n"
    "  while (std::chrono::steady_clock::now() < until) {\n"
    "  }\n")


def run(command, cwd=None, env=None, timeout=600):
    proc = subprocess.run([str(c) for c in command], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def git(repo, *args):
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com")
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env=env).stdout.strip()


def copy_example(name: str, to: pathlib.Path) -> pathlib.Path:
    """The example's files as they are in the repository (no build or report folders)."""
    shutil.copytree(EXAMPLES / name, to, ignore=shutil.ignore_patterns("build", "reports", "__pycache__"))
    return to


def results(out_dir: pathlib.Path) -> dict:
    return json.loads((out_dir / "results.json").read_text())


@unittest.skipUnless(os.environ.get("MESHGATE_EXAMPLES_E2E") == "1" and BUILD_DIR,
                     "set MESHGATE_EXAMPLES_E2E=1 and MESHGATE_BUILD_DIR (CTest's example_* tests do)")
class InstalledMeshgate(unittest.TestCase):
    """meshgate installed from MESHGATE_BUILD_DIR into a scratch prefix, and an environment
    that knows only that prefix."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="meshgate-example-")
        cls.dir = pathlib.Path(cls.tmp.name).resolve()
        cls.prefix = cls.dir / "prefix"
        code, out, err = run(["cmake", "--install", BUILD_DIR, "--prefix", cls.prefix])
        if code != 0:
            raise AssertionError(f"cmake --install failed ({code}):\n{out}\n{err}")
        cls.env = {k: v for k, v in os.environ.items() if not k.startswith("MESHGATE_")}
        cls.env.pop("CMAKE_PREFIX_PATH", None)
        cls.env["PATH"] = os.pathsep.join(p for p in cls.env.get("PATH", "").split(os.pathsep)
                                          if not p.startswith(str(ROOT)))
        cls.meshgate = cls.prefix / "bin" / "meshgate"

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()


class CppKindExample(InstalledMeshgate):
    def test_builds_against_the_installed_package_and_runs_its_cases(self):
        project = copy_example("cpp-kind", self.dir / "ring")
        # By hand, as the README's first way.
        code, out, err = run(["cmake", "-S", project, "-B", project / "build" / "runner",
                              f"-DCMAKE_PREFIX_PATH={self.prefix}"], env=self.env)
        self.assertEqual(code, 0, out + err)
        cache = (project / "build" / "runner" / "CMakeCache.txt").read_text()
        self.assertIn(f"meshgate_DIR:PATH={self.prefix}/lib/cmake/meshgate", cache)
        code, out, err = run(["cmake", "--build", project / "build" / "runner"], env=self.env)
        self.assertEqual(code, 0, out + err)
        runner = project / "build" / "runner" / "ring-runner"
        code, out, err = run([runner, "list", project / "cases", "--json"], env=self.env)
        self.assertEqual(code, 0, err)
        self.assertEqual({entry["kind"] for entry in json.loads(out)}, {"ring_allreduce"})

        # Through the project file: `meshgate run` builds (nothing left to do) and runs cases/,
        # checking their plans against the example's committed signals.
        out_dir = project / "reports" / "smoke"
        code, out, err = run([self.meshgate, "run", "--baseline", "baselines", "--out", out_dir],
                             cwd=project, env=self.env)
        self.assertEqual(code, 0, out + err)
        self.assertIn("signals baselines/signals: no change (exit 0)", out)
        rows = results(out_dir)["cases"]
        self.assertEqual(len(rows), 12, [r["id"] for r in rows])
        self.assertEqual({r["status"] for r in rows}, {"pass"}, out)
        self.assertTrue(all(r["id"].startswith("ring-allreduce/ring-") for r in rows))

        out_dir = project / "reports" / "perf"
        code, out, err = run([self.meshgate, "run", "--tag", "perf", "--out", out_dir],
                             cwd=project, env=self.env)
        self.assertEqual(code, 0, out + err)
        (row,) = results(out_dir)["cases"]
        self.assertEqual((row["id"], row["status"]), ("ring-allreduce/ring-4-perf", "pass"))
        self.assertTrue(row["samples"]["time_s"], row)

        # A runner given on the command line, without the project file's build.
        elsewhere = self.dir / "elsewhere"
        elsewhere.mkdir()
        code, out, err = run([self.meshgate, "run", project / "cases", "--runner", runner,
                              "--case", "ring-allreduce/ring-3-7", "--out", elsewhere / "run"],
                             cwd=elsewhere, env=self.env)
        self.assertEqual(code, 0, out + err)
        self.assertEqual([r["id"] for r in results(elsewhere / "run")["cases"]],
                         ["ring-allreduce/ring-3-7"])

    def test_ab_flags_and_bisect_finds_a_slowdown_planted_in_the_ring_step(self):
        repo = copy_example("cpp-kind", self.dir / "repo")
        git(repo, "init", "-q", "-b", "main")
        git(repo, "add", ".")
        git(repo, "commit", "-q", "-m", "ring all-reduce and its cases")
        good = git(repo, "rev-parse", "HEAD")
        readme = repo / "README.md"
        readme.write_text(readme.read_text() + "\nA harmless change.\n")
        git(repo, "commit", "-q", "-am", "README: a harmless change")
        source = repo / "ring_allreduce.cpp"
        text = source.read_text()
        for old, new in (PLANTED_INCLUDE, PLANTED_LOOP):
            self.assertEqual(text.count(old), 1, f"the anchor of the planted change: {old!r}")
            text = text.replace(old, new)
        source.write_text(text)
        git(repo, "commit", "-q", "-am", "ring: wait in every step")
        planted = git(repo, "rev-parse", "HEAD")
        cases = repo / "cases" / "ring.yaml"
        cases.write_text(cases.read_text() + "# A harmless change.\n")
        git(repo, "commit", "-q", "-am", "cases: a harmless comment")

        code, out, err = run([self.meshgate, "ab", "--base", good, "--candidate", "HEAD", *RUNS,
                              "--seed", "1", "--out", self.dir / "ab"], cwd=repo, env=self.env)
        self.assertEqual(code, 1, out + err)
        verdicts = {c["id"]: c["verdict"] for c in
                    json.loads((self.dir / "ab" / "comparison.json").read_text())["cases"]}
        self.assertEqual(verdicts["ring-allreduce/ring-4-perf"], "regression", out)
        self.assertIn("regression", out)

        code, out, err = run([self.meshgate, "bisect", "--good", good, "--bad", "HEAD", *RUNS,
                              "--revert-runs", "5", "--seed", "1", "--out", self.dir / "bisect"],
                             cwd=repo, env=self.env)
        self.assertEqual(code, 0, out + err)
        document = json.loads((self.dir / "bisect" / "bisect.json").read_text())
        self.assertEqual(document["culprit"], planted, out)
        self.assertIn(f"culprit: {planted}", out)


class PythonCommandExample(InstalledMeshgate):
    def test_its_cases_run_with_the_installed_driver(self):
        project = copy_example("python-command", self.dir / "allreduce")
        out_dir = project / "reports" / "all"
        code, out, err = run([self.meshgate, "run", "cases", "--out", out_dir], cwd=project,
                             env=self.env)
        self.assertEqual(code, 0, out + err)
        rows = {r["id"]: r for r in results(out_dir)["cases"]}
        self.assertEqual(set(rows), {"python-allreduce/allreduce-1", "python-allreduce/allreduce-3",
                                     "python-allreduce/allreduce-sockets-2",
                                     "python-allreduce/allreduce-perf-2"})
        self.assertEqual({r["status"] for r in rows.values()}, {"pass"}, out)
        self.assertEqual(rows["python-allreduce/allreduce-sockets-2"]["metrics"]["used_torch"], 0)
        perf = rows["python-allreduce/allreduce-perf-2"]
        self.assertEqual(len(perf["samples"]["time_s"]), 3, "one sample list per launch")


if __name__ == "__main__":
    unittest.main()
