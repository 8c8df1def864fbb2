"""The documents of the driver, at the bottom of its layers: the results contract (results.py),
the merge of a case's launches into one row (merge.py), other tools' output as results
documents (tool_results.py), the JSON Schemas and their validator (schema.py), the one reader
of JSON files (jsonfile.py), atomic writes, report folders and the project or checkout the
driver works in (files.py), the escaping of user text in every output format (markup.py), the
Markdown tables and p-values of every report (tables.py) and the SVG charts of the reports
(svg.py).

Nothing here runs a process or imports another layer of the driver."""
