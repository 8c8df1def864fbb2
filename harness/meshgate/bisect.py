"""`meshgate bisect --good REV --bad REV [CASES]`: the commit that made the selected cases worse,
and the evidence for reverting it (docs/gate.md).

1. Endpoints. Both are built (revisions.py). The selected cases (as `meshgate ab` selects
   them: with no case arguments, the tag-smoke cases plus every performance case of the bad
   revision's tree, run from that tree's case files at every commit) without a `perf:` block
   run once on each; those that fail or error at bad and pass at good
   are status targets. The perf cases go through the interleaved A/B of `meshgate ab` (good
   vs bad, k runs a side, flagged cases confirmed in a fresh batch): confirmed regressions
   are perf targets, and a perf case that fails or errors at bad while passing at good is a
   status target. No target: nothing reproduces (exit 1).
2. Search. Binary search over `git rev-list --ancestry-path good..bad` (with merges in the
   range, over its first-parent chain, which the JSON records). A commit is bad when a status
   target fails or errors there, or when the SAME A/B against the good endpoint finds a
   confirmed regression of a perf target, or the case times out or errors (a timeout counts
   as slow); good when every target passes (or improves). An inconclusive A/B gets adaptive
   runs up to --max-runs a side (verdict.py); still inconclusive, the commit goes to the
   endpoint whose ratio (1 for good, the endpoints' A/B for bad) its ratio is nearer on a log
   scale, and the step's reason says so. A commit that does not build, or where a target cannot be judged
   (skipped, no timing), is skipped like `git bisect skip`: the untested commit nearest the
   middle is tried instead. Without skips the search builds and tests at most
   ceil(log2 N) + 2 commits, endpoints included (N = commits in good..bad).
3. Confirmation. The culprit is A/B-tested against its parent (the tested-good commit before
   it) with REVERT_RUNS a side and a confirmation batch; status targets run once on both.
4. revert.md recommends `git revert <culprit>` only when the culprit is isolated and either
   a status target passes at its parent and fails at it, or a perf target's culprit-vs-parent
   regression is revert-grade (verdict.grade: its 95 % CI entirely past the gate in both
   batches, so the effect shows in two runs of the experiment); otherwise it says which
   bound fell short. The reports of the folder state the same level for each case.

Exit codes (CONTRACT): 0 a culprit is isolated, 1 none: nothing reproduces, or the first bad
commit lies among commits that could not be tested (the JSON's evidence.suspects names them),
2 unusable input (a revision that does not resolve, good not an ancestor of bad, an endpoint
that does not build, a selection the runner rejects).

The search (`search`) and the recommendation (`recommend`, `revert_markdown`) are pure; git,
builds and runner launches sit behind `Lab`'s two seams (build, launch) and `git_*` helpers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import pathlib
import random
import subprocess
import sys
from typing import Any, Callable, Optional, TextIO

from . import ab as _ab
from . import baseline as _baseline
from . import build
from . import compare as _compare
from . import impls, replicate, revisions, signals, stats, verdict
from .compare import CaseVerdict, Comparison
from .markup import md_cell, pct
from .replicate import LaunchFn, Side

GOOD, BAD, SKIP = "good", "bad", "skip"
REVERT_RUNS = 15  # runs per side of culprit vs parent: revert-grade evidence (docs/gate.md)
FAILING = _compare.FAILING_STATUSES
# Endpoint verdicts of timed cases that revert.md lists: not judged, or not measured on both sides.
LEFT_OUT = ("inconclusive", "skip", "missing", "new")


class BisectError(Exception):
    """Unusable input: exit code 2."""


# ---------------------------------------------------------------------------------------------
# The search (pure)


@dataclasses.dataclass
class Step:
    """One tested commit: its verdict, why, and the deciding A/B numbers (perf targets)."""

    commit: str
    verdict: str  # good | bad | skip
    reason: str
    ratio: Optional[float] = None  # this commit / good endpoint, of the deciding target
    ci: Optional[tuple[float, float]] = None
    p: Optional[float] = None
    role: str = "step"  # "good endpoint", "bad endpoint" or "step"
    built: bool = True  # False: its runner did not build
    cases: list = dataclasses.field(default_factory=list)  # per target: id, verdict, ratio, ci, p, note

    def to_json(self) -> dict[str, Any]:
        return {"commit": self.commit, "verdict": self.verdict, "reason": self.reason,
                "ratio": self.ratio, "ci": list(self.ci) if self.ci else None, "p": self.p,
                "role": self.role, "built": self.built, "cases": self.cases}


@dataclasses.dataclass
class Search:
    """Where a search ended: commits[last_good] is the newest known good (-1: the good
    endpoint), commits[first_bad] the oldest known bad."""

    commits: list[str]
    steps: list[Step]
    last_good: int
    first_bad: int
    skipped: list[str]

    @property
    def culprit(self) -> Optional[str]:
        return self.commits[self.first_bad] if self.first_bad - self.last_good == 1 else None

    @property
    def suspects(self) -> list[str]:
        """The commits the first bad one lies among (the culprit alone once isolated)."""
        return self.commits[self.last_good + 1:self.first_bad + 1]


def cost_bound(n: int) -> int:
    """Commits a bisection of n commits (good..bad) builds and tests without skips, endpoints
    included."""
    return math.ceil(math.log2(n)) + 2 if n > 1 else 2


def next_probe(last_good: int, first_bad: int, untestable: set[int]) -> Optional[int]:
    """The index to test next: the middle of the open range, else (git bisect skip) the
    testable index nearest to it, the newer one on a tie (the middle rounds down, so the newer
    neighbour splits the range more evenly); None when none is left."""
    middle = (last_good + first_bad) // 2
    inside = [i for i in range(last_good + 1, first_bad) if i not in untestable]
    return min(inside, key=lambda i: (abs(i - middle), -i)) if inside else None


def search(commits: list[str], test: Callable[[str], Step]) -> Search:
    """Binary search for the first bad commit of `commits` (oldest first; the last is the bad
    endpoint, the good endpoint comes before the first). `test(commit)` judges one commit; a
    `skip` takes the nearest untested commit instead."""
    last_good, first_bad = -1, len(commits) - 1
    untestable: set[int] = set()
    steps: list[Step] = []
    skipped: list[str] = []
    while first_bad - last_good > 1:
        probe = next_probe(last_good, first_bad, untestable)
        if probe is None:
            break
        step = test(commits[probe])
        steps.append(step)
        if step.verdict == BAD:
            first_bad = probe
        elif step.verdict == GOOD:
            last_good = probe
        else:
            untestable.add(probe)
            skipped.append(commits[probe])
    return Search(commits, steps, last_good, first_bad, skipped)


# ---------------------------------------------------------------------------------------------
# Targets and the verdict of one commit (pure)


@dataclasses.dataclass
class Target:
    """A case that reproduces at the endpoints: "perf" (a confirmed regression of bad against
    good) or "status" (fails or errors at bad, passes at good)."""

    id: str
    kind: str
    ratio: Optional[float] = None  # bad / good at the endpoints
    ci: Optional[tuple[float, float]] = None
    p: Optional[float] = None
    gate: Optional[float] = None
    status: str = ""  # at bad
    message: str = ""  # the bad row's message (status targets)

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["ci"] = list(self.ci) if self.ci else None
        return out


def _first_line(text: str, limit: int = 200) -> str:
    line = next((l.strip() for l in str(text).splitlines() if l.strip()), "")
    return line if len(line) <= limit else line[:limit - 3] + "..."


def judge_perf(v: CaseVerdict) -> tuple[Optional[str], str]:
    """A perf target's verdict at a commit from its A/B against the good endpoint: bad, good,
    or None (not decided: inconclusive, skipped, untimed) with the reason."""
    if v.verdict == "correctness":
        return BAD, f"{v.new_status} here (a timeout or error counts as slow): {_first_line(v.message)}"
    if v.verdict == "regression":
        return BAD, f"confirmed regression: {v.note}"
    if v.verdict in ("pass", "improvement"):
        return GOOD, f"{v.verdict}: {v.note}"
    return None, f"{v.verdict}: {v.note}"


def nearer_endpoint(ratio: float, bad_ratio: float) -> str:
    """good or bad: the endpoint whose ratio against good (1 for good itself, `bad_ratio` for
    bad) `ratio` is nearer on a log scale."""
    return GOOD if abs(math.log(ratio)) < abs(math.log(ratio) - math.log(bad_ratio)) else BAD


def case_entry(v: CaseVerdict, verdict: Optional[str], note: str) -> dict[str, Any]:
    entry = {"id": v.id, "verdict": verdict or SKIP, "ab": v.verdict, "ratio": v.ratio,
             "ci": list(v.ci) if v.ci else None, "p": v.p, "runs": [v.runs_base, v.runs_new],
             "note": note}
    if v.message:
        entry["message"] = v.message
    return entry


def status_entry(case_id: str, row: Optional[dict]) -> dict[str, Any]:
    """A status target's verdict at a commit from that commit's row."""
    status = (row or {}).get("status")
    if status in FAILING:
        verdict, note = BAD, f"{status}: {_first_line(row.get('message', ''))}"
    elif status == "pass":
        verdict, note = GOOD, "pass"
    else:
        verdict = SKIP
        note = f"skip: {_first_line(row.get('message', ''))}" if row else "no result row"
    return {"id": case_id, "verdict": verdict, "status": status, "note": note}


def combine(commit: str, cases: list[dict[str, Any]]) -> Step:
    """A commit's step from its targets' verdicts: bad when any is bad, skip when any cannot be
    judged, good when all are good. The step's ratio, CI and p are the deciding target's."""
    bad = [c for c in cases if c["verdict"] == BAD]
    undecided = [c for c in cases if c["verdict"] == SKIP]
    if bad:
        verdict, chosen = BAD, bad
    elif undecided:
        verdict, chosen = SKIP, undecided
    else:
        verdict, chosen = GOOD, cases
    timed = [c for c in chosen if c.get("ratio") is not None]
    deciding = max(timed, key=lambda c: c["ratio"]) if timed else (chosen[0] if chosen else None)
    reason = "; ".join(f"{c['id']}: {c['note']}" for c in chosen) or "no target"
    if verdict == SKIP:
        reason = f"cannot be judged: {reason}"
    step = Step(commit, verdict, reason, cases=cases)
    if deciding is not None and deciding.get("ratio") is not None:
        step.ratio, step.ci, step.p = deciding["ratio"], tuple(deciding["ci"]) if deciding.get("ci") else None, deciding.get("p")
    return step


# ---------------------------------------------------------------------------------------------
# The recommendation (pure)


@dataclasses.dataclass
class Recommendation:
    revert: bool
    why: str  # one paragraph: the grounds, or precisely why there is none
    perf: list  # CaseVerdicts of the perf targets that qualify
    status: list  # status entries that qualify (parent pass, culprit fail/error)

    def to_json(self, culprit: Optional[str]) -> dict[str, Any]:
        return {"revert": self.revert, "why": self.why,
                "command": f"git revert {culprit}" if self.revert and culprit else None,
                "cases": [v.id for v in self.perf] + [s["id"] for s in self.status]}


def _ci(ci: Optional[tuple]) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "-"


def recommend(culprit: Optional[str], suspects: list[str], perf: list[CaseVerdict],
              status: list[dict[str, Any]], nothing: str = "") -> Recommendation:
    """docs/gate.md over the culprit-vs-parent evidence: `perf` (verdicts of the
    final A/B), `status` (entries with parent_status, culprit_status, message). `nothing`
    explains an empty bisection (no target)."""
    if nothing:
        return Recommendation(False, f"Nothing to revert: {nothing}", [], [])
    if culprit is None:
        listed = ", ".join(c[:12] for c in suspects)
        return Recommendation(False, (
            f"The culprit is not isolated: the first bad commit is one of {listed}, and the "
            f"commits among them that could not be tested (they do not build, or the targets "
            f"cannot be judged there) hide which. Test them by hand, or fix their build and "
            f"bisect again between the last good commit and {suspects[-1][:12]}."), [], [])
    qualifying_status = [s for s in status if s.get("parent_status") == "pass" and s.get("culprit_status") in FAILING]
    qualifying_perf, reasons = [], []
    for v in perf:
        verdict.grade(v)
        if v.grade == "revert-grade":
            qualifying_perf.append(v)
        elif v.verdict == "regression":
            reasons.append(f"{v.id}: a regression, not revert-grade: {v.grade_note}")
        else:
            reasons.append(f"{v.id}: {v.verdict} against the parent ({v.note})")
    for s in status:
        if s not in qualifying_status:
            reasons.append(f"{s['id']}: {s.get('parent_status')} at the parent, {s.get('culprit_status')} at the culprit")
    if not qualifying_perf and not qualifying_status:
        return Recommendation(False, (
            f"No revert is recommended for {culprit[:12]}: the culprit-vs-parent evidence does not "
            f"meet the bar (a status target that passes at the parent and fails at the culprit, "
            f"or a revert-grade regression: confirmed, its 95 % CI entirely past the gate in both "
            f"batches). " + "; ".join(reasons) + "."), [], [])
    grounds = []
    if qualifying_status:
        grounds.append(f"{len(qualifying_status)} case(s) pass at the parent and fail or error at "
                       f"{culprit[:12]}")
    if qualifying_perf:
        lows = [min(v.ci[0], v.confirm_ci[0]) for v in qualifying_perf]
        grounds.append(f"{len(qualifying_perf)} case point(s) are slower by at least {pct(min(lows) - 1)} "
                       f"(the lowest end of their 95 % CIs) against the parent, past the gate in both "
                       f"interleaved batches: the effect shows in 2 runs of the experiment")
    return Recommendation(True, "; ".join(grounds) + ".", qualifying_perf, qualifying_status)


def _fmt(x: Optional[float], spec: str = ".3f") -> str:
    return format(x, spec) if isinstance(x, (int, float)) else "-"


def revert_markdown(doc: dict[str, Any], info: Optional[dict[str, str]], rec: Recommendation,
                    perf: list[CaseVerdict], status: list[dict[str, Any]],
                    signal_changes: dict[str, list[str]], machine: dict[str, Any]) -> str:
    """revert.md: the recommendation with its evidence, or why there is none. `doc` is the
    bisection's JSON document, `info` the culprit's commit (sha, subject, author, date)."""
    ev = doc["evidence"]
    culprit = doc["culprit"]
    lines: list[str] = []
    if rec.revert:
        lines += [f"# Revert {culprit[:12]}: {info.get('subject', '') if info else ''}".rstrip(), "",
                  f"**Recommendation: revert `{culprit[:12]}`.** {rec.why}", "", "```",
                  f"git revert {culprit}", "```", ""]
    else:
        lines += ["# No revert recommendation", "", rec.why, ""]
    if culprit and info:
        lines += ["## The commit", "", "| | |", "|---|---|",
                  f"| commit | `{culprit}` |", f"| subject | {md_cell(info.get('subject', ''))} |",
                  f"| author | {md_cell(info.get('author', ''))} |", f"| date | {md_cell(info.get('date', ''))} |",
                  f"| parent (tested good) | `{ev.get('parent') or '-'}` |", ""]
    if perf:
        k = ev.get("revert_runs")
        lines += [f"## Culprit vs parent: interleaved A/B, k = {k} runs per side, then a fresh batch", "",
                  "| case | verdict | runs | ratio | 95 % CI | p | confirmation ratio | confirmation CI | p | gate | noise floor |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for v in perf:
            floor = pct(v.noise_floor) if v.noise_floor is not None else "not calibrated"
            lines.append(f"| `{v.id}` | {v.level()}{' (confirmed)' if v.confirmed else ''} | {v.runs_base}/{v.runs_new} | "
                         f"{_fmt(v.ratio)} | {_ci(v.ci)} | {_fmt(v.p, '.2g')} | {_fmt(v.confirm_ratio)} | "
                         f"{_ci(v.confirm_ci)} | {_fmt(v.confirm_p, '.2g')} | {pct(v.min_effect or 0)} | {floor} |")
        lines += ["", "Ratio = culprit / parent of the medians of per-run medians (> 1 is slower); the gate is "
                  "max(2 %, 3 x the calibrated noise floor). A regression is revert-grade when its CI's lower "
                  "end lies above 1 + gate in both batches."]
        lines += [f"- `{v.id}`: not revert-grade: {v.grade_note}" for v in perf if v.grade == "not revert-grade"]
        lines.append("")
    if status:
        lines += ["## Correctness: culprit vs parent", "", "| case | parent | culprit | message |", "|---|---|---|---|"]
        for s in status:
            lines.append(f"| `{s['id']}` | {s.get('parent_status')} | {s.get('culprit_status')} | {md_cell(_first_line(s.get('message', ''), 300))} |")
        lines.append("")
        for s in status:
            if s.get("message"):
                lines += [f"`{s['id']}` at the culprit:", "", "```", s["message"].rstrip(), "```", ""]
    if machine:
        lines += ["## Machine", "", f"- host: {machine.get('host', '-')}", f"- cpu: {machine.get('cpu', '-')}",
                  f"- machine class: `{machine.get('class', '-')}`"]
        if machine.get("gpus"):
            lines.append(f"- gpus: {machine['gpus']}")
        if machine.get("backend"):
            lines.append(f"- backend: {machine['backend']}")
        lines.append("")
    if culprit and (perf or status):
        lines += ["## Deterministic signals that changed (parent -> culprit)", ""]
        if signal_changes:
            for case_id, changes in signal_changes.items():
                lines.append(f"- `{case_id}`:")
                lines += [f"  {line}" for line in changes]
        else:
            lines.append("None of the targets' deterministic signals (status, plan, bytes, modeled cost, "
                         "algorithm) changed: the difference is in the time alone.")
        lines.append("")
    lines += ["## Bisection", "",
              f"- good `{doc['good']}`, bad `{doc['bad']}`: {ev['commits']} commit(s) in good..bad"
              + (" (first-parent chain: the range has merges)" if ev.get("first_parent") else ""),
              f"- tested {ev['tested']} commit(s), endpoints included (bound ceil(log2 N) + 2 = {ev['bound']}); "
              f"{ev['builds']} build(s)",
              f"- runs per side: {ev['k']}, adaptive up to {ev['max_runs']} for an inconclusive case; "
              f"culprit vs parent {ev['revert_runs']}; seed {ev.get('seed')}"]
    if doc["skipped"]:
        lines.append(f"- skipped (could not be built or judged): {', '.join(c[:12] for c in doc['skipped'])}")
    unjudged = ev.get("endpoint_cases") or []
    if not culprit and ev.get("suspects"):
        lines.append(f"- the first bad commit is one of: {', '.join(c[:12] for c in ev['suspects'])}")
    targets = ev.get("targets") or []
    if targets:
        lines.append("- targets: " + ", ".join(f"`{t['id']}` ({t['kind']})" for t in targets))
    if ev.get("unexplained"):
        lines.append(f"- not explained by the culprit: {', '.join(ev['unexplained'])} "
                     f"(bisect again with --good {culprit[:12] if culprit else doc['good'][:12]})")
    lines += ["", "| # | commit | role | verdict | ratio | 95 % CI | p | reason |", "|---|---|---|---|---|---|---|---|"]
    for i, step in enumerate(doc["steps"], 1):
        lines.append(f"| {i} | `{step['commit'][:12]}` | {step.get('role', 'step')} | {step['verdict']} | "
                     f"{_fmt(step.get('ratio'))} | {_ci(step.get('ci'))} | {_fmt(step.get('p'), '.2g')} | "
                     f"{md_cell(step['reason'])} |")
    if unjudged:
        lines += ["", "## Endpoint cases that were not bisected", "",
                  "Selected cases that did not become targets because good against bad could not be judged, "
                  "or that were left out (skipped, missing, failing on both): a regression may hide here.", "",
                  "| case | verdict | runs | ratio | 95 % CI | why |", "|---|---|---|---|---|---|"]
        skipped: dict[tuple[str, str], int] = {}
        for c in unjudged:
            if c["verdict"] == "skip":  # skipped on both sides: one line per suite and reason
                key = (c["id"].split("/", 1)[0], _first_line(c.get("message") or c.get("note", ""), 200))
                skipped[key] = skipped.get(key, 0) + 1
                continue
            runs = f"{c['runs'][0]}/{c['runs'][1]}" if c.get("runs") and any(c["runs"]) else "-"
            lines.append(f"| `{c['id']}` | {c['verdict']} | {runs} | {_fmt(c.get('ratio'))} | {_ci(c.get('ci'))} | "
                         f"{md_cell(_first_line(c.get('note', ''), 300))} |")
        for (suite, reason), n in sorted(skipped.items()):
            lines.append(f"| `{suite}/*` ({n} case{'s' if n != 1 else ''}) | skip | - | - | - | "
                         f"skipped on both sides: {md_cell(reason)} |")
    return "\n".join(lines) + "\n"


def signal_changes(parent_rows: dict[str, dict], culprit_rows: dict[str, dict], ids: list[str],
                   parent_run: Optional[dict] = None, culprit_run: Optional[dict] = None) -> dict[str, list[str]]:
    """Per case, the deterministic signals (signals.extract) that differ between the parent's
    and the culprit's rows, with the plan as a unified diff."""
    out: dict[str, list[str]] = {}
    for case_id in ids:
        old, new = parent_rows.get(case_id), culprit_rows.get(case_id)
        if not old or not new:
            continue
        a, b = signals.extract(old, parent_run), signals.extract(new, culprit_run)
        changes, added, _ = signals.diff(a, b)
        lines = []
        for change in changes + added:
            if change.signal == "plan":
                diff = signals.plan_diff(change.old, change.new, "parent", "culprit")
                lines += ["plan:", "```diff", *diff.splitlines(), "```"]
            else:
                lines.append(f"{change.signal}: {json.dumps(change.old)} -> {json.dumps(change.new)}")
        if lines:
            out[case_id] = lines
    return out


