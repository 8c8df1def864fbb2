"""`meshgate releases`: the cases on several PyTorch releases, each in an environment meshgate
makes from the pins of ci/python/torch-releases.txt (system/torch_releases.py), and one table
of the statuses and of what changed from release to release (gate/releases.py)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ..core import files, results
from ..gate import parity
from ..gate.releases import ReleaseRun, markdown, matrix, summary_line
from ..system import build, implementations, launch, torch_releases, venvs
from ..system.launch import RunnerSetup
from ..system.progress import Tally, make_view
from ..system.selection import SelectionError
from .options import add_selection_arguments, case_timeout_seconds, selection_from_args

DEFAULT_CASES = ("cases/layout", "cases/mesh", "cases/mesh-compat", "cases/redistribute",
                 "cases/collectives")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "releases", help="run the cases on several PyTorch releases, each in an environment "
                         "made from its pins, and tabulate what changed between them",
        description="For each PyTorch release of ci/python/torch-releases.txt (or each "
                    "--release), makes or reuses the isolated environment "
                    "build/venv/torch-<release> from the release's pins, held to the lock "
                    "ci/python/constraints-torch-<release>.txt (written by the first "
                    "resolution), then runs the cases on it with --impl "
                    "torch@build/venv/torch-<release>. Writes releases.md and releases.json: "
                    "per case and release the status (pass, fail, error, skip with the "
                    "reason), per suite the counts, the wall time per release, and every "
                    "change between consecutive releases classified as `meshgate compat` "
                    "classifies (new_rejection, semantic_change, representation_change, "
                    "relaxation, expressibility; `error` when a side's row is an error). Exit 0 "
                    "when every release ran, whatever its statuses; 2 on unusable input or "
                    "when a release could not run (its environment could not be made, or its "
                    "runner ran no case).")
    add_selection_arguments(parser, default=" ".join(DEFAULT_CASES))
    parser.add_argument("--release", action="append", default=[], metavar="V",
                        help="a release of ci/python/torch-releases.txt, e.g. 2.10.0 "
                             "(repeatable; default: every release there)")
    parser.add_argument("--out", metavar="DIR",
                        help="report folder, one subfolder per release (default: "
                             "reports/releases-<time>)")
    parser.add_argument("--python", metavar="PYTHON",
                        help="the interpreter the environments are made from (default: "
                             "build/venv/main's, else the one running meshgate)")
    parser.add_argument("--envs-only", action="store_true",
                        help="make or check the environments (and write missing locks), run "
                             "no case")
    parser.add_argument("--case-timeout", type=case_timeout_seconds, metavar="S",
                        help="seconds one case may take before it is an error row (the "
                             "runner's default: 300; 0: no limit)")
    parser.add_argument("--preset", metavar="P", help="CMake preset of the runner (default: ci/preset)")
    parser.set_defaults(func=releases_command)


def _say(line: str) -> None:
    print(f"meshgate releases: {line}", flush=True)


def releases_command(args: argparse.Namespace) -> int:
    root = files.source_root()
    try:
        chosen = torch_releases.select(torch_releases.read_pins(root), args.release)
    except torch_releases.PinsError as e:
        print(f"meshgate releases: {e}", file=sys.stderr)
        return 2
    interpreter = args.python or torch_releases.default_interpreter(root)
    if args.envs_only:
        failed = False
        for release in chosen:
            started = time.monotonic()
            try:
                done = torch_releases.ensure(root, release, interpreter, _say)
            except venvs.EnvError as e:
                print(f"meshgate releases: torch {release.version}: {e}", file=sys.stderr)
                failed = True
                continue
            _say(f"torch {release.version}: {release.env(root)} {done} in "
                 f"{time.monotonic() - started:.0f} s")
        return 2 if failed else 0
    default_cases = not (args.cases or args.suite or args.tag or args.case)
    if default_cases:
        args.cases = [str(root / c) for c in DEFAULT_CASES if (root / c).is_dir()]
    try:
        selection = selection_from_args(args, root, default_tags=[])
        runner = build.runner_command(root, args.preset)
        listed = parity.load_list(parity.default_list(root, "torch"))
    except (SelectionError, build.BuildError, parity.ListError) as e:
        print(f"meshgate releases: {e}", file=sys.stderr)
        return 2
    out_dir = Path(args.out).resolve() if args.out else files.claim_run_dir(
        root / "reports", "releases-" + time.strftime("%Y%m%d-%H%M%S", time.gmtime()))[1]
    out_dir.mkdir(parents=True, exist_ok=True)
    pinned = implementations.pinned_torch().split("==", 1)[1]
    runs = []
    for release in chosen:
        run = ReleaseRun(release.version, pinned=release.version == pinned)
        runs.append(run)
        started = time.monotonic()
        try:
            run.env = torch_releases.ensure(root, release, interpreter, _say)
        except venvs.EnvError as e:
            run.not_run = f"environment: {e}"
        run.env_seconds = time.monotonic() - started
        if run.not_run is None:
            _run_release(run, release.env(root), runner, selection, out_dir, args.case_timeout)
        _say(summary_line(run))
    cases_text = "the default cases (" + " ".join(DEFAULT_CASES) + ")" if default_cases else \
        " ".join(selection.args())
    document = matrix(runs, listed)
    document["cases_selected"] = cases_text
    text = markdown(document, cases_text)
    files.write_text_atomic(out_dir / "releases.md", text)
    files.write_json_atomic(out_dir / "releases.json", document)
    print(text)
    for run in runs:
        _say(f"torch {run.version}: wall time {run.seconds:.0f} s for the cases, "
             f"{run.env_seconds:.0f} s for the environment")
    _say(f"total {document['seconds']:.0f} s; report: {out_dir / 'releases.md'}")
    return 2 if any(run.not_run for run in runs) else 0


def _run_release(run: ReleaseRun, env: Path, runner: list, selection, out_dir: Path,
                 case_timeout: float | None) -> None:
    """The cases on one release's environment into out_dir/<release>; fills `run`."""
    started = time.monotonic()
    folder = out_dir / run.version
    folder.mkdir(parents=True, exist_ok=True)
    try:
        impl = implementations.resolve(f"torch@{env}")
    except implementations.ImplError as e:
        run.not_run = str(e)
        return
    setup = RunnerSetup(runner=runner, impl=impl, case_timeout=case_timeout)
    view = make_view()
    view.heading(f"meshgate releases: torch {run.version} ({env}) -> {folder}")
    try:
        outcome = launch.run_with_recovery(setup, selection, folder, f"releases-{run.version}",
                                           view, Tally())
    except launch.LaunchError as e:
        run.not_run = str(e)
        return
    finally:
        view.close()
        run.seconds = time.monotonic() - started
    if not outcome.started:
        run.not_run = f"the runner ran no case ({outcome.last.death()})"
        return
    run.rows = results.read_rows(folder / "results.jsonl")
    try:
        header = json.loads((folder / "results.json").read_text(encoding="utf-8")).get("run", {})
        version = header.get("impls", {}).get("torch", {}).get("version")
        run.reported = str(version) if version else None
    except (OSError, ValueError, AttributeError):
        run.reported = None  # a killed runner leaves no header; the rows say the rest
