"""The gate: how results are judged. The statistics (stats.py) and the one decision rule
(verdict.py), the deterministic signals (signals.py), the comparison of two results documents
(compare.py), the power and calibration math (power.py), the reports of a comparison and of a
signal check (render.py, signal_report.py), the baseline store under baselines/ (store.py) and
the checks against it (checks.py), and the experiments built on them: the interleaved A/B
(ab.py), the A/A calibration (calibrate.py), differential parity with another implementation
(parity.py) and the classification of what changed between two (compat.py).

stats, verdict, signals, compare, power and the renderers are pure; the experiments launch the
runner through system/. The gate builds on core/ and system/."""
