"""`meshgate releases`: the table of one set of cases run on several PyTorch releases.

Each release is one column: per case its status (pass, fail, error, skip with the reason), per
suite the counts, and per release the wall time. What changed between consecutive releases is
classified by gate/compat.py, exactly as `meshgate compat` classifies two implementations
(new_rejection, semantic_change, representation_change, relaxation, expressibility), with two
additions that compat's signals cannot see:

  error            one side has an error row: the adapter or the runner broke, so the row says
                   nothing of PyTorch's behaviour and is not classified as a change of it
  semantic_change  (observable `status`) the statuses differ while every signal compat
                   compares is the same, e.g. a mesh whose groups changed under the same layout

A release whose environment could not be made or whose runner ran no case has no rows; its
column says why.

The command, which makes the environments and runs the cases, is commands/releases.py."""

from __future__ import annotations

import collections
import re
from dataclasses import dataclass, field

from ..core.markup import first_line, format_clock, md_cell, md_code, visible
from ..core.results import status_counts, suite_of
from ..core.tables import md_row, md_table_head
from . import compat

# compat's classes, worst first, then the rows that are no behaviour of PyTorch.
CLASSES = compat.CLASSES + ("error",)


@dataclass
class ReleaseRun:
    """One release's part of the matrix."""

    version: str                 # the release of the pins file, "2.10.0"
    rows: list = field(default_factory=list)   # its result rows
    seconds: float = 0.0         # wall time of its run of the cases
    env_seconds: float = 0.0     # wall time of making or checking its environment
    env: str = ""                # "reused", "created", "refreshed"
    reported: str | None = None  # the version the adapter reported (run header)
    pinned: bool = False         # the release pyproject.toml pins
    not_run: str | None = None   # why the release has no rows

    def counts(self) -> dict:
        return status_counts(self.rows)

    def executed(self) -> int:
        c = self.counts()
        return c["pass"] + c["fail"] + c["error"]


def _show(row: dict) -> str:
    message = first_line(row.get("message") or "")
    return row.get("status", "?") + (f": {message}" if message else "")


def classify(base: dict, candidate: dict) -> tuple | None:
    """(class, observable, base shows, candidate shows) of one case on two releases, or None
    when it behaves the same on both."""
    base_status, candidate_status = base.get("status"), candidate.get("status")
    if "error" in (base_status, candidate_status):
        if base_status == candidate_status:
            return None
        return ("error", "status", _show(base), _show(candidate))
    found = compat.classify(base, candidate)
    if found is None and base_status != candidate_status:
        found = ("semantic_change", "status", _show(base), _show(candidate))
    return found


def changes(earlier: ReleaseRun, later: ReleaseRun) -> list[dict]:
    """One entry per case both releases ran that behaves differently, worst class first:
    {from, to, case, class, observable, base, candidate}."""
    later_rows = {row["id"]: row for row in later.rows}
    out = []
    for row in earlier.rows:
        other = later_rows.get(row["id"])
        if other is None:
            continue
        found = classify(row, other)
        if found:
            cls, observable, was, now = found
            out.append({"from": earlier.version, "to": later.version, "case": row["id"],
                        "class": cls, "observable": observable, "base": was, "candidate": now})
    out.sort(key=lambda e: CLASSES.index(e["class"]))
    return out


def matrix(runs: list[ReleaseRun], parity: dict | None = None) -> dict:
    """The document releases.json holds: the releases (oldest first, as given), per case and
    release the status and its message's first line, per suite and release the counts, the
    changes between consecutive releases that ran, and the cases whose status differs.
    `parity` is the committed parity list (gate/parity.py), whose classes annotate the cases."""
    listed = {e["case"]: e.get("class") for e in (parity or {}).get("disagreements", [])}
    cases: dict[str, dict] = {}
    for run in runs:
        for row in run.rows:
            entry = cases.setdefault(row["id"], {"suite": suite_of(row), "kind": row.get("kind", ""),
                                                 "statuses": {}})
            entry["statuses"][run.version] = {"status": row.get("status", "error"),
                                              "message": first_line(row.get("message") or "")}
            if row["id"] in listed:
                entry["parity"] = listed[row["id"]]
    suites: dict[str, dict] = {}
    for run in runs:
        by_suite = collections.defaultdict(list)
        for row in run.rows:
            by_suite[suite_of(row)].append(row)
        for suite, rows in by_suite.items():
            suites.setdefault(suite, {})[run.version] = status_counts(rows)
    ran = [run for run in runs if run.not_run is None]
    found = []
    for earlier, later in zip(ran, ran[1:]):
        found += changes(earlier, later)
    ran_versions = [run.version for run in ran]
    differing = sorted(case for case, entry in cases.items()
                       if len({entry["statuses"][v]["status"] for v in ran_versions
                               if v in entry["statuses"]}) > 1)
    return {
        "releases": [{"version": run.version, "reported": run.reported, "pinned": run.pinned,
                      "not_run": run.not_run, "env": run.env,
                      "env_seconds": round(run.env_seconds, 1), "seconds": round(run.seconds, 1),
                      "executed": run.executed(), "counts": run.counts()} for run in runs],
        "seconds": round(sum(run.seconds + run.env_seconds for run in runs), 1),
        "suites": suites,
        "cases": cases,
        "changes": found,
        "differing": differing,
    }


def _release_label(release: dict) -> str:
    label = release["version"] + (" (pinned)" if release["pinned"] else "")
    if release["reported"] and release["reported"] != release["version"]:
        label += f" [reports {release['reported']}]"
    return label


