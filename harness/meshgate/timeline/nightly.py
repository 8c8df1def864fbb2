"""`meshgate nightly`: every case at HEAD, its deterministic signals against the committed
baseline, then timing as an interleaved A/B of the last good commit against HEAD.

1. `meshgate run` of every case (cases/, all tags) into OUT/run.
2. `meshgate baseline check` of those results against baselines/signals: a changed plan or
   signal, or a case that passed and now fails, is red. No timing is involved.
3. Timing: `meshgate ab --base <last good> --candidate <HEAD>` (every perf: case), both builds on this
   machine tonight, interleaved (docs/gate.md): never a number stored on another day.
   The last good commit comes from --last-good REV, else from the state file (default
   reports/nightly/last-good.json). The first night has none: it says so and gates on the
   signals only. nightly.md names every case the A/B calls a regression or a correctness
   failure, with its verdict line; each confirmed regression is bisected between the last
   good commit and HEAD (`meshgate bisect --case ID`, into OUT/bisect-ab-<n>/), or, with
   --no-bisect, nightly.md and the log give the exact `meshgate bisect` command.
4. When the signals check and the timing gate pass, HEAD becomes the last good commit.
5. History: the night's results go into the history database (`meshgate history add`, --db,
   default reports/history.sqlite) and `history changes` looks for change points over every
   night so far. Each change point not handled on an earlier night (kept in
   <db>.handled.json) that is a regression — slower, or a pass turning into a failure — is
   bisected between its last good and first bad commit (`meshgate bisect --case ID`), into
   OUT/bisect-<n>/ with revert.md, and listed in nightly.md. Faster and plan changes are
   reported, not bisected (plan changes already fail step 2 on the night they land), and a
   case bisected tonight from the A/B's regression is not bisected again.

Exit code: the largest of the run's (0 pass, 1 fail, 2 error), the signal check's (1 changed)
and the A/B's (1 confirmed regression, 2 unusable); a bisection that names a culprit adds a 1.
OUT gets nightly.md and nightly.json.

Every step is a call of the step's own Python function, which returns its outcome: the run
(run/session.py: execute, then finish with the signal check, so report.md is written once with
the check's section), the A/B (gate/ab.py), the history (history.py, series.py) and the
bisections (culprit.py). The run, the A/B and the bisections go through the `run_cases`, `ab`
and `bisect` parameters of `nightly()` (`session.execute`, `run_ab` and `run_bisect` by
default), so a test can replace them with fakes.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import pathlib
import shlex
import sys
from typing import Any, Callable, Optional, Union

from ..core import files, jsonfile
from ..core.markup import md_cell, md_code, summary_line
from ..core.tables import fmt_p, md_row, md_table_head
from ..gate import ab as _ab
from ..gate import store
from ..gate.ab import AbRequest, CaseFilter
from ..run import session
from ..system import git, revisions
from . import culprit as _culprit
from . import history as _history
from . import series as _series

STATE_SCHEMA = "meshgate.nightly-state/1"
REPORT_SCHEMA = "meshgate.nightly/1"


def default_state() -> pathlib.Path:
    """reports/nightly/last-good.json where the driver works (files.source_root)."""
    return files.source_root() / "reports" / "nightly" / "last-good.json"


HANDLED_SCHEMA = "meshgate.nightly-handled/1"
# Change kinds that are regressions worth a bisection.
BISECTED_KINDS = ("slower", "status")


class NightlyError(Exception):
    """Unusable input: a state file or revision that cannot be read (exit code 2)."""


@dataclasses.dataclass
class Options:
    cases: list[str] = dataclasses.field(default_factory=list)  # default: the repository's cases/
    backend: str = "threads"
    ranks: Optional[int] = None
    impl: Optional[str] = None  # --impl of every run, A/B and bisection (None: meshgate)
    runs: Optional[int] = None  # A/B runs per side (default: ab's)
    preset: Optional[str] = None
    case_timeout: Optional[float] = None
    out: Optional[pathlib.Path] = None
    signals: pathlib.Path = dataclasses.field(default_factory=store.default_signals)
    state: pathlib.Path = dataclasses.field(default_factory=default_state)
    last_good: Optional[str] = None
    repo: pathlib.Path = dataclasses.field(default_factory=files.source_root)
    db: pathlib.Path = dataclasses.field(default_factory=_history.default_db)
    bisect: bool = True  # bisect new regressing change points


@dataclasses.dataclass
class Regressing:
    """One case the timing A/B called a regression or a correctness failure, with its verdict
    line as the A/B's report states it."""
    case: str
    verdict: str  # the verdict as every report states it ("regression", "correctness", ...)
    line: str  # why, in the A/B's words: the change, the gate, p, q and the CI
    confirmed: bool = False  # a timing regression that a fresh batch repeated
    ratio: Optional[float] = None
    p: Optional[float] = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class TimingVerdict:
    """What the timing gate decided: code 0 pass (or inconclusive), 1 confirmed regression or
    correctness failure, 2 unusable; a one-line summary; where the evidence is; every
    regressing case with its verdict line."""
    code: int
    summary: str
    report: Optional[pathlib.Path] = None
    regressing: list[Regressing] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Bisection:
    """One change point of the history and what its bisection found."""
    change: dict[str, Any]  # history's change JSON (case, commit, last_good, ratio, p, kind)
    code: Optional[int] = None  # bisect's exit code (0 culprit, 1 none, 2 unusable); None: not run
    culprit: Optional[str] = None
    out: Optional[pathlib.Path] = None
    note: str = ""
    command: str = ""  # the `meshgate bisect` command line of this bisection

    def to_json(self) -> dict[str, Any]:
        return {"change": self.change, "exit_code": self.code, "culprit": self.culprit,
                "revert": str(self.out / "revert.md") if self.out else None, "note": self.note,
                "command": self.command}


