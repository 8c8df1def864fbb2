"""Every command of the command-line contract (docs/results.md), written as there: with its defaults
(--db, --out, --repo, the baselines folder), through the `meshgate` entry point.

Other tests pass explicit folders; these run the forms users type, so a default that breaks
(a report folder, the checkout to bisect) shows here. The driver runs from a copy of the
checkout that is its own git repository, so what the defaults write lands in the copy."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GATE = Path(__file__).parent / "fixtures" / "gate"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


@unittest.skipUnless(os.environ.get("MESHGATE_RUNNER") and os.environ.get("MESHGATE_PLAN"),
                     "needs MESHGATE_RUNNER and MESHGATE_PLAN (set by CTest)")
@unittest.skipUnless(shutil.which("git"), "needs git")
class ContractFormsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.repo = Path(cls.tmp.name) / "checkout"
        cls.repo.mkdir()
        shutil.copy2(ROOT / "meshgate", cls.repo / "meshgate")
        shutil.copy2(ROOT / "CMakePresets.json", cls.repo / "CMakePresets.json")
        shutil.copytree(ROOT / "harness" / "meshgate", cls.repo / "harness" / "meshgate",
                        ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copytree(ROOT / "cases" / "collectives", cls.repo / "cases" / "collectives")
        git(cls.repo, "init", "-q", "-b", "main")
        git(cls.repo, "add", ".")
        git(cls.repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "copy")
        cls.results = cls.repo / "results.json"
        shutil.copy2(GATE / "base.json", cls.results)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def meshgate(self, *argv: str) -> subprocess.CompletedProcess:
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        proc = subprocess.run([sys.executable, str(self.repo / "meshgate"), *argv], cwd=self.repo,
                              capture_output=True, text=True, env=env, timeout=300)
        self.assertNotIn("Traceback", proc.stderr, argv)
        self.assertNotIn("internal error", proc.stderr, argv)
        return proc

    def reports(self, prefix: str) -> list[Path]:
        return sorted((self.repo / "reports").glob(f"{prefix}-*"))

    def test_list(self):
        proc = self.meshgate("list", "cases/collectives/smoke.yaml")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("collectives-smoke/all-reduce-tp-sum-float32", proc.stdout)

    def test_compare_writes_its_report_under_reports(self):
        proc = self.meshgate("compare", str(GATE / "base.json"), str(GATE / "new.json"))
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)  # the fixture regresses
        folders = self.reports("compare")
        self.assertTrue(folders and (folders[-1] / "report.md").is_file(), folders)
        again = self.meshgate("report", str(folders[-1]))
        self.assertEqual(again.returncode, 0, again.stderr)

    def test_baseline_update_and_history(self):
        proc = self.meshgate("baseline", "update", str(self.results))
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertTrue(list((self.repo / "baselines").rglob("*.json")))
        proc = self.meshgate("history", "add", str(self.results))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertTrue((self.repo / "reports" / "history.sqlite").is_file())
        changes = self.repo / "changes.json"
        proc = self.meshgate("history", "changes", "--json", str(changes))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        found = json.loads(changes.read_text())
        self.assertEqual(found["changes"], [])
        # One commit of history: every timed series is too short to judge, and says so.
        self.assertTrue(found["too_short"])
        self.assertTrue(all(s["points"] == 1 and s["needed"] > 1 for s in found["too_short"]), found["too_short"])
        proc = self.meshgate("history", "show")
        self.assertEqual(proc.returncode, 0, proc.stderr)

    def test_bisect_and_ab_resolve_revisions_in_the_checkout(self):
        proc = self.meshgate("bisect", "--good", "HEAD", "--bad", "HEAD")
        self.assertEqual(proc.returncode, 2)
        self.assertIn("--good and --bad are the same commit " + git(self.repo, "rev-parse", "HEAD")[:12],
                      proc.stderr)
        proc = self.meshgate("bisect", "--good", "no-such-rev", "--bad", "HEAD", "--case", "x/*")
        self.assertEqual(proc.returncode, 2)
        self.assertIn("no-such-rev", proc.stderr)
        proc = self.meshgate("ab", "--base", "no-such-rev", "--candidate", "HEAD")
        self.assertEqual(proc.returncode, 2)
        self.assertIn("no-such-rev", proc.stderr)
        self.assertEqual(self.reports("bisect") + self.reports("ab"), [])  # refused: no folder

    def test_plan(self):
        proc = self.meshgate("plan", "--mesh", "2x2x2:A,B,C", "--flatten", "A,C", "--from", "P(sum),R,P(sum)",
                             "--to", "R,R,R")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("all_reduce(A+C, sum)", proc.stdout)


if __name__ == "__main__":
    unittest.main()
