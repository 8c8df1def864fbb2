#!/usr/bin/env python3
"""meshgate's change point detector (harness/meshgate/timeline/changepoint.py) against Apache
Otava's method (bench/otava_method.py, our own implementation of its published description), on
the synthetic nightly series of the history tests (harness/tests/synthetic.py).

Every series is one value per commit: the median of the per-run medians of 5 runs of 5
iterations, 2 % run-to-run and 1 % iteration noise, on a machine drifting +0.05 % per commit
(harness/tests/test_history.py, DetectionRateTest). Scenarios:

  step10, step5, step2   one step of 10 / 5 / 2 % (half up, half down) at a commit drawn in
                         [12, 28] of 40
  flat                   no change, 40 commits (drifting +0.05 % per commit like the others)
  still                  no change, 40 commits, no drift
  steps3                 three steps (+10 %, -8 %, +12 %) in 100 commits, at least 20 apart
  outlier                flat, 40 commits, one commit 30 % slow (a disturbed night, no change)
  drift                  no step, 40 commits drifting +0.3 % per commit (12 % in all)

A true step counts as found when a reported change lies within TOLERANCE (3) commits of it
(the closest one counts, once); its location is exact, one off, or late (after the step).
Every other reported change is a false alarm (counted per 100 points, and as the share of
series with at least one). Run time is the detector's CPU time per series.

    python3 bench/change_points_vs_otava.py [--trials 100] [--seed 2024] [--json F]
    python3 bench/change_points_vs_otava.py --trials 4 --scenarios step10,flat --check

--check exits 1 unless both detectors find every 10 % step (the smoke test of bench/CMakeLists.txt).
Timings inform only; nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "harness")]

import otava_method  # noqa: E402
from meshgate.timeline import changepoint  # noqa: E402
from tests.synthetic import night_value, runs_at  # noqa: E402

TOLERANCE = 3
DRIFT = 0.0005  # per commit, as DetectionRateTest.DRIFT
NIGHTS = 40


def _series(rng: random.Random, nights: int, steps: list, drift: float = DRIFT, outlier=None) -> list:
    """`steps`: [(index, relative size)]; `outlier`: (index, factor) on one commit's level."""
    level0 = 10 ** rng.uniform(-5, -2)
    case_rng = random.Random(rng.random())
    values = []
    for i in range(nights):
        level = level0 * (1 + drift * i)
        for at, size in steps:
            if i >= at:
                level *= 1 + size
        if outlier is not None and i == outlier[0]:
            level *= outlier[1]
        values.append(night_value(runs_at(case_rng, level)))
    return values


def scenario_cases(name: str, trials: int, rng: random.Random) -> list:
    """[(values, [(index, size)])] for one scenario."""
    cases = []
    for t in range(trials):
        sign = 1 if t % 2 == 0 else -1
        if name in ("step10", "step5", "step2"):
            size = {"step10": 0.10, "step5": 0.05, "step2": 0.02}[name] * sign
            at = rng.randint(12, 28)
            cases.append((_series(rng, NIGHTS, [(at, size)]), [(at, size)]))
        elif name == "flat":
            cases.append((_series(rng, NIGHTS, []), []))
        elif name == "still":
            cases.append((_series(rng, NIGHTS, [], drift=0.0), []))
        elif name == "steps3":
            a = rng.randint(15, 25)
            b = a + rng.randint(20, 30)
            c = b + rng.randint(20, 30)
            steps = [(a, 0.10 * sign), (b, -0.08 * sign), (c, 0.12 * sign)]
            cases.append((_series(rng, 100, steps), steps))
        elif name == "outlier":
            cases.append((_series(rng, NIGHTS, [], outlier=(rng.randint(5, 34), 1.3)), []))
        elif name == "drift":
            cases.append((_series(rng, NIGHTS, [], drift=0.003), []))
        else:
            raise ValueError(f"unknown scenario {name}")
    return cases


SCENARIOS = ("step10", "step5", "step2", "flat", "still", "steps3", "outlier", "drift")


def ours(values: list) -> list:
    return [(c.index, c.ratio - 1.0) for c in changepoint.detect(values)]


def otava(values: list) -> list:
    return [(c.index, c.forward_change) for c in otava_method.detect(values)]


DETECTORS = {"meshgate": ours, "otava": otava}


def score(cases: list, detector) -> dict:
    steps = found = exact = near = late = false_alarms = points = alarmed = 0
    seconds = 0.0
    for values, truth in cases:
        started = time.process_time()
        reported = detector(values)
        seconds += time.process_time() - started
        points += len(values)
        unused = list(reported)
        for at, size in truth:
            steps += 1
            close = [r for r in unused if abs(r[0] - at) <= TOLERANCE and (r[1] > 0) == (size > 0)]
            if not close:
                continue
            best = min(close, key=lambda r: (abs(r[0] - at), r[0]))
            unused.remove(best)
            found += 1
            exact += best[0] == at
            near += abs(best[0] - at) <= 1
            late += best[0] > at
        false_alarms += len(unused)
        alarmed += bool(unused)
    return {"steps": steps, "found": found, "exact": exact, "within1": near, "late": late,
            "false_alarms": false_alarms, "alarmed_series": alarmed, "points": points, "series": len(cases),
            "ms_per_series": 1000.0 * seconds / max(1, len(cases))}


def pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.0f} %" if whole else "-"


def table(results: dict) -> str:
    lines = ["| scenario | detector | found | exact | within 1 | late | false alarms / 100 points | series with a false alarm | ms / series |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, by_detector in results.items():
        for det, r in by_detector.items():
            lines.append(
                f"| {name} | {det} | {pct(r['found'], r['steps'])} | {pct(r['exact'], r['found'])} | "
                f"{pct(r['within1'], r['found'])} | {pct(r['late'], r['found'])} | "
                f"{100.0 * r['false_alarms'] / r['points']:.2f} | {pct(r['alarmed_series'], r['series'])} | "
                f"{r['ms_per_series']:.1f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=100, help="series per scenario (default 100)")
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated subset of " + ", ".join(SCENARIOS))
    ap.add_argument("--json", help="write the numbers to this file")
    ap.add_argument("--check", action="store_true", help="exit 1 unless both detectors find every 10 %% step")
    args = ap.parse_args(argv)
    names = [s for s in args.scenarios.split(",") if s]
    results = {}
    for name in names:
        # One generator per scenario, seeded from the scenario's name: a subset gives the same series.
        rng = random.Random(f"{args.seed}/{name}")
        cases = scenario_cases(name, args.trials, rng)
        results[name] = {det: score(cases, fn) for det, fn in DETECTORS.items()}
        sys.stderr.write(f"  {name}: done\n")
    print(f"{args.trials} series per scenario, seed {args.seed}; found = within {TOLERANCE} commits, "
          "right direction; exact / within 1 / late are shares of the found steps")
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps({"trials": args.trials, "seed": args.seed, "results": results}, indent=1))
    if args.check:
        bad = [det for det, r in results.get("step10", {}).items() if r["found"] != r["steps"]]
        if "step10" not in results or bad:
            print(f"check failed: 10 % steps missed by {', '.join(bad) or 'no step10 scenario'}")
            return 1
        print("check: both detectors found every 10 % step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
