"""User text (case names, messages, runner output) reaches every output escaped: the driver
decodes whatever bytes the runner writes without a traceback, the terminal shows control
characters and escape sequences as visible escapes, junit.xml is XML 1.0 any parser accepts,
report.md and report.html carry no raw control character, results.json keeps the text exactly."""

import contextlib
import html.parser
import io
import json
import os
import re
import tempfile
import unittest
import xml.etree.ElementTree as ET
from pathlib import Path

from meshgate import cli
from meshgate.core import results
from meshgate.core.markup import html_text, md_cell, md_code, visible

from .support import DriverRun

REPO = Path(__file__).resolve().parents[2]
# Raw characters no report may contain: C0 controls but tab and newline, DEL, C1 controls,
# the line separators, the bidi overrides, lone surrogates, and what XML forbids.
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
                 "\ud800-\udfff\ufffe\uffff]")
HOSTILE_NAMES = [
    "esc-\x1b[31mred\x1b[0m-\x1b]0;title\x07",      # colour and a window-title sequence
    "nul\x00-bell\x07-bs\x08-del\x7f-csi\x9b2J",   # C0, DEL and the 8-bit CSI
    "lines\nbreak\rover\u2028sep\x85nel",            # every way to start a new line
    "bidi-\u202eexe.txt-\ufffe",                     # a reordering override, a non-character
    "markup-<b>&amp;|`tick`]]>",                    # HTML, Markdown table and CDATA syntax
    "fullwidth-\uff12\uff14",                          # plain (non-ASCII) text stays as it is
]


class VisibleTest(unittest.TestCase):
    def test_controls_and_escape_sequences_become_visible_escapes(self):
        self.assertEqual(visible("a\x1b[31mb\x07\x00\x7f\x9b"), "a\\x1b[31mb\\x07\\x00\\x7f\\x9b")
        self.assertEqual(visible("x\u202ey\u2028z\ud800\uffff"), "x\\u202ey\\u2028z\\ud800\\uffff")
        self.assertEqual(visible("one\ntwo\tthree\r"), "one\\ntwo\\tthree\\r")
        self.assertEqual(visible("one\ntwo\tthree\r", multiline=True), "one\ntwo\tthree\\r")

    def test_printable_text_is_left_alone(self):
        for text in ("layout/coalesce (2,4):(4,1)", "\uff12\u00e9\U0001f600", "a\\b <c> |d|"):
            self.assertEqual(visible(text), text)

    def test_markdown_cells_and_code_cannot_break_the_table(self):
        self.assertEqual(md_cell("a|b\nc<script>\\d\x1b"), "a\\|b c\\<script>\\\\d\\x1b")
        self.assertEqual(md_code("s/a|b"), "`s/a\\|b`")
        self.assertEqual(md_code("s/`x`"), "`` s/`x` ``")
        self.assertEqual(md_code("s/a``b"), "```s/a``b```")

    def test_html_text_escapes_markup_and_controls(self):
        self.assertEqual(html_text("<b>&\"\x1b\n"), "&lt;b&gt;&amp;&quot;\\x1b\n")


class HostileNamesTest(DriverRun):
    def setUp(self):
        statuses = ["fail", "error", "skip", "pass"]
        self.cases = [{"id": f"hostile\x1b[2J/{name}", "kind": "layout", "tags": ["smoke"],
                       "outcome": statuses[i % len(statuses)],
                       "message": f"expected 8:1\ngot {name}"}
                      for i, name in enumerate(HOSTILE_NAMES)]
        self.code, self.out, self.err, self.dir = self.run_driver({"cases": self.cases})

    def test_results_json_keeps_every_name_exactly(self):
        document = json.loads((self.dir / "results.json").read_text(encoding="utf-8"))
        self.assertEqual([c["id"] for c in document["cases"]], [c["id"] for c in self.cases])
        failing = next(c for c in document["cases"] if c["status"] == "fail")
        self.assertEqual(failing["message"], self.cases[0]["message"])

    def test_junit_is_valid_xml_with_the_controls_visible(self):
        text = (self.dir / "junit.xml").read_text(encoding="utf-8")
        self.assertIsNone(RAW.search(text), repr(RAW.search(text)))
        root = ET.fromstring(text.encode("utf-8"))
        names = [case.get("name") for case in root.iter("testcase")]
        self.assertEqual(names, [visible(name, multiline=True) for name in HOSTILE_NAMES])
        self.assertEqual(names[0], "esc-\\x1b[31mred\\x1b[0m-\\x1b]0;title\\x07")
        self.assertEqual({s.get("name") for s in root.iter("testsuite")}, {"hostile\\x1b[2J"})
        failure = root.find(".//failure")
        self.assertEqual(failure.text, "expected 8:1\ngot " + visible(HOSTILE_NAMES[0]))
        self.assertIn("markup-<b>&amp;|`tick`]]>", names)  # XML escaping, then parsed back

    def test_reports_hold_no_raw_control_character(self):
        for name in ("report.md", "report.html"):
            text = (self.dir / name).read_text(encoding="utf-8")
            self.assertIsNone(RAW.search(text), f"{name}: {RAW.search(text)!r}")
        markdown = (self.dir / "report.md").read_text(encoding="utf-8")
        self.assertIn("| `hostile\\x1b[2J/esc-\\x1b[31mred\\x1b[0m-\\x1b]0;title\\x07` "
                      "|  | **fail** |",
                      markdown)
        self.assertIn("``hostile\\x1b[2J/markup-<b>&amp;\\|`tick`]]>``", markdown)
        # No name or message breaks a table row apart: every row has its header's cell count.
        cells = 0
        for line in markdown.split("\n"):
            if line.startswith("| case |"):
                cells = line.count("|")
            elif line.startswith("| `"):
                self.assertEqual(len(re.findall(r"(?<!\\)\|", line)), cells, line)

    def test_html_shows_user_markup_as_text(self):
        page = (self.dir / "report.html").read_text(encoding="utf-8")
        self.assertNotIn("<b>&amp;", page)
        self.assertIn("markup-&lt;b&gt;&amp;amp;|`tick`]]&gt;", page)

        class Tags(html.parser.HTMLParser):
            seen: set = set()

            def handle_starttag(self, tag, attrs):
                self.seen.add(tag)

        parser = Tags()
        parser.feed(page)
        self.assertNotIn("b", parser.seen)

    def test_terminal_output_shows_escapes_not_sequences(self):
        self.assertEqual(self.code, 2, self.out + self.err)
        for stream in (self.out, self.err):
            self.assertIsNone(RAW.search(stream), repr(RAW.search(stream)))
        self.assertIn("hostile\\x1b[2J/esc-\\x1b[31mred\\x1b[0m-\\x1b]0;title\\x07", self.out)
        self.assertIn("hostile\\x1b[2J/lines\\nbreak\\rover\\u2028sep\\x85nel", self.out)