RunCases = Callable[[session.RunRequest], session.Execution]
AbFn = Callable[[str, str, pathlib.Path, Options], Union[TimingVerdict, int]]
BisectFn = Callable[[str, str, str, pathlib.Path, Options], tuple[int, Optional[dict]]]
HeadFn = Callable[[pathlib.Path], tuple[str, bool]]


# ---------------------------------------------------------------------------------------------
# git and the state file


def head_commit(repo: pathlib.Path) -> tuple[str, bool]:
    """HEAD's full commit hash and whether the working tree has uncommitted changes."""
    try:
        return git.head_commit(repo)
    except git.RevisionError as e:
        raise NightlyError(str(e)) from None


def resolve(repo: pathlib.Path, rev: str) -> str:
    try:
        return git.resolve_commit(repo, rev)
    except git.RevisionError:
        raise NightlyError(f"last good revision {rev!r} is not a commit of {repo}: pass "
                           f"--last-good REV with one that is") from None


def read_state(path: pathlib.Path) -> Optional[dict[str, Any]]:
    """The recorded last good commit ({"commit": SHA, "recorded": UTC, ...}), None when the
    file does not exist (the first night)."""
    path = pathlib.Path(path)
    if not path.exists():
        return None
    data = jsonfile.read(path, error=NightlyError, hint="fix or delete it, or pass --last-good REV")
    if data.get("schema") != STATE_SCHEMA or not isinstance(data.get("commit"), str):
        raise NightlyError(f"{path}: not a {STATE_SCHEMA} file with a 'commit': fix or delete it, "
                           f"or pass --last-good REV")
    return data


def write_state(path: pathlib.Path, commit: str, report: Optional[pathlib.Path] = None,
                now: Optional[_dt.datetime] = None) -> None:
    now = now or _dt.datetime.now(_dt.timezone.utc)
    files.write_json_atomic(pathlib.Path(path), {
        "schema": STATE_SCHEMA,
        "commit": commit,
        "recorded": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "report": str(report) if report else None,
    })


