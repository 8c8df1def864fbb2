from __future__ import annotations

import contextlib
import io
import os
import unittest
from pathlib import Path
from unittest import mock

from meshgate.run import summary

from .support import built_runner

CASES = [
    {"id": "layout-algebra/coalesce-a", "suite": "layout-algebra", "status": "pass"},
    {"id": "layout-algebra/complement-b", "suite": "layout-algebra", "status": "fail",
     "message": "expected (2,6):(1,2)\ngot (2,6):(1,3)"},
    {"id": "mesh/flatten-c", "suite": "mesh", "status": "skip", "message": "needs 8 ranks"},
    {"id": "redistribute/prp", "status": "error",
     "message": "runner crashed with SIGSEGV while running this case\nlast runner stderr:\nx"},
]


class SummaryTest(unittest.TestCase):
    def test_full_summary(self):
        text = summary.render(CASES, 83.0, Path("/r/20261121-071500-59fa4d3"),
                              [Path("/r/20261121-071500-59fa4d3/report.md")],
                              ["baseline baselines/x: regression (exit 1)"])
        self.assertEqual(text.splitlines(), [
            "meshgate: 4 cases  pass 1  fail 1  error 1  skip 1  (wall 1:23)",
            "",
            "suite           pass  fail  error  skip",
            "layout-algebra     1     1      0     0",
            "mesh               0     0      0     1",
            "redistribute       0     0      1     0",
            "",
            "failed (1):",
            "  layout-algebra/complement-b  expected (2,6):(1,2)",
            "",
            "errors (1):",
            "  redistribute/prp  runner crashed with SIGSEGV while running this case",
            "",
            "baseline baselines/x: regression (exit 1)",
            "results: /r/20261121-071500-59fa4d3/results.json",
            "report:  /r/20261121-071500-59fa4d3/report.md",
        ])

    def test_a_multi_rank_failure_is_summarised_by_the_rank_that_started_it(self):
        # The runner's command kind: one block per rank, the failing rank's output indented.
        stopped = {"id": "torch/ddp", "status": "error", "message": (
            "rank 0: stopped when rank 1 failed; its process group was killed\n"
            "rank 1: was killed by signal 6 (Aborted); its stderr ended with:\n"
            "    terminate called after throwing an instance of 'c10::Error'\n"
            "    what():  CUDA error: an illegal memory access\n"
            "rank 2: stopped when rank 1 failed; its process group was killed")}
        two = {"id": "torch/pair", "status": "error", "message": (
            "rank 0: exited with 1; its stderr ended with:\n"
            "    Traceback (most recent call last):\n"
            "    torch.distributed.DistBackendError: remote process exited\n"
            "rank 1: was killed by signal 6 (Aborted); its stderr ended with:\n"
            "    what():  boom")}
        text = summary.render([stopped, two], 1.0, Path("/o"))
        self.assertIn("  torch/ddp   rank 1: was killed by signal 6 (Aborted); its stderr ended with: "
                      "what():  CUDA error: an illegal memory access (+2 other ranks)", text)
        self.assertIn("  torch/pair  rank 1: was killed by signal 6 (Aborted); its stderr ended with: "
                      "what():  boom (+1 other rank)", text)
        self.assertNotIn("stopped when", text)

    def test_all_passing_has_no_failure_sections(self):
        text = summary.render(CASES[:1], 1.0, Path("/o"))
        self.assertNotIn("failed", text)
        self.assertNotIn("errors", text)
        self.assertIn("pass 1  fail 0  error 0  skip 0", text)

    def test_suite_counts_in_first_appearance_order(self):
        counts = summary.suite_counts(CASES)
        self.assertEqual(list(counts), ["layout-algebra", "mesh", "redistribute"])
        self.assertEqual(counts["layout-algebra"], {"pass": 1, "fail": 1, "error": 0, "skip": 0})