class UndecodableBytesTest(DriverRun):
    def test_input_error_with_half_a_character_is_shown_not_a_traceback(self):
        # What the runner printed when a full-width digit met the layout parser: its first byte.
        scenario = {"cases": [], "input_error":
                    "uni.yaml:6:11: case 'uni/fw': key 'args': found '\udcef' \x1b[31m"}
        code, out, err, _ = self.run_driver(scenario)
        self.assertEqual(code, 2)
        self.assertIn("key 'args': found '\ufffd' \\x1b[31m", err)
        self.assertNotIn("Traceback", out + err)

    def test_runner_lines_with_bytes_that_are_not_utf8_pass_through_replaced(self):
        scenario = {"human_lines": ["loading \udcef\udcbc case \x1b[2J"],
                    "cases": [{"id": "s/a", "kind": "layout", "tags": ["smoke"]}]}
        code, out, err, out_dir = self.run_driver(scenario)
        self.assertEqual(code, 0, out + err)
        # The two bytes start a three-byte character and end early: one replacement for both.
        self.assertIn("loading \ufffd case \\x1b[2J", out)
        self.assertIn("stderr: loading \ufffd case \\x1b[2J", err)
        document = json.loads((out_dir / "results.json").read_text())
        self.assertEqual(document["cases"][0]["id"], "s/a")

    def test_results_jsonl_with_bad_bytes_and_separators_still_reads(self):
        with tempfile.TemporaryDirectory() as tmp:
            jsonl = Path(tmp) / "results.jsonl"
            rows = [{"id": "s/a", "message": "x\u2028y\x85z\x0cw"}, {"id": "s/b", "message": "ok"}]
            # ensure_ascii=False: the separators travel raw, as the runner writes them.
            jsonl.write_bytes(b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n"
                                       for r in rows)
                              + b'{"id": "s/c", "message": "cut \xef\xbc"}\n')
            read = results.read_rows(jsonl)
            self.assertEqual([r["id"] for r in read], ["s/a", "s/b", "s/c"])
            self.assertEqual(read[0]["message"], rows[0]["message"])
            self.assertEqual(read[2]["message"], "cut \ufffd")


REAL_RUNNER = os.environ.get("MESHGATE_RUNNER", "")


@unittest.skipUnless(REAL_RUNNER and Path(REAL_RUNNER).name == "meshgate-runner",
                     "MESHGATE_RUNNER is not set to a built meshgate-runner: run through CTest")
class RealRunnerHostileNamesTest(unittest.TestCase):
    """harness/runner/testdata/hostile-names.yaml through the real runner and driver."""

    def test_reports_of_the_real_runner_are_valid(self):
        with tempfile.TemporaryDirectory(prefix="meshgate-hostile-") as tmp:
            out_dir = Path(tmp) / "run"
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = cli.main(["run", str(REPO / "harness" / "runner" / "testdata" /
                                            "hostile-names.yaml"), "--out", str(out_dir)])
            self.assertEqual(code, 1, out.getvalue() + err.getvalue())
            document = json.loads((out_dir / "results.json").read_text(encoding="utf-8"))
            ids = [c["id"] for c in document["cases"]]
            self.assertIn("hostile-names/bidi-\u202egnp.exe-para\u2029", ids)
            rejected = next(c for c in document["cases"] if c["id"].endswith("fullwidth-digit"))
            self.assertEqual(rejected["status"], "pass", rejected)
            root = ET.parse(out_dir / "junit.xml").getroot()
            self.assertIn("bidi-\\u202egnp.exe-para\\u2029",
                          [case.get("name") for case in root.iter("testcase")])
            for name in ("report.md", "report.html", "junit.xml"):
                text = (out_dir / name).read_text(encoding="utf-8")
                self.assertIsNone(RAW.search(text), f"{name}: {RAW.search(text)!r}")
            self.assertIsNone(RAW.search(out.getvalue() + err.getvalue()))


if __name__ == "__main__":
    unittest.main()