# ---------------------------------------------------------------------------------------------
# The steps (the defaults of nightly()'s seams)


def run_request(options: Options, out_dir: pathlib.Path) -> session.RunRequest:
    """Step 1's run: every case (of the repository's cases/, or a project's own, every tag)
    unless CASES, with the night's backend, ranks, implementation, preset and case timeout, into
    `out_dir`."""
    cases = list(options.cases) or [str(revisions.revision_cases(pathlib.Path(options.repo)))]
    return session.RunRequest(cases=cases,
                              backend=options.backend, ranks=options.ranks, impl=options.impl,
                              preset=options.preset, case_timeout=options.case_timeout, out=out_dir)


def ab_request(base: str, candidate: str, out_dir: pathlib.Path, options: Options) -> AbRequest:
    """Step 3's A/B: `meshgate ab --base BASE --candidate CANDIDATE [CASES]` with the night's
    backend, ranks, implementation, runs and preset: with no CASES, what plain `ab` selects
    (every case with a `perf:` block timed, whatever its tags), as ci/premerge does."""
    return AbRequest(base=base, candidate=candidate, cases=CaseFilter(cases=list(options.cases)),
                     runs=options.runs if options.runs is not None else _ab.DEFAULT_RUNS,
                     backend=options.backend, ranks=options.ranks, impl=options.impl, preset=options.preset,
                     out=out_dir)


def run_ab(base: str, candidate: str, out_dir: pathlib.Path, options: Options) -> TimingVerdict:
    """The A/B of step 3 (gate/ab.py), shown as `meshgate ab` shows it; its verdict from its
    exit code and the counts of its comparison."""
    outcome = _ab.run_request(ab_request(base, candidate, out_dir, options))
    if outcome.error:
        print(outcome.error, file=sys.stderr)
    for line in outcome.lines():
        print(line)
    summary = {0: "no confirmed regression", 1: "confirmed regression or correctness failure"}.get(
        outcome.code, "the A/B could not run")
    if outcome.comparison is not None:
        summary = f"{summary} ({outcome.counts() or 'no cases'})"
    report = out_dir / "report.md"
    return TimingVerdict(outcome.code, summary, report if report.exists() else None,
                         regressing_cases(outcome.comparison))


def regressing_cases(comparison: Any) -> list[Regressing]:
    """The regressions and correctness failures of an A/B's comparison, regressions first."""
    if comparison is None:
        return []
    out = []
    for verdict in ("regression", "correctness"):
        for v in comparison.by_verdict(verdict):
            out.append(Regressing(case=v.id, verdict=v.level(), line=summary_line(v.note or v.message or ""),
                                  confirmed=verdict == "regression" and v.confirmed is not False,
                                  ratio=v.ratio, p=v.p))
    return out


def bisect_command(good: str, bad: str, case_id: str, options: Options) -> str:
    """The `meshgate bisect` command line that bisects one case between two commits with the
    night's options, as nightly itself would run it."""
    words = ["meshgate", "bisect", "--good", good, "--bad", bad, "--case", case_id]
    if options.backend != "threads":
        words += ["--backend", options.backend]
    for flag, value in (("--ranks", options.ranks), ("--impl", options.impl), ("--runs", options.runs),
                        ("--preset", options.preset)):
        if value is not None:
            words += [flag, str(value)]
    words += list(options.cases)
    return " ".join(shlex.quote(w) for w in words)


def bisect_request(good: str, bad: str, case_id: str, out_dir: pathlib.Path,
                   options: Options) -> _culprit.BisectRequest:
    """A change point's bisection: `meshgate bisect --good GOOD --bad BAD --case ID [CASES]` with
    the night's backend, ranks, implementation, runs and preset, into `out_dir` (its JSON
    document also in out_dir/bisect.json)."""
    return _culprit.BisectRequest(good=good, bad=bad, cases=CaseFilter(cases=list(options.cases), case_patterns=[case_id]),
                                  runs=options.runs if options.runs is not None else _ab.DEFAULT_RUNS,
                                  backend=options.backend, ranks=options.ranks, impl=options.impl,
                                  preset=options.preset, out=out_dir, json=out_dir / "bisect.json")


