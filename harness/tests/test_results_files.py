"""The one atomic writer of results, baselines and state files: whole files only, and the mode
a plain open() gives (0666 less the umask), never mkstemp's private 0600."""

import json
import os
import pathlib
import stat
import tempfile
import unittest

from meshgate.core import files, results
from meshgate.gate import store


def mode(path: pathlib.Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


class AtomicWriteTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self._tmp.cleanup)
        self.dir = pathlib.Path(self._tmp.name)
        old = os.umask(0o022)
        self.addCleanup(os.umask, old)

    def test_json_is_written_whole_and_readable_by_others(self):
        path = self.dir / "a" / "results.json"
        files.write_json_atomic(path, {"cases": [1, 2]})
        self.assertEqual(json.loads(path.read_text()), {"cases": [1, 2]})
        self.assertEqual(mode(path), 0o644)
        self.assertEqual([p.name for p in path.parent.iterdir()], ["results.json"])  # no temporary left

    def test_results_keep_one_case_per_line_and_round_trip(self):
        document = {"schema": results.SCHEMA, "run": results.complete_run({"id": "r"}),
                    "cases": [results.error_row("s/a", "two\nlines \u00e9"),
                              results.error_row("s/b", "")]}
        path = self.dir / "results.json"
        results.write_results(path, document)
        self.assertEqual(json.loads(path.read_text()), document)
        lines = path.read_text().splitlines()
        self.assertEqual(sum(1 for line in lines if line.lstrip().startswith('{"id"')), 2)
        self.assertEqual(mode(path), 0o644)
        results.write_results(path, dict(document, cases=[]))
        self.assertEqual(json.loads(path.read_text())["cases"], [])

    def test_the_umask_is_respected(self):
        os.umask(0o027)
        path = self.dir / "state.json"
        files.write_text_atomic(path, "{}\n")
        self.assertEqual(mode(path), 0o640)

    def test_accepted_baselines_are_readable_by_others(self):
        doc = {"schema": "meshgate.results/1", "run": {"machine": {"cpu": "Test CPU"}},
               "cases": [{"id": "s/a", "suite": "s", "kind": "layout", "status": "pass", "message": "", "plan": []}]}
        source = self.dir / "results.json"
        source.write_text(json.dumps(doc))
        written = store.update_baseline(source, self.dir / "baselines")
        self.assertTrue(written)
        for path in (self.dir / "baselines").rglob("*.json"):
            self.assertEqual(mode(path), 0o644, path)


if __name__ == "__main__":
    unittest.main()
