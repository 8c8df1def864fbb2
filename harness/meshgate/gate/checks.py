"""A results document checked against the baseline store, as `meshgate baseline check`,
`meshgate run --baseline` and `meshgate nightly` check it: its deterministic signals against the
committed ones (which gates), and its timing against the stored results of this machine class
(which informs). Each check writes its report files and returns an outcome object: the exit
code, the lines the terminal shows (and the error lines of an unusable input), the signal check
or comparison itself, and the section a run's report.md takes. The commands print; nothing
here does."""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any, Optional

from ..core.results import InputError, check_results, results_machine_class, suite_of
from . import render, signal_report, stats, store
from .compare import Comparison, compare_results
from .render import Section
from .signals import Check, check


@dataclasses.dataclass
class SignalsCheck:
    """What a signal check found: code 0 (no change), 1 (a changed plan or signal, or a new
    failure) or 2 (unusable input, said in `errors`); `lines` as the terminal shows them."""

    code: int
    check: Optional[Check] = None
    lines: list[str] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)

    @property
    def headline(self) -> str:
        return self.check.headline() if self.check is not None else ""

    def section(self, details: str = "signals-report.md") -> Optional[Section]:
        return signal_report.section(self.check, details) if self.check is not None else None


def check_against_dir(results: dict, signals_dir: pathlib.Path, results_label: str = "") -> Check:
    """Loads the committed signals of the results' suites and checks the results against them."""
    suites = {suite_of(r) for r in results.get("cases", []) if isinstance(r, dict)}
    baseline, suite_by_id, lacking = store.load_signals_dir(signals_dir, suites)
    return check(results, baseline, suite_by_id, lacking, str(signals_dir), results_label)


def check_signals(results: dict[str, Any], source: Any, signals_dir: pathlib.Path,
                  out_dir: Optional[pathlib.Path] = None, json_path: Optional[pathlib.Path] = None,
                  quiet: bool = False) -> SignalsCheck:
    """The signal check of a results document (read from `source`) against `signals_dir`.

    Writes signals-report.md and signals-check.json into out_dir (when given) and the check as
    JSON to json_path. The lines: the suites without committed signals, the plan diffs and
    changed signals (with `quiet`, one line when nothing changed), where the report is."""
    signals_dir = pathlib.Path(signals_dir)
    try:
        check_results(results, source)
        chk = check_against_dir(results, signals_dir, str(source))
    except (InputError, store.SignalsError) as e:
        return SignalsCheck(2, errors=[f"meshgate baseline check: {e}"])
    if out_dir is not None:
        signal_report.write_report(pathlib.Path(out_dir), chk)
    if json_path is not None:
        json_path = pathlib.Path(json_path)
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(chk.to_json(), indent=1) + "\n")
    lines = []
    if chk.lacking_suites:
        lines.append(f"no committed signals in {signals_dir} for suite(s): {', '.join(chk.lacking_suites)} "
                     "(their cases are new)")
    lines += (signal_report.text(chk) if not quiet or chk.exit_code()
              else f"signals: {chk.headline()} ({chk.counts_line()})").split("\n")
    if out_dir is not None:
        lines.append(f"signals report: {pathlib.Path(out_dir) / 'signals-report.md'}")
    return SignalsCheck(chk.exit_code(), chk, lines)


@dataclasses.dataclass
class TimingCheck:
    """A comparison with the stored timing baseline: the exit code of `meshgate compare` (2:
    unusable input, said in `errors`), the comparison and the lines the terminal shows."""

    code: int
    comparison: Optional[Comparison] = None
    lines: list[str] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)

    def section(self, details: str = "baseline-report.md") -> Optional[Section]:
        return render.comparison_section(self.comparison, details) if self.comparison is not None else None


def compare_with_baseline(results: dict[str, Any], results_path: pathlib.Path, baseline_dir: pathlib.Path,
                          out_dir: pathlib.Path, max_gate: float = stats.MAX_GATE) -> TimingCheck:
    """`meshgate run --baseline DIR`'s timing: compares a finished run's results (read from
    `results_path`) with the baseline files of its suites in DIR and writes
    baseline-report.md/.html, baseline-junit.xml and baseline-comparison.json into out_dir; the
    code is that of `meshgate compare`. Suites without a baseline file make their cases `new`.
    The run's report.md takes the comparison as its section (TimingCheck.section)."""
    try:
        check_results(results, results_path)
        baseline_dir = pathlib.Path(baseline_dir)
        if not baseline_dir.is_dir():
            raise InputError(
                f"{baseline_dir}: baseline directory does not exist: create it with "
                f"`meshgate baseline update {results_path}`"
            )
        suites = sorted({suite_of(r) for r in results["cases"]})
        own_class = baseline_dir / results_machine_class(results)
        if not any((baseline_dir / f"{s}.json").exists() for s in suites) and own_class.is_dir():
            # Given the baselines root rather than one machine class: use this machine's.
            baseline_dir = own_class
        base, lacking = store.load_baseline_dir(baseline_dir, suites)
        floors = store.load_calibration(baseline_dir / store.CALIBRATION_FILE)
    except InputError as e:
        return TimingCheck(2, errors=[f"meshgate compare: {e}"])
    comparison = compare_results(base, results, floors, base_label=str(baseline_dir),
                                 new_label=str(results_path), max_gate=max_gate)
    comparison.command = "run --baseline"
    render.write_comparison(out_dir, comparison, None, prefix="baseline-")
    lines = []
    if lacking:
        lines.append(f"no baseline in {baseline_dir} for suite(s): {', '.join(lacking)} (their cases are 'new')")
    lines.append(render.summary_line(comparison))
    return TimingCheck(comparison.exit_code(), comparison, lines)