# ---------------------------------------------------------------------------------------------
# git


def _git(repo: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)


def commit_range(repo: pathlib.Path, good: str, bad: str) -> tuple[list[str], bool]:
    """The commits of good..bad on the ancestry path, oldest first (the last is bad), and
    whether the range has merges, in which case only bad's first-parent chain is searched.
    BisectError when good is not an ancestor of bad."""
    if good == bad:
        raise BisectError(f"--good and --bad are the same commit {good[:12]}")
    proc = _git(repo, "merge-base", "--is-ancestor", good, bad)
    if proc.returncode == 1:
        raise BisectError(f"--good {good[:12]} is not an ancestor of --bad {bad[:12]}: the good "
                          f"revision must come before the bad one in the history (swapped?)")
    if proc.returncode != 0:
        raise BisectError(f"git merge-base failed in {repo}: {proc.stderr.strip()}")
    merges = _git(repo, "rev-list", "--ancestry-path", "--merges", f"{good}..{bad}").stdout.split()
    args = ["rev-list", "--reverse", "--ancestry-path"] + (["--first-parent"] if merges else []) + [f"{good}..{bad}"]
    proc = _git(repo, *args)
    commits = proc.stdout.split()
    if proc.returncode != 0 or not commits or commits[-1] != bad:
        raise BisectError(f"git {' '.join(args)} did not list the range ({proc.stderr.strip() or 'empty'})")
    return commits, bool(merges)


