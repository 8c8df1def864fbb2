import io
import unittest
import unittest.mock

from meshgate.core import markup
from meshgate.system import progress
from meshgate.system.progress import PlainView, Tally, TtyView


class ParseEventTest(unittest.TestCase):
    def test_events_are_recognised(self):
        event = progress.parse_event('{"event":"end","id":"a/b","status":"pass","seconds":0.5}')
        self.assertEqual(event["id"], "a/b")
        self.assertEqual(event["status"], "pass")

    def test_human_text_and_foreign_json_pass_through(self):
        self.assertIsNone(progress.parse_event("loaded 3 files"))
        self.assertIsNone(progress.parse_event('{"not": "an event"}'))
        self.assertIsNone(progress.parse_event('{"event": "unknown"}'))
        self.assertIsNone(progress.parse_event('{"event": "end", '))
        self.assertIsNone(progress.parse_event("[1, 2]"))


class FormatTest(unittest.TestCase):
    def test_case_time(self):
        self.assertEqual(progress.format_case_time(0.0001), "0.1 ms")
        self.assertEqual(progress.format_case_time(0.000012), "12 us")
        self.assertEqual(progress.format_case_time(0.25), "250.0 ms")
        self.assertEqual(progress.format_case_time(2.345), "2.35 s")
        self.assertEqual(progress.format_case_time(None), "-")

    def test_clock(self):
        self.assertEqual(markup.format_clock(0), "0:00")
        self.assertEqual(markup.format_clock(75.4), "1:15")
        self.assertEqual(markup.format_clock(3725), "1:02:05")


class TallyTest(unittest.TestCase):
    def test_eta_is_mean_case_time_times_cases_left(self):
        tally = Tally(total=10)
        self.assertIsNone(tally.eta())
        tally.record("pass", 2.0)
        tally.record("fail", 4.0)
        self.assertAlmostEqual(tally.eta(), 3.0 * 8)
        self.assertEqual(tally.counts, {"pass": 1, "fail": 1, "error": 0, "skip": 0})

    def test_unknown_status_counts_as_error(self):
        tally = Tally(total=1)
        tally.record("exploded", 1.0)
        self.assertEqual(tally.counts["error"], 1)


class PlainViewTest(unittest.TestCase):
    def test_one_line_per_finished_case(self):
        out = io.StringIO()
        view = PlainView(out, out)
        tally = Tally(total=120)
        for _ in range(2):
            tally.record("pass", 0.001)
        tally.record("pass", 0.0001)
        view.finished(tally, "layout-algebra/coalesce-a", "pass", 0.0001, "")
        self.assertEqual(out.getvalue(), "[  3/120] pass   layout-algebra/coalesce-a  0.1 ms\n")

    def test_failures_show_their_first_message_line(self):
        out = io.StringIO()
        tally = Tally(total=4)
        tally.record("fail", 0.002)
        PlainView(out, out).finished(tally, "mesh/x", "fail", 0.002, "expected [0]\ngot [1]")
        self.assertEqual(out.getvalue(), "[1/4] fail   mesh/x  2.0 ms  expected [0]\n")

    def test_skips_show_their_reason(self):
        out = io.StringIO()
        tally = Tally(total=4)
        tally.record("skip", 0.0)
        PlainView(out, out).finished(tally, "mesh/x", "skip", 0.0001,
                                     "needs 16 ranks but the world has 8\nmore")
        self.assertEqual(out.getvalue(),
                         "[1/4] skip   mesh/x  0.1 ms  needs 16 ranks but the world has 8\n")

    def test_a_failure_names_where_its_case_is_written(self):
        from meshgate.system.launch import LaunchOutcome, _handle

        out = io.StringIO()
        tally = Tally(total=2)
        view = PlainView(out, out)
        for status in ("fail", "pass"):
            _handle({"event": "end", "id": f"mesh/{status}", "status": status, "seconds": 0.001,
                     "message": "expected [0], got [1]", "file": "cases/mesh/x.yaml", "line": 12},
                    LaunchOutcome(), view, tally)
        lines = out.getvalue().splitlines()
        self.assertTrue(lines[0].endswith("mesh/fail  1.0 ms  cases/mesh/x.yaml:12: expected [0], "
                                          "got [1]"), lines[0])
        self.assertNotIn("x.yaml", lines[1])

    def test_text_goes_to_its_stream(self):
        out, err = io.StringIO(), io.StringIO()
        view = PlainView(out, err)
        view.text("hello", "stdout")
        view.text("warning: x", "stderr")
        self.assertEqual(out.getvalue(), "hello\n")
        self.assertEqual(err.getvalue(), "warning: x\n")


