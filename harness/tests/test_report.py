import contextlib
import html.parser
import io
import json
import pathlib
import re
import tempfile
import unittest
import xml.etree.ElementTree as ET

from meshgate import cli
from meshgate.core import svg
from meshgate.gate import compare, render
from meshgate.run import report

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "gate"


def load(name):
    return json.loads((FIXTURES / name).read_text())


class TagChecker(html.parser.HTMLParser):
    """Collects tags and checks that every opened non-void element is closed in order."""

    VOID = {"meta", "br", "img", "input", "link", "hr", "circle", "line", "rect", "polyline"}

    def __init__(self):
        super().__init__()
        self.stack, self.tags, self.errors, self.urls = [], [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href") and value:
                self.urls.append(value)
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append(tag)

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"unexpected </{tag}>, open: {self.stack[-3:]}")
            return
        self.stack.pop()


def check_html(testcase, text):
    checker = TagChecker()
    checker.feed(text)
    testcase.assertEqual(checker.errors, [])
    testcase.assertEqual(checker.stack, [])
    testcase.assertEqual(checker.urls, [])  # self-contained: nothing to fetch
    testcase.assertNotIn("<script", text)
    return checker


class RunReportTest(unittest.TestCase):
    def test_writes_three_files(self):
        with tempfile.TemporaryDirectory() as tmp:
            paths = report.write_run_report(pathlib.Path(tmp), load("new.json"))
            self.assertEqual([p.name for p in paths], ["report.md", "junit.xml", "report.html"])
            self.assertTrue(all(p.is_file() for p in paths))

    def test_markdown_headline_and_failures_first(self):
        md = report.run_markdown(load("new.json"))
        first = md.splitlines()[0]
        self.assertEqual(first, "# meshgate run new-1: FAIL (6 pass, 1 fail, 1 skip)")
        self.assertLess(md.index("## Failures"), md.index("## Performance"))
        self.assertIn("| `layout/coalesce-a` | `cases/layout/coalesce.yaml:12` | **fail** | "
                      "expected (2,6):(1,2), got (2,(1,6)):(1,(6,2)) |", md)
        self.assertIn("| `collectives/all-reduce-8MiB` | 9 |", md)
        self.assertIn("mesh has 16 ranks but the world has 8", md)

    def test_lists_every_model_disagreement(self):
        results = load("mesh_compat_run.json")
        md = report.run_markdown(results)
        self.assertIn("## Layout-model disagreements (2 of 3 configurations)", md)
        self.assertIn("### `mesh-compat/hsdp-flatten` (pass, 2 disagreements)", md)
        self.assertIn("- groups of dim dp_tp: one_level [[0,1,4,5],[2,3,6,7]] vs two_level [[0,1,2,3],[4,5,6,7]]", md)
        self.assertIn("- what: coordinates; rank: 3; one_level: [3]; two_level: [1]", md)
        self.assertIn("### `mesh-compat/unflatten-noncontig` (error, 1 disagreement)", md)
        self.assertNotIn("### `mesh-compat/plain-2x4`", md)  # compared, models agree
        self.assertIn('"flatten": [["dp", "tp"]]', md)  # the configuration is shown
        self.assertEqual([r["id"] for r in report.model_disagreement_cases(results)],
                         ["mesh-compat/hsdp-flatten", "mesh-compat/unflatten-noncontig"])
        page = report.run_html(results)
        self.assertIn("one_level rejects (KeyError), two_level accepts", page)

    def test_disagreements_are_summarised_by_class_worst_first(self):
        def row(case_id, *items):
            return {"id": case_id, "status": "pass", "metrics": {"model_disagreements": list(items)}}
        def item(cls, observable):
            return {"class": cls, "observable": observable, "one_level": "a", "two_level": "b"}
        results = {"run": {"id": "r"}, "cases": [
            row("c/relaxed", item("relaxation", "configuration")),
            row("c/repr", item("representation_change", "mesh._layout[0]"),
                item("representation_change", "== / hash with equal_to")),
            row("c/rejected", item("representation_change", "mesh._layout[1]"),
                item("new_rejection", "check_orthogonal of #172343")),
            row("c/agree"),
        ]}
        self.assertEqual(report.disagreement_summary(results), [
            ("new_rejection", 1, 1, ["check_orthogonal of #172343"]),
            ("representation_change", 2, 3, ["mesh._layout", "== / hash with equal_to"]),
            ("relaxation", 1, 1, ["configuration"]),
        ])
        md = report.run_markdown(results)
        self.assertIn("| new_rejection | 1 | 1 | check_orthogonal of #172343 |", md)
        # the case sections lead with the configurations whose changes break users
        self.assertLess(md.index("### `c/rejected`"), md.index("### `c/repr`"))
        self.assertLess(md.index("### `c/repr`"), md.index("### `c/relaxed`"))
        self.assertIn("<td>representation_change</td><td>2</td><td>3</td>", report.run_html(results))

    def test_no_disagreement_section_without_compared_models(self):
        self.assertNotIn("disagreements", report.run_markdown(load("new.json")))

    def test_junit_maps_statuses(self):
        root = ET.fromstring(render.junit_xml(load("new.json")))
        self.assertEqual(root.tag, "testsuites")
        self.assertEqual((root.get("tests"), root.get("failures"), root.get("errors"), root.get("skipped")), ("8", "1", "0", "1"))
        layout = root.find("testsuite[@name='layout']")
        case = layout.find("testcase[@name='coalesce-a']")
        self.assertIn("expected (2,6):(1,2)", case.find("failure").get("message"))
        mesh = root.find("testsuite[@name='mesh']")
        self.assertIsNotNone(mesh.find("testcase[@name='new-case']/skipped"))
        self.assertIsNone(mesh.find("testcase[@name='flatten-dp-tp']/*"))
        error_root = ET.fromstring(render.junit_xml(load("mesh_compat_run.json")))
        self.assertEqual(error_root.get("errors"), "1")

    def test_collectives_section_has_the_per_size_table_of_each_case_group(self):
        from .test_summary import COLLECTIVES

        md = report.run_markdown({"run": {"id": "r"}, "cases": COLLECTIVES})
        self.assertEqual(md.count("## Collectives"), 1)
        section = md[md.index("## Collectives"):md.index("<details><summary>Skipped")]
        self.assertEqual(section.splitlines()[2:10], [
            "`collectives-smoke/all-reduce-tp-sum-*` (all_reduce; 2 groups of 2 ranks; smoke.yaml:6)",
            "",
            "| size (B) | count | type | redop | time (us) | algbw (GB/s) | busbw (GB/s) | #wrong | "
            "in-place time (us) | in-place algbw (GB/s) | in-place busbw (GB/s) | in-place #wrong |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            "| 8 | 2 | float32 | sum | 7.51 | 0.00 | 0.00 | 0 | 3.66 | 0.00 | 0.00 | 0 |",
            "| 4096 | 1024 | float32 | sum | 17.74 | 0.23 | 0.23 | 0 | 6.23 | 0.66 | 0.66 | 0 |",
            "| 8 | 2 | int32 | sum | 3.97 | 0.00 | 0.00 | 0 | 4.13 | 0.00 | 0.00 | 0 |",
            "| 4096 | 1024 | int32 | sum | 5.54 | 0.74 | 0.74 | 3 | 5.37 | 0.76 | 0.76 | 0 |",
        ])
        self.assertIn("| size (B) | count | type | redop | root | time (us) | algbw (GB/s) | busbw (GB/s) | #wrong |",
                      section)
        self.assertIn("| 4096 | 4096 | uint8 | - | 1 | 1.49 | 2.75 | 2.75 | 0 |", section)
        # A row that records only busbw per size still gets its table, unknown cells as '-'.
        sparse = report.run_markdown(load("new.json"))
        self.assertIn("`collectives/all-gather-sweep`\n\n| size (B) |", sparse)
        self.assertIn("| 1048576 | - | - | - | - | 9.60 | 16.64 | - |", sparse)

    def test_busbw_in_and_out_of_place_are_separate_lines(self):
        metrics = {"sizes": [{"bytes": 1024, "busbw_GBps": 1.0, "inplace": False},
                             {"bytes": 1024, "busbw_GBps": 3.0, "inplace": True},
                             {"bytes": 4096, "busbw_GBps": 2.0, "inplace": False},
                             {"bytes": 4096, "busbw_GBps": 4.0, "inplace": True}]}
        self.assertEqual(render._busbw_series(metrics, "new"),
                         [("new out-of-place", [(1024.0, 1.0), (4096.0, 2.0)]),
                          ("new in-place", [(1024.0, 3.0), (4096.0, 4.0)])])
        one_mode = {"sizes": [{"bytes": 8, "busbw_GBps": 0.5, "inplace": False}]}
        self.assertEqual(render._busbw_series(one_mode), [("busbw", [(8.0, 0.5)])])

    def test_html_is_self_contained_with_plots(self):
        page = report.run_html(load("new.json"))
        checker = check_html(self, page)
        self.assertGreaterEqual(checker.tags.count("svg"), 7)  # 5 run distributions, busbw, TFLOP/s
        # Plots come under one heading per suite, titled by case name, the size axis log-scaled.
        plots = page[page.index("<h2 id=\"plots\">Plots</h2>"):page.index("<h2>All cases</h2>")]
        self.assertEqual(re.findall(r"<h3>([a-z]+) \((\d+)\)</h3>", plots),
                         [("collectives", "3"), ("gemm", "2"), ("redistribute", "2")])
        self.assertIn(">all-gather-sweep: busbw</text>", plots)
        self.assertIn("message size (log scale)", plots)
        self.assertIn("bias-1024: TFLOP/s", plots)
        self.assertIn("lt_epilogue", page)
        self.assertIn("<code>cases/layout/coalesce.yaml:12</code>", page)

    def test_long_plot_titles_are_cut_to_fit_with_the_full_title_as_tooltip(self):
        long = "a-very-long-case-name-" * 6
        chart = svg.line_plot([("busbw", [(1024.0, 1.0), (4096.0, 2.0)])], long, "size", "GB/s")
        shown = re.search(r'class="title"><title>([^<]*)</title>([^<]*)</text>', chart)
        self.assertEqual(shown.group(1), long)
        self.assertTrue(shown.group(2).endswith("\u2026"))
        self.assertLessEqual(len(shown.group(2)) * svg.TITLE_CHAR_PX, 520 - 60)

    def test_junit_links_failures_to_their_case_file(self):
        root = ET.fromstring(render.junit_xml(load("new.json")))
        case = next(c for c in root.iter("testcase") if c.get("name") == "coalesce-a")
        self.assertEqual((case.get("file"), case.get("line")), ("cases/layout/coalesce.yaml", "12"))
        self.assertTrue(case.find("failure").get("message").startswith("cases/layout/coalesce.yaml:12: expected"))


