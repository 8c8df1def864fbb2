"""`meshgate nightly`: every case at HEAD, its deterministic signals against the committed
baseline, then timing as an interleaved A/B of the last good commit against HEAD.

1. `meshgate run` of every case (cases/, all tags) into OUT/run.
2. `meshgate baseline check` of those results against baselines/signals: a changed plan or
   signal, or a case that passed and now fails, is red. No timing is involved.
3. Timing: `meshgate ab --base <last good> --candidate <HEAD> --tag perf`, both builds on this
   machine tonight, interleaved (docs/gate.md): never a number stored on another day.
   The last good commit comes from --last-good REV, else from the state file (default
   reports/nightly/last-good.json). The first night has none: it says so and gates on the
   signals only.
4. When the signals check and the timing gate pass, HEAD becomes the last good commit.
5. History: the night's results go into the history database (`meshgate history add`, --db,
   default reports/history.sqlite) and `history changes` looks for change points over every
   night so far. Each change point not handled on an earlier night (kept in
   <db>.handled.json) that is a regression — slower, or a pass turning into a failure — is
   bisected between its last good and first bad commit (`meshgate bisect --case ID`), into
   OUT/bisect-<n>/ with revert.md, and listed in nightly.md. Faster and plan changes are
   reported, not bisected (plan changes already fail step 2 on the night they land).

Exit code: the largest of the run's (0 pass, 1 fail, 2 error), the signal check's (1 changed)
and the A/B's (1 confirmed regression, 2 unusable); a bisection that names a culprit adds a 1.
OUT gets nightly.md and nightly.json.

The A/B and the bisections run through the `ab` and `bisect` parameters of `nightly()`
(`run_ab_command` and `run_bisect_command` by default), so a test can replace them with fakes.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as _dt
import io
import json
import pathlib
import sys
from typing import Any, Callable, Optional, Union

from . import ab as _ab
from . import baseline as _baseline
from . import build
from . import history as _history
from . import jsonfile
from . import results as _results
from . import revisions as _revisions

STATE_SCHEMA = "meshgate.nightly-state/1"
REPORT_SCHEMA = "meshgate.nightly/1"


def default_state() -> pathlib.Path:
    """reports/nightly/last-good.json where the driver works (build.source_root)."""
    return build.source_root() / "reports" / "nightly" / "last-good.json"


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
    signals: pathlib.Path = dataclasses.field(default_factory=_baseline.default_signals)
    state: pathlib.Path = dataclasses.field(default_factory=default_state)
    last_good: Optional[str] = None
    repo: pathlib.Path = dataclasses.field(default_factory=build.source_root)
    db: pathlib.Path = dataclasses.field(default_factory=_history.default_db)
    bisect: bool = True  # bisect new regressing change points


@dataclasses.dataclass
class TimingVerdict:
    """What the timing gate decided: code 0 pass (or inconclusive), 1 confirmed regression or
    correctness failure, 2 unusable; a one-line summary; where the evidence is."""
    code: int
    summary: str
    report: Optional[pathlib.Path] = None


@dataclasses.dataclass
class Bisection:
    """One change point of the history and what its bisection found."""
    change: dict[str, Any]  # history's change JSON (case, commit, last_good, ratio, p, kind)
    code: Optional[int] = None  # bisect's exit code (0 culprit, 1 none, 2 unusable); None: not run
    culprit: Optional[str] = None
    out: Optional[pathlib.Path] = None
    note: str = ""


RunCases = Callable[[list[str], pathlib.Path], int]
AbFn = Callable[[str, str, pathlib.Path, Options], Union[TimingVerdict, int]]
BisectFn = Callable[[str, str, str, pathlib.Path, Options], tuple[int, Optional[dict]]]
HeadFn = Callable[[pathlib.Path], tuple[str, bool]]


# ---------------------------------------------------------------------------------------------
# git and the state file


def _git(repo: pathlib.Path, *args: str) -> str:
    try:
        return _revisions.git(repo, *args)
    except _revisions.RevisionError as e:
        raise NightlyError(str(e)) from None


def head_commit(repo: pathlib.Path) -> tuple[str, bool]:
    """HEAD's full commit hash and whether the working tree has uncommitted changes."""
    sha = _git(repo, "rev-parse", "--verify", "HEAD^{commit}")
    dirty = bool(_git(repo, "status", "--porcelain", "--untracked-files=no"))
    return sha, dirty