def commit_info(repo: pathlib.Path, commit: str) -> dict[str, str]:
    proc = _git(repo, "log", "-1", "--format=%H%x00%s%x00%an <%ae>%x00%aI", commit)
    sha, subject, author, date = (proc.stdout.rstrip("\n").split("\x00") + ["", "", "", ""])[:4]
    return {"sha": sha or commit, "subject": subject, "author": author, "date": date}


# ---------------------------------------------------------------------------------------------
# The experiment: builds and launches behind two seams


class Lab:
    """Builds commits (`build(commit, label) -> Side`, RevisionBuildError when it does not
    build) and runs cases on them through `launch` (replicate.LaunchFn): one launch for
    statuses, run_ab for timings. Every A/B takes its seed from one seeded generator."""

    def __init__(self, build: Callable[[str, str], Side], launch: LaunchFn, out_dir: pathlib.Path,
                 k: int = _ab.DEFAULT_RUNS, seed: Optional[int] = None,
                 floors_for: Optional[Callable[[dict], dict]] = None, max_gate: float = stats.MAX_GATE,
                 max_runs: int = verdict.DEFAULT_MAX_RUNS, revert_runs: int = REVERT_RUNS,
                 log: Optional[TextIO] = None):
        self.build, self.launch, self.out_dir = build, launch, pathlib.Path(out_dir)
        self.k, self.max_runs, self.revert_runs = k, max(max_runs, k), revert_runs
        self.seed = random.SystemRandom().randrange(2**31) if seed is None else seed
        self.rng = random.Random(self.seed)
        self.floors_for, self.max_gate = floors_for, max_gate
        self.log = log or sys.stderr
        self.sides: dict[str, Side] = {}
        self.builds = 0

    def say(self, text: str) -> None:
        print(f"meshgate bisect: {text}", file=self.log, flush=True)

    def side(self, commit: str, label: str) -> Side:
        """The built side of `commit` (built once); RevisionBuildError when it does not build."""
        if commit not in self.sides:
            self.builds += 1
            self.sides[commit] = self.build(commit, label)
        return dataclasses.replace(self.sides[commit], label=label, rev=label)

    def statuses(self, side: Side, ids: list[str], folder: str) -> dict[str, Any]:
        """One launch of `ids` on `side`: its results document."""
        return self.launch(side, 1, list(ids), self.out_dir / folder)

    def ab(self, base: Side, side: Side, ids: list[str], folder: str, k: Optional[int] = None,
           confirm: bool = True) -> tuple[Comparison, dict]:
        k = k or self.k
        return _ab.run_ab([base, side], {base.label: list(ids), side.label: list(ids)}, self.launch,
                          self.out_dir / folder, k=k, seed=self.rng.randrange(2**31),
                          confirm=confirm, floors_for=self.floors_for, max_gate=self.max_gate,
                          max_runs=max(k, self.max_runs))


