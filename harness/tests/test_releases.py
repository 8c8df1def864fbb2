"""meshgate releases: the pins of the PyTorch releases and the environments made from them
(real `venv --without-pip` environments with planted .dist-info folders and a fake pip: no
download), the table and its classification from synthetic rows (no torch), and the command's
errors and wiring (the launches replaced)."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from meshgate import cli
from meshgate.core import files
from meshgate.gate import releases as table
from meshgate.system import implementations, torch_releases, venvs
from meshgate.system.launch import RecoveryResult

REPO = Path(__file__).resolve().parents[2]


def temp_dir(test: unittest.TestCase) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="meshgate-releases-"))
    test.addCleanup(shutil.rmtree, folder, True)
    return folder


def write_pins(root: Path, text: str) -> None:
    path = root / torch_releases.PINS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


PINS = """# a comment
2.13.0  torch==2.13.0 numpy==2.4.6
2.10.0  torch==2.10.0 numpy==2.4.1   # trailing comment
"""


class Pins(unittest.TestCase):
    def test_releases_are_read_oldest_first_with_their_pins(self):
        root = temp_dir(self)
        write_pins(root, PINS)
        found = torch_releases.read_pins(root)
        self.assertEqual([(r.version, r.pins) for r in found],
                         [("2.10.0", ("torch==2.10.0", "numpy==2.4.1")),
                          ("2.13.0", ("torch==2.13.0", "numpy==2.4.6"))])
        self.assertEqual(found[0].env(root), root / "build" / "venv" / "torch-2.10.0")
        self.assertEqual(found[0].lock(root),
                         root / "ci" / "python" / "constraints-torch-2.10.0.txt")

    def test_malformed_pins_are_refused_naming_the_line(self):
        root = temp_dir(self)
        for text, message in (
                ("2.10.0 numpy==2.4.1\n", r"torch-releases.txt:1: release 2.10.0 needs the pin torch==2.10.0"),
                ("2.10.0 torch==2.11.0\n", "needs the pin torch==2.10.0"),
                ("2.10.0 torch==2.10.0\n2.10.0 torch==2.10.0\n", ":2: release 2.10.0 is listed twice"),
                ("2.10.0 torch>=2.10.0\n", "is not a pin of the form name==version"),
                ("latest torch==2.10.0\n", "'latest' is not a release"),
                ("2.10.0 torch==2.10.0 numpy==1 NumPy==2\n", "NumPy is pinned twice"),
                ("# nothing\n", "lists no release")):
            with self.subTest(text=text):
                write_pins(root, text)
                with self.assertRaisesRegex(torch_releases.PinsError, message):
                    torch_releases.read_pins(root)

    def test_no_pins_file(self):
        with self.assertRaisesRegex(torch_releases.PinsError, "no pins: .* does not exist"):
            torch_releases.read_pins(temp_dir(self))

    def test_select_names_the_known_releases_for_an_unknown_one(self):
        root = temp_dir(self)
        write_pins(root, PINS)
        found = torch_releases.read_pins(root)
        self.assertEqual([r.version for r in torch_releases.select(found, ["2.13.0", "2.10.0"])],
                         ["2.10.0", "2.13.0"])
        self.assertEqual(torch_releases.select(found, []), found)
        with self.assertRaisesRegex(torch_releases.PinsError,
                                    r"unknown release 2\.12\.0: .* list 2\.10\.0, 2\.13\.0"):
            torch_releases.select(found, ["2.12.0"])

    def test_the_committed_pins(self):
        found = {r.version: r for r in torch_releases.read_pins(REPO)}
        for version in ("2.10.0", "2.11.0", "2.13.0", "2.15.0"):
            self.assertIn(version, found)
        # The pinned release is the one of pyproject.toml, with pyproject.toml's pins.
        torch_pin = files.pinned("torch", "?")
        pinned = found[torch_pin.split("==")[1]]
        self.assertEqual(set(pinned.pins), {torch_pin, files.pinned("numpy", "?")})
        for release in found.values():
            self.assertTrue(any(p.startswith("numpy==") for p in release.pins), release)

    def test_each_committed_lock_was_resolved_from_its_releases_pins(self):
        for release in torch_releases.read_pins(REPO):
            with self.subTest(release=release.version):
                lock = venvs.read_lock(release.lock(REPO))
                self.assertIsNotNone(lock, f"no lock {release.lock(REPO)}")
                self.assertEqual(lock.pins, release.pins)
                for pin in release.pins:
                    name, version = venvs.parse_pin(pin)
                    self.assertEqual(lock.packages.get(venvs.canonical(name)), version)
                self.assertNotIn("pip", lock.packages)


def plant(env: Path, name: str, version: str) -> None:
    """A distribution as importlib.metadata finds it: NAME-VERSION.dist-info/METADATA."""
    site = next((env / "lib").glob("python3.*")) / "site-packages"
    for old in site.glob(f"{name.replace('-', '_')}-*.dist-info"):
        shutil.rmtree(old)
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def make_env(env: Path) -> None:
    """An isolated environment without pip: seconds, no download."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--clear", str(env)],
                   check=True, env=venvs.clean_env())


