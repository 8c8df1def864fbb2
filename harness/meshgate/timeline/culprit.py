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

With `--google-benchmark TARGET` (BisectRequest.benchmark) every commit builds its own CMake
TARGET, a Google Benchmark binary, instead of the runner; its benchmarks are the cases (all
timed, so every target is a perf target) and each launch is one run of the binary
(system/gbench.py). The search, the confirmation and revert.md are the same.

This module runs the experiment: builds and runner launches sit behind `Lab`'s two seams
(build, launch), git behind system/git.py. The search and the recommendation are bisection.py's
(pure), revert.md is render.py's. `run_request(BisectRequest)` is the whole bisection as the
command and `meshgate nightly` run it; it returns an Outcome that commands/bisect.py prints.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import random
import sys
from typing import Any, Callable, Optional, TextIO

from ..core import files
from ..core import results as _results
from ..core import tool_results
from ..core.results import FAILING, InputError, machine_class
from ..gate import ab as _ab
from ..gate import render as _render
from ..gate import stats, verdict
from ..gate.ab import CaseFilter
from ..gate.compare import Comparison, compare_results
from ..gate.verdict import CaseVerdict
from ..system import git, implementations, launch, progress, repeats, revisions
from ..system.repeats import LaunchFn, Side
from ..system.selection import case_arguments
from .bisection import (BAD, GOOD, LEFT_OUT, SKIP, Step, Target, case_entry, ci_text, combine, cost_bound,
                        short_line, judge_perf, nearer_endpoint, recommend, search, signal_changes,
                        status_entry)
from .render import revert_markdown

REVERT_RUNS = 15  # runs per side of culprit vs parent: revert-grade evidence (docs/gate.md)


class BisectError(Exception):
    """Unusable input: exit code 2."""


# ---------------------------------------------------------------------------------------------
# The experiment: builds and launches behind two seams


class Lab:
    """Builds commits (`build(commit, label) -> Side`, RevisionBuildError when it does not
    build) and runs cases on them through `launch` (repeats.LaunchFn): one launch for
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
    return compare_results(parent, culprit, base_label=labels[0], new_label=labels[1])


def _merge_comparisons(first: Optional[Comparison], second: Optional[Comparison]) -> Optional[Comparison]:
    """One comparison with the cases of both (the perf A/B and the status check)."""
    if first is None or second is None:
        return first or second
    merged = dataclasses.replace(first, cases=first.cases + [c for c in second.cases if c.id not in first.new_rows])
    merged.base_rows = {**second.base_rows, **first.base_rows}
    merged.new_rows = {**second.new_rows, **first.new_rows}
    return merged


def _results_of(comparison: Comparison) -> dict[str, Any]:
    return {"schema": _results.SCHEMA, "run": comparison.new_run, "cases": list(comparison.new_rows.values())}


def _machine(run: Optional[dict]) -> dict[str, Any]:
    run = run or {}
    machine = run.get("machine") if isinstance(run.get("machine"), dict) else {}
    if not machine:
        return {}
    cpu = machine.get("cpu")
    return {"host": machine.get("host", ""), "cpu": cpu.get("model", cpu) if isinstance(cpu, dict) else cpu,
            "gpus": machine.get("gpus") or [], "class": machine_class(machine),
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
        self.search_steps: Optional[progress.Steps] = None  # k of N of the search (after the endpoints)

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
                  "note": (f"confirmed regression, ratio {t.ratio:.3f} {ci_text(t.ci)}" if t.kind == "perf"
                           else f"{t.status} at bad, pass at good: {short_line(t.message)}")} for t in self.targets]
        bad_step = combine(self.bad, cases)
        bad_step.role = "bad endpoint"
        return good_step, bad_step

    def test(self, commit: str) -> Step:
        """The verdict of one commit between the endpoints."""
        lab = self.lab
        label = commit[:12]
        self.probes += 1
        folder = f"steps/{self.probes:02d}-{label}"
        if self.search_steps is not None:
            self.search_steps.step(f"testing {label}")
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
            # The endpoints are two of cost_bound's commits; the search tests at most the rest.
            self.search_steps = progress.Steps("meshgate bisect", "search", max(1, cost_bound(len(self.commits)) - 2),
                                               out=lab.log)
            try:
                result = search(self.commits, self.test)
            finally:
                self.search_steps.close()
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
# The outputs and the bisection as `meshgate bisect` and `meshgate nightly` ask for it


def write_outputs(outcome: Outcome, out_dir: pathlib.Path, json_path: Optional[pathlib.Path]) -> None:
    """revert.md, bisect.json and the final comparison's reports into out_dir; --json F."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if outcome.final is not None:
        outcome.final.command = "bisect"
        _render.write_comparison(out_dir, outcome.final, outcome.final_results)
    (out_dir / "revert.md").write_text(outcome.revert_md)
    text = json.dumps(outcome.doc, indent=1) + "\n"
    (out_dir / "bisect.json").write_text(text)
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(text)


@dataclasses.dataclass
class BisectRequest:
    """What `meshgate bisect` is asked: the endpoints, the cases, how to run and judge them."""

    good: str
    bad: str
    cases: CaseFilter = dataclasses.field(default_factory=CaseFilter)
    runs: int = _ab.DEFAULT_RUNS
    max_runs: int = verdict.DEFAULT_MAX_RUNS
    revert_runs: int = REVERT_RUNS
    backend: str = "threads"
    ranks: Optional[int] = None
    cpus: Optional[str] = None  # --cpus LIST: pin every runner to these CPUs; None: not pinned
    impl: Optional[str] = None
    preset: Optional[str] = None
    seed: Optional[int] = None
    max_gate: float = stats.MAX_GATE
    machine_class: Optional[str] = None
    case_timeout: Optional[float] = None
    out: Optional[pathlib.Path] = None
    repo: Optional[pathlib.Path] = None
    json: Optional[pathlib.Path] = None  # also write the bisection's JSON document here
    verbose: bool = False
    benchmark: Optional[_ab.BenchmarkOptions] = None  # --google-benchmark TARGET: time that binary