def size_entry(size: int, count: int, time_us: float, algbw: float, busbw: float, wrong: int = 0,
               inplace: bool = False) -> dict:
    """One entry of a collective row's metrics.sizes, as the runner writes it."""
    return {"bytes": size, "count": count, "inplace": inplace, "time_s": time_us * 1e-6,
            "algbw_GBps": algbw, "busbw_GBps": busbw, "modeled_time_s": 1e-5, "wrong": wrong}


def collective(name: str, line: int, op: str, dtype: str, sizes: list[dict], reduce: str | None = None,
               groups: int = 1, group_size: int = 4, status: str = "pass", **params) -> dict:
    params = dict(params, op=op, dtype=dtype, group_size=group_size)
    if reduce:
        params["reduce"] = reduce
    return {"id": f"collectives-smoke/{name}", "suite": "collectives-smoke", "name": name,
            "kind": "collective", "file": "/src/cases/collectives/smoke.yaml", "line": line,
            "status": status, "params": params,
            "metrics": {"groups": groups, "group_size": group_size, "sizes": sizes}}


# Two cases of one matrix entry measured in and out of place, a broadcast, and rows that have no
# per-size table: a skipped collective and a case of another kind.
COLLECTIVES = [
    collective("all-reduce-tp-sum-float32", 6, "all_reduce", "float32", reduce="sum", groups=2,
               group_size=2, sizes=[size_entry(8, 2, 7.512, 0.0011, 0.0011),
                                    size_entry(4096, 1024, 17.74, 0.2309, 0.2309),
                                    size_entry(8, 2, 3.66, 0.0022, 0.0022, inplace=True),
                                    size_entry(4096, 1024, 6.23, 0.6574, 0.6574, inplace=True)]),
    collective("all-reduce-tp-sum-int32", 6, "all_reduce", "int32", reduce="sum", groups=2,
               group_size=2, status="fail",
               sizes=[size_entry(8, 2, 3.97, 0.002, 0.002),
                      size_entry(4096, 1024, 5.54, 0.74, 0.74, wrong=3),
                      size_entry(8, 2, 4.13, 0.0019, 0.0019, inplace=True),
                      size_entry(4096, 1024, 5.37, 0.76, 0.76, inplace=True)]),
    collective("broadcast-root-1", 57, "broadcast", "uint8", root=1, groups=2, group_size=2,
               sizes=[size_entry(1, 1, 1.72, 0.0006, 0.0006), size_entry(4096, 4096, 1.49, 2.75, 2.75)]),
    {"id": "collectives-smoke/all-gather-on-8", "suite": "collectives-smoke", "kind": "collective",
     "status": "skip", "message": "needs 8 ranks", "params": {"op": "all_gather"}, "metrics": {}},
    {"id": "layout/coalesce", "suite": "layout", "kind": "layout", "status": "pass",
     "metrics": {"sizes": [{"bytes": 8}]}},
]


