"""A revision's build: the runner of any commit, built once and reused (`meshgate ab`, bisect).

    built = runner_for(repo, "HEAD~1", "cuda")   # -> BuiltRevision(commit, root, runner)

- `rev` resolves to a full commit hash (RevisionError naming it when it does not).
- The commit is checked out in a detached git worktree, build/ab/<commit12>/ under the
  repository (created once, reused afterwards).
- The runner is built in that worktree's build/<preset>/, so a build folder belongs to one
  commit and one preset. The worktree is configured with tests and benchmarks off
  (MESHGATE_BUILD_TESTS=OFF, MESHGATE_BUILD_BENCHMARKS=OFF) and only the meshgate-runner
  target is built, on every CPU (`-j`).
- ccache, when installed, is the compiler launcher of every language (passed on the configure
  line too, so revisions older than the launcher in CMakeLists.txt use it), and every build
  runs with CCACHE_BASEDIR at the repository and CCACHE_NOHASHDIR=1: the worktrees and the
  checkout itself share one cache (ccache's own, CCACHE_DIR when set), so the second revision
  of an adjacent pair compiles mostly from cache hits.
- A finished build writes build/<preset>/.meshgate-built.json (the commit, the preset, the
  runner's path, size and time). A later call whose worktree is still clean and whose runner
  is unchanged returns at once, without running cmake; delete the file to force the check.
- A revision whose runner does not build raises RevisionBuildError (a RevisionError) with the
  commit, so a bisection can skip that commit and stop on anything else.
- The build tools' output goes to build/<preset>/meshgate-build.log in the worktree, named on
  one line ("building <commit> (log: PATH)") when the build starts; a build that fails shows
  the end of that log, with the failing tool's message. With `verbose` (`-v` of ab and bisect)
  the output comes to the terminal as it comes instead.

Another CMake target of a revision (`target`, e.g. a Google Benchmark binary for `ab` and
`bisect --google-benchmark`) is built the same way, that target only, with benchmarks on
(BENCHMARK_CONFIGURE_ARGS) in the same build/<preset>/ folder; its stamp is
build/<preset>/.meshgate-built-<target>.json. A project of its own kinds has no such targets.

Calls for the same commit wait for each other (a lock file beside the worktree).

Disk: each worktree holds a checkout and a build (a few hundred MB), so they are pruned. Every
use of a worktree marks it (the mtime of build/ab/<commit12>.used); `prune_worktrees` removes
all but the KEEP_WORKTREES (4; MESHGATE_KEEP_WORKTREES sets it, 0 keeps none) most recently
used, never one whose lock another process holds or one the caller is still using, with `git
worktree remove --force`. `ab` and `bisect` prune when they finish and say how much build/ab
holds; `meshgate clean` removes them all (or keeps the last N).

A project of its own kinds (project.py: meshgate.toml in the repository's folder) is built by
the steps of its meshgate.toml as that revision has them, in its folder of the worktree, with
no preset: the stamp and the log are in build/meshgate-project/ of the worktree.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pathlib
import shutil
import sys
from typing import Any, Iterator, NamedTuple, Optional, TextIO

from ..core import files, jsonfile
from . import build, project
from .git import RevisionError, git, is_clean, resolve_commit, run_git

WORKTREES = pathlib.Path("build") / "ab"  # under the repository
STAMP = ".meshgate-built.json"            # in a finished build folder
BUILD_LOG = "meshgate-build.log"        # in a build folder: the tools' output of its last build
LOG_TAIL_LINES = 20                     # of a failed build's log, shown on the terminal
WORKTREE_CONFIGURE_ARGS = ("-DMESHGATE_BUILD_TESTS=OFF", "-DMESHGATE_BUILD_BENCHMARKS=OFF")
# A worktree built for one of its benchmark targets: tests still off, benchmarks on.
BENCHMARK_CONFIGURE_ARGS = ("-DMESHGATE_BUILD_TESTS=OFF", "-DMESHGATE_BUILD_BENCHMARKS=ON")
LAUNCHER_LANGUAGES = ("CXX", "C", "CUDA")
PROJECT_PRESET = "meshgate-project"       # the build folder name of a project's revisions


class RevisionBuildError(RevisionError):
    """A commit that resolves and checks out but whose runner does not build (a bisection
    skips it). `commit` is the full hash."""

    def __init__(self, commit: str, reason: str):
        super().__init__(f"commit {commit[:12]} does not build: {reason}")
        self.commit = commit
        self.reason = reason


class BuiltRevision(NamedTuple):
    commit: str              # full hash
    root: pathlib.Path       # the worktree, or a project's folder in it (its cases are that revision's)
    runner: list[str]        # the command that starts its meshgate-runner


def worktree_path(repo: pathlib.Path, commit: str) -> pathlib.Path:
    return pathlib.Path(repo) / WORKTREES / commit[:12]


KEEP_WORKTREES = 4  # the most recently used worktrees that prune_worktrees keeps by default
KEEP_ENV = "MESHGATE_KEEP_WORKTREES"


class Worktree(NamedTuple):
    path: pathlib.Path
    used: float  # when a command last used it (seconds since the epoch)
    bytes: int


def keep_worktrees(env: Optional[dict] = None) -> int:
    """How many worktrees prune_worktrees keeps: MESHGATE_KEEP_WORKTREES, else KEEP_WORKTREES."""
    value = (os.environ if env is None else env).get(KEEP_ENV, "")
    try:
        return max(0, int(value)) if value.strip() else KEEP_WORKTREES
    except ValueError:
        return KEEP_WORKTREES


def disk_usage(path: pathlib.Path) -> int:
    """Bytes of the files under `path` (links not followed; what cannot be read counts 0)."""
    total = 0
    for folder, _, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass
    return total


def format_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0
    return f"{n:.1f} GB"


def _used_marker(path: pathlib.Path) -> pathlib.Path:
    return path.with_name(f"{path.name}.used")


def mark_used(repo: pathlib.Path, commit: str) -> None:
    """Records that a command uses the worktree of `commit` now."""
    marker = _used_marker(worktree_path(repo, commit))
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()
    os.utime(marker)


def list_worktrees(repo: pathlib.Path, sizes: bool = True) -> list[Worktree]:
    """The worktrees under build/ab, most recently used first."""
    folder = pathlib.Path(repo) / WORKTREES
    if not folder.is_dir():
        return []
    out = []
    for path in folder.iterdir():
        if not path.is_dir() or not (path / ".git").exists():
            continue
        marker = _used_marker(path)
        used = marker.stat().st_mtime if marker.exists() else path.stat().st_mtime
        out.append(Worktree(path, used, disk_usage(path) if sizes else 0))
    return sorted(out, key=lambda w: -w.used)


def remove_worktree(repo: pathlib.Path, path: pathlib.Path) -> bool:
    """Removes one worktree unless another process holds its lock (it is being built); True
    when it is gone."""
    lock_path = path.with_name(f"{path.name}.lock")
    with open(lock_path, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        try:
            proc = run_git(pathlib.Path(repo), "worktree", "remove", "--force", str(path))
            if proc.returncode != 0 and path.exists():
                shutil.rmtree(path, ignore_errors=True)
                run_git(pathlib.Path(repo), "worktree", "prune")
            _used_marker(path).unlink(missing_ok=True)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return not path.exists()


# The worktrees this process uses, each held by a shared lock on its lock file until
# release_uses(): another command's prune_worktrees cannot take the exclusive lock and leaves
# them, so a runner in use is never removed under a running A/B or bisection.
_uses: dict[str, Any] = {}


def _hold_use(repo: pathlib.Path, commit: str) -> None:
    key = str(worktree_path(repo, commit))
    if key in _uses:
        return
    lock = open(worktree_path(repo, commit).with_name(f"{commit[:12]}.lock"), "a")
    fcntl.flock(lock, fcntl.LOCK_SH)
    _uses[key] = lock


def _release_use(repo: pathlib.Path, commit: str) -> None:
    lock = _uses.pop(str(worktree_path(repo, commit)), None)
    if lock is not None:
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()


def release_uses() -> None:
    """Lets go of every worktree this process uses (at the end of a command)."""
    for key in list(_uses):
        lock = _uses.pop(key)
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()


def prune_worktrees(repo: pathlib.Path, keep: Optional[int] = None,
                    in_use: tuple = ()) -> tuple[list[Worktree], list[Worktree]]:
    """Removes the worktrees under build/ab beyond the `keep` (default keep_worktrees()) most
    recently used, never those of the commits `in_use`; (removed, kept)."""
    keep = keep_worktrees() if keep is None else keep
    protected = {c[:12] for c in in_use} | {pathlib.Path(k).name for k in _uses}
    removed, kept = [], []
    for n, tree in enumerate(list_worktrees(repo)):
        if n < keep or tree.path.name in protected or not remove_worktree(repo, tree.path):
            kept.append(tree)
        else:
            removed.append(tree)
    return removed, kept


def prune_after_command(repo: pathlib.Path) -> str:
    """At the end of a command that built revisions: the worktrees beyond keep_worktrees()
    pruned (this process's own still protected), its holds released; what build/ab holds now."""
    removed, kept = prune_worktrees(repo)
    release_uses()
    return disk_note(repo, removed, kept)


def disk_note(repo: pathlib.Path, removed: list[Worktree], kept: list[Worktree],
              keep: Optional[int] = None) -> str:
    """'build/ab: 4 worktrees, 0.9 GB (pruned 7, 1.6 GB freed; keeping the last 4 used, MESHGATE_KEEP_WORKTREES)'."""
    held = sum(t.bytes for t in kept)
    note = (f"{pathlib.Path(repo) / WORKTREES}: {len(kept)} worktree{'s' if len(kept) != 1 else ''}, "
            f"{format_bytes(held)}")
    if removed:
        note += (f" (pruned {len(removed)}, {format_bytes(sum(t.bytes for t in removed))} freed; keeping the "
                 f"last {keep_worktrees() if keep is None else keep} used, {KEEP_ENV})")
    return note


def build_dir_for(repo: pathlib.Path, commit: str, preset: str) -> pathlib.Path:
    """Where the runner of `commit` is built with `preset`."""
    return worktree_path(repo, commit) / "build" / preset


def ensure_worktree(repo: pathlib.Path, commit: str) -> pathlib.Path:
    """A detached worktree of `commit` under build/ab/<commit12>, created or reused."""
    path = worktree_path(repo, commit)
    if (path / ".git").exists():
        head = git(path, "rev-parse", "HEAD")
        if head != commit:
            raise RevisionError(
                f"{path} is a worktree of {head[:12]}, not {commit[:12]}: remove it with "
                f"`git worktree remove --force {path}` and run again"
            )
        return path
    if path.exists() and any(path.iterdir()):
        raise RevisionError(f"{path} exists but is not a git worktree: remove it and run again")
    path.parent.mkdir(parents=True, exist_ok=True)
    git(repo, "worktree", "prune")
    git(repo, "worktree", "add", "--detach", str(path), commit)
    return path


@contextlib.contextmanager
def _locked(repo: pathlib.Path, commit: str) -> Iterator[None]:
    """Holds build/ab/<commit12>.lock while a worktree is made and built."""
    lock_path = worktree_path(repo, commit).with_name(f"{commit[:12]}.lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def configure_args(env: dict, benchmarks: bool = False) -> list[str]:
    """The extra `cmake --preset` arguments of a worktree build: tests and benchmarks off (with
    `benchmarks`, benchmarks on) and, when ccache is on PATH, ccache as every language's
    compiler launcher (unless the environment names a launcher). Options a revision does not
    know are ignored."""
    args = ["--no-warn-unused-cli", *(BENCHMARK_CONFIGURE_ARGS if benchmarks else WORKTREE_CONFIGURE_ARGS)]
    ccache = shutil.which("ccache", path=env.get("PATH"))
    if ccache:
        args += [f"-DCMAKE_{lang}_COMPILER_LAUNCHER={ccache}" for lang in LAUNCHER_LANGUAGES
                 if not env.get(f"CMAKE_{lang}_COMPILER_LAUNCHER")]
    return args


def build_env(repo: pathlib.Path, env: Optional[dict] = None) -> dict:
    """The environment of a revision's build: the caller's, without MESHGATE_RUNNER (a
    revision's runner is always its own), with the shared ccache settings of the repository."""
    env = dict(os.environ if env is None else env)
    env.pop("MESHGATE_RUNNER", None)
    return build.ccache_env(env, repo)


def stamp_name(target: str = build.RUNNER_TARGET) -> str:
    """The stamp file of a finished build of `target` in its build folder."""
    return STAMP if target == build.RUNNER_TARGET else f".meshgate-built-{target}.json"


def _stamp(runner: pathlib.Path, build_dir: pathlib.Path, commit: str, preset: str,
           target: str = build.RUNNER_TARGET) -> dict:
    info = runner.stat()
    return {"commit": commit, "preset": preset, "target": target,
            "runner": os.path.relpath(runner, build_dir), "size": info.st_size,
            "mtime_ns": info.st_mtime_ns}


def finished_runner(repo: pathlib.Path, commit: str, preset: str,
                    target: str = build.RUNNER_TARGET) -> Optional[pathlib.Path]:
    """The runner (or `target`'s executable) of a finished build of `commit` with `preset` whose
    stamp still holds (same commit, preset and executable file, clean worktree), else None."""
    build_dir = build_dir_for(repo, commit, preset)
    try:
        stamp = jsonfile.read(build_dir / stamp_name(target))
        runner = build_dir / stamp["runner"]
        if (stamp.get("commit") != commit or stamp.get("preset") != preset
                or stamp != _stamp(runner, build_dir, commit, preset, target)
                or not os.access(runner, os.X_OK)):
            return None
    except (OSError, jsonfile.JsonFileError, KeyError, TypeError):  # no stamp, or a damaged one
        return None
    return runner if is_clean(worktree_path(repo, commit)) else None


def log_tail(path: pathlib.Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last `lines` lines of a build log, and before them the first compiler error when
    it is further up (the error that matters is often the first of many)."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    tail = text[-lines:]
    cause = build.failure_cause(text)
    if cause is not None and all(cause != line.strip() for line in tail):
        tail = [cause, "..."] + tail
    return tail


def _build_logged(root: pathlib.Path, preset: str, env: dict, out: TextIO,
                  log_path: pathlib.Path, target: str = build.RUNNER_TARGET) -> None:
    """Builds with the tools' output in `log_path`, and on failure its end on `out`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(log_path, "w", errors="replace") as log:
            checked = build.require_cmake(root, log, env)
            build.build_target(root, preset, env, out, target=target,
                               configure_args=tuple(configure_args(env, target != build.RUNNER_TARGET)),
                               checked_packages=checked, log=log)
    except build.BuildError:
        out.write(f"meshgate: the build failed; the end of {log_path}:\n")
        out.write("".join(f"  {line}\n" for line in log_tail(log_path)))
        out.flush()
        raise


def build_commit(repo: pathlib.Path, commit: str, preset: str, out: Optional[TextIO] = None,
                 env: Optional[dict] = None, verbose: bool = False,
                 target: str = build.RUNNER_TARGET) -> BuiltRevision:
    """The worktree and runner of `commit` (a full hash) built with `preset`, reusing a
    finished build; with another `target`, that CMake target's executable instead (only that
    target built, benchmarks on). The build's output goes to its log (BUILD_LOG), or with
    `verbose` (the command's -v) to `out` as it comes. RevisionBuildError when it does not
    build."""
    repo = pathlib.Path(repo).resolve()
    out = out or sys.stderr
    runner_target = target == build.RUNNER_TARGET
    _release_use(repo, commit)  # our own shared hold would block the exclusive lock below
    try:
        with _locked(repo, commit):
            return _build_commit_locked(repo, commit, preset, out, env, verbose, target, runner_target)
    finally:
        _hold_use(repo, commit)


def _build_commit_locked(repo: pathlib.Path, commit: str, preset: str, out: TextIO, env: Optional[dict],
                         verbose: bool, target: str, runner_target: bool) -> BuiltRevision:
    root = ensure_worktree(repo, commit)
    mark_used(repo, commit)
    own_project = project_at(repo, commit, root)
    if own_project is not None:
        if not runner_target:
            raise RevisionBuildError(commit, f"a project of its own kinds builds no CMake target {target}")
        root = own_project.root
    runner = finished_runner(repo, commit, preset, target)
    if runner is not None:
        return BuiltRevision(commit, root, [str(runner)])
    env = build_env(repo, env)
    build_dir = build_dir_for(repo, commit, preset)
    (build_dir / stamp_name(target)).unlink(missing_ok=True)
    try:
        if own_project is not None:
            runner = _build_project(own_project, commit, env, out, verbose, build_dir / BUILD_LOG)
        elif verbose:
            checked = build.require_cmake(root, out, env)
            build.build_target(root, preset, env, out, target=target,
                               configure_args=tuple(configure_args(env, not runner_target)),
                               checked_packages=checked)
        else:
            log_path = build_dir / BUILD_LOG
            what = "" if runner_target else f" {target}"
            out.write(f"meshgate: building{what} {commit[:12]} (log: {log_path})\n")
            out.flush()
            _build_logged(root, preset, env, out, log_path, target)
        if own_project is None:
            runner = build.find_runner(build_dir, target)
    except build.BuildError as e:
        raise RevisionBuildError(commit, str(e)) from None
    if is_clean(root):
        tmp = build_dir / f"{stamp_name(target)}.tmp"
        tmp.write_text(json.dumps(_stamp(runner, build_dir, commit, preset, target)) + "\n")
        os.replace(tmp, build_dir / stamp_name(target))
    return BuiltRevision(commit, root, [str(runner)])


def revision_folder(repo: pathlib.Path, commit: str) -> pathlib.Path:
    """`repo`'s folder in the worktree of `commit`: the worktree's root when `repo` is the
    repository's root, the same subfolder when `repo` is a folder in it (a project's)."""
    return ensure_worktree(repo, commit) / git(repo, "rev-parse", "--show-prefix")


def project_at(repo: pathlib.Path, commit: str, worktree: pathlib.Path) -> Optional[project.Project]:
    """The project of its own kinds at `commit` when `repo` is a project's folder (the
    repository's root or a folder in it), else None. RevisionBuildError when that revision has
    no usable meshgate.toml there."""
    if not (pathlib.Path(repo) / project.PROJECT_FILE).is_file():
        return None
    folder = git(repo, "rev-parse", "--show-prefix")
    try:
        found = project.load(worktree / folder)
    except project.ProjectError as e:
        raise RevisionBuildError(commit, str(e)) from None
    if found is None:
        raise RevisionBuildError(commit, f"it has no {folder}{project.PROJECT_FILE}")
    return found


def _build_project(own_project: project.Project, commit: str, env: dict, out: TextIO,
                   verbose: bool, log_path: pathlib.Path) -> pathlib.Path:
    """A project's runner at `commit`, its build's output in `log_path` (the end of it on `out`
    when it fails) or with `verbose` on `out` as it comes."""
    if verbose:
        return project.build_runner(own_project, env, out)
    out.write(f"meshgate: building {commit[:12]} (log: {log_path})\n")
    out.flush()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(log_path, "w", errors="replace") as log:
            return project.build_runner(own_project, env, out, log=log)
    except build.BuildError:
        out.write(f"meshgate: the build failed; the end of {log_path}:\n")
        out.write("".join(f"  {line}\n" for line in log_tail(log_path)))
        out.flush()
        raise


def revision_cases(root: pathlib.Path) -> pathlib.Path:
    """The cases of a built revision (BuiltRevision.root): a project's `cases`, else cases/."""
    try:
        own_project = project.load(root)
    except project.ProjectError:
        own_project = None
    return own_project.cases if own_project is not None else pathlib.Path(root) / "cases"


def choose_preset(repo: pathlib.Path, preset: Optional[str] = None,
                  env: Optional[dict] = None) -> str:
    """`preset` when given, else ci/preset's choice (of `repo` when it has one, else of this
    checkout), the same for every revision; for a project of its own kinds, which builds
    without presets, PROJECT_PRESET."""
    root = pathlib.Path(repo)
    if (root / project.PROJECT_FILE).is_file():
        return preset or PROJECT_PRESET
    if not (root / "ci" / "preset").exists():
        root = files.source_root()
    try:
        return build.preset_for(root, preset, env)
    except build.BuildError as e:
        raise RevisionError(str(e)) from None


def runner_for(repo: pathlib.Path, rev: str, preset: Optional[str] = None,
               out: Optional[TextIO] = None, env: Optional[dict] = None,
               verbose: bool = False) -> BuiltRevision:
    """(commit, worktree root, runner command) of revision `rev` of `repo`, built with
    `preset` (default: ci/preset's choice) or reused. RevisionError when `rev` does not
    resolve or its worktree cannot be made; RevisionBuildError when it does not build."""
    commit = resolve_commit(repo, rev)
    return build_commit(repo, commit, choose_preset(repo, preset, env), out, env, verbose)
