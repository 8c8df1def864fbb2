"""`meshgate clean [--keep N] [--repo DIR]`: removes the worktrees `ab`, `bisect` and `nightly`
build other revisions in (build/ab/<commit12>/, system/revisions.py), all of them or all but the
N most recently used, and says how much disk that freed. A worktree another command is using
(building, or running its runner) is left. Exit 0, or 2 when the folder is no git repository."""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Any

from ..core import files
from ..system import git, revisions


def _cmd_clean(args: argparse.Namespace) -> int:
    repo = pathlib.Path(args.repo).resolve() if args.repo else files.source_root()
    if git.run_git(repo, "rev-parse", "--git-dir").returncode != 0:
        print(f"meshgate clean: {repo} is not a git repository", file=sys.stderr)
        return 2
    before = revisions.list_worktrees(repo)
    removed, kept = revisions.prune_worktrees(repo, keep=args.keep)
    for tree in removed:
        print(f"removed {tree.path} ({revisions.format_bytes(tree.bytes)})")
    busy = kept[args.keep:]
    for tree in busy:
        print(f"kept {tree.path}: in use by another command")
    freed = sum(t.bytes for t in removed)
    print(f"meshgate clean: {len(removed)} of {len(before)} worktree(s) removed, "
          f"{revisions.format_bytes(freed)} freed; {revisions.disk_note(repo, [], kept)}")
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "clean", help="remove the worktrees of other revisions under build/ab (and say what that frees)",
        description="Removes the git worktrees under build/ab/ in which ab, bisect and nightly build "
                    "other revisions (a few hundred MB each). ab and bisect already keep only the "
                    f"{revisions.KEEP_WORKTREES} most recently used ({revisions.KEEP_ENV} sets how many).")
    parser.add_argument("--keep", type=int, default=0, metavar="N",
                        help="keep the N most recently used worktrees (default 0: remove all)")
    parser.add_argument("--repo", metavar="DIR", help="git repository (default: this checkout or project)")
    parser.set_defaults(func=_cmd_clean)