class AttachComparisonTest(unittest.TestCase):
    def test_run_report_gets_the_baseline_verdict_first(self):
        comparison = compare.compare_results(load("base.json"), load("new.json"))
        with tempfile.TemporaryDirectory() as tmp:
            # The run's report.md is written once, with the comparison's section.
            report.write_run_report(pathlib.Path(tmp), load("new.json"),
                                    [render.comparison_section(comparison, "baseline-report.md")])
            md_path = pathlib.Path(tmp) / "report.md"
            lines = md_path.read_text().splitlines()
        self.assertTrue(lines[0].startswith("# meshgate run new-1: FAIL"))
        self.assertEqual(lines[2], "Baseline comparison: **FAIL: 1 regression, 1 correctness failure** "
                                   "(details below and in `baseline-report.md`)")
        self.assertIn("## Baseline comparison: FAIL: 1 regression, 1 correctness failure", lines)
        self.assertIn("### Regressions", lines)


class ComparisonReportTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.comparison = compare.compare_results(load("base.json"), load("new.json"), base_label="base.json", new_label="new.json")

    def test_markdown_order_regressions_then_correctness_then_plans(self):
        md = render.comparison_markdown(self.comparison)
        self.assertTrue(md.startswith("# meshgate compare: FAIL: 1 regression, 1 correctness failure"))
        order = [md.index(h) for h in ("## Regressions", "## Correctness", "## Plan changes", "## Inconclusive", "## Improvements")]
        self.assertEqual(order, sorted(order))
        reg = md[md.index("## Regressions"): md.index("## Correctness")]
        self.assertIn("`collectives/all-reduce-8MiB`", reg)
        self.assertIn("| **1.121** | [1.098, 1.138] | 4.1e-05 | 0.0001 | 9/9 | 2.0 % | - | median 1 ms -> 1.12 ms; no calibration |", reg)
        plans = md[md.index("## Plan changes"): md.index("## Inconclusive")]
        self.assertIn("| **`all_reduce(A+C, sum)`** | **`all_reduce(A, sum)`** |", plans)
        self.assertIn("|  | `all_reduce(C, sum)` |", plans)
        passed = md[md.index("## Passed timing"):]
        self.assertIn("| `redistribute/prp-to-rrr` | 0.992 | [0.969, 1.007] | 2.0 % | slowdown >= 0.7 % | 9/9 |", passed)

    def test_markdown_shows_the_confirmation_batch_and_flags_wide_pass_intervals(self):
        c = compare.compare_results(load("base.json"), load("new.json"))
        by_id = {v.id: v for v in c.cases}
        reg = by_id["collectives/all-reduce-8MiB"]
        reg.confirmed, reg.confirm_verdict, reg.confirm_ratio, reg.confirm_ci = True, "regression", 1.118, (1.09, 1.14)
        by_id["redistribute/prp-to-rrr"].wide_ci = True
        md = render.comparison_markdown(c)
        self.assertIn("| 2.0 % | regression 1.118 [1.090, 1.140] |", md)
        self.assertIn("1 PASS row(s) flagged **wide CI**", md)
        self.assertIn("| **wide CI** |", md)

    def test_junit_marks_regressions_as_failures(self):
        verdicts = {v.id: v for v in self.comparison.cases}
        rows = [{"id": v.id, "status": v.new_status, "message": v.message} for v in self.comparison.cases if v.new_status]
        root = ET.fromstring(render.junit_xml({"cases": rows}, verdicts))
        failure = root.find("testsuite[@name='collectives']/testcase[@name='all-reduce-8MiB']/failure")
        self.assertEqual(failure.get("type"), "regression")
        self.assertEqual(root.get("failures"), "2")  # the regression and the correctness failure
        removed = root.find("testsuite[@name='layout']/testcase[@name='removed-case']/skipped")
        self.assertIn("missing", removed.get("message"))

    def test_html_plots_base_vs_new(self):
        page = render.comparison_html(self.comparison)
        checker = check_html(self, page)
        self.assertGreaterEqual(checker.tags.count("svg"), 7)
        self.assertIn("Per-run medians, base vs new", page)
        self.assertIn("lt_epilogue (base)", page)
        self.assertIn("lt_epilogue (new)", page)



