"""`meshgate ab --base REV --candidate REV [CASES]`: interleaved A/B of two builds.

Each revision is checked out in its own git worktree under build/ab/<commit> (reused when
present) and builds its own runner there with `cmake --preset`. Selection (experiment_cases):
with no case arguments, the cases `meshgate run` selects by default (tag smoke) plus every
performance case of the revision's cases/. Cases without a `perf:` block run once per side for
their correctness; the performance cases run k times per side (default 9) in randomised ABBA
order, each run a fresh runner process with MESHGATE_COMMIT naming the revision. Timed cases
are judged by the gate's rule (verdict.py): inconclusive ones get adaptive runs within
--max-runs, and flagged ones (regressions, improvements) are re-run in a fresh interleaved
batch and keep their verdict only when that batch repeats it by the same rule. Exit codes as
`meshgate compare`: 1 confirmed regression or correctness failure, 0 otherwise, 2 unusable
input or a build that fails.

With `--google-benchmark TARGET` (AbRequest.google_benchmark) each revision builds its own
CMake TARGET instead of the runner (preset `release` unless --preset says otherwise), the
cases are that binary's benchmarks and each launch is one run of the binary
(system/gbench.py); the batches, the rule and the confirmation are the same.

`run_request(AbRequest)` is the whole experiment as the command and `meshgate nightly` run it:
it builds both sides, runs them, writes the report folder and returns an AbOutcome; the
command (commands/ab.py) prints it.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import random
import sys
from typing import Any, Callable, Optional, Sequence, TextIO

from ..core import files
from ..core import results as _results
from ..core.merge import merge_case
from ..core.results import InputError
from ..core import tool_results
from ..system import build, gbench, implementations, launch, progress, project, repeats, revisions
from ..system.git import RevisionError as AbError  # a revision that does not resolve, or does not build
from ..system.git import resolve_commit
from ..system.launch import Selection
from ..system.repeats import LaunchFn, Side
from ..system.revisions import worktree_path
from ..system.selection import DEFAULT_TAGS, case_arguments
from . import render, stats, store, verdict
from .compare import Comparison, compare_results
from .verdict import CaseVerdict

DEFAULT_RUNS = 9
BENCHMARK_PRESET = "release"  # the preset of --google-benchmark builds unless --preset names another


class Batch:
    """One interleaved batch of runs of both sides, grown look by look: `run_to(ids, n)` brings
    `ids` to n runs per side in a fresh randomised ABBA order, launch n of a side landing in
    <folder>/<label>/run-<n>; `docs()` merges each side's launches into one results document
    whose rows hold one sample list per run of that case."""

    def __init__(self, sides: list[Side], case_ids: dict[str, list[str]], launch: LaunchFn,
                 folder: pathlib.Path, rng: random.Random):
        self.sides, self.case_ids, self.launch, self.folder, self.rng = sides, case_ids, launch, folder, rng
        self.launches: dict[str, list[tuple[list[str], dict]]] = {s.label: [] for s in sides}
        self.order: list[str] = []
        self.judged = False  # whether its first look has been judged

    def runs_of(self, label: str, case_id: str) -> int:
        return sum(1 for ids, _ in self.launches[label] if case_id in ids)

    def run_to(self, ids: list[str], n: int) -> None:
        have = min((self.runs_of(s.label, i) for s in self.sides for i in ids), default=n)
        order = repeats.abba_order(n - have, self.rng)
        steps = progress.Steps("meshgate", f"{self.folder.name}, runs {have + 1} to {n} a side", len(order))
        try:
            for index in order:
                side = self.sides[index]
                asked = [i for i in self.case_ids[side.label] if i in set(ids)]
                number = len(self.launches[side.label]) + 1
                steps.step(f"{side.label} run {number}, {len(asked)} case(s)")
                doc = self.launch(side, number, asked, self.folder / side.label / f"run-{number}")
                self.launches[side.label].append((asked, doc))
                self.order.append("AB"[index])
        finally:
            steps.close()

    def docs(self) -> dict[str, dict]:
        out = {}
        for side in self.sides:
            launches = self.launches[side.label]
            cases = []
            for case_id in self.case_ids[side.label]:
                rows = [(number, {r.get("id"): r for r in doc.get("cases", [])}.get(case_id))
                        for number, (ids, doc) in enumerate(launches, 1) if case_id in ids]
                if not rows:
                    continue
                k = len(rows)
                first = rows[0][1] or _results.error_row(case_id, f"run {rows[0][0]}: the runner produced no result")
                cases.append(merge_case(first, {i: row for i, (_, row) in enumerate(rows[1:], 2)}, k))
            run = dict(launches[0][1].get("run") or {}) if launches else {}
            if side.commit:
                run["commit"] = side.commit
            run["runs"] = max((self.runs_of(side.label, i) for i in self.case_ids[side.label]), default=0)
            out[side.label] = {"schema": _results.SCHEMA, "run": _results.complete_run(run), "cases": cases}
        return out

    def write(self) -> None:
        for label, doc in self.docs().items():
            _results.write_results(self.folder / label / "results.json", doc)


def run_ab(
    sides: list[Side],
    case_ids: dict[str, list[str]],
    launch: LaunchFn,
    out_dir: pathlib.Path,
    k: int = DEFAULT_RUNS,
    seed: Optional[int] = None,
    confirm: bool = True,
    floors_for: Optional[Callable[[dict], dict]] = None,
    max_gate: float = stats.MAX_GATE,
    max_runs: Optional[int] = None,
    status_ids: Optional[dict[str, list[str]]] = None,
) -> tuple[Comparison, dict[str, Any]]:
    """The A/B experiment once both runners exist: correctness run, interleaved batch with
    adaptive looks, comparison, confirmation (the rule and its looks: verdict.py).

    `status_ids` (per side) are cases without timing: they run once per side, first, and count
    for their correctness alone. The timed `case_ids` run k times per side in randomised ABBA
    order; cases still inconclusive with an estimated need within `max_runs` (default
    verdict.DEFAULT_MAX_RUNS; k turns adaptation off) get more runs, look by look, at the
    spent-down alpha. Flagged cases (regressions and improvements) are re-run in a fresh batch
    with as many runs as flagged them and keep their verdict only when that batch, judged by
    the same rule, repeats it. `floors_for(candidate results)` gives the calibrated noise
    floors of the machine the runs landed on. Returns the final comparison and a record of
    what ran.
    """
    seed = random.SystemRandom().randrange(2**31) if seed is None else seed
    rng = random.Random(seed)
    max_runs = max(k, verdict.DEFAULT_MAX_RUNS if max_runs is None else max_runs)
    base, cand = sides
    out_dir = pathlib.Path(out_dir)
    record: dict[str, Any] = {
        "seed": seed, "k": k, "max_runs": max_runs,
        "base": {"rev": base.rev, "commit": base.commit, "impl": base.impl.name if base.impl else None},
        "candidate": {"rev": cand.rev, "commit": cand.commit, "impl": cand.impl.name if cand.impl else None},
        "batches": [], "looks": [], "confirm_looks": [], "confirmation": {},
    }
    status_cmp = None
    if status_ids and any(status_ids.values()):
        status_docs = {s.label: launch(s, 1, list(status_ids[s.label]), out_dir / "status" / s.label / "run-1")
                       for s in sides}
        status_cmp = compare_results(status_docs[base.label], status_docs[cand.label])
        record["status"] = str(out_dir / "status")
    timed = {s.label: [i for i in case_ids.get(s.label, [])] for s in sides}
    if not any(timed.values()):
        if status_cmp is None:
            raise InputError("nothing to run: no case is selected on either side")
        status_cmp.base_label = base.describe()
        status_cmp.new_label = cand.describe()
        return status_cmp, record
    floors: dict = {}

    def judge_batch(batch: Batch, ids: list[str], runs: int, looks: list) -> dict[str, CaseVerdict]:
        """The verdicts of `ids` in `batch` after its adaptive looks, from `runs` per side."""
        def measure_at(asked: list[str], n: int, alpha: float) -> dict[str, CaseVerdict]:
            nonlocal floors
            batch.run_to(asked, n)
            docs = batch.docs()
            if not batch.judged:
                floors = floors or (floors_for(docs[cand.label]) if floors_for else {})
            wanted = set(asked)
            pick = {label: {**doc, "cases": [r for r in doc["cases"] if r.get("id") in wanted]}
                    for label, doc in docs.items()}
            judged = compare_results(pick[base.label], pick[cand.label], floors, alpha=alpha, max_gate=max_gate)
            if batch.judged:
                looks.append({"batch": batch.folder.name, "runs": n, "alpha": alpha, "cases": list(asked)})
            batch.judged = True
            return {v.id: v for v in judged.cases}

        final = verdict.judge_adaptively(measure_at, ids, runs, max_runs)
        batch.write()
        record["batches"].append(str(batch.folder))
        return final

    batch = Batch(sides, timed, launch, out_dir / "batch-1", rng)
    ids = [i for i in timed[cand.label]] + [i for i in timed[base.label] if i not in set(timed[cand.label])]
    final = judge_batch(batch, ids, k, record["looks"])
    record["order"] = list(batch.order)
    docs = batch.docs()
    comparison = compare_results(docs[base.label], docs[cand.label], floors, max_gate=max_gate,
                                          base_label=base.describe(), new_label=cand.describe())
    comparison.cases = [final.get(v.id, v) for v in comparison.cases]
    flagged = [v for v in comparison.cases if v.verdict in verdict.CONFIRMED_VERDICTS]
    if flagged and confirm:
        # The confirmation starts with as many runs as the flag took, and may grow like the first batch.
        again_runs = max(min(v.runs_base, v.runs_new) for v in flagged)
        flagged_ids = [v.id for v in flagged]
        again_batch = Batch(sides, {s.label: [i for i in timed[s.label] if i in set(flagged_ids)] for s in sides},
                            launch, out_dir / "batch-2", rng)
        again = judge_batch(again_batch, flagged_ids, again_runs, record["confirm_looks"])
        record["confirm_order"] = list(again_batch.order)
        for v in flagged:
            second = again.get(v.id)
            verdict.confirm(v, second)
            record["confirmation"][v.id] = {
                "confirmed": v.confirmed, "verdict": second.verdict if second else None,
                "ratio": second.ratio if second else None, "ci": list(second.ci) if second and second.ci else None,
                "p": second.p if second else None,
                "runs": min(second.runs_base, second.runs_new) if second else 0,
            }
    if status_cmp is not None:
        comparison.cases += [c for c in status_cmp.cases if c.id not in comparison.new_rows]
        comparison.base_rows = {**status_cmp.base_rows, **comparison.base_rows}
        comparison.new_rows = {**status_cmp.new_rows, **comparison.new_rows}
    return comparison, record


def side_for(repo: pathlib.Path, label: str, rev: str, preset: Optional[str],
             case_paths: Optional[list[str]] = None, verbose: bool = False,
             benchmark: Optional[str] = None, commit: Optional[str] = None) -> Side:
    """Revision `rev` of `repo` as a side of an experiment: resolved, its runner built (or
    reused) through revisions.py, running `case_paths` (default: that revision's own cases/);
    with `benchmark`, that CMake target (a Google Benchmark binary) built instead, with
    `preset` or BENCHMARK_PRESET, and no case paths. RevisionError when `rev` does not
    resolve; RevisionBuildError when it does not build. `commit`: what `rev` was resolved to
    already (the side is then that commit, wherever `rev` points now)."""
    commit = commit or resolve_commit(repo, rev)
    if benchmark:
        built = revisions.build_commit(repo, commit, preset or BENCHMARK_PRESET, verbose=verbose, target=benchmark)
        return Side(label=label, rev=rev, commit=commit, root=built.root, runner=built.runner,
                    env=repeats.env_for_commit(commit))
    built = revisions.build_commit(repo, commit, revisions.choose_preset(repo, preset), verbose=verbose)
    return Side(label=label, rev=rev, commit=commit, root=built.root, runner=built.runner,
                env=repeats.env_for_commit(commit),
                case_paths=list(case_paths) if case_paths else [str(revisions.revision_cases(built.root))])


def _prepare_side(repo: pathlib.Path, label: str, rev: str, commit: str, preset: Optional[str],
                  given_paths: list[str], verbose: bool = False, log: Optional[TextIO] = None,
                  benchmark: Optional[str] = None) -> Side:
    print(f"meshgate ab: {label} {rev} = {commit[:12]} in {worktree_path(repo, commit)}", file=log or sys.stderr)
    try:
        return side_for(repo, label, rev, preset, [str(pathlib.Path(c).resolve()) for c in given_paths], verbose,
                        benchmark, commit)
    except revisions.RevisionBuildError as e:
        raise AbError(f"{label} {rev}: {e}") from None


def _prebuilt_side(label: str, runner: str, given_paths: list[str], log: Optional[TextIO] = None) -> Side:
    """A side that runs a prebuilt runner as it is: its cases are CASES' paths, else the cases
    `meshgate run` defaults to in the working directory (a project's own, or cases/)."""
    try:
        command = project.given_runner(runner)
    except build.BuildError as e:
        raise AbError(f"{label}: {e}") from None
    paths = [str(pathlib.Path(c).resolve()) for c in given_paths] or [str(build.default_cases(files.source_root()))]
    print(f"meshgate ab: {label} runs {command[0]} (prebuilt: nothing is built)", file=log or sys.stderr)
    return Side(label, rev=f"runner {command[0]}", runner=command, case_paths=paths)


def prebuilt_conflict(request: "AbRequest") -> str:
    """Why --base-runner/--candidate-runner cannot run as asked ('' when they can)."""
    if request.base_runner is None or request.candidate_runner is None:
        return "give both --base-runner PATH and --candidate-runner PATH (two prebuilt runners)"
    if request.base is not None or request.candidate is not None or request.benchmark is not None:
        return ("--base-runner and --candidate-runner run prebuilt runners: they replace --base, --candidate "
                "and --google-benchmark, which build revisions")
    return ""


@dataclasses.dataclass
class CaseFilter:
    """The case id patterns of CASES and the --suite, --tag and --case filters of a command;
    `cases` are its CASES arguments as given (paths and patterns)."""

    cases: Sequence[str] = ()
    suites: Sequence[str] = ()
    tags: Sequence[str] = ()
    case_patterns: Sequence[str] = ()

    def asks(self) -> bool:
        """Whether any case argument or filter was given."""
        return bool(self.cases or self.suites or self.tags or self.case_patterns)


def selection_for(side: Side, patterns: list[str], wanted: CaseFilter) -> Selection:
    """The runner's selection on `side`: its case paths, the case id patterns and the
    --case, --suite and --tag filters."""
    return Selection(paths=side.case_paths, suites=list(wanted.suites), tags=list(wanted.tags),
                     cases=list(patterns) + list(wanted.case_patterns))


def experiment_cases(launcher: Any, side: Side, patterns: list[str], wanted: CaseFilter) -> tuple[list[str], list[str]]:
    """What `ab` and `bisect` select on `side`: (every selected case id, the timed ones among
    them). With no case arguments and no filters: the cases `meshgate run` selects by default
    (tag smoke) plus every performance case (a `perf:` block) of the revision's cases/. Cases
    without timing run once per side for their correctness; the timed ones run k times."""
    listing = launcher.list_cases(side, selection_for(side, patterns, wanted))
    perf_ids = repeats.perf_case_ids(listing)
    if not wanted.asks():
        timed = set(perf_ids)
        listing = [e for e in listing if e["id"] in timed or set(DEFAULT_TAGS) & set(e.get("tags") or [])]
    return [e["id"] for e in listing], perf_ids


def noise_floors_for(machine_class: Optional[str]) -> Callable[[dict], dict]:
    """`floors_for` of run_ab: the calibrated noise floors of the machine the runs landed on
    (or of --machine-class)."""
    def floors_for(doc: dict) -> dict:
        return store.calibration_for(doc, machine_class=machine_class)

    return floors_for


# ---------------------------------------------------------------------------------------------
# The experiment as `meshgate ab` and `meshgate nightly` ask for it


@dataclasses.dataclass
class AbRequest:
    """What `meshgate ab` is asked: the revisions (or implementations) of the two sides, the
    cases, and how to run and judge them (the command's options)."""

    base: Optional[str] = None
    candidate: Optional[str] = None
    cases: CaseFilter = dataclasses.field(default_factory=CaseFilter)
    base_impl: Optional[str] = None
    candidate_impl: Optional[str] = None
    impl: Optional[str] = None
    runs: int = DEFAULT_RUNS
    max_runs: int = verdict.DEFAULT_MAX_RUNS
    backend: str = "threads"
    ranks: Optional[int] = None
    cpus: Optional[str] = None  # --cpus LIST: pin every runner to these CPUs; None: not pinned
    preset: Optional[str] = None
    seed: Optional[int] = None
    max_gate: float = stats.MAX_GATE
    machine_class: Optional[str] = None
    out: Optional[pathlib.Path] = None
    repo: Optional[pathlib.Path] = None
    verbose: bool = False
    confirm: bool = True
    benchmark: Optional[BenchmarkOptions] = None  # --google-benchmark TARGET: time that binary
    # --base-runner/--candidate-runner: two prebuilt runners (a user's own, built elsewhere);
    # nothing is built and the cases come from CASES or the working directory's cases.
    base_runner: Optional[str] = None
    candidate_runner: Optional[str] = None


@dataclasses.dataclass
class BenchmarkOptions:
    """`--google-benchmark TARGET` and how its launches run (system/gbench.py): the samples'
    clock (real or cpu time), repetitions per launch, --benchmark_min_time (None: the binary's
    own) and a time limit per launch."""

    target: str
    clock: str = "real"
    repetitions: int = gbench.DEFAULT_REPETITIONS
    min_time: Optional[float] = None
    timeout: Optional[float] = None

    def launcher(self, cpus: Optional[str], run_prefix: str) -> gbench.BenchmarkLauncher:
        return gbench.BenchmarkLauncher(self.target, clock=self.clock, repetitions=self.repetitions,
                                        min_time=self.min_time, cpus=cpus, timeout=self.timeout,
                                        run_prefix=f"{run_prefix}-{repeats.timestamp()}")


def benchmark_conflict(options: Optional[BenchmarkOptions], impls: Sequence[Optional[str]], backend: str,
                       ranks: Optional[int]) -> str:
    """Why options that only the runner knows cannot go with --google-benchmark ('' when none)."""
    if options is None:
        return ""
    if any(impls):
        return "--impl, --base-impl and --candidate-impl name implementations of meshgate's cases, not of a benchmark binary"
    if backend != "threads" or ranks is not None:
        return "--backend and --ranks are the runner's: a Google Benchmark binary runs as it is built"
    return ""


@dataclasses.dataclass
class AbOutcome:
    """What an A/B came to: the exit code of `meshgate compare` (1 confirmed regression or
    correctness failure, 0 otherwise, 2 unusable input, said in `error`), the comparison and
    the record of what ran (ab.json), and the report folder."""

    code: int
    comparison: Optional[Comparison] = None
    record: Optional[dict[str, Any]] = None
    out_dir: Optional[pathlib.Path] = None
    error: str = ""

    def lines(self) -> list[str]:
        """What `meshgate ab` prints when the experiment ran: the verdict table and the report."""
        if self.comparison is None:
            return []
        return [render.format_table(self.comparison), f"report: {self.out_dir / 'report.md'}"]

    def counts(self) -> str:
        """'2 pass, 1 regression': the verdicts of the comparison (comparison.json's counts)."""
        counts = self.comparison.to_json()["counts"] if self.comparison is not None else {}
        return ", ".join(f"{n} {v}" for v, n in counts.items() if n)


def run_request(request: AbRequest, log: Optional[TextIO] = None) -> AbOutcome:
    """The interleaved A/B `request` asks for: both sides built (their progress on `log`,
    stderr by default), the cases selected, run and judged (run_ab), the comparison's reports,
    results.json and ab.json written to the report folder."""
    repo = pathlib.Path(request.repo).resolve() if request.repo else files.source_root()
    bench = request.benchmark
    conflict = benchmark_conflict(bench, (request.impl, request.base_impl, request.candidate_impl),
                                  request.backend, request.ranks)
    if conflict:
        return AbOutcome(2, error=f"meshgate ab: --google-benchmark: {conflict}")
    # With a benchmark binary every CASES argument is a pattern of benchmark names.
    given_paths, patterns = ([], list(request.cases.cases)) if bench else case_arguments(request.cases.cases)
    by_impl = request.base_impl is not None or request.candidate_impl is not None
    prebuilt = request.base_runner is not None or request.candidate_runner is not None
    if prebuilt:
        problem = prebuilt_conflict(request)
        if problem:
            return AbOutcome(2, error=f"meshgate ab: {problem}")
    elif not by_impl and (request.base is None or request.candidate is None):
        return AbOutcome(2, error="meshgate ab: give --base REV and --candidate REV (or --base-impl and "
                                  "--candidate-impl to compare two implementations on one build)")
    try:
        target = bench.target if bench else None
        if prebuilt:
            sides = [_prebuilt_side("base", request.base_runner, given_paths, log),
                     _prebuilt_side("candidate", request.candidate_runner, given_paths, log)]
        else:
            # Both revisions are resolved before either side builds: a commit landing in the
            # checkout meanwhile (HEAD moving on) changes neither side.
            revs = (("base", request.base or "HEAD"), ("candidate", request.candidate or "HEAD"))
            pinned = [(label, rev, resolve_commit(repo, rev)) for label, rev in revs]
            sides = [_prepare_side(repo, label, rev, commit, request.preset, given_paths, request.verbose,
                                   log, target) for label, rev, commit in pinned]
        sides[0].impl = implementations.resolve(request.base_impl or request.impl)
        sides[1].impl = implementations.resolve(request.candidate_impl or request.impl)
        launcher: Any = (bench.launcher(request.cpus, "ab") if bench else
                         repeats.DriverLauncher(backend=request.backend, ranks=request.ranks, run_prefix="ab",
                                                cpus=request.cpus))
        case_ids, status_ids = {}, {}
        for side in sides:
            ids, perf_ids = experiment_cases(launcher, side, patterns, request.cases)
            case_ids[side.label] = perf_ids
            status_ids[side.label] = [i for i in ids if i not in set(perf_ids)]
    except (AbError, implementations.ImplError) as e:
        return AbOutcome(2, error=f"meshgate ab: {e}")
    except (launch.LaunchError, launch.RunnerInputError) as e:
        return AbOutcome(2, error=f"meshgate ab: the runner rejected the selection: {getattr(e, 'stderr', e)}")
    except tool_results.ToolResultsError as e:
        return AbOutcome(2, error=f"meshgate ab: the benchmark binary cannot list its benchmarks: {e}")
    if not any(case_ids.values()) and not any(status_ids.values()):
        return AbOutcome(2, error="meshgate ab: no case is selected on either side")
    out_dir = pathlib.Path(request.out) if request.out else files.default_report_dir("ab")
    try:
        comparison, record = run_ab(sides, case_ids, launcher, out_dir, k=request.runs, seed=request.seed,
                                    confirm=request.confirm, floors_for=noise_floors_for(request.machine_class),
                                    max_gate=request.max_gate, max_runs=request.max_runs, status_ids=status_ids)
    except InputError as e:
        return AbOutcome(2, error=f"meshgate ab: {e}", out_dir=out_dir)
    candidate_results = {"schema": _results.SCHEMA, "run": comparison.new_run,
                         "cases": list(comparison.new_rows.values())}
    comparison.command = "ab"
    render.write_comparison(out_dir, comparison, candidate_results)
    (out_dir / "ab.json").write_text(json.dumps(record, indent=1) + "\n")
    if not prebuilt:
        print(f"meshgate ab: {revisions.prune_after_command(repo)}", file=log or sys.stderr)
    return AbOutcome(comparison.exit_code(), comparison, record, out_dir)