def resolve(repo: pathlib.Path, rev: str) -> str:
    try:
        return _revisions.resolve_commit(repo, rev)
    except _revisions.RevisionError:
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
    _results.write_json_atomic(pathlib.Path(path), {
        "schema": STATE_SCHEMA,
        "commit": commit,
        "recorded": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "report": str(report) if report else None,
    })


# ---------------------------------------------------------------------------------------------
# The real steps (the defaults of nightly()'s seams)


def _cli(argv: list[str]) -> int:
    from . import cli  # cli imports this module

    try:
        return cli.main(argv)
    except SystemExit as e:  # argparse rejected the arguments
        return e.code if isinstance(e.code, int) else 2


def run_cases_command(argv: list[str], out_dir: pathlib.Path) -> int:
    """`meshgate run ARGV --out OUT_DIR`, in this process."""
    return _cli(["run", *argv, "--out", str(out_dir)])


def _build_and_launch_argv(options: Options) -> list[str]:
    """The options `ab` and `bisect` share with the night: backend, ranks, runs, preset, cases."""
    argv = ["--backend", options.backend]
    if options.ranks is not None:
        argv += ["--ranks", str(options.ranks)]
    if options.impl is not None:
        argv += ["--impl", options.impl]
    if options.runs is not None:
        argv += ["--runs", str(options.runs)]
    if options.preset:
        argv += ["--preset", options.preset]
    return argv + list(options.cases)


def ab_argv(base: str, candidate: str, out_dir: pathlib.Path, options: Options) -> list[str]:
    return (["ab", "--base", base, "--candidate", candidate, "--tag", "perf", "--out", str(out_dir)]
            + _build_and_launch_argv(options))


def run_ab_command(base: str, candidate: str, out_dir: pathlib.Path, options: Options) -> TimingVerdict:
    """`meshgate ab --base BASE --candidate CANDIDATE --tag perf [CASES]`, in this process."""
    code = _cli(ab_argv(base, candidate, out_dir, options))
    summary = {0: "no confirmed regression", 1: "confirmed regression or correctness failure"}.get(
        code, "the A/B could not run")
    data = _results.load_json(out_dir / "comparison.json")
    if data is not None and isinstance(data.get("counts"), dict):
        counts = ", ".join(f"{n} {v}" for v, n in data["counts"].items() if n)
        summary = f"{summary} ({counts or 'no cases'})"
    report = out_dir / "report.md"
    return TimingVerdict(code, summary, report if report.exists() else None)


def bisect_argv(good: str, bad: str, case_id: str, out_dir: pathlib.Path, options: Options) -> list[str]:
    return (["bisect", "--good", good, "--bad", bad, "--case", case_id, "--out", str(out_dir),
             "--json", str(out_dir / "bisect.json")] + _build_and_launch_argv(options))


def run_bisect_command(good: str, bad: str, case_id: str, out_dir: pathlib.Path,
                       options: Options) -> tuple[int, Optional[dict]]:
    """`meshgate bisect --good GOOD --bad BAD --case ID --out OUT_DIR`, in this process; its
    exit code and its --json document."""
    out_dir.mkdir(parents=True, exist_ok=True)
    code = _cli(bisect_argv(good, bad, case_id, out_dir, options))
    return code, _results.load_json(out_dir / "bisect.json")


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
    _results.write_json_atomic(handled_path(db), {"schema": HANDLED_SCHEMA, "changes": sorted(keys)})


