"""ci/python_envs.py, the maker of the tests' Python environments, on scratch environments:
what its check reports (a stray package, a version off its pin or lock, an environment that
sees its interpreter's site-packages, a missing guard) and that the guard it installs refuses
a foreign import and a global interpreter. No package is downloaded: the installed packages
are planted as bare .dist-info folders."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def load_python_envs():
    spec = importlib.util.spec_from_file_location("python_envs", REPO / "ci" / "python_envs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("python_envs", module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@unittest.skipIf(sys.version_info < (3, 11), "ci/python_envs.py runs on the python3 of ci/bootstrap "
                 "(3.11: tomllib); the oldest Python only runs in an environment it makes")
class PythonEnvsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pe = load_python_envs()
        cls.tmp = tempfile.TemporaryDirectory(prefix="meshgate-envs-")
        cls.dir = Path(cls.tmp.name)
        # One scratch environment for every test; each test plants and removes its packages.
        cls.envs = cls.dir / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(cls.envs / "main")],
                       check=True)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def setUp(self):
        self.pe.ENVS = self.envs
        self.pe.LOCKS = self.dir / "locks"
        self.pe.LOCKS.mkdir(exist_ok=True)
        version = "%d.%d" % sys.version_info[:2]
        self.spec = self.pe.EnvSpec("main", getattr(sys, "_base_executable", sys.executable),
                                    version, ("alpha==1.0",))
        self.spec.lock.write_text("alpha==1.0\nbeta==2.0\n", encoding="utf-8")
        self.site = self.pe.site_packages(self.spec.python)
        self.planted = []
        self.pe.install_guard(self.spec.python)

    def tearDown(self):
        for path in self.planted:
            for child in path.iterdir():
                child.unlink()
            path.rmdir()

    def plant(self, name: str, version: str) -> None:
        info = self.site / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
                                       encoding="utf-8")
        self.planted.append(info)

    def test_an_environment_as_pinned_and_locked_has_no_problem(self):
        self.plant("alpha", "1.0")
        self.plant("beta", "2.0")
        self.assertEqual(self.pe.problems(self.spec), [])
        self.assertEqual(self.pe.guard_refuses(self.spec), [])

    def test_a_package_installed_by_hand_is_reported(self):
        self.plant("alpha", "1.0")
        self.plant("handmade", "0.1")
        found = self.pe.problems(self.spec)
        self.assertEqual(len(found), 1, found)
        self.assertIn("handmade 0.1 is installed but is in no pin or lock", found[0])

    def test_versions_off_the_pin_or_the_lock_and_a_missing_pin_are_reported(self):
        self.plant("beta", "2.1")
        found = self.pe.problems(self.spec)
        self.assertIn("alpha==1.0 is not installed", found)
        self.assertIn("beta is 2.1, locked 2.0", found)
        self.tearDown()
        self.planted = []
        self.plant("alpha", "1.1")
        self.assertIn("alpha is 1.1, pinned 1.0", self.pe.problems(self.spec))

    def test_a_missing_or_stale_guard_is_reported(self):
        self.plant("alpha", "1.0")
        guard = self.site / f"{self.pe.GUARD_MODULE}.py"
        guard.write_text("# stale\n", encoding="utf-8")
        self.assertIn(f"the import guard in {self.site} is missing or stale", self.pe.problems(self.spec))
        guard.unlink()
        self.assertIn(f"the import guard in {self.site} is missing or stale", self.pe.problems(self.spec))

    def test_an_environment_that_sees_its_interpreters_packages_is_reported(self):
        self.plant("alpha", "1.0")
        cfg = self.spec.path / "pyvenv.cfg"
        original = cfg.read_text(encoding="utf-8")
        self.addCleanup(cfg.write_text, original, encoding="utf-8")
        cfg.write_text(original.replace("include-system-site-packages = false",
                                        "include-system-site-packages = true"), encoding="utf-8")
        found = self.pe.problems(self.spec)
        self.assertTrue(any("sees its interpreter's site-packages" in p for p in found), found)

    def test_the_guard_refuses_a_foreign_import_and_a_global_interpreter_and_logs_both(self):
        log = self.dir / "violations.log"
        foreign = self.dir / "elsewhere" / "site-packages"
        (foreign / "handmade_pkg").mkdir(parents=True, exist_ok=True)
        (foreign / "handmade_pkg" / "__init__.py").write_text("", encoding="utf-8")
        env = dict(self.pe.clean_env(), MESHGATE_HERMETIC=str(log), PYTHONPATH=str(foreign))
        # An ImportError handler (code probing for an optional package) does not hide it.
        probe = "try:\n    import handmade_pkg\nexcept ImportError:\n    print('skipped')\n"
        done = subprocess.run([str(self.spec.python), "-c", probe], capture_output=True, text=True,
                              env=env)
        self.assertNotEqual(done.returncode, 0)
        self.assertNotIn("skipped", done.stdout)
        self.assertIn("HermeticViolation: import of 'handmade_pkg' from", done.stderr)
        done = subprocess.run([str(self.spec.python), "-c",
                               f"import subprocess; subprocess.run([{self.spec.interpreter!r}, '-V'])"],
                              capture_output=True, text=True, env=env)
        self.assertIn("HermeticViolation: start of the interpreter", done.stderr)
        # The standard library, this environment's own packages and the project's modules pass.
        done = subprocess.run([str(self.spec.python), "-c", "import json, sqlite3, _meshgate_hermetic"],
                              capture_output=True, text=True, env=dict(env, PYTHONPATH=""))
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(len(log.read_text(encoding="utf-8").splitlines()), 2)
        self.assertEqual(self.pe.violations(log), 1)
        log.write_text("", encoding="utf-8")
        self.assertEqual(self.pe.violations(log), 0)

    def test_the_guard_is_idle_without_its_variable(self):
        foreign = self.dir / "idle" / "site-packages"
        (foreign / "idle_pkg").mkdir(parents=True, exist_ok=True)
        (foreign / "idle_pkg" / "__init__.py").write_text("", encoding="utf-8")
        env = dict(self.pe.clean_env(), PYTHONPATH=str(foreign))
        done = subprocess.run([str(self.spec.python), "-c", "import idle_pkg"], capture_output=True,
                              text=True, env=env)
        self.assertEqual(done.returncode, 0, done.stderr)


class TheseTestsRunHermetically(unittest.TestCase):
    """Under CTest (MESHGATE_HERMETIC set) this interpreter is one of the project's isolated
    environments and its guard is active."""

    def test_the_suite_runs_in_an_isolated_environment_with_the_guard(self):
        if not os.environ.get("MESHGATE_HERMETIC"):
            self.skipTest("outside CTest's Python suites")
        self.assertNotEqual(sys.prefix, sys.base_prefix, "not a virtual environment")
        self.assertTrue(Path(sys.prefix).resolve().is_relative_to((REPO / "build" / "venv").resolve()),
                        sys.prefix)
        self.assertIn("_meshgate_hermetic", sys.modules)
        for path in sys.path:
            parts = Path(path).parts
            if "site-packages" in parts or "dist-packages" in parts:
                self.assertTrue(Path(path).resolve().is_relative_to(Path(sys.prefix).resolve()), path)


if __name__ == "__main__":
    unittest.main()