class CollectiveTableTest(unittest.TestCase):
    def test_one_table_per_case_group_in_and_out_of_place_side_by_side(self):
        text = summary.collective_text(summary.collective_tables(COLLECTIVES))
        self.assertEqual(text, [
            "collectives-smoke/all-reduce-tp-sum-* (all_reduce; 2 groups of 2 ranks; smoke.yaml:6)",
            "                                        out-of-place                    in-place",
            "  size  count     type  redop   time   algbw   busbw  #wrong  time   algbw   busbw  #wrong",
            "   (B)                          (us)  (GB/s)  (GB/s)          (us)  (GB/s)  (GB/s)",
            "     8      2  float32    sum   7.51    0.00    0.00       0  3.66    0.00    0.00       0",
            "  4096   1024  float32    sum  17.74    0.23    0.23       0  6.23    0.66    0.66       0",
            "     8      2    int32    sum   3.97    0.00    0.00       0  4.13    0.00    0.00       0",
            "  4096   1024    int32    sum   5.54    0.74    0.74       3  5.37    0.76    0.76       0",
            "",
            "collectives-smoke/broadcast-root-1 (broadcast; 2 groups of 2 ranks; smoke.yaml:57)",
            "  size  count   type  redop  root  time   algbw   busbw  #wrong",
            "   (B)                             (us)  (GB/s)  (GB/s)",
            "     1      1  uint8      -     1  1.72    0.00    0.00       0",
            "  4096   4096  uint8      -     1  1.49    2.75    2.75       0",
            "",
        ])

    def test_cases_the_columns_cannot_tell_apart_are_named(self):
        sizes = [size_entry(32, 4, 6.06, 0.01, 0.0)]
        tables = summary.collective_tables([
            collective("2d-over-dp", 22, "all_gather", "float32", groups=4, group_size=2, sizes=sizes),
            collective("2d-over-tp", 22, "all_gather", "float32", groups=4, group_size=2, sizes=sizes),
            collective("2d-over-both", 22, "all_gather", "float32", groups=1, group_size=8, sizes=sizes)])
        self.assertEqual(len(tables), 1)
        table = tables[0]
        self.assertEqual(table.name, "collectives-smoke/2d-over-*")
        self.assertEqual(table.about, "all_gather; smoke.yaml:22")  # the geometry varies: a column
        self.assertEqual(table.keys, ["case", "size (B)", "count", "type", "redop", "groups x ranks"])
        self.assertEqual([row[0] for row in table.rows], ["2d-over-dp", "2d-over-tp", "2d-over-both"])
        self.assertEqual([row[5] for row in table.rows], ["4x2", "4x2", "1x8"])

    def test_a_row_the_implementation_declined_says_skip(self):
        declined = {"bytes": 8, "count": 2, "inplace": True, "modeled_time_s": 1e-5,
                    "status": "skip", "reason": "in place: no in-place form"}
        table = summary.collective_tables([
            collective("reduce-scatter-dp-sum", 41, "reduce_scatter", "float32", reduce="sum",
                       sizes=[size_entry(8, 2, 3.5, 0.002, 0.001), declined])])[0]
        self.assertEqual(table.rows, [["8", "2", "float32", "sum", "3.50", "0.00", "0.00", "0",
                                       "skip", "-", "-", "-"]])

    def test_no_collective_sizes_no_table(self):
        self.assertEqual(summary.collective_tables(CASES + COLLECTIVES[3:]), [])


@unittest.skipIf(built_runner() is None, "no meshgate-runner binary (MESHGATE_RUNNER or build/)")
class RunPrintsCollectiveTablesTest(unittest.TestCase):
    """`meshgate run` on the real runner prints a collective sweep's per-size table before its
    summary, and report.md has it under Collectives."""

    def test_run_prints_the_sweep_table(self):
        import tempfile

        from meshgate import cli

        cases = Path(__file__).resolve().parents[2] / "cases" / "collectives" / "smoke.yaml"
        with tempfile.TemporaryDirectory(prefix="meshgate-collectives-") as tmp:
            out_dir = Path(tmp) / "run"
            stdout, stderr = io.StringIO(), io.StringIO()
            with mock.patch.dict(os.environ, {"MESHGATE_RUNNER": str(built_runner())}), \
                    contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                code = cli.main(["run", str(cases), "--case", "collectives-smoke/all-reduce-timed",
                                 "--out", str(out_dir)])
            report_md = (out_dir / "report.md").read_text()
        self.assertEqual(code, 0, stderr.getvalue())
        lines = stdout.getvalue().splitlines()
        title = "collectives-smoke/all-reduce-timed (all_reduce; 1 group of 4 ranks; smoke.yaml:65)"
        self.assertIn(title, lines)
        table = lines[lines.index(title) + 1:]
        self.assertEqual(table[0].split(), ["size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong"])
        sizes = [line.split()[:4] for line in table[2:7]]
        self.assertEqual(sizes, [[str(1024 * 4 ** i), str(256 * 4 ** i), "float32", "sum"] for i in range(5)])
        self.assertEqual(table[7], "")
        self.assertLess(lines.index(title), next(i for i, l in enumerate(lines) if l.startswith("meshgate: 1 cases")))
        self.assertIn("## Collectives", report_md)
        self.assertIn("| 262144 | 65536 | float32 | sum |", report_md)


if __name__ == "__main__":
    unittest.main()