@dataclasses.dataclass
class Outcome:
    code: int
    doc: dict[str, Any]  # the --json document
    revert_md: str
    final: Optional[Comparison] = None  # the last A/B (or status comparison), for the reports
    final_results: Optional[dict] = None


def _status_docs_comparison(parent: dict, culprit: dict, labels: tuple[str, str]) -> Comparison:
    return _compare.compare_results(parent, culprit, base_label=labels[0], new_label=labels[1])


def _merge_comparisons(first: Optional[Comparison], second: Optional[Comparison]) -> Optional[Comparison]:
    """One comparison with the cases of both (the perf A/B and the status check)."""
    if first is None or second is None:
        return first or second
    merged = dataclasses.replace(first, cases=first.cases + [c for c in second.cases if c.id not in first.new_rows])
    merged.base_rows = {**second.base_rows, **first.base_rows}
    merged.new_rows = {**second.new_rows, **first.new_rows}
    return merged


def _results_of(comparison: Comparison) -> dict[str, Any]:
    return {"schema": _baseline.RESULTS_SCHEMA, "run": comparison.new_run, "cases": list(comparison.new_rows.values())}


def _machine(run: Optional[dict]) -> dict[str, Any]:
    run = run or {}
    machine = run.get("machine") if isinstance(run.get("machine"), dict) else {}
    if not machine:
        return {}
    cpu = machine.get("cpu")
    return {"host": machine.get("host", ""), "cpu": cpu.get("model", cpu) if isinstance(cpu, dict) else cpu,
            "gpus": machine.get("gpus") or [], "class": _baseline.machine_class(machine),
            "backend": run.get("backend", "")}


