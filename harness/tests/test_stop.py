"""A cancelled run (SIGTERM from CI, SIGINT from Ctrl-C) stops the runner's process group
within seconds and leaves results.json and the reports of what finished."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
import unittest

from .support import FakeRunner

REPO = pathlib.Path(__file__).resolve().parents[2]


def processes_mentioning(text: str) -> list[int]:
    pids = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            pids.append(int(entry.name))
    return pids


class StopTest(unittest.TestCase):
    def stop_mid_suite(self, signum: int) -> tuple[int, float, pathlib.Path, FakeRunner]:
        fake = FakeRunner("hang")  # a case that passes, then one that hangs forever
        self.addCleanup(fake.__exit__)
        out = fake.dir / "run"
        proc = subprocess.Popen([sys.executable, str(REPO / "meshgate"), "run", str(fake.dir), "--out", str(out)],
                                env=fake.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        deadline = time.monotonic() + 60
        jsonl = out / "results.jsonl"
        while time.monotonic() < deadline and not (jsonl.exists() and jsonl.read_text().strip()):
            time.sleep(0.05)
        self.assertTrue(jsonl.exists(), "the run never finished its first case")
        time.sleep(0.3)  # the hanging case has started
        self.assertTrue(processes_mentioning(str(out)), "the runner is not running")
        sent = time.monotonic()
        proc.send_signal(signum)
        output, _ = proc.communicate(timeout=30)
        gone = time.monotonic() - sent
        for _ in range(50):
            if not processes_mentioning(str(out)):
                break
            time.sleep(0.1)
        self.assertEqual(processes_mentioning(str(out)), [], "the runner outlived the driver")
        self.assertIn(f"{signal.Signals(signum).name} received", output)
        return proc.returncode, gone, out, fake

    def test_sigterm_stops_the_runner_and_writes_what_finished(self):
        code, seconds, out, _ = self.stop_mid_suite(signal.SIGTERM)
        self.assertEqual(code, 143)
        self.assertLess(seconds, 5.0)
        document = json.loads((out / "results.json").read_text())
        self.assertEqual([c["id"] for c in document["cases"]], ["collectives/all-reduce-a"])
        self.assertEqual(document["cases"][0]["status"], "pass")
        self.assertTrue((out / "report.md").is_file())
        self.assertTrue((out / "junit.xml").is_file())

    def test_sigint_exits_130(self):
        code, seconds, out, _ = self.stop_mid_suite(signal.SIGINT)
        self.assertEqual(code, 130)
        self.assertLess(seconds, 5.0)
        self.assertTrue((out / "results.json").is_file())


if __name__ == "__main__":
    unittest.main()
