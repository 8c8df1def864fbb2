"""The bisection's pure parts (docs/gate.md): the binary search over good..bad with `git bisect
skip`'s rule for commits that cannot be tested (search, next_probe, cost_bound), the verdict of
one commit from its targets' verdicts (judge_perf, status_entry, combine), the targets found at
the endpoints, the recommendation whether to revert the culprit (recommend) and the signals
that changed between its parent and it. No git, no builds, no launches: culprit.py runs the
experiment around these, render.py writes revert.md.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Callable, Optional

from ..core.markup import pct
from ..core.results import FAILING
from ..gate import signals, verdict
from ..gate.verdict import CaseVerdict

GOOD, BAD, SKIP = "good", "bad", "skip"
# Endpoint verdicts of timed cases that revert.md lists: not judged, or not measured on both sides.
LEFT_OUT = ("inconclusive", "skip", "missing", "new")


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


def short_line(text: str, limit: int = 200) -> str:
    line = next((l.strip() for l in str(text).splitlines() if l.strip()), "")
    return line if len(line) <= limit else line[:limit - 3] + "..."


def judge_perf(v: CaseVerdict) -> tuple[Optional[str], str]:
    """A perf target's verdict at a commit from its A/B against the good endpoint: bad, good,
    or None (not decided: inconclusive, skipped, untimed) with the reason."""
    if v.verdict == "correctness":
        return BAD, f"{v.new_status} here (a timeout or error counts as slow): {short_line(v.message)}"
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
        verdict, note = BAD, f"{status}: {short_line(row.get('message', ''))}"
    elif status == "pass":
        verdict, note = GOOD, "pass"
    else:
        verdict = SKIP
        note = f"skip: {short_line(row.get('message', ''))}" if row else "no result row"
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


def ci_text(ci: Optional[tuple]) -> str:
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
