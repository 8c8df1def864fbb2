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
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import sys
from typing import Any, Callable, Optional

from . import baseline as _baseline
from . import build
from . import compare as _compare
from . import results as _results
from . import impls, perfruns, replicate, revisions, stats, verdict
from .replicate import LaunchFn, Side
from .verdict import CaseVerdict
# A revision's worktree and build live in revisions.py; AbError is its RevisionError.
from .revisions import RevisionError as AbError, ensure_worktree, resolve_commit, worktree_path  # noqa: F401

DEFAULT_RUNS = 9


def case_arguments(cases: list[str], root: Optional[pathlib.Path] = None) -> tuple[list[str], list[str]]:
    """CASES split into case files/folders and case id patterns. Paths come back absolute, so
    that every build runs the same files; a relative one is looked up in `root` (a revision's
    tree) before the working directory."""
    paths: list[str] = []
    patterns: list[str] = []
    for item in cases:
        places = [pathlib.Path(item)]
        if root is not None and not pathlib.Path(item).is_absolute():
            places.insert(0, pathlib.Path(root) / item)
        found = next((place for place in places if place.exists()), None)
        if found is not None:
            paths.append(str(found.resolve()))
        else:
            patterns.append(item)
    return paths, patterns


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
        for index in replicate.abba_order(n - have, self.rng):
            side = self.sides[index]
            asked = [i for i in self.case_ids[side.label] if i in set(ids)]
            number = len(self.launches[side.label]) + 1
            doc = self.launch(side, number, asked, self.folder / side.label / f"run-{number}")
            self.launches[side.label].append((asked, doc))
            self.order.append("AB"[index])

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
                cases.append(perfruns.merge_case(first, {i: row for i, (_, row) in enumerate(rows[1:], 2)}, k))
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
) -> tuple[_compare.Comparison, dict[str, Any]]:
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
        status_cmp = _compare.compare_results(status_docs[base.label], status_docs[cand.label])
        record["status"] = str(out_dir / "status")
    timed = {s.label: [i for i in case_ids.get(s.label, [])] for s in sides}
    if not any(timed.values()):
        if status_cmp is None:
            raise _baseline.InputError("nothing to run: no case is selected on either side")
        status_cmp.base_label = f"{base.rev} ({base.commit[:10]})"
        status_cmp.new_label = f"{cand.rev} ({cand.commit[:10]})"
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
            judged = _compare.compare_results(pick[base.label], pick[cand.label], floors, alpha=alpha, max_gate=max_gate)
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
    comparison = _compare.compare_results(docs[base.label], docs[cand.label], floors, max_gate=max_gate,
                                          base_label=f"{base.rev} ({base.commit[:10]})",
                                          new_label=f"{cand.rev} ({cand.commit[:10]})")
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
             case_paths: Optional[list[str]] = None, verbose: bool = False) -> Side:
    """Revision `rev` of `repo` as a side of an experiment: resolved, its runner built (or
    reused) through revisions.py, running `case_paths` (default: that revision's own cases/).
    RevisionError when `rev` does not resolve; RevisionBuildError when it does not build."""
    commit = resolve_commit(repo, rev)
    built = revisions.build_commit(repo, commit, revisions.choose_preset(repo, preset), verbose=verbose)
    return Side(label=label, rev=rev, commit=commit, root=built.root, runner=built.runner,
                env=replicate.env_for_commit(commit),
                case_paths=list(case_paths) if case_paths else [str(revisions.revision_cases(built.root))])


def _prepare_side(repo: pathlib.Path, label: str, rev: str, preset: Optional[str], given_paths: list[str],
                  verbose: bool = False) -> Side:
    commit = resolve_commit(repo, rev)
    print(f"meshgate ab: {label} {rev} = {commit[:12]} in {worktree_path(repo, commit)}", file=sys.stderr)
    try:
        return side_for(repo, label, rev, preset, [str(pathlib.Path(c).resolve()) for c in given_paths], verbose)
    except revisions.RevisionBuildError as e:
        raise AbError(f"{label} {rev}: {e}") from None