class ReportCommandTest(unittest.TestCase):
    """`meshgate report DIR` re-renders a run's reports from its results."""

    def rows(self):
        return [{"id": "layout/a", "suite": "layout", "kind": "layout", "status": "pass", "message": ""},
                {"id": "layout/b", "suite": "layout", "kind": "layout", "status": "fail",
                 "message": "expected 4\ngot 5"}]

    def test_rerenders_from_results_json(self):
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = pathlib.Path(tmp)
            (run_dir / "results.json").write_text(json.dumps(
                {"schema": "meshgate.results/1", "run": {"id": "r1"}, "cases": self.rows()}))
            with contextlib.redirect_stdout(io.StringIO()):
                code = cli.main(["report", str(run_dir)])
            self.assertEqual(code, 0)
            md = (run_dir / "report.md").read_text()
            self.assertIn("layout/b", md)
            self.assertIn("expected 4", md)
            ET.fromstring((run_dir / "junit.xml").read_text())
            self.assertTrue((run_dir / "report.html").is_file())

    def test_a_killed_run_is_rendered_from_its_jsonl(self):
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = pathlib.Path(tmp)
            (run_dir / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in self.rows()))
            with contextlib.redirect_stdout(io.StringIO()):
                code = cli.main(["report", str(run_dir)])
            self.assertEqual(code, 0)
            doc = json.loads((run_dir / "results.json").read_text())
            self.assertEqual([c["id"] for c in doc["cases"]], ["layout/a", "layout/b"])
            self.assertTrue((run_dir / "report.md").is_file())

    def test_nothing_to_render_is_unusable_input(self):
        with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stderr(io.StringIO()) as err:
            self.assertEqual(cli.main(["report", tmp]), 2)
            pathlib.Path(tmp, "results.json").write_text('{"schema": "other"}')
            self.assertEqual(cli.main(["report", tmp]), 2)
        self.assertIn("results.json", err.getvalue())


