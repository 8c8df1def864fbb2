"""Shared pieces of the driver tests: the fake runner and its scenario files."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "driver"
FAKE_RUNNER = FIXTURES / "fake_runner.py"


class FakeRunner:
    """A temporary folder, a scenario for the fake runner and the environment that points the
    driver at it. Use as a context manager; `environ()` patches os.environ."""

    def __init__(self, scenario: str | dict):
        self._tmp = tempfile.TemporaryDirectory(prefix="meshgate-test-")
        self.dir = Path(self._tmp.name)
        if isinstance(scenario, dict):
            self.scenario = self.dir / "scenario.json"
            self.scenario.write_text(json.dumps(scenario))
        else:
            self.scenario = FIXTURES / f"{scenario}.json"
        self.log = self.dir / "launches.jsonl"
        self.env = dict(os.environ, FAKE_RUNNER_SCENARIO=str(self.scenario),
                        FAKE_RUNNER_LOG=str(self.log), MESHGATE_RUNNER=str(FAKE_RUNNER))
        self.command = [sys.executable, str(FAKE_RUNNER)]

    def __enter__(self) -> "FakeRunner":
        return self

    def __exit__(self, *exc) -> None:
        self._tmp.cleanup()

    def environ(self):
        return mock.patch.dict(os.environ, self.env, clear=True)

    def launches(self) -> list[list[str]]:
        """The argument lists the fake runner was started with, in order."""
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def run_launches(self) -> list[list[str]]:
        return [argv for argv in self.launches() if argv[0] == "run"]


class DriverRun(unittest.TestCase):
    """`meshgate run` in-process on the fake runner, reports included."""

    def run_driver(self, scenario: dict, *argv: str) -> tuple[int, str, str, Path]:
        """(exit code, stdout, stderr, the run's folder) of `meshgate run --out DIR ARGV`."""
        from meshgate import cli

        fake = FakeRunner(scenario)
        self.addCleanup(fake.__exit__)
        root = fake.dir / "repo"
        (root / "cases").mkdir(parents=True)
        fake.env["MESHGATE_COMMIT"] = "59fa4d3deadbeef"
        out_dir = fake.dir / "run"
        out, err = io.StringIO(), io.StringIO()
        with fake.environ(), mock.patch("meshgate.core.files.source_root", return_value=root), \
                contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(["run", "--out", str(out_dir), *argv])
        return code, out.getvalue(), err.getvalue(), out_dir


def option_values(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == flag]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def once(why: str):
    """For a measurement over many simulated sessions, a run at scale or an analysis of the
    source: the run on the oldest supported Python (CTest python_driver_oldest sets
    MESHGATE_COMPAT_RUN=1), which is there for the language and library differences between
    interpreters, leaves it to the main run, whose faster tests on the same code it repeats."""
    return unittest.skipIf(os.environ.get("MESHGATE_COMPAT_RUN") == "1",
                           f"runs once, on the main Python: {why}")


def torch_tests_skip_reason() -> str | None:
    """Why the tests of --impl torch do not run here, or None when they do. They run from the
    CTest torch_impl (MESHGATE_TORCH_TESTS=1), not from the driver's unit tests, since each one
    starts PyTorch; and only where torch is importable (ci/bootstrap installs the pinned one)."""
    import importlib.util

    if os.environ.get("MESHGATE_TORCH_TESTS") != "1":
        return "the torch tests run from CTest torch_impl (MESHGATE_TORCH_TESTS=1)"
    if importlib.util.find_spec("torch") is None:
        return "PyTorch is not importable (ci/bootstrap installs the pinned version)"
    return None


def built_runner() -> Path | None:
    """The real meshgate-runner: MESHGATE_RUNNER when it is a binary, else one built under
    build/."""
    given = os.environ.get("MESHGATE_RUNNER", "")
    if given and not given.endswith(".py") and Path(given).exists():
        return Path(given)
    repo = Path(__file__).resolve().parents[2]
    for preset in ("cuda", "cpu"):
        built = repo / "build" / preset / "harness" / "runner" / "meshgate-runner"
        if built.exists():
            return built
    return None


def run_cases_on_runner(case_text: str, *extra: str, env: dict | None = None):
    """The built runner's `run` of a case file written from `case_text` (and `extra`
    options), in a scratch folder: its exit code, its rows by case name, its output."""
    tmp = Path(tempfile.mkdtemp(prefix="meshgate-runner-test-"))
    try:
        (tmp / "c.yaml").write_text(case_text)
        proc = subprocess.run([str(built_runner()), "run", str(tmp / "c.yaml"), "--out",
                               str(tmp / "out"), *extra], capture_output=True, text=True,
                              env=dict(os.environ, **(env or {})), timeout=300)
        results = tmp / "out" / "results.json"
        rows = json.loads(results.read_text())["cases"] if results.exists() else []
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return proc.returncode, {r["name"]: r for r in rows}, proc.stdout + proc.stderr


def requires_torch_runner(cls):
    """Skips a test class of --impl torch where those tests do not run (torch_tests_skip_reason)
    or no real runner is built."""
    reason = torch_tests_skip_reason()
    if reason is None and built_runner() is None:
        reason = "no meshgate-runner binary (MESHGATE_RUNNER or build/)"
    return unittest.skip(reason)(cls) if reason else cls


def run_on_torch(args: list, out: Path, timeout: float = 900, world: str = "gloo",
                 **env: str) -> dict:
    """meshgate-runner run ARGS --impl torch --out OUT on the built runner (`world` local:
    --impl torch-local): the results document. AssertionError with the runner's output when it
    wrote none."""
    import subprocess

    runner = built_runner()

    harness = Path(__file__).resolve().parents[1]  # holds the meshgate package
    environ = dict(os.environ, PYTHONPATH=str(harness) + os.pathsep
                   + os.environ.get("PYTHONPATH", ""), **env)
    proc = subprocess.run(
        [str(runner), "run", *[str(a) for a in args],
         "--impl", "torch" if world == "gloo" else f"torch-{world}",
         "--impl-command", json.dumps([sys.executable, "-m", "meshgate.impls.torch",
                                       "--world", world]),
         "--out", str(out)],
        cwd=harness.parent, env=environ, capture_output=True, text=True, timeout=timeout)
    results = Path(out) / "results.json"
    if not results.exists():
        raise AssertionError(f"no results.json (exit {proc.returncode}):\n"
                             f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return json.loads(results.read_text())


def rows_on_torch(case_file: Path, suite: str, names: list[str], out: Path, **options) -> dict:
    """The named cases of one case file run on torch (run_on_torch): their rows by name."""
    args: list = [case_file]
    for name in names:
        args += ["--case", f"{suite}/{name}"]
    return {row["name"]: row for row in run_on_torch(args, out, **options)["cases"]}