def selection_for(side: Side, patterns: list[str], args: argparse.Namespace) -> Any:
    """The runner's selection on `side`: its case paths, the case id patterns and --case,
    --suite and --tag filters of the command line."""
    from .launch import Selection

    return Selection(paths=side.case_paths, suites=list(args.suite), tags=list(args.tag),
                     cases=list(patterns) + list(args.case))


def experiment_cases(launcher: Any, side: Side, patterns: list[str], args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """What `ab` and `bisect` select on `side`: (every selected case id, the timed ones among
    them). With no case arguments and no filters: the cases `meshgate run` selects by default
    (tag smoke) plus every performance case (a `perf:` block) of the revision's cases/. Cases
    without timing run once per side for their correctness; the timed ones run k times."""
    from .run import DEFAULT_TAGS

    listing = launcher.list_cases(side, selection_for(side, patterns, args))
    perf_ids = replicate.perf_case_ids(listing)
    if not (args.cases or args.suite or args.tag or args.case):
        timed = set(perf_ids)
        listing = [e for e in listing if e["id"] in timed or set(DEFAULT_TAGS) & set(e.get("tags") or [])]
    return [e["id"] for e in listing], perf_ids


def noise_floors_for(machine_class: Optional[str]) -> Callable[[dict], dict]:
    """`floors_for` of run_ab: the calibrated noise floors of the machine the runs landed on
    (or of --machine-class)."""
    def floors_for(doc: dict) -> dict:
        return _compare.calibration_for(doc, machine_class=machine_class)

    return floors_for


def _cmd_ab(args: argparse.Namespace) -> int:
    from . import launch

    repo = pathlib.Path(args.repo).resolve() if args.repo else build.source_root()
    given_paths, patterns = case_arguments(args.cases)
    by_impl = args.base_impl is not None or args.candidate_impl is not None
    if not by_impl and (args.base is None or args.candidate is None):
        print("meshgate ab: give --base REV and --candidate REV (or --base-impl and "
              "--candidate-impl to compare two implementations on one build)", file=sys.stderr)
        return 2
    try:
        sides = [
            _prepare_side(repo, "base", args.base or "HEAD", args.preset, given_paths, args.verbose),
            _prepare_side(repo, "candidate", args.candidate or "HEAD", args.preset, given_paths, args.verbose),
        ]
        sides[0].impl = impls.resolve(args.base_impl or args.impl)
        sides[1].impl = impls.resolve(args.candidate_impl or args.impl)
        launcher = replicate.DriverLauncher(backend=args.backend, ranks=args.ranks, run_prefix="ab")
        case_ids, status_ids = {}, {}
        for side in sides:
            ids, perf_ids = experiment_cases(launcher, side, patterns, args)
            case_ids[side.label] = perf_ids
            status_ids[side.label] = [i for i in ids if i not in set(perf_ids)]
    except (AbError, impls.ImplError) as e:
        print(f"meshgate ab: {e}", file=sys.stderr)
        return 2
    except (launch.LaunchError, launch.RunnerInputError) as e:
        print(f"meshgate ab: the runner rejected the selection: {getattr(e, 'stderr', e)}", file=sys.stderr)
        return 2
    if not any(case_ids.values()) and not any(status_ids.values()):
        print("meshgate ab: no case is selected on either side", file=sys.stderr)
        return 2
    out_dir = pathlib.Path(args.out) if args.out else _compare.default_report_dir("ab")
    floors_for = noise_floors_for(args.machine_class)

    try:
        comparison, record = run_ab(sides, case_ids, launcher, out_dir, k=args.runs, seed=args.seed,
                                    confirm=not args.no_confirm, floors_for=floors_for, max_gate=args.max_gate,
                                    max_runs=args.max_runs, status_ids=status_ids)
    except _baseline.InputError as e:
        print(f"meshgate ab: {e}", file=sys.stderr)
        return 2
    candidate_results = {"schema": _baseline.RESULTS_SCHEMA, "run": comparison.new_run,
                         "cases": list(comparison.new_rows.values())}
    _compare.write_comparison(out_dir, comparison, candidate_results)
    (out_dir / "ab.json").write_text(json.dumps(record, indent=1) + "\n")
    print(_compare.format_table(comparison))
    print(f"report: {out_dir / 'report.md'}")
    return comparison.exit_code()


def runs_per_side(text: str) -> int:
    """--runs and the like: an integer no smaller than the fewest runs per side with which the
    decision rule can reach alpha (5 at alpha = 0.01); fewer could not judge any case."""
    try:
        k = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of runs") from None
    fewest = stats.smallest_k_reaching()
    if k < fewest:
        raise argparse.ArgumentTypeError(
            f"{k}: at least {fewest} runs per side, since fewer can never reach alpha = {stats.ALPHA}")
    return k


def add_experiment_arguments(parser: argparse.ArgumentParser, report_prefix: str) -> None:
    """The options `ab` shares with the commands built on it (bisect): the case selection,
    runs per side, backend, preset, seed, gate, calibration, report folder and repository."""
    from .selection import add_backend_arguments, add_selection_arguments

    add_selection_arguments(parser, default="the cases of the revision's cases/ tagged smoke, once per side "
                                             "for correctness, plus every performance case, timed")
    parser.add_argument("--runs", type=runs_per_side, default=DEFAULT_RUNS, metavar="K",
                        help="runs per side (default %(default)s; 15 for revert-grade evidence)")
    parser.add_argument("--max-runs", type=runs_per_side, default=verdict.DEFAULT_MAX_RUNS, metavar="N",
                        help="budget of runs per side for a case still inconclusive after --runs: it gets more "
                             "interleaved runs (doubling) while its estimated need is within N, judged at a "
                             "spent-down alpha so that false alarms stay within alpha (default %(default)s; "
                             "equal to --runs: no adaptive runs)")
    add_backend_arguments(parser)
    parser.add_argument("--preset", metavar="P", help="CMake preset of every build (default: ci/preset)")
    parser.add_argument("--seed", type=int, help="seed of the run order (default: random, recorded)")
    _compare.add_max_gate_argument(parser)
    parser.add_argument("--machine-class", help="use this machine class's calibration")
    parser.add_argument("--out", metavar="DIR", help=f"report folder (default: reports/{report_prefix}-<time>)")
    parser.add_argument("--repo", metavar="DIR", help="git repository of the revisions (default: this checkout)")
    revisions.add_verbose_argument(parser)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "ab", help="interleaved A/B of two revisions' builds (exit 1 on a confirmed regression)",
        description="Builds --base and --candidate in git worktrees under build/ab/. Selects CASES (files, "
                    "folders or id patterns) and the --suite/--tag/--case filters; with none of them, the "
                    "cases `meshgate run` selects by default (tag smoke) plus every performance case of "
                    "the revision's cases/. Cases without a perf: block run once per side (correctness); "
                    "performance cases run --runs times per side in randomised ABBA order, inconclusive "
                    "ones get more runs up to --max-runs, and flagged ones (regressions and improvements) "
                    "are re-run in a fresh batch to confirm them by the same rule.")
    parser.add_argument("--base", metavar="REV",
                        help="the revision to compare against (any git revision: branch, tag, "
                             "sha); HEAD when only the implementations differ")
    parser.add_argument("--candidate", metavar="REV",
                        help="the revision under test (a commit: uncommitted changes are not "
                             "part of it); HEAD when only the implementations differ")
    parser.add_argument("--base-impl", metavar="IMPL",
                        help="the implementation of the base side (default: --impl), e.g. "
                             "torch@/path/to/venv to compare two PyTorch environments")
    parser.add_argument("--candidate-impl", metavar="IMPL",
                        help="the implementation of the candidate side (default: --impl)")
    add_experiment_arguments(parser, "ab")
    parser.add_argument("--no-confirm", action="store_true",
                        help="skip the confirmation batch (flagged cases then stand unconfirmed)")
    parser.set_defaults(func=_cmd_ab)