class Bisection:
    """The whole bisection over a Lab: endpoints, search, confirmation, recommendation."""

    def __init__(self, lab: Lab, good: str, bad: str, commits: list[str], ids: list[str],
                 perf_ids: list[str], first_parent: bool = False,
                 info_for: Callable[[str], dict] = lambda c: {"sha": c}):
        self.lab, self.good, self.bad, self.commits = lab, good, bad, commits
        self.ids, self.perf_ids = list(ids), [i for i in ids if i in set(perf_ids)]
        self.first_parent, self.info_for = first_parent, info_for
        self.targets: list[Target] = []
        self.endpoint_notes: list[str] = []
        self.endpoint_cases: list[dict] = []  # timed endpoint cases that could not be judged or were left out
        self.endpoint_final: Optional[Comparison] = None
        self.good_side: Optional[Side] = None
        self.probes = 0

    @property
    def perf_targets(self) -> list[Target]:
        return [t for t in self.targets if t.kind == "perf"]

    @property
    def status_targets(self) -> list[Target]:
        return [t for t in self.targets if t.kind == "status"]

    def _endpoint(self, commit: str, label: str) -> Side:
        try:
            return self.lab.side(commit, label)
        except revisions.RevisionBuildError as e:
            raise BisectError(f"the {label} endpoint {commit[:12]} does not build ({e.reason}): "
                              f"choose a {label} revision that builds") from None

    def endpoints(self) -> tuple[Step, Step]:
        """Builds both endpoints and finds the targets."""
        lab = self.lab
        self.good_side = self._endpoint(self.good, "good")
        bad_side = self._endpoint(self.bad, "bad")
        plain = [i for i in self.ids if i not in self.perf_ids]
        status_cmp = perf_cmp = None
        if plain:
            lab.say(f"endpoints: running {len(plain)} case(s) once on good and bad")
            good_doc = lab.statuses(self.good_side, plain, "endpoints/status-good")
            bad_doc = lab.statuses(bad_side, plain, "endpoints/status-bad")
            good_rows = {r["id"]: r for r in good_doc.get("cases", [])}
            for row in bad_doc.get("cases", []):
                base = good_rows.get(row["id"])
                if row.get("status") in FAILING and (base or {}).get("status") == "pass":
                    self.targets.append(Target(row["id"], "status", status=row["status"], message=row.get("message", "")))
                elif row.get("status") in FAILING:
                    self.endpoint_notes.append(f"{row['id']}: {row['status']} at bad but "
                                               f"{(base or {}).get('status', 'absent')} at good (not a regression)")
            status_cmp = _status_docs_comparison(good_doc, bad_doc, (f"good ({self.good[:10]})", f"bad ({self.bad[:10]})"))
        undecided: list[dict[str, Any]] = []
        if self.perf_ids:
            lab.say(f"endpoints: interleaved A/B of good vs bad over {len(self.perf_ids)} perf case(s), k = {lab.k}")
            perf_cmp, _ = lab.ab(self.good_side, bad_side, self.perf_ids, "endpoints/ab")
            for v in perf_cmp.cases:
                if v.verdict in LEFT_OUT:
                    self.endpoint_cases.append(case_entry(v, v.verdict, v.note))
                if v.verdict == "regression" and v.confirmed:
                    self.targets.append(Target(v.id, "perf", ratio=v.ratio, ci=v.ci, p=v.p, gate=v.min_effect,
                                               status=v.new_status or ""))
                elif v.verdict == "correctness" and v.base_status == "pass":
                    self.targets.append(Target(v.id, "status", status=v.new_status or "", message=v.message))
                else:
                    self.endpoint_notes.append(f"{v.id}: {v.verdict}: {v.note}")
                    if v.verdict == "correctness":  # failing at good too: not this range's doing
                        self.endpoint_cases.append(case_entry(v, v.verdict, v.note))
                    if v.verdict == "inconclusive":
                        undecided.append(case_entry(v, SKIP, v.note))
        self.endpoint_final = _merge_comparisons(perf_cmp, status_cmp)
        good_step = Step(self.good, GOOD, "the good endpoint: every A/B compares against it", role="good endpoint")
        if not self.targets and undecided:
            # Not shown worse is not shown no worse: the bad endpoint cannot be judged.
            bad_step = combine(self.bad, undecided)
            bad_step.role = "bad endpoint"
            return good_step, bad_step
        if not self.targets:
            return good_step, Step(self.bad, GOOD, "bad is not worse than good: " + "; ".join(self.endpoint_notes),
                                   role="bad endpoint")
        cases = [{"id": t.id, "verdict": BAD, "ratio": t.ratio, "ci": list(t.ci) if t.ci else None, "p": t.p,
                  "note": (f"confirmed regression, ratio {t.ratio:.3f} {_ci(t.ci)}" if t.kind == "perf"
                           else f"{t.status} at bad, pass at good: {_first_line(t.message)}")} for t in self.targets]
        bad_step = combine(self.bad, cases)
        bad_step.role = "bad endpoint"
        return good_step, bad_step

    def test(self, commit: str) -> Step:
        """The verdict of one commit between the endpoints."""
        lab = self.lab
        label = commit[:12]
        self.probes += 1
        folder = f"steps/{self.probes:02d}-{label}"
        try:
            side = lab.side(commit, label)
        except revisions.RevisionBuildError as e:
            lab.say(f"{label}: does not build, skipped")
            return Step(commit, SKIP, f"does not build: {e.reason.split('; ')[0]}", built=False)
        cases: list[dict[str, Any]] = []
        if self.status_targets:
            doc = lab.statuses(side, [t.id for t in self.status_targets], f"{folder}/status")
            rows = {r["id"]: r for r in doc.get("cases", [])}
            cases += [status_entry(t.id, rows.get(t.id)) for t in self.status_targets]
        if self.perf_targets and not any(c["verdict"] == BAD for c in cases):
            cases += self._perf_cases(side, folder)
        step = combine(commit, cases)
        lab.say(f"{label}: {step.verdict}: {step.reason}")
        return step

    def _perf_cases(self, side: Side, folder: str) -> list[dict[str, Any]]:
        lab = self.lab
        ids = [t.id for t in self.perf_targets]
        comparison, _ = lab.ab(self.good_side, side, ids, f"{folder}/ab")
        bad_ratio = {t.id: t.ratio for t in self.perf_targets}
        judged = []
        for v in comparison.cases:
            if v.id not in ids:
                continue
            outcome, note = judge_perf(v)
            if outcome is None and v.verdict == "inconclusive" and v.ratio and bad_ratio.get(v.id):
                outcome = nearer_endpoint(v.ratio, bad_ratio[v.id])
                ends = {GOOD: "1 (good)", BAD: f"{bad_ratio[v.id]:.3f} (bad)"}
                other = BAD if outcome == GOOD else GOOD
                note = (f"inconclusive after {min(v.runs_base, v.runs_new)} runs a side ({v.note}); decided by "
                        f"the nearer endpoint: ratio {v.ratio:.3f} is nearer {ends[outcome]} than "
                        f"{ends[other]} on a log scale")
            judged.append((v, outcome, note))
        return [case_entry(v, outcome, note) for v, outcome, note in judged]

    def confirm(self, culprit: str, parent: str) -> tuple[list[CaseVerdict], list[dict], Optional[Comparison], dict, dict]:
        """Culprit vs parent: the revert-grade A/B of the perf targets and one status run of the
        status targets on both. Returns (perf verdicts, status entries, comparison for the
        reports, parent rows, culprit rows)."""
        lab = self.lab
        parent_side = lab.side(parent, "parent")
        culprit_side = lab.side(culprit, "culprit")
        perf: list[CaseVerdict] = []
        status: list[dict] = []
        perf_cmp = status_cmp = None
        parent_rows: dict[str, dict] = {}
        culprit_rows: dict[str, dict] = {}
        if self.perf_targets:
            ids = [t.id for t in self.perf_targets]
            lab.say(f"culprit {culprit[:12]} vs parent {parent[:12]}: A/B with k = {lab.revert_runs}")
            perf_cmp, _ = lab.ab(parent_side, culprit_side, ids, "culprit/ab", k=lab.revert_runs)
            perf = [v for v in perf_cmp.cases if v.id in ids]
            parent_rows.update(perf_cmp.base_rows)
            culprit_rows.update(perf_cmp.new_rows)
        if self.status_targets:
            ids = [t.id for t in self.status_targets]
            lab.say(f"culprit {culprit[:12]} vs parent {parent[:12]}: {len(ids)} status target(s) once on each")
            parent_doc = lab.statuses(parent_side, ids, "culprit/status-parent")
            culprit_doc = lab.statuses(culprit_side, ids, "culprit/status-culprit")
            prow = {r["id"]: r for r in parent_doc.get("cases", [])}
            crow = {r["id"]: r for r in culprit_doc.get("cases", [])}
            for case_id in ids:
                status.append({"id": case_id, "parent_status": (prow.get(case_id) or {}).get("status"),
                               "culprit_status": (crow.get(case_id) or {}).get("status"),
                               "message": (crow.get(case_id) or {}).get("message", "")})
            status_cmp = _status_docs_comparison(parent_doc, culprit_doc, (f"parent ({parent[:10]})", f"culprit ({culprit[:10]})"))
            parent_rows.update({k: v for k, v in prow.items() if k not in parent_rows})
            culprit_rows.update({k: v for k, v in crow.items() if k not in culprit_rows})
        return perf, status, _merge_comparisons(perf_cmp, status_cmp), parent_rows, culprit_rows

    def run(self) -> Outcome:
        lab = self.lab
        good_step, bad_step = self.endpoints()
        steps = [good_step, bad_step]
        evidence: dict[str, Any] = {
            "commits": len(self.commits), "first_parent": self.first_parent, "bound": cost_bound(len(self.commits)),
            "k": lab.k, "max_runs": lab.max_runs, "revert_runs": lab.revert_runs, "seed": lab.seed,
            "max_gate": lab.max_gate, "cases": self.ids,
            "targets": [t.to_json() for t in self.targets], "endpoint_notes": self.endpoint_notes,
            "endpoint_cases": self.endpoint_cases,
        }
        doc: dict[str, Any] = {"good": self.good, "bad": self.bad, "culprit": None, "steps": [], "skipped": [],
                               "evidence": evidence}
        perf: list[CaseVerdict] = []
        status: list[dict] = []
        final = self.endpoint_final
        changes: dict[str, list[str]] = {}
        info = None
        if not self.targets and bad_step.verdict == SKIP:
            nothing = ("nothing reproduces: the A/B of the endpoints cannot tell whether bad is worse than good "
                       "(more runs per side, --runs, or a quieter machine may). At the endpoints: "
                       + "; ".join(self.endpoint_notes))
            code, culprit, result = 1, None, None
        elif not self.targets:
            nothing = ("nothing reproduces: bad is not worse than good on the selected cases. At the endpoints: "
                       + ("; ".join(self.endpoint_notes) or "every selected case passes on both"))
            code, culprit, result = 1, None, None
        else:
            nothing = ""
            lab.say(f"{len(self.targets)} target(s): {', '.join(t.id for t in self.targets)}; "
                    f"searching {len(self.commits)} commit(s), at most {cost_bound(len(self.commits))} tested")
            result = search(self.commits, self.test)
            steps += result.steps
            culprit = result.culprit
            doc["skipped"] = result.skipped
            code = 0 if culprit else 1
            if culprit:
                index = self.commits.index(culprit)
                parent = self.commits[index - 1] if index > 0 else self.good
                evidence["parent"] = parent
                info = self.info_for(culprit)
                perf, status, confirmed_cmp, prows, crows = self.confirm(culprit, parent)
                final = confirmed_cmp or final
                changes = signal_changes(prows, crows, [t.id for t in self.targets],
                                         confirmed_cmp.base_run if confirmed_cmp else None,
                                         confirmed_cmp.new_run if confirmed_cmp else None)
                moved = {v.id for v in perf if v.verdict == "regression"} | {
                    s["id"] for s in status if s["culprit_status"] in FAILING and s["parent_status"] == "pass"}
                evidence["unexplained"] = [t.id for t in self.targets if t.id not in moved]
                evidence["confirmation"] = {"perf": [v.to_json() for v in perf], "status": status}
            else:
                evidence["suspects"] = result.suspects
        doc["culprit"] = culprit
        doc["steps"] = [s.to_json() for s in steps]
        evidence["tested"] = sum(1 for s in steps if s.built)
        evidence["builds"] = lab.builds
        machine = _machine(final.new_run if final else None)
        evidence["machine"] = machine
        rec = recommend(culprit, result.suspects if result else [], perf, status, nothing)
        evidence["recommendation"] = rec.to_json(culprit)
        evidence["reason"] = (f"culprit {culprit[:12]}: {'revert: ' if rec.revert else ''}{rec.why}" if culprit else
                              (nothing or f"not isolated: the first bad commit is one of "
                               f"{', '.join(c[:12] for c in evidence.get('suspects', []))}"))
        if info:
            evidence["commit"] = info
        md = revert_markdown(doc, info, rec, perf, status, changes, machine)
        return Outcome(code, doc, md, final, _results_of(final) if final else None)


