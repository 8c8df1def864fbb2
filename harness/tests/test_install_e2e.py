"""meshgate as a dependency, end to end: `cmake --install` of this build, a consumer project that
finds it with find_package(meshgate) and runs a layout op and a DeviceMesh, the installed
`meshgate` driver and runner run outside any checkout, and `pip install .` of this source tree
into a fresh virtual environment gives a `meshgate` command with its own runner and cases.

Runs only with MESHGATE_INSTALL_E2E=1 and MESHGATE_BUILD_DIR (CTest's package_install sets
both), since it installs and builds: tens of seconds, a few minutes for the first wheel. The
wheel builds with --no-build-isolation and the build backend ci/bootstrap installed (no
download), in the build folder pyproject.toml names (build/pip-<wheel tag>), the one the README's
`pip install .` builds in too: whichever of the two runs second, and every later run, compiles
only what changed (CTest runs the two one at a time, RESOURCE_LOCK pip_build_folder)."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import sysconfig
import tempfile
import unittest

from meshgate.core import schema
from meshgate.system import build

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD_DIR = os.environ.get("MESHGATE_BUILD_DIR", "")
VERSION = re.search(r'^__version__ = "([^"]+)"', (ROOT / "harness" / "meshgate" / "__init__.py")
                    .read_text(encoding="utf-8"), re.MULTILINE).group(1)


def run(command, cwd=None, env=None, timeout=600):
    proc = subprocess.run([str(c) for c in command], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


@unittest.skipUnless(os.environ.get("MESHGATE_INSTALL_E2E") == "1" and BUILD_DIR,
                     "set MESHGATE_INSTALL_E2E=1 and MESHGATE_BUILD_DIR (CTest's package_install does)")
class InstallTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="meshgate-install-")
        cls.dir = pathlib.Path(cls.tmp.name)
        cls.prefix = cls.dir / "prefix"
        code, out, err = run(["cmake", "--install", BUILD_DIR, "--prefix", cls.prefix])
        if code != 0:
            raise AssertionError(f"cmake --install failed ({code}):\n{out}\n{err}")
        # Outside any checkout, with nothing of the build on PATH or in the environment.
        cls.env = {k: v for k, v in os.environ.items() if not k.startswith("MESHGATE_")}
        cls.env["PATH"] = os.pathsep.join(p for p in cls.env.get("PATH", "").split(os.pathsep)
                                          if not p.startswith(str(ROOT)))
        cls.work = cls.dir / "work"
        cls.work.mkdir()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_the_layout_is_a_package(self):
        cmake_dir = self.prefix / "lib" / "cmake" / "meshgate"
        for name in ("meshgateConfig.cmake", "meshgateConfigVersion.cmake", "meshgateTargets.cmake",
                     "FindNCCL.cmake"):
            self.assertTrue((cmake_dir / name).is_file(), name)
        self.assertTrue((self.prefix / "include" / "meshgate" / "layout" / "layout.hpp").is_file())
        self.assertFalse(list((self.prefix / "include").rglob("*test*")), "test headers installed")
        self.assertTrue((self.prefix / "share" / "meshgate" / "schemas" / "cases-1.schema.json").is_file())
        self.assertTrue((self.prefix / "share" / "meshgate" / "cases" / "layout" / "coalesce.yaml").is_file())

    def test_a_consumer_project_finds_and_uses_it(self):
        build = self.dir / "consumer"
        code, out, err = run(["cmake", "-S", ROOT / "tests" / "consumer", "-B", build,
                              f"-DCMAKE_PREFIX_PATH={self.prefix}"], env=self.env)
        self.assertEqual(code, 0, out + err)
        code, out, err = run(["cmake", "--build", build, "-j", str(os.cpu_count() or 2)], env=self.env)
        self.assertEqual(code, 0, out + err)
        code, out, err = run([build / "layout_consumer", "(4,(2,3)):(6,(3,1))"])
        self.assertEqual((code, out), (0, "(4,(2,3)):(6,(3,1)) -> 24:1\n"), err)
        code, out, err = run([build / "mesh_consumer"])
        self.assertEqual(code, 0, err)
        lines = out.splitlines()
        self.assertRegex(lines[0], r"^meshgate \d+\.\d+\.\d+ backends threads")
        self.assertEqual(lines[1], "0 1 2 3 | 4 5 6 7 | ")

    def check_driver(self, meshgate, env, label, prefix):
        """The `meshgate` command uses the runner and the cases installed in `prefix`."""
        code, out, err = run([meshgate, "--version"], cwd=self.work, env=env)
        self.assertEqual(code, 0, err)
        self.assertRegex(out, rf"^meshgate {re.escape(VERSION)} \(installed driver")
        self.assertIn(f"backends: threads", out)
        self.assertIn(f"({prefix / 'bin' / 'meshgate-runner'})", out)
        out_dir = self.work / f"run-{label}"
        code, out, err = run([meshgate, "run", "--suite", "layout-coalesce", "--out", out_dir],
                             cwd=self.work, env=env)
        self.assertEqual(code, 0, out + err)
        document = json.loads((out_dir / "results.json").read_text())
        schema.check(document, "results-1", out_dir / "results.json")
        self.assertTrue(document["cases"])
        self.assertEqual({row["status"] for row in document["cases"]}, {"pass"})
        cases = prefix / "share" / "meshgate" / "cases"
        self.assertEqual({row["file"] for row in document["cases"]},
                         {str(cases / "layout" / "coalesce.yaml")})
        # What the driver keeps lands in the working directory, as inside a checkout it lands in
        # the checkout: the history database, comparison reports, baselines.
        here = self.work / f"defaults-{label}"
        here.mkdir()
        results = out_dir / "results.json"
        code, out, err = run([meshgate, "history", "add", results], cwd=here, env=env)
        self.assertEqual(code, 0, out + err)
        self.assertTrue((here / "reports" / "history.sqlite").is_file(), out)
        code, out, err = run([meshgate, "compare", results, results], cwd=here, env=env)
        self.assertEqual(code, 0, out + err)
        self.assertEqual(len(list((here / "reports").glob("compare-*/report.md"))), 1, out)
        code, out, err = run([meshgate, "baseline", "update", results], cwd=here, env=env)
        self.assertEqual(code, 0, out + err)
        self.assertTrue(list((here / "baselines").glob("*/layout-coalesce.json")), out)

    def test_the_installed_driver_runs_the_installed_cases(self):
        self.check_driver(self.prefix / "bin" / "meshgate", self.env, "cmake", self.prefix)

    def test_pip_install_gives_a_working_meshgate_command(self):
        """`pip install .` into a fresh environment builds the runner and installs it with the
        driver: that environment's `meshgate` needs nothing else (not the cmake-installed
        prefix, not this checkout) to run the cases it installed."""
        venv = self.dir / "venv"
        # A fresh environment that also sees this one's packages, for the pinned build backend
        # (ci/bootstrap installs it in the tests' environment); meshgate is installed into it.
        code, out, err = run([sys.executable, "-m", "venv", venv])
        self.assertEqual(code, 0, err)
        python = venv / "bin" / "python"
        code, out, err = run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
        self.assertEqual(code, 0, err)
        pathlib.Path(out.strip(), "_test_environment.pth").write_text(
            sysconfig.get_path("purelib") + "\n", encoding="utf-8")
        code, out, err = run([python, "-c", "import scikit_build_core"], env=self.env)
        self.assertEqual(code, 0, f"no build backend for pip install: run ci/bootstrap\n{err}")
        env = dict(self.env, CMAKE_BUILD_PARALLEL_LEVEL=str(build.build_jobs()))
        code, out, err = run([python, "-m", "pip", "install", "--no-build-isolation", "--no-index",
                              "--disable-pip-version-check", ROOT], cwd=self.work, env=env,
                             timeout=900)
        self.assertEqual(code, 0, out + err)
        self.assertEqual(list((ROOT / "harness").glob("*.egg-info")), [], "the build wrote into the tree")
        for name in ("meshgate", "meshgate-runner", "meshgate-plan"):
            self.assertTrue(os.access(venv / "bin" / name, os.X_OK), name)
        code, out, err = run([python, "-c", "from importlib import metadata; import meshgate; "
                              "print(metadata.version('meshgate'), meshgate.__file__)"],
                             cwd=self.work, env=self.env)
        self.assertEqual(code, 0, err)
        version, package = out.split()
        self.assertEqual(version, VERSION)
        self.assertTrue(pathlib.Path(package).is_relative_to(venv.resolve()), package)
        self.check_driver(venv / "bin" / "meshgate", self.env, "pip", venv)
        code, out, err = run([python, "-c",
                              "import meshgate.schema as s; print(sorted(s.NAMES))"], cwd=self.work)
        self.assertEqual(out.strip(), "['cases-1', 'impl-1', 'results-1', 'verdicts-1']", err)

if __name__ == "__main__":
    unittest.main()
