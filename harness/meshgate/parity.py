"""`meshgate parity`: differential testing of another implementation (PyTorch by default)
against meshgate's cases. Every case under cases/ that the implementation can express runs on
it once; each disagreement with a case's expectation must be listed, with its class, in one
committed file (baselines/torch-parity.json):

  pytorch-bug   meshgate guards against a bug of the implementation: name the bug ("bug") and
                the case that shows the damage ("damage")
  by-design     the implementation behaves so on purpose and meshgate's model differs: say why

A meshgate bug is never listed: it is fixed. The command exits 1 on a disagreement that is not
listed, on a listed one that no longer happens (the list must say what is true today), and on
any error row (an adapter that breaks is a bug of ours); 2 on unusable input."""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

from . import build, impls, launch, results
from .launch import RunnerSetup
from .markup import visible
from .progress import Tally, make_view
from .selection import SelectionError, add_selection_arguments, build_selection

CLASSES = {"pytorch-bug": ("bug", "damage", "why"), "by-design": ("why",)}
DISAGREEING = ("fail",)


class ListError(Exception):
    """The committed list is not of the form the module docstring gives."""


def default_list(root: Path, impl: str) -> Path:
    return root / "baselines" / f"{impl}-parity.json"


def load_list(path: Path) -> dict:
    """The committed list: {"impl", "version", "disagreements": [{case, status, class, ...}]}."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"disagreements": []}
    except (OSError, json.JSONDecodeError) as e:
        raise ListError(f"{path}: {e}") from None
    entries = document.get("disagreements")
    if not isinstance(entries, list):
        raise ListError(f"{path}: 'disagreements' must be a list")
    seen = set()
    for i, entry in enumerate(entries):
        where = f"{path}: disagreements[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("case"), str):
            raise ListError(f"{where}: each entry needs a string 'case'")
        if entry["case"] in seen:
            raise ListError(f"{where}: {entry['case']} is listed twice")
        seen.add(entry["case"])
        cls = entry.get("class")
        if cls not in CLASSES:
            raise ListError(f"{where} ({entry['case']}): 'class' must be one of "
                            f"{', '.join(CLASSES)}; a meshgate bug is fixed, never listed")
        for key in CLASSES[cls]:
            if not isinstance(entry.get(key), str) or not entry[key].strip():
                raise ListError(f"{where} ({entry['case']}): a {cls} entry needs '{key}'")
        if entry.get("status", "fail") not in DISAGREEING:
            raise ListError(f"{where} ({entry['case']}): only 'fail' rows are disagreements")
    return document


def tally(rows: list[dict]) -> dict:
    """Per kind: how many ran, agreed, disagreed, errored, and the skip reasons counted."""
    kinds: dict[str, dict] = {}
    for row in rows:
        k = kinds.setdefault(row.get("kind") or "?", {"pass": 0, "fail": 0, "error": 0, "skip": 0,
                                                      "skip_reasons": collections.Counter()})
        status = row.get("status", "error")
        k[status if status in k else "error"] += 1
        if status == "skip":
            k["skip_reasons"][_reason(row.get("message", ""))] += 1
    return kinds


def _reason(message: str) -> str:
    """A skip message without the case's own values, so that reasons group."""
    first = message.splitlines()[0] if message else "no reason given"
    return first if len(first) <= 160 else first[:157] + "..."


def check(rows: list[dict], listed: dict) -> tuple[list[dict], list[dict], list[dict]]:
    """(unlisted disagreements, listed ones that no longer happen, error rows)."""
    by_case = {entry["case"]: entry for entry in listed.get("disagreements", [])}
    statuses = {row["id"]: row for row in rows}
    unlisted = [row for row in rows if row.get("status") in DISAGREEING and row["id"] not in by_case]
    stale = [entry for case, entry in by_case.items()
             if statuses.get(case, {}).get("status") not in DISAGREEING]
    errors = [row for row in rows if row.get("status") == "error"]
    return unlisted, stale, errors