if __name__ == "__main__":
    unittest.main()


class MultiLineMessagesTest(unittest.TestCase):
    MESSAGE = ("rank 0: stopped when rank 1 failed; its process group was killed\n"
               "rank 1: exited with 1; its stderr ended with:\n"
               "    Traceback (most recent call last):\n"
               "    ValueError: bad shard | `x`\n"
               "rank 2: stopped when rank 1 failed; its process group was killed")

    def results(self):
        return {"schema": "meshgate.results/1", "run": {"id": "r"},
                "cases": [{"id": "s/multi", "kind": "command", "status": "error", "message": self.MESSAGE}]}

    def test_report_md_leads_with_the_cause_and_keeps_the_lines_in_a_code_block(self):
        text = report.run_markdown(self.results())
        row = next(line for line in text.splitlines() if line.startswith("| `s/multi`"))
        self.assertIn("rank 1: exited with 1; its stderr ended with: ValueError: bad shard", row)
        block = text.split("```text\n", 1)[1].split("\n```", 1)[0]
        self.assertEqual(block.splitlines(), self.MESSAGE.splitlines())

    def test_report_html_keeps_the_lines(self):
        page = report.run_html(self.results())
        self.assertIn("<pre>rank 0: stopped when rank 1 failed; its process group was killed\n"
                      "rank 1: exited with 1; its stderr ended with:\n", page)


