"""Which cases a command runs: the CASES arguments and the --suite/--tag/--case filters turned
into the runner's selection. Existing paths are case files or folders, anything else shaped
like a case id (`suite/name`, fnmatch patterns allowed) selects cases by id. With no CASES and
no filter, `meshgate run` selects the cases of cases/ tagged smoke (DEFAULT_TAGS); `ab` and
`bisect` select those plus every performance case of the revision's tree."""

from __future__ import annotations

import pathlib
from pathlib import Path
from typing import Optional, Sequence

from . import build
from .launch import Selection

CASE_SUFFIXES = (".yaml", ".yml")
# The tags `meshgate run` selects when given no CASES and no filter.
DEFAULT_TAGS = ["smoke"]


class SelectionError(Exception):
    """A CASES argument that is neither an existing path nor a case id."""


def build_selection(cases: Sequence[str], suites: Sequence[str], tags: Sequence[str],
                    case_patterns: Sequence[str], root: Path, default_tags: Sequence[str]) -> Selection:
    """The selection of CASES (`cases`) and the filters; with no CASES and no filter at all,
    root's cases/ restricted to `default_tags`."""
    paths: list[str] = []
    patterns: list[str] = list(case_patterns)
    for item in cases:
        if Path(item).exists():
            paths.append(item)
        elif item.endswith(CASE_SUFFIXES) or item.startswith((".", "/")) or "/" not in item:
            raise SelectionError(f"{item}: no such case file or folder, and not a case id "
                                 f"(ids look like <suite>/<name>)")
        else:
            patterns.append(item)
    nothing_asked = not (cases or suites or tags or case_patterns)
    return Selection(paths=paths or [str(build.default_cases(root))], suites=list(suites),
                     tags=list(tags) or (list(default_tags) if nothing_asked else []),
                     cases=patterns)


def case_arguments(cases: Sequence[str], root: Optional[pathlib.Path] = None) -> tuple[list[str], list[str]]:
    """CASES split into case files/folders and case id patterns, for the builds of several
    revisions (`ab`, `bisect`). Paths come back absolute, so that every build runs the same
    files; a relative one is looked up in `root` (a revision's tree) before the working
    directory."""
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
