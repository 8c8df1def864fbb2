"""`meshgate bisect` end to end: real builds of a scratch copy of this repository with planted
commits, real runner launches, real timings (CTest: bisect_e2e).

The scratch repository is `git archive HEAD` of this checkout plus a small case file, then:

    1 neutral   2 neutral   3 does not build   4 fixes it   5 size() 4x slower
    6 cosize() off by one   7 neutral

This checkout's driver bisects it twice (--repo): the perf case of size() must find commit 5,
the correctness case of cosize() commit 6; both skip commit 3, stay within ceil(log2 7) + 2 = 5
tested commits and write revert.md naming the culprit. Every build after the first is
incremental: the worktrees share ccache (CCACHE_BASEDIR at the scratch repository), and the
second bisection reuses the first one's builds.

It builds the runner several times, so it runs only when MESHGATE_BISECT_E2E=1 (its add_test
sets it); the plain `unittest discover` of python_driver skips it. MESHGATE_BISECT_E2E_PRESET
picks the preset (default cpu); MESHGATE_BISECT_E2E_KEEP=1 keeps the scratch repository and the
reports (the path is printed).
"""

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[2]
ENABLED = os.environ.get("MESHGATE_BISECT_E2E") == "1"
PRESET = os.environ.get("MESHGATE_BISECT_E2E_PRESET", "cpu")
CASE_FILE = "cases/bisect-e2e.yaml"
CASES = """\
# Small, fast cases for the bisection end-to-end test (harness/tests/test_bisect_e2e.py).
suite: bisect-e2e
cases:
  - name: size-3-modes
    kind: layout
    op: size
    args: ["(16,16,16):(256,16,1)"]
    expect: 4096
    tags: [perf]
    perf: {warmup: 5, iters: 20, runs: 5}
  - name: coalesce-4-modes
    kind: layout
    op: coalesce
    args: ["((2,2),(2,2)):((32,8),(4,1))"]
    expect: "(2,4,2):(32,4,1)"
    tags: [perf]
    perf: {warmup: 5, iters: 20, runs: 5}
  - name: cosize-2-modes
    kind: layout
    op: cosize
    args: ["(4,2):(1,4)"]
    expect: 8
    tags: [correctness]
"""
LAYOUT = "lib/layout/layout.cpp"
BROKEN = "\nint broken_on_purpose = ;  // planted by test_bisect_e2e: does not compile\n"
SLOW_SIZE = """
namespace meshgate {
// planted by test_bisect_e2e: size() does its work four times
std::int64_t size(const Layout& l) {
  std::int64_t n = 0;
  for (int i = 0; i < 4; ++i) {
    n = size_once(l);
    asm volatile("" : "+r"(n));
  }
  return n;
}
}  // namespace meshgate
"""
WRONG_COSIZE = """
namespace meshgate {
// planted by test_bisect_e2e: cosize() is off by one
std::int64_t cosize(const Layout& l) { return cosize_once(l) + 1; }
}  // namespace meshgate
"""


def git(repo, *args):
    env = dict(os.environ, GIT_AUTHOR_NAME="Planted Author", GIT_AUTHOR_EMAIL="planted@example.com",
               GIT_COMMITTER_NAME="Planted Author", GIT_COMMITTER_EMAIL="planted@example.com")
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def ccache_stats():
    if shutil.which("ccache") is None:
        return None
    proc = subprocess.run(["ccache", "--print-stats"], capture_output=True, text=True)
    if proc.returncode != 0:
        return None
    stats = dict(line.split("\t", 1) for line in proc.stdout.splitlines() if "\t" in line)
    return {"hits": int(stats.get("direct_cache_hit", 0)) + int(stats.get("preprocessed_cache_hit", 0)),
            "misses": int(stats.get("cache_miss", 0))}


def say(text):
    print(f"[bisect_e2e] {text}", file=sys.stderr, flush=True)


@unittest.skipUnless(ENABLED, "builds the runner several times: run through CTest (bisect_e2e), "
                              "or set MESHGATE_BISECT_E2E=1")
class BisectEndToEndTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.started = time.monotonic()
        cls.tmp = Path(tempfile.mkdtemp(prefix="meshgate-bisect-e2e-"))  # tearDownClass removes it
        cls.repo = cls.tmp / "repo"
        cls.repo.mkdir()
        archive = subprocess.run(["git", "-C", str(SOURCE), "archive", "HEAD"], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(cls.repo)], input=archive.stdout, check=True)
        (cls.repo / CASE_FILE).write_text(CASES)
        git(cls.repo, "init", "-q", "-b", "main")
        git(cls.repo, "add", "-A")
        git(cls.repo, "commit", "-q", "-m", "scratch copy of meshgate")
        layout = cls.repo / LAYOUT
        original = layout.read_text()
        for signature in ("std::int64_t size(const Layout& l) {", "std::int64_t cosize(const Layout& l) {"):
            if original.count(signature) != 1:
                raise AssertionError(f"{LAYOUT} no longer defines `{signature}` once: update the planted edits")
        slow = original.replace("std::int64_t size(const Layout& l) {",
                                "static std::int64_t size_once(const Layout& l) {") + SLOW_SIZE
        wrong = slow.replace("std::int64_t cosize(const Layout& l) {",
                             "static std::int64_t cosize_once(const Layout& l) {") + WRONG_COSIZE
        readme = cls.repo / "README.md"
        plan = [
            ("README: a neutral line", readme, readme.read_text() + "\nNeutral line one.\n"),
            ("cases/README: a neutral line", cls.repo / "cases" / "README.md",
             (cls.repo / "cases" / "README.md").read_text() + "\nNeutral line two.\n"),
            ("layout: a change that does not compile", layout, original + BROKEN),
            ("layout: make it compile again", layout, original),
            ("layout: size() walks the shape four times", layout, slow),
            ("layout: cosize() off by one", layout, wrong),
            ("README: another neutral line", readme, readme.read_text() + "\nNeutral line one.\nNeutral line three.\n"),
        ]
        for message, path, text in plan:
            path.write_text(text)
            git(cls.repo, "add", "-A")
            git(cls.repo, "commit", "-q", "-m", message)
        cls.history = git(cls.repo, "rev-list", "--reverse", "HEAD").split()  # base + 7
        cls.unbuildable, cls.slow, cls.wrong = cls.history[3], cls.history[5], cls.history[6]
        cls.bound = math.ceil(math.log2(len(cls.history) - 1)) + 2
        cls.ccache_before = ccache_stats()

    @classmethod
    def tearDownClass(cls):
        after = ccache_stats()
        if cls.ccache_before and after:
            say(f"ccache over the whole test: {after['hits'] - cls.ccache_before['hits']} hits, "
                f"{after['misses'] - cls.ccache_before['misses']} misses")
        say(f"total wall time {time.monotonic() - cls.started:.0f} s")
        if os.environ.get("MESHGATE_BISECT_E2E_KEEP") == "1":
            say(f"kept {cls.tmp}")
        else:
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def bisect(self, name, *selection):
        out = self.tmp / name
        env = {k: v for k, v in os.environ.items() if k not in ("MESHGATE_RUNNER", "MESHGATE_BISECT_E2E")}
        command = [sys.executable, str(SOURCE / "meshgate"), "bisect", "--repo", str(self.repo),
                   "--good", self.history[0], "--bad", "main", "--preset", PRESET, "--runs", "5",
                   "--seed", "11", "--case-timeout", "60", "--out", str(out), "--json", str(out / "result.json"),
                   *selection]
        before, started = ccache_stats(), time.monotonic()
        proc = subprocess.run(command, cwd=self.repo, env=env, capture_output=True, text=True)
        after = ccache_stats()
        seconds = time.monotonic() - started
        cache = (f"; ccache {after['hits'] - before['hits']} hits, {after['misses'] - before['misses']} misses"
                 if before and after else "")
        say(f"{name}: exit {proc.returncode} in {seconds:.0f} s{cache}")
        detail = f"\nstdout:\n{proc.stdout}\nstderr (tail):\n{proc.stderr[-6000:]}"
        self.assertEqual(proc.returncode, 0, detail)
        doc = json.loads((out / "result.json").read_text())
        revert = (out / "revert.md").read_text()
        return doc, revert, detail

    def check_common(self, doc, culprit, detail):
        self.assertEqual(doc["culprit"], culprit, detail)
        self.assertEqual(doc["good"], self.history[0])
        self.assertEqual(doc["bad"], self.history[-1])
        self.assertEqual(doc["evidence"]["commits"], len(self.history) - 1)
        self.assertLessEqual(doc["evidence"]["tested"], self.bound, detail)
        self.assertIn(self.unbuildable, doc["skipped"], detail)
        skip = [s for s in doc["steps"] if s["commit"] == self.unbuildable][0]
        self.assertEqual((skip["verdict"], skip["built"]), ("skip", False))

    def test_slowdown(self):
        doc, revert, detail = self.bisect("perf", CASE_FILE, "--tag", "perf")
        self.check_common(doc, self.slow, detail)
        targets = {t["id"]: t for t in doc["evidence"]["targets"]}
        self.assertIn("bisect-e2e/size-3-modes", targets)
        self.assertGreater(targets["bisect-e2e/size-3-modes"]["ratio"], 1.5)
        self.assertIn(self.slow, revert)
        self.assertIn(f"git revert {self.slow}", revert, revert)
        self.assertIn("size() walks the shape four times", revert)

    def test_correctness_break(self):
        doc, revert, detail = self.bisect("correctness", CASE_FILE, "--case", "bisect-e2e/cosize-2-modes")
        self.check_common(doc, self.wrong, detail)
        self.assertEqual([t["kind"] for t in doc["evidence"]["targets"]], ["status"])
        self.assertIn(f"git revert {self.wrong}", revert, revert)
        self.assertIn("cosize() off by one", revert)
        self.assertIn("| `bisect-e2e/cosize-2-modes` | pass | fail |", revert)


if __name__ == "__main__":
    unittest.main()