class FoldedSkipsTest(unittest.TestCase):
    """ab, bisect and calibrate launch the same cases again and again: their skips are one line
    per suite and launch, with the reasons, rather than one line per case."""

    def setUp(self):
        environ = unittest.mock.patch.dict("os.environ", {"MESHGATE_QUIET": ""})
        environ.start()
        self.addCleanup(environ.stop)

    def finish(self, view, tally, case_id, status, message=""):
        tally.record(status, 0.1)
        view.finished(tally, case_id, status, 0.1, message)

    def test_skips_fold_into_one_line_per_suite_keeping_the_reasons(self):
        out = io.StringIO()
        view = PlainView(out, out, fold_skips=True)
        tally = Tally(total=44)
        self.finish(view, tally, "gemm-cpu/perf", "pass")
        for i in range(39):
            self.finish(view, tally, f"gemm-cuda/case-{i}", "skip", "no CUDA device present\ndetail")
        self.finish(view, tally, "mesh/a", "skip", "needs 16 ranks but the world has 8")
        self.finish(view, tally, "mesh/b", "skip", "")
        self.finish(view, tally, "mesh/c", "skip", "needs 16 ranks but the world has 8")
        self.finish(view, tally, "gemm-cuda/fp8-is-rejected", "pass")
        self.assertEqual(out.getvalue().count("skip"), 0)  # nothing yet: the launch goes on
        view.close()
        self.assertEqual(out.getvalue().splitlines()[2:], [
            "gemm-cuda: 39 skipped (no CUDA device present)",
            "mesh: 3 skipped (needs 16 ranks but the world has 8: 2; no reason given: 1)",
        ])

    def test_each_launch_gets_its_own_lines(self):
        out = io.StringIO()
        view = PlainView(out, out, fold_skips=True)
        for run in (1, 2):
            view.heading(f"run {run}")
            tally = Tally(total=2)
            self.finish(view, tally, "gemm-cuda/a", "skip", "no CUDA device present")
            self.finish(view, tally, "gemm-cuda/b", "skip", "no CUDA device present")
        view.close()
        self.assertEqual(out.getvalue().splitlines(), [
            "run 1", "gemm-cuda: 2 skipped (no CUDA device present)",
            "run 2", "gemm-cuda: 2 skipped (no CUDA device present)"])

    def test_a_terminal_shows_the_folded_lines_when_the_launch_ends(self):
        out = io.StringIO()
        view = TtyView(out, width=100, fold_skips=True)
        tally = Tally(total=2)
        self.finish(view, tally, "gemm-cuda/a", "skip", "no CUDA device present")
        self.finish(view, tally, "gemm-cuda/b", "pass")
        view.close()
        self.assertTrue(out.getvalue().endswith("\r\x1b[Kgemm-cuda: 1 skipped (no CUDA device present)\n"),
                        repr(out.getvalue()[-80:]))

    def test_without_folding_every_skip_has_its_line(self):
        out = io.StringIO()
        view = progress.make_view(out)
        tally = Tally(total=2)
        self.finish(view, tally, "gemm-cuda/a", "skip", "no CUDA device present")
        view.close()
        self.assertEqual(out.getvalue(), "[1/2] skip   gemm-cuda/a  100.0 ms  no CUDA device present\n")

    def test_experiment_launches_fold_their_skips(self):
        import contextlib
        import tempfile
        from pathlib import Path

        from meshgate.system import repeats

        from .support import FakeRunner

        scenario = {"cases": [{"id": "gemm-cpu/perf", "kind": "gemm", "outcome": "pass"}] + [
            {"id": f"gemm-cuda/case-{i}", "kind": "gemm", "outcome": "skip",
             "message": "no CUDA device present"} for i in range(39)]}
        with FakeRunner(scenario) as fake, fake.environ(), tempfile.TemporaryDirectory() as tmp:
            side = repeats.Side(label="base", commit="0123456789abcdef", runner=fake.command,
                                  case_paths=[tmp])
            launcher = repeats.DriverLauncher(stamp="test")
            ids = [case["id"] for case in scenario["cases"]]
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                for n in (1, 2):
                    launcher(side, n, ids, Path(tmp) / f"run-{n}")
        lines = out.getvalue().splitlines()
        self.assertEqual([line for line in lines if "skip" in line],
                         ["gemm-cuda: 39 skipped (no CUDA device present)"] * 2)
        self.assertEqual(len(lines), 6)  # per launch: its heading, the pass, the folded skips


