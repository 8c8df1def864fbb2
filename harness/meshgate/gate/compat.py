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


def markdown(changes: list[dict], base_label: str, candidate_label: str, compared: int) -> str:
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
    return "\n".join(lines)


def run_side(label: str, impl, runner: list[str], selection, out_dir: Path) -> tuple[list[dict], dict]:
    """The cases of `selection` run once on `impl` into out_dir/<label>: the rows and the run
    header. LaunchError when the runner ran no case."""
    folder = out_dir / label
    folder.mkdir(parents=True, exist_ok=True)
    view = make_view()
    view.heading(f"meshgate compat: {label} = {impl.name if impl else implementations.DEFAULT} "
                 f"({' '.join(impl.command) if impl else 'the runner'})")
    outcome = launch.run_with_recovery(RunnerSetup(runner=runner, impl=impl), selection, folder,
                                       f"compat-{label}", view, Tally())
    view.close()
    if not outcome.started:
        raise launch.LaunchError(f"{label}: the runner ran no case ({outcome.last.death()})")
    written = repeats.runner_results(folder / "results.json") or {}
    return results.read_rows(folder / "results.jsonl"), written.get("run", {})


def label(spec: str, run: dict) -> str:
    entries = run.get("impls") or {}
    versions = [f"{name} {entry.get('version')}" for name, entry in entries.items()
                if isinstance(entry, dict)]
    return ", ".join(versions) or spec


