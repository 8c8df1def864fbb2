"""The timeline: results over commits. Change points (changepoint.py) in the series of the
history (series.py), the history database (history.py), the bisection search and its
recommendation (bisection.py), the bisection experiment that finds and confirms a culprit
(culprit.py), the renderers of the history and of revert.md (render.py), and the nightly job
that composes a run, the gate and bisections (nightly.py).

changepoint, series, bisection and render are pure. The timeline builds on core/, system/, gate/
and run/."""