class FakePip:
    """venvs.pip replaced: `install` plants the pins (and, with a lock, the lock's other
    packages; without one, a resolved dependency), `uninstall` removes dist-info folders."""

    def __init__(self, env: Path, resolved: dict):
        self.env, self.resolved, self.calls = env, resolved, []

    def __call__(self, python, *args):
        self.calls.append(list(args))
        site = next((self.env / "lib").glob("python3.*")) / "site-packages"
        if args[0] == "uninstall":
            for name in args[2:]:
                for info in site.glob(f"{name.replace('-', '_')}-*.dist-info"):
                    shutil.rmtree(info)
            return
        pins = [a for a in args[1:] if "==" in a]
        if args[1] == "-c":
            for name, version in venvs.read_lock(Path(args[2])).packages.items():
                plant(self.env, name, version)
        else:
            for name, version in self.resolved.items():
                plant(self.env, name, version)
        for pin in pins:
            plant(self.env, *venvs.parse_pin(pin))


class Environments(unittest.TestCase):
    PINS = ("torch==2.10.0", "numpy==2.4.1")

    def setUp(self):
        self.root = temp_dir(self)
        self.env = self.root / "venv" / "torch-2.10.0"
        self.lock = self.root / "constraints-torch-2.10.0.txt"
        self.version = venvs.interpreter_version(sys.executable)

    def write_lock(self, pins=PINS, **packages):
        venvs.write_lock(self.lock, dict({"torch": "2.10.0", "numpy": "2.4.1", "sympy": "1.14.0"},
                                         **packages), tuple(pins), self.version, "test lock")

    def ensure(self, pip: FakePip, create=None):
        said = []
        with mock.patch.object(venvs, "pip", pip), \
                mock.patch.object(venvs, "create", create or self.fail_create):
            done = venvs.ensure(self.env, sys.executable, self.PINS, self.lock, "test lock",
                                said.append)
        return done, said

    def fail_create(self, interpreter, env):
        self.fail(f"the environment was made again: {env}")

    def test_a_matching_environment_is_reused_untouched(self):
        make_env(self.env)
        for name, version in (("torch", "2.10.0"), ("numpy", "2.4.1"), ("sympy", "1.14.0")):
            plant(self.env, name, version)
        self.write_lock()
        self.assertEqual(venvs.problems(self.env, self.version, self.PINS,
                                        venvs.read_lock(self.lock)), [])
        pip = FakePip(self.env, {})
        self.assertEqual(self.ensure(pip)[0], "reused")
        self.assertEqual(pip.calls, [])

    def test_problems_name_each_difference(self):
        make_env(self.env)
        plant(self.env, "torch", "2.9.1")
        plant(self.env, "sympy", "1.13.0")
        plant(self.env, "left-over", "1.0")
        self.write_lock()
        found = venvs.problems(self.env, self.version, self.PINS, venvs.read_lock(self.lock))
        self.assertIn("torch is 2.9.1, pinned 2.10.0", found)
        self.assertIn("numpy==2.4.1 is not installed", found)
        self.assertIn("sympy is 1.13.0, locked 1.14.0", found)
        self.assertIn("left-over 1.0 is installed but is in no pin or lock", found)
        self.assertEqual(venvs.problems(self.root / "nothing", self.version, self.PINS, None),
                         [f"{self.root / 'nothing'} does not exist"])

    def test_a_local_version_label_matches_its_pin(self):
        make_env(self.env)
        plant(self.env, "torch", "2.10.0+cpu")
        plant(self.env, "numpy", "2.4.1")
        self.assertEqual(venvs.problems(self.env, self.version, self.PINS, None), [])

    def test_a_mismatching_environment_is_refreshed_with_the_lock(self):
        make_env(self.env)
        plant(self.env, "torch", "2.9.1")
        plant(self.env, "numpy", "2.4.1")
        plant(self.env, "stray", "0.1")
        self.write_lock()
        pip = FakePip(self.env, {})
        done, said = self.ensure(pip)
        self.assertEqual(done, "refreshed")
        self.assertEqual(pip.calls[0][:2], ["uninstall", "-y"])
        # torch at another version and a package of no pin or lock; sympy, missing, is installed.
        self.assertEqual(sorted(pip.calls[0][2:]), ["stray", "torch"])
        self.assertEqual(pip.calls[1], ["install", "-c", str(self.lock), *self.PINS])
        self.assertEqual(venvs.problems(self.env, self.version, self.PINS,
                                        venvs.read_lock(self.lock)), [])

    def test_a_missing_environment_is_created_and_its_lock_written(self):
        pip = FakePip(self.env, {"sympy": "1.14.0", "filelock": "3.20.0"})
        created = []

        def create(interpreter, env):
            created.append(interpreter)
            make_env(env)

        done, said = self.ensure(pip, create)
        self.assertEqual((done, created), ("created", [sys.executable]))
        self.assertEqual(pip.calls, [["install", *self.PINS]])
        lock = venvs.read_lock(self.lock)
        self.assertEqual(lock.pins, self.PINS)
        self.assertEqual(lock.python, self.version)
        self.assertEqual(lock.packages, {"torch": "2.10.0", "numpy": "2.4.1", "sympy": "1.14.0",
                                         "filelock": "3.20.0"})
        self.assertTrue(any("resolved freely" in line for line in said), said)

    def test_an_install_without_the_space_it_needs_stops_before_writing(self):
        pip = FakePip(self.env, {})
        full = mock.Mock(free=3 * 2**30)
        with mock.patch.object(venvs, "pip", pip), \
                mock.patch.object(venvs, "create", self.fail_create), \
                mock.patch.object(venvs.shutil, "disk_usage", return_value=full):
            with self.assertRaisesRegex(venvs.EnvError,
                                        r"needs about 10 GiB free in .*, which has 3\.0 GiB"):
                venvs.ensure(self.env, sys.executable, self.PINS, self.lock, "test lock",
                             lambda line: None, space=10 * 2**30)
        self.assertEqual(pip.calls, [])
        self.assertFalse(self.env.exists())
        # A reused environment needs no space.
        make_env(self.env)
        for name, version in (("torch", "2.10.0"), ("numpy", "2.4.1"), ("sympy", "1.14.0")):
            plant(self.env, name, version)
        self.write_lock()
        with mock.patch.object(venvs.shutil, "disk_usage", return_value=full):
            self.assertEqual(venvs.ensure(self.env, sys.executable, self.PINS, self.lock,
                                          "test lock", lambda line: None, space=10 * 2**30),
                             "reused")

    def test_a_lock_of_other_pins_is_resolved_again(self):
        make_env(self.env)
        plant(self.env, "torch", "2.10.0")
        plant(self.env, "numpy", "2.4.0")
        self.write_lock(pins=("torch==2.10.0", "numpy==2.4.0"), numpy="2.4.0")
        pip = FakePip(self.env, {"sympy": "1.14.0"})
        done, said = self.ensure(pip)
        self.assertEqual(done, "refreshed")
        self.assertEqual(pip.calls, [["install", *self.PINS]])
        self.assertEqual(venvs.read_lock(self.lock).pins, self.PINS)
        self.assertEqual(venvs.read_lock(self.lock).packages["numpy"], "2.4.1")
        self.assertTrue(any("resolving them again" in line for line in said), said)

    def test_an_environment_that_sees_system_site_packages_is_made_again(self):
        make_env(self.env)
        for name, version in (("torch", "2.10.0"), ("numpy", "2.4.1"), ("sympy", "1.14.0")):
            plant(self.env, name, version)
        self.write_lock()
        cfg = self.env / "pyvenv.cfg"
        cfg.write_text(cfg.read_text().replace("include-system-site-packages = false",
                                               "include-system-site-packages = true"))
        self.assertTrue(venvs.problems(self.env, self.version, self.PINS,
                                       venvs.read_lock(self.lock)))
        created = []

        def create(interpreter, env):
            created.append(env)
            make_env(env)

        done, _ = self.ensure(FakePip(self.env, {}), create)
        self.assertEqual((done, created), ("created", [self.env]))
        self.assertFalse(venvs.sees_system_site(self.env))

    def test_a_pip_that_leaves_the_environment_wrong_is_an_error(self):
        make_env(self.env)
        self.write_lock()

        def broken_pip(python, *args):
            pass

        with mock.patch.object(venvs, "pip", broken_pip), \
                mock.patch.object(venvs, "create", self.fail_create):
            with self.assertRaisesRegex(venvs.EnvError, "still differs from its pins"):
                venvs.ensure(self.env, sys.executable, self.PINS, self.lock, "t", lambda _: None)


