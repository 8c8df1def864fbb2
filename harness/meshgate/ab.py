"""`meshgate ab --base REV --candidate REV [CASES]`: interleaved A/B of two builds.

Each revision is checked out in its own git worktree under build/ab/<commit> (reused when
present) and builds its own runner there with `cmake --preset`. The performance cases run k
times per side (default 9) in randomised ABBA order, each run a fresh runner process with
MESHGATE_COMMIT naming the revision. The comparison is `meshgate compare`'s; cases it flags as
regressions or improvements are re-run in a fresh interleaved batch, and only those flagged
the same way again keep their verdict (spec/gating.md, steps 5 and 6). Exit codes as
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
from . import impls, replicate, revisions, stats
from .replicate import LaunchFn, Side
# A revision's worktree and build live in revisions.py; AbError is its RevisionError.
from .revisions import RevisionError as AbError, ensure_worktree, resolve_commit, worktree_path  # noqa: F401

DEFAULT_RUNS = 9
# Verdicts that count only after a fresh batch repeats them (spec/gating.md items 5 and 6).
CONFIRMED_VERDICTS = ("regression", "improvement")


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
) -> tuple[_compare.Comparison, dict[str, Any]]:
    """The A/B experiment once both runners exist: interleaved batch, comparison, confirmation.

    `floors_for(candidate results)` returns the calibrated noise floors for the machine the
    runs landed on. Cases flagged as regressions or improvements are re-run in a fresh
    interleaved batch and keep their verdict only when that batch gives the same one; the
    others become inconclusive. Returns the final comparison (each confirmed or unconfirmed
    case carries the confirmation batch's ratio, CI and p beside the first batch's) and a
    record of what ran.
    """
    seed = random.SystemRandom().randrange(2**31) if seed is None else seed
    rng = random.Random(seed)
    base, cand = sides
    order = replicate.abba_order(k, rng)
    docs = replicate.collect_runs(sides, order, case_ids, launch, pathlib.Path(out_dir) / "batch-1")
    for side in sides:
        _results.write_results(pathlib.Path(out_dir) / "batch-1" / side.label / "results.json", docs[side.label])
    noise_floors = floors_for(docs[cand.label]) if floors_for else {}
    comparison = _compare.compare_results(
        docs[base.label], docs[cand.label], noise_floors, max_gate=max_gate,
        base_label=f"{base.rev} ({base.commit[:10]})", new_label=f"{cand.rev} ({cand.commit[:10]})",
    )
    record: dict[str, Any] = {
        "seed": seed,
        "k": k,
        "order": ["AB"[i] for i in order],
        "base": {"rev": base.rev, "commit": base.commit},
        "candidate": {"rev": cand.rev, "commit": cand.commit},
        "batches": [str(pathlib.Path(out_dir) / "batch-1")],
        "confirmation": {},
    }
    flagged = {v.id: v.verdict for v in comparison.cases if v.verdict in CONFIRMED_VERDICTS}
    if not flagged or not confirm:
        return comparison, record
    confirm_ids = {s.label: [i for i in case_ids[s.label] if i in flagged] for s in sides}
    confirm_order = replicate.abba_order(k, rng)
    confirm_dir = pathlib.Path(out_dir) / "batch-2"
    again_docs = replicate.collect_runs(sides, confirm_order, confirm_ids, launch, confirm_dir)
    for side in sides:
        _results.write_results(confirm_dir / side.label / "results.json", again_docs[side.label])
    again = _compare.compare_results(again_docs[base.label], again_docs[cand.label], noise_floors, max_gate=max_gate)
    again_by_id = {v.id: v for v in again.cases}
    record["batches"].append(str(confirm_dir))
    record["confirm_order"] = ["AB"[i] for i in confirm_order]
    for v in comparison.cases:
        if v.id not in flagged:
            continue
        second = again_by_id.get(v.id)
        confirmed = second is not None and second.verdict == flagged[v.id]
        v.confirmed = confirmed
        if second is not None:
            v.confirm_verdict, v.confirm_ratio, v.confirm_ci, v.confirm_p = second.verdict, second.ratio, second.ci, second.p
        evidence = (
            f"ratio {second.ratio:.3f}, 95 % CI [{second.ci[0]:.3f}, {second.ci[1]:.3f}], p = {second.p:.2g}"
            if second is not None and second.ratio is not None
            else (second.note if second is not None else "no result")
        )
        record["confirmation"][v.id] = {
            "confirmed": confirmed, "verdict": second.verdict if second else None,
            "ratio": second.ratio if second else None, "ci": list(second.ci) if second and second.ci else None,
            "p": second.p if second else None,
        }
        if second is not None and second.verdict == "correctness":
            v.verdict, v.note = "correctness", f"confirmation batch: {second.note}"
        elif confirmed:
            v.note += f"; confirmed by a fresh batch ({evidence})"
        else:
            v.verdict = "inconclusive"
            v.note += f"; not confirmed by a fresh batch ({second.verdict if second else 'missing'}: {evidence})"
    return comparison, record


def side_for(repo: pathlib.Path, label: str, rev: str, preset: Optional[str],
             case_paths: Optional[list[str]] = None) -> Side:
    """Revision `rev` of `repo` as a side of an experiment: resolved, its runner built (or
    reused) through revisions.py, running `case_paths` (default: that revision's own cases/).
    RevisionError when `rev` does not resolve; RevisionBuildError when it does not build."""
    commit = resolve_commit(repo, rev)
    built = revisions.build_commit(repo, commit, revisions.choose_preset(repo, preset))
    return Side(label=label, rev=rev, commit=commit, root=built.root, runner=built.runner,
                env=replicate.env_for_commit(commit),
                case_paths=list(case_paths) if case_paths else [str(built.root / "cases")])


def _prepare_side(repo: pathlib.Path, label: str, rev: str, preset: Optional[str], given_paths: list[str]) -> Side:
    commit = resolve_commit(repo, rev)
    print(f"meshgate ab: {label} {rev} = {commit[:12]} in {worktree_path(repo, commit)}", file=sys.stderr)
    try:
        return side_for(repo, label, rev, preset, [str(pathlib.Path(c).resolve()) for c in given_paths])
    except revisions.RevisionBuildError as e:
        raise AbError(f"{label} {rev}: {e}") from None


def selection_for(side: Side, patterns: list[str], args: argparse.Namespace) -> Any:
    """The runner's selection on `side`: its case paths, the case id patterns and --case,
    --suite and --tag filters of the command line."""
    from .launch import Selection

    return Selection(paths=side.case_paths, suites=list(args.suite), tags=list(args.tag),
                     cases=list(patterns) + list(args.case))


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
            _prepare_side(repo, "base", args.base or "HEAD", args.preset, given_paths),
            _prepare_side(repo, "candidate", args.candidate or "HEAD", args.preset, given_paths),
        ]
        sides[0].impl = impls.resolve(args.base_impl or args.impl)
        sides[1].impl = impls.resolve(args.candidate_impl or args.impl)
        launcher = replicate.DriverLauncher(backend=args.backend, ranks=args.ranks, run_prefix="ab")
        case_ids = {}
        for side in sides:
            listing = launcher.list_cases(side, selection_for(side, patterns, args))
            case_ids[side.label] = replicate.perf_case_ids(listing)
    except (AbError, impls.ImplError) as e:
        print(f"meshgate ab: {e}", file=sys.stderr)
        return 2
    except (launch.LaunchError, launch.RunnerInputError) as e:
        print(f"meshgate ab: the runner rejected the selection: {getattr(e, 'stderr', e)}", file=sys.stderr)
        return 2
    if not any(case_ids.values()):
        print("meshgate ab: no performance case (with a `perf:` block) is selected on either side", file=sys.stderr)
        return 2
    out_dir = pathlib.Path(args.out) if args.out else _compare.default_report_dir("ab")
    floors_for = noise_floors_for(args.machine_class)

    try:
        comparison, record = run_ab(sides, case_ids, launcher, out_dir, k=args.runs, seed=args.seed,
                                    confirm=not args.no_confirm, floors_for=floors_for, max_gate=args.max_gate)
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

    add_selection_arguments(parser)
    parser.add_argument("--runs", type=runs_per_side, default=DEFAULT_RUNS, metavar="K",
                        help="runs per side (default %(default)s; 15 for revert-grade evidence)")
    add_backend_arguments(parser)
    parser.add_argument("--preset", metavar="P", help="CMake preset of every build (default: ci/preset)")
    parser.add_argument("--seed", type=int, help="seed of the run order (default: random, recorded)")
    _compare.add_max_gate_argument(parser)
    parser.add_argument("--machine-class", help="use this machine class's calibration")
    parser.add_argument("--out", metavar="DIR", help=f"report folder (default: reports/{report_prefix}-<time>)")
    parser.add_argument("--repo", metavar="DIR", help="git repository of the revisions (default: this checkout)")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "ab", help="interleaved A/B of two revisions' builds (exit 1 on a confirmed regression)",
        description="Builds --base and --candidate in git worktrees under build/ab/, runs the "
                    "selected performance cases k times per side in randomised ABBA order, "
                    "compares, and re-runs flagged cases (regressions and improvements) in a fresh batch to confirm them.")
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