def run_bisect(good: str, bad: str, case_id: str, out_dir: pathlib.Path,
               options: Options) -> tuple[int, Optional[dict]]:
    """The bisection of a change point (culprit.py), shown as `meshgate bisect` shows it: its
    exit code and its JSON document."""
    out_dir.mkdir(parents=True, exist_ok=True)
    result = _culprit.run_request(bisect_request(good, bad, case_id, out_dir, options))
    if result.error:
        print(result.error, file=sys.stderr)
    for line in result.lines():
        print(line)
    return result.code, result.doc


def _change_key(change: dict[str, Any]) -> str:
    return "|".join(str(change.get(k)) for k in ("machine", "case", "kind", "commit"))


def handled_path(db: pathlib.Path) -> pathlib.Path:
    return pathlib.Path(str(db) + ".handled.json")


def read_handled(db: pathlib.Path) -> set[str]:
    path = handled_path(db)
    if not path.exists():
        return set()
    data = jsonfile.read(path, error=NightlyError, hint="fix or delete it")
    if data.get("schema") != HANDLED_SCHEMA or not isinstance(data.get("changes"), list):
        raise NightlyError(f"{path}: not a {HANDLED_SCHEMA} file: fix or delete it")
    return {str(k) for k in data["changes"]}


def write_handled(db: pathlib.Path, keys: set[str]) -> None:
    files.write_json_atomic(handled_path(db), {"schema": HANDLED_SCHEMA, "changes": sorted(keys)})


def follow_history(options: Options, results_path: pathlib.Path, out: pathlib.Path, bisect: BisectFn,
                   log=print, results: Optional[dict] = None,
                   ab_bisected: Optional[dict[str, str]] = None) -> tuple[list[dict[str, Any]], list[Bisection], str]:
    """Step 5: history add (of `results`, the document of results_path, when at hand), change
    points, a bisection per new regressing change point (not again for a case `ab_bisected`,
    case -> folder, already bisected tonight from the A/B). Returns (every change point, the
    new ones with their bisections, a note on the history)."""
    ab_bisected = ab_bisected or {}
    db = pathlib.Path(options.db)
    try:
        runs, points, _ = _history.add(db, [results_path], None if results is None else [results])
        series = _history.read_series(db, repo=pathlib.Path(options.repo))
    except _history.HistoryError as e:
        return [], [], f"history not updated: {e}"
    changes = [c.to_json() for c in _series.all_changes(series)]
    (out / "changes.json").write_text(json.dumps({"changes": changes}, indent=1) + "\n")
    handled = read_handled(db)
    fresh = [c for c in changes if _change_key(c) not in handled]
    bisections = []
    for n, change in enumerate(fresh, 1):
        entry = Bisection(change=change)
        bisections.append(entry)
        if change["kind"] not in BISECTED_KINDS:
            entry.note = f"{change['kind']} change: reported, not bisected"
        elif not options.bisect:
            entry.note = "not bisected (--no-bisect)"
            if change.get("last_good"):
                entry.command = bisect_command(change["last_good"], change["commit"], change["case"], options)
                log(f"== bisect {change['case']}: not run (--no-bisect); to bisect: {entry.command}")
        elif change["kind"] == "slower" and change["case"] in ab_bisected:
            entry.note = f"bisected tonight from the A/B's confirmed regression ({ab_bisected[change['case']]})"
        elif not change.get("last_good"):
            entry.note = "no earlier good commit in the history to bisect from"
        else:
            entry.out = out / f"bisect-{n}"
            log(f"== bisect {change['case']}: {change['kind']} change between "
                f"{change['last_good'][:12]} and {change['commit'][:12]} -> {entry.out}")
            entry.code, doc = bisect(change["last_good"], change["commit"], change["case"], entry.out, options)
            entry.culprit = (doc or {}).get("culprit")
            entry.note = ({0: f"culprit {entry.culprit[:12] if entry.culprit else '?'}", 1: "nothing reproduces"}
                          .get(entry.code, "the bisection could not run"))
        handled.add(_change_key(change))
    write_handled(db, handled)
    note = (f"{points} point(s) of {runs} run(s) added to {db}; {len(changes)} change point(s) "
            f"over {len(series)} series, {len(fresh)} new")
    return changes, bisections, note