def row(case, status, kind="mesh", message="", plan=None, **metrics):
    return {"id": case, "suite": case.split("/")[0], "kind": kind, "status": status,
            "message": message, "plan": plan or [], "metrics": metrics}


class Classification(unittest.TestCase):
    def test_an_error_row_is_no_change_of_behaviour(self):
        self.assertEqual(table.classify(row("s/a", "pass"), row("s/a", "error", message="boom\nx")),
                         ("error", "status", "pass", "error: boom"))
        self.assertIsNone(table.classify(row("s/a", "error"), row("s/a", "error", message="y")))

    def test_a_status_change_compat_cannot_see_is_semantic(self):
        # Same layout and shape (compat's signals), another status: the groups changed.
        a = row("s/a", "pass", layout="(2,2):(2,1)", shape=[2, 2])
        b = row("s/a", "fail", message="groups differ", layout="(2,2):(2,1)", shape=[2, 2])
        self.assertEqual(table.classify(a, b)[:2], ("semantic_change", "status"))

    def test_compat_classes_come_from_compat(self):
        self.assertEqual(table.classify(row("s/a", "pass"), row("s/a", "skip"))[0],
                         "expressibility")
        self.assertEqual(table.classify(row("s/a", "pass"),
                                        row("s/a", "fail", rejected="ValueError: no"))[0],
                         "new_rejection")
        self.assertEqual(table.classify(row("s/a", "fail", rejected="ValueError: no"),
                                        row("s/a", "pass"))[0], "relaxation")
        one = row("s/m", "pass", layout="(2,2):(2,1)", shape=[2, 2])
        two = row("s/m", "pass", layout="((2),(2)):((2),(1))", shape=[2, 2])
        self.assertEqual(table.classify(one, two)[0], "representation_change")
        self.assertIsNone(table.classify(one, dict(one)))