class TtyViewTest(unittest.TestCase):
    def test_status_line_shows_position_current_case_times_and_counts(self):
        tally = Tally(total=5, started_at=0.0)
        tally.record("pass", 1.0)
        tally.record("error", 3.0)
        tally.current = "mesh/slice-c"
        view = TtyView(io.StringIO(), width=200)
        line = view.status_line(tally)
        self.assertTrue(line.startswith("[3/5]  mesh/slice-c  elapsed "), line)
        self.assertIn("ETA 0:06", line)   # mean 2 s x 3 cases left
        self.assertTrue(line.endswith("fail 0  error 1"), line)

    def test_status_line_is_rewritten_in_place_and_failures_stay(self):
        out = io.StringIO()
        view = TtyView(out, out, width=200, min_interval=0)
        tally = Tally(total=2)
        view.plan(tally)
        tally.current = "a/one"
        view.started(tally, "a/one")
        tally.record("fail", 0.5)
        view.finished(tally, "a/one", "fail", 0.5, "wrong plan")
        view.text("runner says hi", "stdout")
        view.close()
        text = out.getvalue()
        self.assertIn("\r\x1b[K[1/2]  a/one  elapsed", text)
        self.assertIn("\r\x1b[K[1/2] fail   a/one  500.0 ms  wrong plan\n", text)
        self.assertIn("\r\x1b[Krunner says hi\n", text)
        self.assertTrue(text.endswith("\r\x1b[K"), repr(text[-40:]))

    def test_passing_cases_leave_no_permanent_line(self):
        out = io.StringIO()
        view = TtyView(out, out, width=200)
        tally = Tally(total=1)
        tally.record("pass", 0.1)
        view.finished(tally, "a/one", "pass", 0.1, "")
        self.assertNotIn("\n", out.getvalue())

    def test_long_lines_are_cut_to_the_terminal(self):
        tally = Tally(total=1)
        tally.current = "suite/" + "x" * 300
        line = TtyView(io.StringIO(), width=60).status_line(tally)
        self.assertLessEqual(len(line), 59)
        self.assertTrue(line.endswith("..."))

    def test_redraws_are_throttled(self):
        out = io.StringIO()
        view = TtyView(out, out, width=200, min_interval=3600)
        tally = Tally(total=100)
        view.plan(tally)
        for i in range(50):
            tally.current = f"s/{i}"
            view.started(tally, tally.current)
            tally.record("pass", 0.001)
            view.finished(tally, tally.current, "pass", 0.001, "")
        self.assertEqual(out.getvalue().count("\r\x1b[K"), 1)
        view.min_interval = 0
        view.tick()
        self.assertTrue(
            out.getvalue().endswith("[50/100]  elapsed 0:00  ETA 0:00  fail 0  error 0"),
            out.getvalue()[-80:])


class MakeViewTest(unittest.TestCase):
    def test_terminal_gets_the_live_line(self):
        class Terminal(io.StringIO):
            def isatty(self):
                return True

        self.assertIsInstance(progress.make_view(Terminal()), TtyView)
        self.assertIsInstance(progress.make_view(io.StringIO()), PlainView)


if __name__ == "__main__":
    unittest.main()


class CaseLineTest(unittest.TestCase):
    def test_a_multi_rank_error_shows_the_rank_that_started_it(self):
        tally = Tally(total=3)
        tally.record("error", 1.0)
        line = progress.case_line(tally, "torch/ddp", "error", 1.0,
                                  "rank 0: stopped when rank 1 failed; its process group was killed\n"
                                  "rank 1: exited with 3; its stderr ended with:\n    cannot connect")
        self.assertIn("rank 1: exited with 3; its stderr ended with: cannot connect (+1 other rank)", line)
        self.assertNotIn("rank 0", line)


