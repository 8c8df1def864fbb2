"""The one Markdown table builder and the one p-value format (meshgate/core/tables.py) that every
report uses: the header and separator, blank cells, and p-values as reports print them."""

import unittest

from meshgate.core.tables import fmt_p, md_row, md_table, md_table_head


class TablesTest(unittest.TestCase):
    def test_head_aligns_columns_by_letter(self):
        self.assertEqual(md_table_head(["case", "ratio", "p", "why"], "lrr"),
                         ["| case | ratio | p | why |", "|---|---:|---:|---|"])
        self.assertEqual(md_table_head(["#", "baseline"], "r"), ["| # | baseline |", "|---:|---|"])

    def test_empty_header_cells_and_none_cells_are_blank(self):
        self.assertEqual(md_table_head(["", ""]), ["| | |", "|---|---|"])
        self.assertEqual(md_table_head(["case", "runs", ""], "lr")[0], "| case | runs | |")
        self.assertEqual(md_row([None, "(no collectives)"]), "| | (no collectives) |")

    def test_rows_write_cells_with_str(self):
        # An empty string is a cell of its own, as the reports' f-strings wrote it.
        self.assertEqual(md_row(["a", "", 3, 0.5]), "| a |  | 3 | 0.5 |")
        self.assertEqual(md_table(["k", "v"], [["commit", "`abc`"]], "lr"),
                         ["| k | v |", "|---|---:|", "| commit | `abc` |"])

    def test_p_values(self):
        self.assertEqual(fmt_p(0.01234), "0.012")
        self.assertEqual(fmt_p(3e-07), "3e-07")
        self.assertEqual(fmt_p(1), "1")
        self.assertEqual(fmt_p(None), "-")
        self.assertEqual(fmt_p("not a number"), "-")


if __name__ == "__main__":
    unittest.main()