class Matrix(unittest.TestCase):
    def runs(self):
        old = table.ReleaseRun("2.9.1", rows=[
            row("mesh/a", "skip", message="torch 2.9.1 has no torch.distributed._mesh_layout"),
            row("mesh/b", "pass"), row("redistribute/c", "error", kind="redistribute",
                                       message="rank 0 raised")], seconds=10, env="created",
            env_seconds=100)
        mid = table.ReleaseRun("2.10.0", not_run="environment: pip failed", env_seconds=3)
        new = table.ReleaseRun("2.15.0", pinned=True, reported="2.15.0", rows=[
            row("mesh/a", "pass"), row("mesh/b", "fail", message="groups differ"),
            row("redistribute/c", "pass", kind="redistribute")], seconds=20, env="reused",
            env_seconds=1)
        return [old, mid, new]

    def test_the_document(self):
        doc = table.matrix(self.runs(), {"disagreements": [{"case": "mesh/b", "class": "by-design"}]})
        self.assertEqual([(r["version"], r["executed"], r["counts"]["skip"], r["not_run"])
                          for r in doc["releases"]],
                         [("2.9.1", 2, 1, None), ("2.10.0", 0, 0, "environment: pip failed"),
                          ("2.15.0", 3, 0, None)])
        self.assertEqual(doc["seconds"], 134.0)
        self.assertEqual(doc["suites"]["mesh"]["2.9.1"],
                         {"pass": 1, "fail": 0, "error": 0, "skip": 1})
        self.assertNotIn("2.10.0", doc["suites"]["mesh"])
        # Changes between the releases that ran, 2.9.1 -> 2.15.0, worst first.
        self.assertEqual([(c["from"], c["to"], c["case"], c["class"]) for c in doc["changes"]],
                         [("2.9.1", "2.15.0", "mesh/b", "semantic_change"),
                          ("2.9.1", "2.15.0", "mesh/a", "expressibility"),
                          ("2.9.1", "2.15.0", "redistribute/c", "error")])
        self.assertEqual(doc["differing"], ["mesh/a", "mesh/b", "redistribute/c"])
        self.assertEqual(doc["cases"]["mesh/b"]["parity"], "by-design")
        self.assertEqual(doc["cases"]["mesh/a"]["statuses"]["2.9.1"]["message"],
                         "torch 2.9.1 has no torch.distributed._mesh_layout")

    def test_the_markdown(self):
        doc = table.matrix(self.runs())
        text = table.markdown(doc, "cases/mesh")
        self.assertIn("| 2.9.1 | 2 | 1 | 0 | 1 | 1 | created in 100 s | 10 s |", text)
        self.assertIn("| 2.10.0 | not run: environment: pip failed |", text)
        self.assertIn("| 2.15.0 (pinned) | 3 | 2 | 1 | 0 | 0 | reused in 1 s | 20 s |", text)
        self.assertIn("| mesh | 1 / 0 / 0 / 1 | - | 1 / 1 / 0 / 0 |", text)
        self.assertIn("| 2.9.1 -> 2.15.0 |  | 1 |  |  | 1 | 1 |", text)
        self.assertIn("| `mesh/b` | pass | - | fail | 2.9.1->2.15.0: semantic_change (status) |",
                      text)
        self.assertIn("- 2.9.1: skip x1: torch 2.9.1 has no torch.distributed._mesh_layout", text)
        self.assertIn("- 2.9.1: error x1: rank 0 raised", text)

    def test_skip_reasons_group_by_case_file(self):
        message = ("torch: meshgate rejects the case's values while reading the case file, before "
                   "any implementation runs: /w/cases/mesh/errors.yaml:{}:57: case 'mesh-errors/{}'"
                   ": key 'mesh': bad")
        run = table.ReleaseRun("2.15.0", rows=[row(f"mesh/{n}", "skip", message=message.format(n, n))
                                              for n in (19, 28)] + [row("mesh/c", "skip", message="x")])
        text = table.markdown(table.matrix([run]), "x")
        self.assertIn("- 2.15.0: skip x2: torch: meshgate rejects the case's values while reading "
                      "the case file, before any implementation runs: errors.yaml: ...", text)
        self.assertIn("- 2.15.0: skip x1: x", text)

    def test_no_change_says_so(self):
        same = [table.ReleaseRun(v, rows=[row("mesh/a", "pass")]) for v in ("2.13.0", "2.15.0")]
        doc = table.matrix(same)
        self.assertEqual((doc["changes"], doc["differing"]), ([], []))
        self.assertIn("No case behaves differently between consecutive releases.",
                      table.markdown(doc, "x"))