# ---------------------------------------------------------------------------------------------
# The command


def write_outputs(outcome: Outcome, out_dir: pathlib.Path, json_path: Optional[pathlib.Path]) -> None:
    """revert.md, bisect.json and the final comparison's reports into out_dir; --json F."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if outcome.final is not None:
        _compare.write_comparison(out_dir, outcome.final, outcome.final_results)
    (out_dir / "revert.md").write_text(outcome.revert_md)
    text = json.dumps(outcome.doc, indent=1) + "\n"
    (out_dir / "bisect.json").write_text(text)
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(text)


def _cmd_bisect(args: argparse.Namespace) -> int:
    from . import launch

    repo = pathlib.Path(args.repo).resolve() if args.repo else build.source_root()
    json_path = pathlib.Path(args.json).resolve() if args.json else None
    try:
        impl = impls.resolve(args.impl)
    except impls.ImplError as e:
        print(f"meshgate bisect: {e}", file=sys.stderr)
        return 2
    launcher = replicate.DriverLauncher(backend=args.backend, ranks=args.ranks, case_timeout=args.case_timeout,
                                        run_prefix="bisect", quiet=True, impl=impl)
    try:
        good = revisions.resolve_commit(repo, args.good)
        bad = revisions.resolve_commit(repo, args.bad)
        commits, first_parent = commit_range(repo, good, bad)
        preset = revisions.choose_preset(repo, args.preset)
        print(f"meshgate bisect: good {args.good} = {good[:12]}, bad {args.bad} = {bad[:12]}: {len(commits)} "
              f"commit(s){' on the first-parent chain (the range has merges)' if first_parent else ''}",
              file=sys.stderr)
        case_paths, patterns = _ab.case_arguments(args.cases, revisions.ensure_worktree(repo, bad))

        def build_side(commit: str, label: str) -> Side:
            return _ab.side_for(repo, label, commit, preset, case_paths, args.verbose)

        # Claimed once the input is known to be usable, so a refused command leaves no folder.
        out_dir = pathlib.Path(args.out).resolve() if args.out else _compare.default_report_dir("bisect")
        lab = Lab(build_side, launcher, out_dir, k=args.runs, seed=args.seed,
                  floors_for=_ab.noise_floors_for(args.machine_class), max_gate=args.max_gate,
                  max_runs=args.max_runs, revert_runs=args.revert_runs)
        try:
            bad_side = lab.side(bad, "bad")
        except revisions.RevisionBuildError as e:
            raise BisectError(f"the bad endpoint {bad[:12]} does not build ({e.reason}): choose a bad revision that builds") from None
        ids, perf_ids = _ab.experiment_cases(launcher, bad_side, patterns, args)
        if not ids:
            raise BisectError(f"no case of {bad[:12]}'s tree matches the selection")
        bisection = Bisection(lab, good, bad, commits, ids, perf_ids, first_parent,
                              info_for=lambda c: commit_info(repo, c))
        outcome = bisection.run()
    except (BisectError, revisions.RevisionError) as e:
        print(f"meshgate bisect: {e}", file=sys.stderr)
        return 2
    except (launch.LaunchError, launch.RunnerInputError) as e:
        print(f"meshgate bisect: the runner rejected the selection: {getattr(e, 'stderr', e)}", file=sys.stderr)
        return 2
    except _baseline.InputError as e:
        print(f"meshgate bisect: {e}", file=sys.stderr)
        return 2
    write_outputs(outcome, out_dir, json_path)
    ev = outcome.doc["evidence"]
    culprit = outcome.doc["culprit"]
    print(f"culprit: {culprit if culprit else 'none'}")
    print(ev["reason"])
    print(f"tested {ev['tested']} commit(s) of {ev['commits']} (bound {ev['bound']}), {ev['builds']} build(s)"
          + (f"; skipped {', '.join(c[:12] for c in outcome.doc['skipped'])}" if outcome.doc["skipped"] else ""))
    print(f"revert.md: {out_dir / 'revert.md'}")
    return outcome.code


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "bisect", help="find the commit that made the selected cases fail or slow down, and whether to revert it",
        description="Builds --good and --bad, finds the target cases (fail at bad and pass at good, or a "
                    "confirmed A/B regression), binary-searches good..bad with the same interleaved A/B "
                    "against good at every step (unbuildable commits skipped), confirms the culprit "
                    "against its parent and writes revert.md. Exit 0 culprit found, 1 none, 2 unusable input.")
    parser.add_argument("--good", required=True, metavar="REV", help="a revision without the problem")
    parser.add_argument("--bad", required=True, metavar="REV", help="a later revision with it")
    _ab.add_experiment_arguments(parser, "bisect")
    parser.add_argument("--revert-runs", type=_ab.runs_per_side, default=REVERT_RUNS, metavar="K",
                        help="runs per side of the culprit-vs-parent A/B (default %(default)s: revert grade)")
    from .selection import case_timeout_seconds

    parser.add_argument("--case-timeout", type=case_timeout_seconds, metavar="S",
                        help="seconds a case may run before it is an error, which counts as slow (runner default 300)")
    parser.add_argument("--json", metavar="F", help="also write the bisection's JSON document to F")
    parser.set_defaults(func=_cmd_bisect)