def markdown(document: dict, cases_text: str) -> str:
    """releases.md: the releases, the suites, the changes by class, the cases whose status
    differs between releases with their changes, every change, and the skip reasons."""
    releases = document["releases"]
    versions = [r["version"] for r in releases]
    lines = [f"# meshgate releases: torch {', '.join(versions)}", "",
             f"Cases: {md_cell(cases_text)}. Wall time {format_clock(document['seconds'])} "
             f"({document['seconds']:.0f} s) in all.", ""]
    lines += md_table_head(["release", "executed", "pass", "fail", "error", "skip", "environment",
                            "wall time"], "lrrrrrlr")
    for r in releases:
        if r["not_run"]:
            lines.append(md_row([_release_label(r), f"not run: {md_cell(r['not_run'])}", None, None,
                                 None, None, f"{r['env'] or '-'}",
                                 f"{r['env_seconds'] + r['seconds']:.0f} s"]))
            continue
        c = r["counts"]
        lines.append(md_row([_release_label(r), f"{r['executed']}", f"{c['pass']}", f"{c['fail']}",
                             f"{c['error']}", f"{c['skip']}",
                             f"{r['env']} in {r['env_seconds']:.0f} s", f"{r['seconds']:.0f} s"]))
    lines += ["", "Executed: pass + fail + error; a skip is a case the release cannot express "
                  "(the reason is below). Wall time: the run of the cases, the environment "
                  "apart.", ""]

    lines += ["## Per suite", "", "pass / fail / error / skip per release.", ""]
    lines += md_table_head(["suite", *versions], "l" + "r" * len(versions))
    for suite in sorted(document["suites"]):
        cells = []
        for v in versions:
            c = document["suites"][suite].get(v)
            cells.append(f"{c['pass']} / {c['fail']} / {c['error']} / {c['skip']}" if c else "-")
        lines.append(md_row([md_cell(suite), *cells]))
    lines.append("")

    found = document["changes"]
    lines += ["## Changes from release to release", ""]
    if not found:
        lines += ["No case behaves differently between consecutive releases.", ""]
    else:
        steps = list(dict.fromkeys((c["from"], c["to"]) for c in found))
        counts = collections.Counter((c["from"], c["to"], c["class"]) for c in found)
        lines += md_table_head(["from -> to", *CLASSES], "l" + "r" * len(CLASSES))
        for a, b in steps:
            lines.append(md_row([f"{a} -> {b}", *(str(counts[(a, b, cls)] or "") for cls in CLASSES)]))
        lines += ["", "`error`: a row of one side is an error (the adapter or the runner broke), "
                      "so it says nothing of PyTorch's behaviour.", ""]

    differing = document["differing"]
    lines += ["## Cases whose status differs between releases", ""]
    if not differing:
        lines += ["None.", ""]
    else:
        by_case = collections.defaultdict(list)
        for c in found:
            by_case[c["case"]].append(f"{c['from']}->{c['to']}: {c['class']} ({c['observable']})")
        lines += md_table_head(["case", *versions, "changes"])
        for case in differing:
            entry = document["cases"][case]
            cells = [entry["statuses"].get(v, {}).get("status", "-") for v in versions]
            marker = f" ({entry['parity']})" if entry.get("parity") else ""
            lines.append(md_row([f"{md_code(case)}{marker}", *cells, md_cell("; ".join(by_case[case]))]))
        lines += ["", "(pytorch-bug) / (by-design): the case's disagreement with the pinned "
                      "release is listed so in baselines/torch-parity.json.", ""]

    if found:
        lines += ["## Every change", ""]
        lines += md_table_head(["from -> to", "case", "change", "observable", "earlier", "later"])
        for c in found:
            lines.append(md_row([f"{c['from']} -> {c['to']}", md_code(c["case"]), f"{c['class']}",
                                 md_cell(c["observable"]), md_cell(c["base"]),
                                 md_cell(c["candidate"])]))
        lines.append("")

    lines += ["## Skips and errors by reason", ""]
    any_reason = False
    for v in versions:
        reasons = collections.Counter(
            (entry["statuses"][v]["status"], _reason(entry["statuses"][v]["message"]))
            for entry in document["cases"].values()
            if entry["statuses"].get(v, {}).get("status") in ("skip", "error"))
        for (status, reason), count in sorted(reasons.items(), key=lambda x: (-x[1], x[0])):
            lines.append(f"- {v}: {status} x{count}: {md_cell(reason)}")
            any_reason = True
    if not any_reason:
        lines.append("None.")
    return "\n".join(lines) + "\n"


# A case file's location and what follows it ("/path/cases/mesh/errors.yaml:19:57: case ..."):
# one per case, so reasons that name it group by the file instead.
_CASE_LOCATION = re.compile(r"\S*?([^/\s]+\.ya?ml):\d+(?::\d+)?:.*$")


def _reason(message: str) -> str:
    """A skip or error message cut to what groups the rows giving the same reason: a case
    file's location becomes the file's name, and the text at most 160 characters."""
    text = _CASE_LOCATION.sub(r"\1: ...", visible(message)) or "no reason given"
    return text if len(text) <= 160 else text[:157] + "..."


def summary_line(run: ReleaseRun) -> str:
    """The line printed after each release."""
    if run.not_run:
        return f"torch {run.version}: not run: {run.not_run}"
    c = run.counts()
    return (f"torch {run.version}: {run.executed()} executed ({c['pass']} pass, {c['fail']} fail, "
            f"{c['error']} error), {c['skip']} skip; {run.seconds:.0f} s "
            f"(environment {run.env or '-'} in {run.env_seconds:.0f} s)")
