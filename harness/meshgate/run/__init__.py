"""A run: the session that runs the selected cases and checks them (session.py), the reports of
a run (report.py) and the summary the terminal shows (summary.py). It builds on core/,
system/ and gate/."""
