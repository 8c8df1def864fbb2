"""`meshgate compat`: what changed between two implementations, typically two PyTorch versions
installed side by side (`--base torch@/venvs/torch-2.13 --candidate torch`). Both run the same
cases once with meshgate's runner as the checker; each case that behaves differently is
classified by how it affects users, worst first, as the mesh kind classifies the differences of
its two layout models:

  new_rejection          the base accepts the configuration, the candidate raises
  semantic_change        both accept it but user-visible results differ (status, plan issued,
                         result, shape), or both raise with different exception types
  representation_change  the same function written differently (a mesh's layout text), or the
                         same exception type with another message (an expect_error string breaks)
  relaxation             the base raises, the candidate accepts
  expressibility         one side cannot express the case (a skip on one side only)

The two sides may also be one implementation under two environments (`--base-env`,
`--candidate-env`), e.g. two builds of cuBLASLt picked by LD_LIBRARY_PATH: each side's label then
names the library versions its run recorded that differ from the other's, and the GEMM sweeps
get a differential of their failing shapes (found on one side only, or on both).

The command is commands/compat.py.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

from ..core import results
from ..core.markup import md_cell, md_code
from ..core.tables import md_row, md_table_head
from ..system import implementations, launch, repeats
from ..system.launch import RunnerSetup
from ..system.progress import Tally, make_view
from . import signals

CLASSES = ("new_rejection", "semantic_change", "representation_change", "relaxation",
           "expressibility")
DEFAULT_CASES = ("cases/mesh-compat", "cases/redistribute")
# Signals that only say how a result is written, not what it is.
REPRESENTATION_SIGNALS = ("layout",)


def _rejection(row: dict) -> str | None:
    """The exception a side raised for the case, 'Type: message', or None when it computed."""
    rejected = (row.get("metrics") or {}).get("rejected")
    return rejected if isinstance(rejected, str) else None


def _error_type(rejection: str) -> str:
    return rejection.split(":", 1)[0]


def classify(base: dict, candidate: dict) -> tuple[str, str, str, str] | None:
    """(class, observable, base shows, candidate shows) of one case, or None when it behaves
    the same on both sides."""
    if base.get("status") == "skip" or candidate.get("status") == "skip":
        if base.get("status") == candidate.get("status"):
            return None
        return ("expressibility", "status", _show(base), _show(candidate))
    base_rejected, candidate_rejected = _rejection(base), _rejection(candidate)
    if base_rejected is None and candidate_rejected is not None:
        return ("new_rejection", "configuration", "accepts", "rejects: " + candidate_rejected)
    if base_rejected is not None and candidate_rejected is None:
        return ("relaxation", "configuration", "rejects: " + base_rejected, "accepts")
    if base_rejected is not None and candidate_rejected is not None:
        if _error_type(base_rejected) != _error_type(candidate_rejected):
            return ("semantic_change", "error type", base_rejected, candidate_rejected)
        if base_rejected != candidate_rejected:
            return ("representation_change", "error message", base_rejected, candidate_rejected)
        return None
    old, new = signals.extract(base), signals.extract(candidate)
    changed, added, removed = signals.diff(old, new)
    differences = [(c.signal, c.old, c.new) for c in changed] + \
                  [(c.signal, c.old, c.new) for c in added] + \
                  [(name, old.get(name), None) for name in removed]
    if not differences:
        return None
    semantic = [d for d in differences if d[0].split(".")[0].split("[")[0] not in REPRESENTATION_SIGNALS]
    signal, was, now = (semantic or differences)[0]
    cls = "semantic_change" if semantic else "representation_change"
    return (cls, signal, json.dumps(was), json.dumps(now))


def _show(row: dict) -> str:
    message = (row.get("message") or "").splitlines()
    return row.get("status", "?") + (f": {message[0]}" if message else "")


def compare(base_rows: list[dict], candidate_rows: list[dict]) -> list[dict]:
    """One entry per case that behaves differently: {case, class, observable, base, candidate}."""
    candidates = {row["id"]: row for row in candidate_rows}
    out = []
    for row in base_rows:
        other = candidates.get(row["id"])
        if other is None:
            continue
        found = classify(row, other)
        if found:
            cls, observable, was, now = found
            out.append({"case": row["id"], "class": cls, "observable": observable,
                        "base": was, "candidate": now})
    out.sort(key=lambda e: CLASSES.index(e["class"]))
    return out


def sweep_differential(base_rows: list[dict], candidate_rows: list[dict]) -> list[dict]:
    """Per gemm_sweep case run on both sides: its failure counts on each side and its failing
    shapes (shape, dtype, configuration, class, implementation) found on one side only or on
    both. Empty when no sweep ran on both."""
    candidates = {row["id"]: row for row in candidate_rows}
    out = []
    for row in base_rows:
        other = candidates.get(row["id"])
        if row.get("kind") != "gemm_sweep" or other is None:
            continue
        metrics = [r.get("metrics") or {} for r in (row, other)]
        if any("failing_shapes" not in m for m in metrics):
            continue  # a side that skipped or stopped: its status difference is a change above
        failing = [set(m["failing_shapes"]) for m in metrics]
        out.append({"case": row["id"],
                    "shapes": [m.get("shapes") for m in metrics],
                    "failure_counts": [m.get("failure_counts") or {} for m in metrics],
                    "only_base": sorted(failing[0] - failing[1]),
                    "only_candidate": sorted(failing[1] - failing[0]),
                    "both": sorted(failing[0] & failing[1]),
                    "truncated": any(m.get("failing_shapes_truncated") for m in metrics)})
    return out


def _counts(counts: dict) -> str:
    found = [f"{name} {n}" for name, n in sorted(counts.items()) if n]
    return ", ".join(found) or "none"


SHAPES_SHOWN = 10


def _sweep_markdown(sweeps: list[dict]) -> list[str]:
    lines = ["## GEMM sweeps", ""]
    lines += md_table_head(["case", "shapes", "failures on base", "failures on candidate",
                            "failing on base only", "on candidate only", "on both"], "lrllrrr")
    for s in sweeps:
        shapes = " / ".join(str(n) for n in s["shapes"])
        lines.append(md_row([md_code(s["case"]), shapes, _counts(s["failure_counts"][0]),
                             _counts(s["failure_counts"][1]), f"{len(s['only_base'])}",
                             f"{len(s['only_candidate'])}", f"{len(s['both'])}"]))
    lines.append("")
    for s in sweeps:
        for side in ("only_base", "only_candidate"):
            if s[side]:
                where = "base" if side == "only_base" else "candidate"
                lines.append(f"Failing on the {where} only, {md_code(s['case'])}:")
                lines += [f"- {md_code(key)}" for key in s[side][:SHAPES_SHOWN]]
                if len(s[side]) > SHAPES_SHOWN:
                    lines.append(f"- and {len(s[side]) - SHAPES_SHOWN} more (compat.json)")
                lines.append("")
    if any(s["truncated"] for s in sweeps):
        lines += ["A side kept only its first failing shapes (failing_shapes_truncated): the "
                  "split above covers those.", ""]
    return lines


def markdown(changes: list[dict], base_label: str, candidate_label: str, compared: int,
             sweeps: list[dict] | None = None) -> str:
    lines = [f"# meshgate compat: {base_label} -> {candidate_label}", "",
             f"{len(changes)} of {compared} case(s) behave differently.", ""]
    if changes:
        counts = collections.Counter(c["class"] for c in changes)
        lines += md_table_head(["change", "cases"], "lr")
        lines += [md_row([cls, f"{counts[cls]}"]) for cls in CLASSES if counts[cls]]
        lines += [""] + md_table_head(["case", "change", "observable", "base", "candidate"])
        for c in changes:
            lines.append(md_row([md_code(c["case"]), f"{c['class']}", md_cell(c["observable"]),
                                 md_cell(c["base"]), md_cell(c["candidate"])]))
        lines.append("")
    if sweeps:
        lines += _sweep_markdown(sweeps)
    return "\n".join(lines)


def run_side(label: str, impl, runner: list[str], selection, out_dir: Path,
             env: dict | None = None) -> tuple[list[dict], dict]:
    """The cases of `selection` run once on `impl` (with the runner's environment `env`, ours
    when None) into out_dir/<label>: the rows and the run header. LaunchError when the runner
    ran no case."""
    folder = out_dir / label
    folder.mkdir(parents=True, exist_ok=True)
    view = make_view()
    view.heading(f"meshgate compat: {label} = {impl.name if impl else implementations.DEFAULT} "
                 f"({' '.join(impl.command) if impl else 'the runner'})")
    outcome = launch.run_with_recovery(RunnerSetup(runner=runner, impl=impl, env=env), selection,
                                       folder, f"compat-{label}", view, Tally())
    view.close()
    if not outcome.started:
        raise launch.LaunchError(f"{label}: the runner ran no case ({outcome.last.death()})")
    written = repeats.runner_results(folder / "results.json") or {}
    return results.read_rows(folder / "results.jsonl"), written.get("run", {})


# Versions whose library file is recorded beside them (versions.<name>_library).
_LIBRARY_OF = {"cublaslt": "cuBLASLt"}


def label(spec: str, run: dict, other: dict | None = None) -> str:
    """The side as its run describes it: the implementations' versions, then the library
    versions of the run header that differ from the other side's (two builds of one library)."""
    entries = run.get("impls") or {}
    shown = [f"{name} {entry.get('version')}" for name, entry in entries.items()
             if isinstance(entry, dict)]
    versions, theirs = run.get("versions") or {}, (other or {}).get("versions") or {}
    for name, value in versions.items():
        if name.endswith("_library") or value is None:
            continue
        library = versions.get(f"{name}_library")
        if other is not None and (value, library) == (theirs.get(name),
                                                     theirs.get(f"{name}_library")):
            continue
        shown.append(f"{_LIBRARY_OF.get(name, name)} {value}" + (f" ({library})" if library else ""))
    return ", ".join(shown) or spec