def bisect_ab_regressions(timing: TimingVerdict, good: str, bad: str, out: pathlib.Path, options: Options,
                          bisect: BisectFn, log=print) -> list[Bisection]:
    """Step 3b: each confirmed regression of the timing A/B bisected between the last good
    commit and HEAD (out/bisect-ab-<n>), or with --no-bisect, the exact command that would."""
    bisections = []
    for n, case in enumerate([r for r in timing.regressing if r.verdict.startswith("regression") and r.confirmed], 1):
        change = {"case": case.case, "kind": "slower", "commit": bad, "last_good": good, "ratio": case.ratio,
                  "p": case.p, "machine": None, "detail": f"A/B {case.verdict}: {case.line}", "source": "ab"}
        entry = Bisection(change=change, command=bisect_command(good, bad, case.case, options))
        bisections.append(entry)
        if not options.bisect:
            entry.note = "not bisected (--no-bisect)"
            log(f"== bisect {case.case}: not run (--no-bisect); to bisect: {entry.command}")
            continue
        entry.out = out / f"bisect-ab-{n}"
        log(f"== bisect {case.case}: confirmed A/B regression between {good[:12]} and {bad[:12]} -> {entry.out}")
        entry.code, doc = bisect(good, bad, case.case, entry.out, options)
        entry.culprit = (doc or {}).get("culprit")
        entry.note = ({0: f"culprit {entry.culprit[:12] if entry.culprit else '?'}", 1: "nothing reproduces"}
                      .get(entry.code, "the bisection could not run"))
    return bisections


# ---------------------------------------------------------------------------------------------
# The job