def render(rows: list[dict], listed: dict, seconds: float, impl_name: str, version: str) -> str:
    lines = [f"meshgate parity: {len(rows)} case(s) on {impl_name} {version} in {seconds:.0f} s", ""]
    kinds = tally(rows)
    by_case = {entry["case"]: entry for entry in listed.get("disagreements", [])}
    lines.append("| kind | ran | agree | disagree (pytorch-bug / by-design / unlisted) | error | skip |")
    lines.append("|---|---|---|---|---|---|")
    for kind, k in sorted(kinds.items()):
        classes = collections.Counter(by_case[r["id"]]["class"] if r["id"] in by_case else "unlisted"
                                      for r in rows if r.get("kind") == kind and r.get("status") == "fail")
        lines.append(f"| {kind} | {k['pass'] + k['fail'] + k['error']} | {k['pass']} | {k['fail']} "
                     f"({classes['pytorch-bug']} / {classes['by-design']} / {classes['unlisted']}) "
                     f"| {k['error']} | {k['skip']} |")
    lines.append("")
    for kind, k in sorted(kinds.items()):
        for reason, count in k["skip_reasons"].most_common():
            lines.append(f"- skip {kind} x{count}: {visible(reason)}")
    return "\n".join(lines)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "parity", help="run the cases on another implementation (torch) and check every "
                       "disagreement against the committed list",
        description="Runs every case that --impl (default: torch) can express and checks each "
                    "disagreement with a case's expectation against the committed list "
                    "(default: baselines/<impl>-parity.json). Exit 0 when they match, 1 on an "
                    "unlisted disagreement, a listed one that no longer happens or an error "
                    "row, 2 on unusable input.")
    add_selection_arguments(parser)
    parser.add_argument("--impl", default="torch", metavar="NAME",
                        help="the implementation to compare (default: torch; see run --impl)")
    parser.add_argument("--list", metavar="FILE",
                        help="the committed disagreements (default: baselines/<impl>-parity.json)")
    parser.add_argument("--out", metavar="DIR", help="where the run lands (default: reports/parity-<time>)")
    parser.add_argument("--preset", metavar="P", help="CMake preset of the runner (default: ci/preset)")
    parser.add_argument("--json", metavar="F", help="also write the tally and the findings as JSON")
    parser.set_defaults(func=parity_command)


def parity_command(args: argparse.Namespace) -> int:
    started = time.monotonic()
    root = build.source_root()
    try:
        impl = impls.resolve(args.impl)
        if impl is None:
            raise impls.ImplError("--impl meshgate compares meshgate with itself: name another "
                                  "implementation")
        selection = build_selection(args, root, default_tags=[])
        runner = build.runner_command(root, args.preset)
        listed = load_list(Path(args.list) if args.list else default_list(root, impl.name))
    except (impls.ImplError, SelectionError, build.BuildError, ListError) as e:
        print(f"meshgate parity: {e}", file=sys.stderr)
        return 2
    if args.out:
        out_dir = Path(args.out).resolve()
        run_id = out_dir.name
    else:
        run_id, out_dir = results.claim_run_dir(root / "reports", f"parity-{impl.name}-"
                                                + time.strftime("%Y%m%d-%H%M%S", time.gmtime()))
    out_dir.mkdir(parents=True, exist_ok=True)
    setup = RunnerSetup(runner=runner, impl=impl)
    view = make_view()
    view.heading(f"meshgate parity: {impl.name} on {' '.join(selection.args())} -> {out_dir}")
    try:
        outcome = launch.run_with_recovery(setup, selection, out_dir, run_id, view, Tally())
    except launch.LaunchError as e:
        view.close()
        print(f"meshgate parity: {e}", file=sys.stderr)
        return 2
    view.close()
    if not outcome.started:
        print(f"meshgate parity: the runner ran no case ({outcome.last.death()})", file=sys.stderr)
        return 2
    rows = results.read_rows(out_dir / "results.jsonl")
    try:
        header = results.load_results(out_dir / "results.json")["run"]
        version = str(header.get("impls", {}).get(impl.name, {}).get("version"))
    except Exception:  # a killed runner leaves no header; the rows still say everything else
        version = "?"
    unlisted, stale, errors = check(rows, listed)
    seconds = time.monotonic() - started
    text = render(rows, listed, seconds, impl.name, version)
    problems = []
    recorded = listed.get("version")
    if recorded and recorded != version:
        problems.append(f"the list was recorded against {impl.name} {recorded}, this is {version}: "
                        f"install the pinned version (ci/bootstrap) or re-record the list")
    for row in unlisted:
        problems.append(f"unlisted disagreement {row['id']}: {visible(row.get('message', ''))}\n"
                        f"  classify it in the list, e.g. "
                        + json.dumps({"case": row["id"], "status": "fail", "class": "by-design",
                                      "why": "..."}))
    for entry in stale:
        problems.append(f"listed disagreement {entry['case']} no longer happens: remove it from "
                        f"the list")
    for row in errors:
        problems.append(f"error {row['id']}: {visible(row.get('message', ''))}")
    print(text)
    if problems:
        print("\n" + "\n".join(f"- {p}" for p in problems))
    if args.json:
        Path(args.json).write_text(json.dumps({
            "impl": impl.name, "version": version, "seconds": round(seconds, 1),
            "kinds": {k: {**{s: v[s] for s in ("pass", "fail", "error", "skip")},
                          "skip_reasons": dict(v["skip_reasons"])} for k, v in tally(rows).items()},
            "unlisted": [r["id"] for r in unlisted], "stale": [e["case"] for e in stale],
            "errors": [r["id"] for r in errors]}, indent=1) + "\n")
    print(f"\nmeshgate parity: {'FAIL' if problems else 'PASS'}: {len(unlisted)} unlisted, "
          f"{len(stale)} stale, {len(errors)} error(s); report: {out_dir}")
    return 1 if problems else 0