class LongCommandProgressTest(unittest.TestCase):
    def setUp(self):
        progress.set_quiet(False)
        self.addCleanup(progress.set_quiet, False)
        environ = unittest.mock.patch.dict("os.environ", {"MESHGATE_QUIET": ""})
        environ.start()
        self.addCleanup(environ.stop)

    def test_steps_say_k_of_n_elapsed_and_eta(self):
        now = [100.0]
        out = io.StringIO()
        steps = progress.Steps("meshgate ab", "batch-1, runs 1 to 9 a side", 18, out=out, clock=lambda: now[0],
                               quiet_for=0.0)
        steps.step("base run 1")
        now[0] += 10
        steps.step("candidate run 1")
        now[0] += 10
        steps.step("candidate run 2")
        lines = out.getvalue().splitlines()
        self.assertEqual(lines[0], "meshgate ab: batch-1, runs 1 to 9 a side: 1 of 18 (base run 1), elapsed 0:00, ETA ?")
        self.assertEqual(lines[2], "meshgate ab: batch-1, runs 1 to 9 a side: 3 of 18 (candidate run 2), "
                                   "elapsed 0:20, ETA 2:40")
        progress.set_quiet(True)
        steps.step("x")
        self.assertEqual(len(out.getvalue().splitlines()), 3)
        # A phase of quick steps says nothing until it has run for quiet_for seconds.
        progress.set_quiet(False)
        quick = io.StringIO()
        brief = progress.Steps("meshgate", "batch-2", 4, out=quick, clock=lambda: now[0])
        brief.step("a")
        now[0] += 3
        brief.step("b")
        self.assertEqual(quick.getvalue(), "meshgate: batch-2: 2 of 4 (b), elapsed 0:03, ETA 0:09\n")

    def test_on_a_terminal_steps_builds_and_cases_share_one_line(self):
        class Terminal(io.StringIO):
            def isatty(self):
                return True

        self.addCleanup(setattr, progress, "_terminal_line", None)
        term = Terminal()
        progress._terminal_line = progress.StatusLine(term, width=300)
        now = [0.0]
        steps = progress.Steps("meshgate", "ab, runs 1 to 2 a side", 4, out=term,
                               clock=lambda: now[0], quiet_for=0.0)
        steps.step("base run 1")
        self.assertEqual(term.getvalue(),
                         "\r\x1b[Kmeshgate: ab, runs 1 to 2 a side: 1 of 4 (base run 1), "
                         "elapsed 0:00, ETA ?")
        now[0] += 10
        steps.step("candidate run 1")
        # Rewritten in place: no line of its own per step.
        self.assertNotIn("\n", term.getvalue())
        self.assertTrue(term.getvalue().endswith("2 of 4 (candidate run 1), elapsed 0:10, "
                                                 "ETA 0:30"), term.getvalue()[-60:])
        # The runner's live line goes after the step on the same line.
        view = TtyView(term, term, min_interval=0)
        tally = Tally(total=2)
        tally.current = "a/one"
        view.started(tally, "a/one")
        last = term.getvalue().rsplit("\r\x1b[K", 1)[1]
        self.assertTrue(last.startswith("meshgate: ab, runs 1 to 2 a side: 2 of 4"), last)
        self.assertIn("  |  [1/2]  a/one  elapsed", last)
        # A failure goes above and stays; the shared line is drawn again under it.
        tally.record("fail", 0.5)
        view.finished(tally, "a/one", "fail", 0.5, "wrong plan")
        self.assertIn("\r\x1b[K[1/2] fail   a/one  500.0 ms  wrong plan\n\r\x1b[Kmeshgate: ab",
                      term.getvalue())
        # A build during the step shows beside it and stays as a line when done.
        build = progress.BuildProgress("c0ffee", term, clock=lambda: 0.0)
        build.feed("[1/1] x\n")
        self.assertTrue(term.getvalue().endswith("  |  meshgate: built 1/1 targets of c0ffee, 0:00"))
        build.close()
        self.assertIn("\r\x1b[Kmeshgate: built 1/1 targets of c0ffee, 0:00\n", term.getvalue())
        view.close()
        self.assertTrue(term.getvalue().rsplit("\r\x1b[K", 1)[1].startswith(
            "meshgate: ab, runs 1 to 2 a side: 2 of 4"))
        steps.close()
        self.assertTrue(term.getvalue().endswith("\r\x1b[K"))
        self.assertEqual(progress._terminal_line.parts, {})

    def test_a_build_shows_targets_built_of_total_from_ninja(self):
        out = io.StringIO()
        shown = progress.BuildProgress("1a2b3c4d5e6f", out, clock=lambda: 0.0, tty=False)
        for k in range(1, 213):
            shown.feed(f"[{k}/212] Building CXX object lib/x{k}.o\n")
            shown.feed("some compiler chatter\n")
        shown.close()
        lines = out.getvalue().splitlines()
        self.assertEqual(lines[0], "meshgate: built 1/212 targets of 1a2b3c4d5e6f, 0:00")
        self.assertEqual(lines[-1], "meshgate: built 212/212 targets of 1a2b3c4d5e6f, 0:00")
        self.assertEqual(len(lines), 5)  # a line each quarter on a log, not one per target
        tty = io.StringIO()
        live = progress.BuildProgress("c0ffee", tty, clock=lambda: 0.0, tty=True)
        live.feed("[1/2] x\n")
        live.feed("[2/2] y\n")
        live.close()
        self.assertEqual(tty.getvalue(), "\r\x1b[Kmeshgate: built 1/2 targets of c0ffee, 0:00"
                                         "\r\x1b[Kmeshgate: built 2/2 targets of c0ffee, 0:00\n")