class RunReportOrderTest(unittest.TestCase):
    """report.md leads with what matters: failures, then performance, then folded details."""

    def test_failures_then_performance_then_folded_details(self):
        results = load("mesh_compat_run.json")
        results["cases"].append({"id": "perf/one-run", "kind": "gemm", "status": "pass", "message": "",
                                 "samples": {"time_s": [[1e-3, 1.1e-3, 0.9e-3]]}})
        md = report.run_markdown(results)
        order = [md.index(s) for s in ("## Failures", "## Performance", report.DETAILS_MARK,
                                       "<details><summary>Layout-model disagreements (2 of 3 configurations; 1 in failing cases)",
                                       "## Layout-model disagreements")]
        self.assertEqual(order, sorted(order))
        # The first screen: nothing of the disagreements before the details.
        self.assertNotIn("disagreement", md[:md.index(report.DETAILS_MARK)])
        self.assertIn("| `perf/one-run` | 1 | 1 ms | - (1 run) |", md)
        section = render.Section("Deterministic signals", "PASS", "# x\n\n## Plan changes\n\nnone\n", "s.md")
        with_section = report.run_markdown(results, [section])
        self.assertLess(with_section.index("## Deterministic signals: PASS"), with_section.index(report.DETAILS_MARK))
        page = report.run_html(results)
        self.assertLess(page.index("<h2>Performance</h2>"), page.index("<details><summary>Layout-model"))

    def test_one_rank_groups_have_no_bandwidth(self):
        metrics = {"group_size": 1, "groups": 8,
                   "sizes": [{"bytes": 1024, "time_s": 4e-8, "algbw_GBps": 25.6, "busbw_GBps": 0.0, "inplace": False},
                             {"bytes": 1024, "time_s": 3.9e-11, "algbw_GBps": 26214.4, "busbw_GBps": 0.0,
                              "inplace": True}]}
        self.assertEqual(render._busbw_series(metrics), [])
        row = {"id": "coll/all-reduce-1", "suite": "coll", "name": "all-reduce-1", "kind": "collective",
               "status": "pass", "params": {"op": "all_reduce", "dtype": "float32", "reduce": "sum"},
               "metrics": metrics}
        md = report.run_markdown({"run": {"id": "r"}, "cases": [row]})
        self.assertIn("| 1024 | - | float32 | sum | 0.04 | - | - | - | 0.00 | - | - | - |", md)
        self.assertNotIn("26214.40", md)
        self.assertNotIn("busbw", "".join(report._metric_plots(row)))

    def test_each_commands_report_names_its_command(self):
        comparison = compare.compare_results(load("base.json"), load("new.json"))
        self.assertTrue(render.comparison_markdown(comparison).startswith("# meshgate compare: "))
        comparison.command = "ab"
        self.assertTrue(render.comparison_markdown(comparison).startswith("# meshgate ab: "))
        self.assertIn("<title>meshgate ab", render.comparison_html(comparison))
