"""Every git command the driver runs: revisions resolved to commits, HEAD and whether the
working tree is dirty, the short commit of a run, the commits between two revisions and what
one commit says of itself. Worktrees of other revisions are made in revisions.py, through
`git` here."""

from __future__ import annotations

import os
import pathlib
import subprocess
from typing import Optional


class RevisionError(Exception):
    """A revision that does not resolve, a range that is no range, or a git command that fails;
    the commands that take revisions exit with code 2."""


def run_git(repo: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    """`git -C repo ARGS`, its output captured, whatever its exit code."""
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)


def git(repo: pathlib.Path, *args: str) -> str:
    """stdout of `git -C repo ARGS`; RevisionError naming the command when it fails."""
    proc = run_git(repo, *args)
    if proc.returncode != 0:
        raise RevisionError(f"git {' '.join(args)} failed in {repo}: "
                            f"{proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout.strip()


def resolve_commit(repo: pathlib.Path, rev: str) -> str:
    """Full commit hash of `rev`; RevisionError naming the revision when it does not resolve."""
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except RevisionError:
        raise RevisionError(f"revision {rev!r} is not a commit of {repo}: check `git log` for the name") from None


def head_commit(repo: pathlib.Path) -> tuple[str, bool]:
    """HEAD's full commit hash and whether the working tree has uncommitted changes."""
    sha = git(repo, "rev-parse", "--verify", "HEAD^{commit}")
    dirty = bool(git(repo, "status", "--porcelain", "--untracked-files=no"))
    return sha, dirty


def is_clean(root: pathlib.Path) -> bool:
    """Whether the worktree at `root` has no uncommitted changes to tracked files (False when
    git cannot tell)."""
    try:
        return git(root, "status", "--porcelain", "--untracked-files=no") == ""
    except RevisionError:
        return False


def short_commit(root: pathlib.Path, env: Optional[dict] = None) -> str:
    """The commit a run is of: MESHGATE_COMMIT (builds of other revisions) or git HEAD."""
    env = os.environ if env is None else env
    if env.get("MESHGATE_COMMIT"):
        return env["MESHGATE_COMMIT"][:7]
    try:
        proc = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=7", "HEAD"],
                              capture_output=True, text=True, check=True)
        return proc.stdout.strip() or "nocommit"
    except (OSError, subprocess.CalledProcessError):
        return "nocommit"


def describe_head(root: pathlib.Path) -> Optional[tuple[str, bool]]:
    """(HEAD's commit, dirty) of the checkout at `root`, None when git cannot say."""
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit, bool(dirty)


def commit_range(repo: pathlib.Path, good: str, bad: str) -> tuple[list[str], bool]:
    """The commits of good..bad on the ancestry path, oldest first (the last is bad), and
    whether the range has merges, in which case only bad's first-parent chain is searched.
    RevisionError when good is not an ancestor of bad."""
    if good == bad:
        raise RevisionError(f"--good and --bad are the same commit {good[:12]}")
    proc = run_git(repo, "merge-base", "--is-ancestor", good, bad)
    if proc.returncode == 1:
        raise RevisionError(f"--good {good[:12]} is not an ancestor of --bad {bad[:12]}: the good "
                            f"revision must come before the bad one in the history (swapped?)")
    if proc.returncode != 0:
        raise RevisionError(f"git merge-base failed in {repo}: {proc.stderr.strip()}")
    merges = run_git(repo, "rev-list", "--ancestry-path", "--merges", f"{good}..{bad}").stdout.split()
    args = ["rev-list", "--reverse", "--ancestry-path"] + (["--first-parent"] if merges else []) + [f"{good}..{bad}"]
    proc = run_git(repo, *args)
    commits = proc.stdout.split()
    if proc.returncode != 0 or not commits or commits[-1] != bad:
        raise RevisionError(f"git {' '.join(args)} did not list the range ({proc.stderr.strip() or 'empty'})")
    return commits, bool(merges)


def commit_info(repo: pathlib.Path, commit: str) -> dict[str, str]:
    """sha, subject, author and date of `commit`."""
    proc = run_git(repo, "log", "-1", "--format=%H%x00%s%x00%an <%ae>%x00%aI", commit)
    sha, subject, author, date = (proc.stdout.rstrip("\n").split("\x00") + ["", "", "", ""])[:4]
    return {"sha": sha or commit, "subject": subject, "author": author, "date": date}


def first_parent_lineage(repo: pathlib.Path, rev: str = "HEAD") -> list[str]:
    """The full hashes of `rev`'s first-parent line, oldest first (the order the main branch
    was built in, whatever order its commits were later measured in); [] where `repo` is no
    git repository or `rev` does not resolve."""
    proc = run_git(repo, "rev-list", "--first-parent", "--reverse", rev)
    if proc.returncode != 0:
        return []
    return proc.stdout.split()