@dataclasses.dataclass
class Outcome:
    head: str
    dirty: bool
    out: pathlib.Path
    run_code: int = 2
    signals_code: int = 2
    signals_headline: str = ""
    last_good: Optional[str] = None
    last_good_source: str = ""
    timing: Optional[TimingVerdict] = None
    timing_note: str = ""
    recorded: bool = False
    record_note: str = ""
    history_note: str = ""
    changes: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    bisections: list[Bisection] = dataclasses.field(default_factory=list)
    ab_bisections: list[Bisection] = dataclasses.field(default_factory=list)  # of the A/B's regressions

    @property
    def timing_code(self) -> int:
        return self.timing.code if self.timing else 0

    @property
    def exit_code(self) -> int:
        culprit = 1 if any(b.code == 0 for b in self.bisections + self.ab_bisections) else 0
        return max(self.run_code, self.signals_code, self.timing_code, culprit)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": REPORT_SCHEMA,
            "head": self.head,
            "dirty": self.dirty,
            "exit_code": self.exit_code,
            "run": {"exit_code": self.run_code, "results": str(self.out / "run" / "results.json")},
            "signals": {"exit_code": self.signals_code, "headline": self.signals_headline,
                        "report": str(self.out / "run" / "signals-report.md")},
            "last_good": self.last_good,
            "last_good_source": self.last_good_source,
            "timing": ({"exit_code": self.timing.code, "summary": self.timing.summary,
                        "report": str(self.timing.report) if self.timing.report else None,
                        "regressing": [r.to_json() for r in self.timing.regressing],
                        "bisections": [b.to_json() for b in self.ab_bisections]}
                       if self.timing else {"exit_code": None, "summary": self.timing_note}),
            "recorded_last_good": self.recorded,
            "record_note": self.record_note,
            "history": {"note": self.history_note, "changes": self.changes,
                        "bisections": [b.to_json() for b in self.bisections]},
        }

    def markdown(self) -> str:
        verdict = {0: "PASS", 1: "FAIL"}.get(self.exit_code, "ERROR")
        dirty = " (uncommitted changes)" if self.dirty else ""
        lines = [f"# meshgate nightly {self.head[:12]}{dirty}: {verdict}", ""]
        run_word = {0: "all pass/skip", 1: "failures"}.get(self.run_code, "errors")
        lines.append(f"- correctness: `meshgate run` of every case: {run_word} (exit {self.run_code}); "
                     f"`run/report.md`")
        lines.append(f"- deterministic signals against the committed baseline: "
                     f"{self.signals_headline or 'not checked'} (exit {self.signals_code}); "
                     f"`run/signals-report.md`")
        if self.timing:
            where = f"; `{self.timing.report}`" if self.timing.report else ""
            lines.append(f"- timing: interleaved A/B of last good {self.last_good[:12] if self.last_good else '?'} "
                         f"({self.last_good_source}) against HEAD: {self.timing.summary} "
                         f"(exit {self.timing.code}){where}")
            for r in self.timing.regressing:
                lines.append(f"  - {md_code(r.case)}: {md_cell(r.verdict)}: {md_cell(r.line)}")
        else:
            lines.append(f"- timing: {self.timing_note}")
        lines.append(f"- last good: {self.record_note}")
        lines.append(f"- history: {self.history_note or 'not updated'}")
        if self.ab_bisections:
            lines += ["", "## Confirmed regressions of the A/B, bisected", ""]
            lines += md_table_head(["case", "verdict", "last good", "HEAD", "bisection"])
            for b in self.ab_bisections:
                c = b.change
                where = f" (`{b.out.name}/revert.md`)" if b.out else ""
                note = md_cell(b.note) + (f"; to bisect: {md_code(b.command)}" if not b.out else "")
                lines.append(md_row([md_code(c["case"]), md_cell(c["detail"]), f"{c['last_good'][:12]}",
                                     f"{c['commit'][:12]}", f"{note}{where}"]))
        if self.bisections:
            lines += ["", "## New change points", ""]
            lines += md_table_head(["case", "kind", "last good", "first bad", "ratio", "p", "bisection"],
                                   "llllrr")
            for b in self.bisections:
                c = b.change
                ratio = f"{c['ratio']:.3f}" if isinstance(c.get("ratio"), (int, float)) else "-"
                p = fmt_p(c.get("p"))
                where = f" (`{b.out.name}/revert.md`)" if b.out else (
                    f"; to bisect: {md_code(b.command)}" if b.command else "")
                lines.append(md_row([f"`{c['case']}`", f"{c['kind']}", f"{(c.get('last_good') or '-')[:12]}",
                                     f"{c['commit'][:12]}", ratio, p, f"{b.note}{where}"]))
        return "\n".join(lines) + "\n"


def _verdict(value: Union[TimingVerdict, int]) -> TimingVerdict:
    if isinstance(value, TimingVerdict):
        return value
    code = int(value)
    return TimingVerdict(code, {0: "pass", 1: "regression"}.get(code, "unusable"))


def default_out(repo: pathlib.Path, now: Optional[_dt.datetime] = None) -> pathlib.Path:
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return files.claim_run_dir(pathlib.Path(repo) / "reports", f"nightly-{now.strftime('%Y%m%d-%H%M%S')}")[1]