def follow_history(options: Options, results_path: pathlib.Path, out: pathlib.Path, bisect: BisectFn,
                   log=print) -> tuple[list[dict[str, Any]], list[Bisection], str]:
    """Step 5: history add, change points, a bisection per new regressing change point.
    Returns (every change point, the new ones with their bisections, a note on the history)."""
    db = pathlib.Path(options.db)
    try:
        runs, points, _ = _history.add(db, [results_path])
        conn = _history.open_db(db, create=False)
        try:
            series = _history.load_series(conn)
        finally:
            conn.close()
    except _history.HistoryError as e:
        return [], [], f"history not updated: {e}"
    changes = [c.to_json() for c in _history.all_changes(series)]
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

    @property
    def timing_code(self) -> int:
        return self.timing.code if self.timing else 0

    @property
    def exit_code(self) -> int:
        culprit = 1 if any(b.code == 0 for b in self.bisections) else 0
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
                        "report": str(self.timing.report) if self.timing.report else None}
                       if self.timing else {"exit_code": None, "summary": self.timing_note}),
            "recorded_last_good": self.recorded,
            "record_note": self.record_note,
            "history": {"note": self.history_note, "changes": self.changes,
                        "bisections": [{"change": b.change, "exit_code": b.code, "culprit": b.culprit,
                                        "revert": str(b.out / "revert.md") if b.out else None, "note": b.note}
                                       for b in self.bisections]},
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
        else:
            lines.append(f"- timing: {self.timing_note}")
        lines.append(f"- last good: {self.record_note}")
        lines.append(f"- history: {self.history_note or 'not updated'}")
        if self.bisections:
            lines += ["", "## New change points", "", "| case | kind | last good | first bad | ratio | p | bisection |",
                      "|---|---|---|---|---:|---:|---|"]
            for b in self.bisections:
                c = b.change
                ratio = f"{c['ratio']:.3f}" if isinstance(c.get("ratio"), (int, float)) else "-"
                p = f"{c['p']:.2g}" if isinstance(c.get("p"), (int, float)) else "-"
                where = f" (`{b.out.name}/revert.md`)" if b.out else ""
                lines.append(f"| `{c['case']}` | {c['kind']} | {(c.get('last_good') or '-')[:12]} | {c['commit'][:12]} | "
                             f"{ratio} | {p} | {b.note}{where} |")
        return "\n".join(lines) + "\n"


def _verdict(value: Union[TimingVerdict, int]) -> TimingVerdict:
    if isinstance(value, TimingVerdict):
        return value
    code = int(value)
    return TimingVerdict(code, {0: "pass", 1: "regression"}.get(code, "unusable"))


def default_out(repo: pathlib.Path, now: Optional[_dt.datetime] = None) -> pathlib.Path:
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return _results.claim_run_dir(pathlib.Path(repo) / "reports", f"nightly-{now.strftime('%Y%m%d-%H%M%S')}")[1]


def run_argv(options: Options) -> list[str]:
    """The `meshgate run` arguments of step 1 (without --out): every case unless CASES."""
    argv = list(options.cases) or [str(_revisions.revision_cases(pathlib.Path(options.repo)))]
    argv += ["--backend", options.backend]
    if options.ranks is not None:
        argv += ["--ranks", str(options.ranks)]
    if options.impl is not None:
        argv += ["--impl", options.impl]
    if options.preset:
        argv += ["--preset", options.preset]
    if options.case_timeout is not None:
        argv += ["--case-timeout", str(options.case_timeout)]
    return argv


