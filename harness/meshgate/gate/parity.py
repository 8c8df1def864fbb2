"""`meshgate parity`: differential testing of another implementation (PyTorch by default)
against meshgate's cases. Every case under cases/ that the implementation can express runs on
it once; each disagreement with a case's expectation must be listed, with its class, in one
committed file (baselines/torch-parity.json):

  pytorch-bug   meshgate guards against a bug of the implementation: name the bug ("bug") and
                the case that shows the damage ("damage")
  by-design     the implementation behaves so on purpose and meshgate's model differs: say why

A list may extend another ("extends": "torch-parity.json", a file beside it): the torch adapter's
local world (torch-local, every rank in one process under LocalTensorMode) runs the same PyTorch
code as its gloo world, so its list is gloo's plus the cases where the local world itself
answers otherwise; an inherited entry whose case the world skips is not stale.

A meshgate bug is never listed: it is fixed. The command exits 1 on a disagreement that is not
listed, on a listed one that no longer happens (the list must say what is true today), and on
any error row (an adapter that breaks is a bug of ours); 2 on unusable input.

The command, which runs the cases, is commands/parity.py."""

from __future__ import annotations

import collections
import json
from pathlib import Path

from ..core.markup import visible
from ..core.results import STATUSES
from ..core.tables import md_row, md_table_head

CLASSES = {"pytorch-bug": ("bug", "damage", "why"), "by-design": ("why",)}
DISAGREEING = ("fail",)


class ListError(Exception):
    """The committed list is not of the form the module docstring gives."""


def default_list(root: Path, impl: str) -> Path:
    return root / "baselines" / f"{impl}-parity.json"


def load_list(path: Path) -> dict:
    """The committed list: {"impl", "version", "disagreements": [{case, status, class, ...}]},
    with the entries of the list it extends (marked "inherited") where it names none of its
    own for the case."""
    document = _load_one(path)
    base_name = document.get("extends")
    if base_name is None:
        return document
    if not isinstance(base_name, str) or "/" in base_name or base_name == path.name:
        raise ListError(f"{path}: 'extends' names another list in the same folder")
    base_path = path.parent / base_name
    if not base_path.exists():
        raise ListError(f"{path}: extends {base_name}, which does not exist")
    base = _load_one(base_path)
    if base.get("extends") is not None:
        raise ListError(f"{path}: extends {base_name}, which extends another list in turn")
    own = {entry["case"] for entry in document["disagreements"]}
    inherited = [dict(entry, inherited=True) for entry in base["disagreements"]
                 if entry["case"] not in own]
    return dict(document, disagreements=document["disagreements"] + inherited)


def _load_one(path: Path) -> dict:
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


def check(rows: list[dict], listed: dict, whole: bool = True) -> tuple[list[dict], list[dict], list[dict]]:
    """(unlisted disagreements, listed ones that no longer happen, error rows). With `whole`
    (every case ran) a listed case that did not run is stale too (renamed or removed); a run of
    some of the cases judges only the listed cases it ran."""
    by_case = {entry["case"]: entry for entry in listed.get("disagreements", [])}
    statuses = {row["id"]: row for row in rows}
    unlisted = [row for row in rows if row.get("status") in DISAGREEING and row["id"] not in by_case]
    stale = [entry for case, entry in by_case.items()
             if (whole or case in statuses)
             and statuses.get(case, {}).get("status") not in DISAGREEING
             and not (entry.get("inherited") and statuses.get(case, {}).get("status") == "skip")]
    errors = [row for row in rows if row.get("status") == "error"]
    return unlisted, stale, errors


def known_class(listed: dict, case_id: str) -> str | None:
    """The class of a listed disagreement ('pytorch-bug', 'by-design'), None when unlisted."""
    for entry in listed.get("disagreements", []):
        if entry["case"] == case_id:
            return entry["class"]
    return None


def render(rows: list[dict], listed: dict, seconds: float, impl_name: str, version: str) -> str:
    lines = [f"meshgate parity: {len(rows)} case(s) on {impl_name} {version} in {seconds:.0f} s", ""]
    kinds = tally(rows)
    by_case = {entry["case"]: entry for entry in listed.get("disagreements", [])}
    lines += md_table_head(["kind", "ran", "agree", "disagree (pytorch-bug / by-design / unlisted)",
                            "error", "skip"])
    for kind, k in sorted(kinds.items()):
        classes = collections.Counter(by_case[r["id"]]["class"] if r["id"] in by_case else "unlisted"
                                      for r in rows if r.get("kind") == kind and r.get("status") == "fail")
        lines.append(md_row([f"{kind}", f"{k['pass'] + k['fail'] + k['error']}", f"{k['pass']}",
                             f"{k['fail']} ({classes['pytorch-bug']} / {classes['by-design']} / "
                             f"{classes['unlisted']})", f"{k['error']}", f"{k['skip']}"]))
    lines.append("")
    for kind, k in sorted(kinds.items()):
        for reason, count in k["skip_reasons"].most_common():
            lines.append(f"- skip {kind} x{count}: {visible(reason)}")
    return "\n".join(lines)


def problems(unlisted: list[dict], stale: list[dict], errors: list[dict], listed: dict, impl_name: str,
             version: str) -> list[str]:
    """What makes the check fail, one item each: a list recorded against another version,
    unlisted disagreements (with the entry to add), listed ones that no longer happen, errors."""
    out = []
    recorded = listed.get("version")
    if recorded and recorded != version:
        out.append(f"the list was recorded against {impl_name} {recorded}, this is {version}: "
                   f"install the pinned version (ci/bootstrap) or re-record the list")
    for row in unlisted:
        out.append(f"unlisted disagreement {row['id']}: {visible(row.get('message', ''))}\n"
                   f"  classify it in the list, e.g. "
                   + json.dumps({"case": row["id"], "status": "fail", "class": "by-design",
                                 "why": "..."}))
    for entry in stale:
        out.append(f"listed disagreement {entry['case']} no longer happens: remove it from "
                   f"the list")
    for row in errors:
        out.append(f"error {row['id']}: {visible(row.get('message', ''))}")
    return out


def findings_json(rows: list[dict], unlisted: list[dict], stale: list[dict], errors: list[dict],
                  impl_name: str, version: str, seconds: float) -> dict:
    """--json's document: the tally per kind and the findings."""
    return {
        "impl": impl_name, "version": version, "seconds": round(seconds, 1),
        "kinds": {k: {**{s: v[s] for s in STATUSES},
                      "skip_reasons": dict(v["skip_reasons"])} for k, v in tally(rows).items()},
        "unlisted": [r["id"] for r in unlisted], "stale": [e["case"] for e in stale],
        "errors": [r["id"] for r in errors]}