def nightly(options: Options, run_cases: RunCases = session.execute, ab: AbFn = run_ab,
            head: HeadFn = head_commit, log=print, bisect: BisectFn = run_bisect) -> Outcome:
    """The nightly job (see the module doc). The seams: `run_cases(RunRequest) -> Execution`
    runs the cases (run_request says which), `ab(base, candidate, out_dir, options)` the timing
    A/B, `head(repo)` names HEAD, `bisect(good, bad, case, out_dir, options) -> (exit code,
    json)` bisects a change point. Raises NightlyError on unusable input found before anything
    runs."""
    repo = pathlib.Path(options.repo)
    sha, dirty = head(repo)
    out = pathlib.Path(options.out) if options.out else default_out(repo)
    out.mkdir(parents=True, exist_ok=True)
    outcome = Outcome(head=sha, dirty=dirty, out=out)
    read_handled(options.db)  # refuse a corrupt file before anything runs
    state = read_state(options.state) if not options.last_good else None
    if options.last_good:
        outcome.last_good, outcome.last_good_source = resolve(repo, options.last_good), "--last-good"
    elif state:
        outcome.last_good, outcome.last_good_source = state["commit"], f"recorded {state.get('recorded', '')}".strip()

    log(f"== nightly {sha[:12]}: every case at HEAD -> {out / 'run'}")
    run_dir = out / "run"
    execution = run_cases(run_request(options, run_dir))
    outcome.run_code = execution.code
    results_path = run_dir / "results.json"

    if execution.document is None:
        if execution.error:
            sys.stderr.write(execution.error)
        outcome.signals_headline = "no results to check"
        outcome.timing_note = "not run: the cases produced no results"
        outcome.record_note = f"unchanged ({outcome.last_good[:12] if outcome.last_good else 'none'})"
        outcome.run_code = max(outcome.run_code, 2)
        _finish(outcome, log)
        return outcome

    # The run's report.md is written once, with the signal check's section.
    finished = session.finish(execution, signals=pathlib.Path(options.signals), results_label=results_path)
    log(finished.text())
    outcome.run_code = finished.code
    log(f"== deterministic signals against {options.signals}")
    check = finished.signals
    log("\n".join(check.errors + check.lines).rstrip())
    outcome.signals_code = check.code
    outcome.signals_headline = check.headline if check.check is not None else "the check could not run"

    if outcome.last_good is None:
        outcome.timing_note = (f"first night: no last good commit recorded in {options.state}; "
                               "timing is not gated tonight, the signals alone decide")
        log(f"== timing: {outcome.timing_note}")
    elif outcome.last_good == sha:
        outcome.timing_note = f"HEAD {sha[:12]} is the last good commit: nothing to compare"
        log(f"== timing: {outcome.timing_note}")
    else:
        log(f"== timing: interleaved A/B of last good {outcome.last_good[:12]} against HEAD {sha[:12]}")
        outcome.timing = _verdict(ab(outcome.last_good, sha, out / "ab", options))
        outcome.ab_bisections = bisect_ab_regressions(outcome.timing, outcome.last_good, sha, out,
                                                      options, bisect, log)

    previous = outcome.last_good[:12] if outcome.last_good else "none"
    if outcome.signals_code != 0 or outcome.timing_code != 0:
        failed = [name for name, code in (("signals", outcome.signals_code), ("timing", outcome.timing_code)) if code]
        outcome.record_note = f"unchanged ({previous}): {' and '.join(failed)} did not pass"
    elif dirty:
        outcome.record_note = (f"unchanged ({previous}): the working tree has uncommitted changes, "
                               f"so HEAD is not what ran")
    else:
        write_state(options.state, sha, out)
        outcome.recorded = True
        outcome.record_note = f"{sha[:12]} recorded in {options.state} (was {previous})"

    log(f"== history: {results_path} -> {options.db}")
    outcome.changes, outcome.bisections, outcome.history_note = follow_history(
        options, results_path, out, bisect, log, execution.document,
        {b.change["case"]: b.out.name for b in outcome.ab_bisections if b.out})
    _finish(outcome, log)
    return outcome


def _finish(outcome: Outcome, log) -> None:
    (outcome.out / "nightly.json").write_text(json.dumps(outcome.to_json(), indent=1) + "\n")
    (outcome.out / "nightly.md").write_text(outcome.markdown())
    log(outcome.markdown().rstrip())
    log(f"report: {outcome.out / 'nightly.md'}")