class Command(unittest.TestCase):
    """`meshgate releases` in-process on a temporary root."""

    def setUp(self):
        self.root = temp_dir(self)
        (self.root / "cases" / "mesh").mkdir(parents=True)
        (self.root / "cases" / "mesh" / "a.yaml").write_text("cases: []\n")
        patcher = mock.patch("meshgate.core.files.source_root", return_value=self.root)
        patcher.start()
        self.addCleanup(patcher.stop)
        self.build = mock.patch("meshgate.system.build.runner_command",
                                return_value=["/fake/runner"]).start()
        self.addCleanup(mock.patch.stopall)

    def meshgate(self, *argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(list(argv))
        return code, out.getvalue(), err.getvalue()

    def test_no_pins(self):
        code, out, err = self.meshgate("releases")
        self.assertEqual(code, 2, out + err)
        self.assertIn("meshgate releases: no pins: ", err)
        self.assertIn("torch-releases.txt does not exist", err)
        self.build.assert_not_called()

    def test_an_unknown_release_is_refused_before_anything_builds(self):
        write_pins(self.root, PINS)
        code, out, err = self.meshgate("releases", "--release", "2.10.0", "--release", "2.12.0")
        self.assertEqual(code, 2, out + err)
        self.assertIn("unknown release 2.12.0: the pins (ci/python/torch-releases.txt) list "
                      "2.10.0, 2.13.0", err)
        self.build.assert_not_called()
        self.assertFalse((self.root / "reports").exists())

    def fake_run(self, statuses):
        """run_with_recovery replaced: writes one row per case of `statuses[release]`."""
        def run(setup, selection, folder, run_id, view, tally, **kwargs):
            version = run_id.split("-", 1)[1]
            rows = [row(case, status) for case, status in statuses[version].items()]
            (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            (folder / "results.json").write_text(json.dumps(
                {"run": {"impls": {"torch": {"version": version}}}, "cases": rows}))
            return RecoveryResult([], [r["id"] for r in rows], started=True, rows=rows)
        return run

    def test_each_release_runs_on_its_environment_and_the_table_is_written(self):
        write_pins(self.root, PINS)
        ensured, resolved = [], []

        def ensure(root, release, interpreter, say):
            ensured.append(release.version)
            return "reused"

        def resolve(spec, check=True):
            resolved.append(spec)
            return implementations.Impl("torch", ("python", "-m", "meshgate.impls.torch"),
                                        python="python")

        statuses = {"2.10.0": {"mesh/a": "error", "mesh/b": "pass"},
                    "2.13.0": {"mesh/a": "pass", "mesh/b": "pass"}}
        with mock.patch.object(torch_releases, "ensure", ensure), \
                mock.patch.object(implementations, "resolve", resolve), \
                mock.patch("meshgate.system.launch.run_with_recovery", self.fake_run(statuses)):
            code, out, err = self.meshgate("releases", "--out", str(self.root / "out"))
        self.assertEqual(code, 0, out + err)
        self.assertEqual(ensured, ["2.10.0", "2.13.0"])
        self.assertEqual(resolved, [f"torch@{self.root / 'build' / 'venv' / 'torch-2.10.0'}",
                                    f"torch@{self.root / 'build' / 'venv' / 'torch-2.13.0'}"])
        doc = json.loads((self.root / "out" / "releases.json").read_text())
        self.assertEqual([r["reported"] for r in doc["releases"]], ["2.10.0", "2.13.0"])
        self.assertEqual([(c["case"], c["class"]) for c in doc["changes"]], [("mesh/a", "error")])
        self.assertIn("cases/mesh-compat", doc["cases_selected"])
        self.assertTrue((self.root / "out" / "releases.md").is_file())
        self.assertIn("torch 2.10.0: 2 executed (1 pass, 0 fail, 1 error), 0 skip", out)

    def test_a_release_whose_environment_fails_is_not_run_and_exits_2(self):
        write_pins(self.root, PINS)

        def ensure(root, release, interpreter, say):
            if release.version == "2.10.0":
                raise venvs.EnvError("pip install failed")
            return "created"

        statuses = {"2.13.0": {"mesh/a": "pass"}}
        with mock.patch.object(torch_releases, "ensure", ensure), \
                mock.patch.object(implementations, "resolve",
                                  lambda spec, check=True: implementations.Impl("torch", ("x",))), \
                mock.patch("meshgate.system.launch.run_with_recovery", self.fake_run(statuses)):
            code, out, err = self.meshgate("releases", "--out", str(self.root / "out"))
        self.assertEqual(code, 2, out + err)
        self.assertIn("torch 2.10.0: not run: environment: pip install failed", out)
        doc = json.loads((self.root / "out" / "releases.json").read_text())
        self.assertEqual(doc["releases"][1]["counts"]["pass"], 1)

    def test_envs_only_makes_the_environments_and_runs_nothing(self):
        write_pins(self.root, PINS)
        ensured = []
        with mock.patch.object(torch_releases, "ensure",
                               lambda root, release, interpreter, say: ensured.append(
                                   (release.version, interpreter)) or "created"):
            code, out, err = self.meshgate("releases", "--envs-only", "--release", "2.13.0",
                                           "--python", "/some/python")
        self.assertEqual(code, 0, out + err)
        self.assertEqual(ensured, [("2.13.0", "/some/python")])
        self.build.assert_not_called()


if __name__ == "__main__":
    unittest.main()