def nightly(options: Options, run_cases: RunCases = run_cases_command, ab: AbFn = run_ab_command,
            head: HeadFn = head_commit, log=print, bisect: BisectFn = run_bisect_command) -> Outcome:
    """The nightly job (see the module doc). The seams: `run_cases(argv, out_dir) -> exit code`
    runs the cases, `ab(base, candidate, out_dir, options)` the timing A/B, `head(repo)` names
    HEAD, `bisect(good, bad, case, out_dir, options) -> (exit code, json)` bisects a change
    point. Raises NightlyError on unusable input found before anything runs."""
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
    outcome.run_code = run_cases(run_argv(options), run_dir)
    results_path = run_dir / "results.json"

    if not results_path.exists():
        outcome.signals_headline = "no results to check"
        outcome.timing_note = "not run: the cases produced no results"
        outcome.record_note = f"unchanged ({outcome.last_good[:12] if outcome.last_good else 'none'})"
        outcome.run_code = max(outcome.run_code, 2)
        _finish(outcome, log)
        return outcome

    log(f"== deterministic signals against {options.signals}")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        outcome.signals_code = _baseline.run_check(results_path, pathlib.Path(options.signals), run_dir,
                                                   report_md=run_dir / "report.md")
    log(printed.getvalue().rstrip())
    data = _results.load_json(run_dir / "signals-check.json")
    outcome.signals_headline = data.get("headline", "") if data else "the check could not run"

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
        options, results_path, out, bisect, log)
    _finish(outcome, log)
    return outcome


def _finish(outcome: Outcome, log) -> None:
    (outcome.out / "nightly.json").write_text(json.dumps(outcome.to_json(), indent=1) + "\n")
    (outcome.out / "nightly.md").write_text(outcome.markdown())
    log(outcome.markdown().rstrip())
    log(f"report: {outcome.out / 'nightly.md'}")


def _cmd_nightly(args: argparse.Namespace) -> int:
    options = Options(
        cases=list(args.cases), backend=args.backend, ranks=args.ranks, impl=args.impl, runs=args.runs,
        preset=args.preset, case_timeout=args.case_timeout,
        out=pathlib.Path(args.out) if args.out else None,
        signals=pathlib.Path(args.signals), state=pathlib.Path(args.state),
        last_good=args.last_good, db=pathlib.Path(args.db), bisect=not args.no_bisect,
    )
    try:
        return nightly(options).exit_code
    except NightlyError as e:
        print(f"meshgate nightly: {e}", file=sys.stderr)
        return 2


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "nightly", help="every case at HEAD, signals against the committed baseline, A/B of the "
                        "last good commit against HEAD",
        description="Runs every case at HEAD, checks the deterministic signals against "
                    "baselines/signals (no timing involved), then gates timing with an "
                    "interleaved `meshgate ab` of the last good commit against HEAD on the perf "
                    "cases. HEAD becomes the last good commit when both pass. Exit 0 pass, 1 a "
                    "failure, changed signal or confirmed regression, 2 errors or unusable input.")
    parser.add_argument("cases", nargs="*", metavar="CASES",
                        help="case files or folders (default: cases/, every tag)")
    from .selection import add_backend_arguments, case_timeout_seconds

    add_backend_arguments(parser)
    parser.add_argument("--runs", type=_ab.runs_per_side, metavar="K", help="A/B runs per side (default: ab's)")
    parser.add_argument("--preset", metavar="P", help="CMake preset of the builds")
    parser.add_argument("--case-timeout", type=case_timeout_seconds, metavar="S",
                        help="seconds a case may run before it becomes an error row (run's default)")
    parser.add_argument("--out", metavar="DIR", help="report folder (default: reports/nightly-<time>)")
    parser.add_argument("--signals", metavar="DIR",
                        default=str(_baseline.default_signals()),
                        help="committed signals (default: %(default)s)")
    parser.add_argument("--state", metavar="F", default=str(default_state()),
                        help="where the last good commit is kept (default: %(default)s)")
    parser.add_argument("--last-good", metavar="REV",
                        help="A/B against this revision instead of the recorded last good commit")
    parser.add_argument("--db", metavar="F", default=str(_history.default_db()),
                        help="history database the night is added to (default: %(default)s)")
    parser.add_argument("--no-bisect", action="store_true",
                        help="report new change points without bisecting them")
    parser.set_defaults(func=_cmd_nightly)