@dataclasses.dataclass
class Result:
    """A finished `meshgate bisect`: its exit code (0 culprit, 1 none, 2 unusable input, said in
    `error`), the bisection's outcome and its report folder."""

    code: int
    outcome: Optional[Outcome] = None
    out_dir: Optional[pathlib.Path] = None
    error: str = ""

    @property
    def doc(self) -> Optional[dict[str, Any]]:
        """The bisection's JSON document (bisect.json)."""
        return self.outcome.doc if self.outcome is not None else None

    def lines(self) -> list[str]:
        """What `meshgate bisect` prints at the end: the culprit, why, what was tested, revert.md."""
        if self.outcome is None:
            return []
        ev = self.outcome.doc["evidence"]
        culprit = self.outcome.doc["culprit"]
        skipped = self.outcome.doc["skipped"]
        return [f"culprit: {culprit if culprit else 'none'}", ev["reason"],
                f"tested {ev['tested']} commit(s) of {ev['commits']} (bound {ev['bound']}), {ev['builds']} build(s)"
                + (f"; skipped {', '.join(c[:12] for c in skipped)}" if skipped else ""),
                f"revert.md: {self.out_dir / 'revert.md'}"]


def run_request(request: BisectRequest, log: Optional[TextIO] = None) -> Result:
    """The bisection `request` asks for: the range resolved, the endpoints built and judged,
    the search, the culprit confirmed against its parent, and revert.md, bisect.json and the
    last comparison's reports written to the report folder (claimed only once the input is
    known to be usable). Progress goes to `log` (stderr)."""
    log = log or sys.stderr
    repo = pathlib.Path(request.repo).resolve() if request.repo else files.source_root()
    json_path = pathlib.Path(request.json).resolve() if request.json else None
    bench = request.benchmark
    conflict = _ab.benchmark_conflict(bench, (request.impl,), request.backend, request.ranks)
    if conflict:
        return Result(2, error=f"meshgate bisect: --google-benchmark: {conflict}")
    try:
        impl = implementations.resolve(request.impl)
    except implementations.ImplError as e:
        return Result(2, error=f"meshgate bisect: {e}")
    launcher: Any
    if bench:
        if request.case_timeout and not bench.timeout:
            bench = dataclasses.replace(bench, timeout=request.case_timeout)
        launcher = bench.launcher(request.cpus, "bisect")
    else:
        launcher = repeats.DriverLauncher(backend=request.backend, ranks=request.ranks,
                                          case_timeout=request.case_timeout, run_prefix="bisect", quiet=True,
                                          impl=impl, cpus=request.cpus)
    try:
        good = git.resolve_commit(repo, request.good)
        bad = git.resolve_commit(repo, request.bad)
        commits, first_parent = git.commit_range(repo, good, bad)
        preset = (request.preset or _ab.BENCHMARK_PRESET) if bench else revisions.choose_preset(repo, request.preset)
        print(f"meshgate bisect: good {request.good} = {good[:12]}, bad {request.bad} = {bad[:12]}: {len(commits)} "
              f"commit(s){' on the first-parent chain (the range has merges)' if first_parent else ''}",
              file=log)
        if bench:  # every CASES argument is a pattern of benchmark names
            case_paths, patterns = [], list(request.cases.cases)
        else:
            case_paths, patterns = case_arguments(request.cases.cases, revisions.revision_folder(repo, bad))

        def build_side(commit: str, label: str) -> Side:
            return _ab.side_for(repo, label, commit, preset, case_paths, request.verbose,
                                bench.target if bench else None)

        # Claimed once the input is known to be usable, so a refused command leaves no folder.
        out_dir = pathlib.Path(request.out).resolve() if request.out else files.default_report_dir("bisect")
        lab = Lab(build_side, launcher, out_dir, k=request.runs, seed=request.seed,
                  floors_for=_ab.noise_floors_for(request.machine_class), max_gate=request.max_gate,
                  max_runs=request.max_runs, revert_runs=request.revert_runs, log=log)
        try:
            bad_side = lab.side(bad, "bad")
        except revisions.RevisionBuildError as e:
            raise BisectError(f"the bad endpoint {bad[:12]} does not build ({e.reason}): choose a bad revision that builds") from None
        ids, perf_ids = _ab.experiment_cases(launcher, bad_side, patterns, request.cases)
        if not ids:
            raise BisectError(f"no case of {bad[:12]}'s tree matches the selection")
        bisection = Bisection(lab, good, bad, commits, ids, perf_ids, first_parent,
                              info_for=lambda c: git.commit_info(repo, c))
        outcome = bisection.run()
    except (BisectError, git.RevisionError) as e:
        return Result(2, error=f"meshgate bisect: {e}")
    except (launch.LaunchError, launch.RunnerInputError) as e:
        return Result(2, error=f"meshgate bisect: the runner rejected the selection: {getattr(e, 'stderr', e)}")
    except tool_results.ToolResultsError as e:
        return Result(2, error=f"meshgate bisect: the benchmark binary cannot list its benchmarks: {e}")
    except InputError as e:
        return Result(2, error=f"meshgate bisect: {e}")
    write_outputs(outcome, out_dir, json_path)
    print(f"meshgate bisect: {revisions.prune_after_command(repo)}", file=log)
    return Result(outcome.code, outcome, out_dir)
