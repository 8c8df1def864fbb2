"""A bundle of meshgate's GPU binaries for a GPU machine that has the NVIDIA driver, the CUDA
toolkit's libraries, NCCL (a Python environment's nvidia/nccl/lib will do), a C++ runtime and
glibc, but none of the other build dependencies and no network, so that it cannot build
meshgate itself. This module decides which shared libraries travel with the binaries, writes
the bundle's env.sh and manifest.json, and checks on the machine that a bundle loads there.
ci/gpu-bundle builds and assembles a bundle; ci/gpu-validate checks and uses one.

  python3 ci/gpu_bundle.py targets                       # the CMake targets a bundle holds
  python3 ci/gpu_bundle.py assemble BUILD_DIR DEST [--preset P] [--limit-mib N]
  python3 ci/gpu_bundle.py check BUNDLE                  # exit 1 when it cannot run here
  python3 ci/gpu_bundle.py digest                        # fingerprint of the sources built

Standard library only: the GPU machine's python3 has nothing else that can be relied on."""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# CMake target -> its executable under the build directory. The GEMM and NCCL test binaries are
# what ci/gpu-validate's tests and sanitize stages run; the runner and meshgate-plan are what
# ./meshgate needs. meshgate_gemm_kind_test is left out: it tests the gemm kind on CPU
# implementations only, which the CPU build's CTest covers.
BINARIES = {
    "meshgate-runner": "harness/runner/meshgate-runner",
    "meshgate-plan": "harness/runner/meshgate-plan",
    "meshgate_gemm_test": "lib/gemm/meshgate_gemm_test",
    "meshgate_comm_nccl_test": "lib/comm/meshgate_comm_nccl_test",
}

LIMIT_MIB = 48

# Libraries the bundle leaves to the GPU machine, by group. glibc and the C++ runtime must be
# the machine's own (a carried libc cannot be mixed with the machine's dynamic loader; the
# machine's libstdc++ is as new as ours or newer). The CUDA runtime, cuBLAS and NCCL must match
# the machine's driver and are installed there; libcuda and libnvidia-* are the driver itself.
_SO = r"\.so(\.[0-9A-Za-z_.]+)?"
MACHINE_PROVIDED = (
    ("glibc", re.compile(
        r"(ld-linux[\w.-]*|linux-vdso|linux-gate|libc|libm|libmvec|libpthread|libdl|librt"
        r"|libresolv|libutil|libnsl|libanl|libBrokenLocale|libnss_\w+|libthread_db"
        r"|libc_malloc_debug|libmemusage|libpcprofile)" + _SO)),
    ("C++ runtime", re.compile(r"(libstdc\+\+|libgcc_s)" + _SO)),
    ("CUDA, NCCL and driver", re.compile(
        r"(libcuda|libcudart|libcublas|libcublasLt|libcufft|libcurand|libcusparse|libcusolver"
        r"|libcupti|libnccl|libnvrtc(-builtins)?|libnvJitLink|libnvToolsExt|libnvidia-[\w.-]+)"
        + _SO)),
)

# What a bundle was built from, for the check on the GPU machine: the files that decide what
# the binaries do. Their digest says whether the checkout there matches, without git.
DIGEST_PATHS = ("CMakeLists.txt", "CMakePresets.json", "cmake", "lib", "harness/CMakeLists.txt",
                "harness/runner", "harness/meshgate/__init__.py")


class BundleError(Exception):
    """The bundle cannot be made or used; the message says why."""


@dataclass
class Lib:
    """One line of ldd's output: the name the binary asks for and where it resolved (None when
    it was not found, or for the kernel's vDSO, which is no file)."""
    name: str
    path: str | None
    found: bool = True


def parse_ldd(text: str) -> list[Lib]:
    """The libraries of ldd's output, in order. Lines that are not libraries (diagnostics such
    as `undefined symbol` from `ldd -r`) are left to ldd_problems."""
    libs = []
    for line in text.splitlines():
        line = line.strip()
        if "=>" in line:
            name, _, where = (part.strip() for part in line.partition("=>"))
            if where.startswith("not found"):
                libs.append(Lib(name, None, found=False))
            else:
                path = where.split(" (0x")[0].strip()
                libs.append(Lib(name, path or None))
        elif re.match(r"^\S+\s+\(0x[0-9a-f]+\)$", line):
            # The dynamic loader (an absolute path) and the vDSO have no "=>".
            token = line.split()[0]
            libs.append(Lib(os.path.basename(token), token if token.startswith("/") else None))
    return libs


def ldd_problems(text: str) -> list[str]:
    """ldd's lines that say a binary cannot run: a library or a symbol version not found, an
    undefined symbol (`ldd -r`: e.g. an older NCCL than the one built against), a file that is
    not a dynamic executable."""
    marks = ("not found", "undefined symbol", "not a dynamic executable", "error while loading")
    return [line.strip() for line in text.splitlines() if any(m in line for m in marks)]


def machine_group(name: str) -> str | None:
    """The group of a library the GPU machine provides (see MACHINE_PROVIDED), or None when the
    bundle must carry it."""
    for group, pattern in MACHINE_PROVIDED:
        if pattern.fullmatch(name):
            return group
    return None


@dataclass
class Selection:
    carried: dict = field(default_factory=dict)   # name -> path on this machine
    left: dict = field(default_factory=dict)      # name -> group (machine_group)
    missing: dict = field(default_factory=dict)   # name -> binaries that could not find it


def select_libraries(ldd_by_binary: dict) -> Selection:
    """Which libraries travel in the bundle's lib/, given each binary's ldd output (ldd lists
    what its libraries load in turn): every one except those machine_group leaves to the GPU
    machine. A library not found here ends up in `missing`: the bundle would be incomplete."""
    sel = Selection()
    for binary, text in ldd_by_binary.items():
        for lib in parse_ldd(text):
            group = machine_group(lib.name)
            if group is not None:
                sel.left.setdefault(lib.name, group)
            elif not lib.found or lib.path is None:
                sel.missing.setdefault(lib.name, []).append(binary)
            else:
                sel.carried.setdefault(lib.name, lib.path)
    return sel


_VERSION = re.compile(r"^([A-Z]+)_(\d+(?:\.\d+)*)$")


def required_versions(objdump_text: str) -> dict:
    """The newest symbol version each runtime the GPU machine provides must have (GLIBC,
    GLIBCXX, CXXABI, GCC), from the "Version References" of `objdump -p` (several files' output
    may be joined); the references to carried libraries are the bundle's own business."""
    newest: dict = {}
    provider = None
    for line in objdump_text.splitlines():
        words = line.split()
        if line.strip().startswith("required from "):
            provider = line.strip()[len("required from "):].rstrip(":")
        elif len(words) == 4 and words[0].startswith("0x") and provider \
                and machine_group(provider) is not None:
            m = _VERSION.match(words[3])
            if m:
                key = tuple(int(x) for x in m.group(2).split("."))
                if m.group(1) not in newest or key > newest[m.group(1)][0]:
                    newest[m.group(1)] = (key, words[3])
    return {prefix: text for prefix, (_, text) in sorted(newest.items())}


ENV_SH = r"""# Environment for the meshgate binaries of this bundle (ci/gpu-bundle, built from @COMMIT@).
# On the GPU machine, in bash:  source <bundle>/env.sh
# The dynamic loader then searches, in this order: the libraries the bundle carries (lib/), the
# CUDA toolkit's (CUDA_HOME, CUDA_PATH, beside nvcc, /usr/local/cuda), the nvidia/*/lib folders
# of the NVIDIA pip packages of the python3 on PATH (or of MESHGATE_BUNDLE_PYTHON), where NCCL
# may be the only copy, then what LD_LIBRARY_PATH held before. Sourcing it twice changes nothing.
# Only bash builtins run here besides that python3, so a missing tool cannot break it, and it is
# safe under `set -euo pipefail`.
_mg_src=${BASH_SOURCE[0]:-}
if [ -z "$_mg_src" ]; then
  echo "env.sh: source this file from bash (BASH_SOURCE names its folder)" >&2
  return 1 2>/dev/null || exit 1
fi
case "$_mg_src" in */*) _mg_src=${_mg_src%/*} ;; *) _mg_src=. ;; esac
_mg_bundle=$(CDPATH= cd -- "$_mg_src" && pwd)
_mg_path=
# _mg_add DIR[:DIR...]: appends each existing folder not yet in the list (an empty entry, which
# the loader would take for the working directory, is dropped).
_mg_add() {
  local rest=$1 dir
  while [ -n "$rest" ]; do
    dir=${rest%%:*}
    case "$rest" in *:*) rest=${rest#*:} ;; *) rest= ;; esac
    if [ -n "$dir" ] && [ -d "$dir" ]; then
      case ":$_mg_path:" in
        *":$dir:"*) ;;
        *) _mg_path=${_mg_path:+$_mg_path:}$dir ;;
      esac
    fi
  done
  return 0
}
_mg_add "$_mg_bundle/lib"
_mg_nvcc=$(command -v nvcc 2>/dev/null || true)
for _mg_cuda in "${CUDA_HOME:-}" "${CUDA_PATH:-}" "${_mg_nvcc%/bin/nvcc}" /usr/local/cuda; do
  case "$_mg_cuda" in
    ""|/|/usr) ;;   # no toolkit prefix, or the system's, whose libraries the loader finds anyway
    *) _mg_add "$_mg_cuda/lib64:$_mg_cuda/lib:$_mg_cuda/targets/x86_64-linux/lib" ;;
  esac
done
_mg_python=${MESHGATE_BUNDLE_PYTHON:-python3}
_mg_nvidia=
if command -v "$_mg_python" >/dev/null 2>&1; then
  _mg_nvidia=$("$_mg_python" -c '
import glob, os, site, sys
roots = []
try:
    roots += site.getsitepackages()
except Exception:
    pass
try:
    roots.append(site.getusersitepackages())
except Exception:
    pass
roots += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
seen = []
for root in roots:
    for lib in sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib"))):
        if lib not in seen:
            seen.append(lib)
print(":".join(seen))
' 2>/dev/null || true)
fi
_mg_add "$_mg_nvidia"
_mg_add "${LD_LIBRARY_PATH:-}"
export LD_LIBRARY_PATH=$_mg_path
export MESHGATE_GPU_BUNDLE=$_mg_bundle
export MESHGATE_RUNNER=$_mg_bundle/bin/meshgate-runner
export MESHGATE_PLAN=$_mg_bundle/bin/meshgate-plan
# Results record the revision the binaries were built from (no source tree is at the path the
# runner was built in, so it cannot ask git itself).
export MESHGATE_COMMIT=@COMMIT@
export MESHGATE_DIRTY=@DIRTY@
unset -f _mg_add
unset _mg_src _mg_bundle _mg_path _mg_nvcc _mg_cuda _mg_python _mg_nvidia
"""


def env_script(commit: str, dirty: bool) -> str:
    """The bundle's env.sh (see ENV_SH)."""
    if not re.fullmatch(r"[0-9A-Za-z._-]+", commit):
        raise BundleError(f"unexpected commit name {commit!r}")
    return ENV_SH.replace("@COMMIT@", commit).replace("@DIRTY@", "1" if dirty else "0")


def source_digest(root: Path) -> str:
    """A fingerprint of the files under DIGEST_PATHS (names and contents)."""
    files = []
    for rel in DIGEST_PATHS:
        top = root / rel
        if top.is_file():
            files.append(top)
        elif top.is_dir():
            files += [p for p in top.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    digest = hashlib.sha256()
    for path in sorted(files, key=lambda p: p.relative_to(root).as_posix()):
        data = path.read_bytes()
        digest.update(f"{path.relative_to(root).as_posix()}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()[:16]


def _git(root: Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return proc.stdout.strip()


def checkout_head(root: Path) -> tuple:
    """(commit, dirty) of the git checkout whose top is root, or (None, False) when root is no
    checkout's top: a copy of the tree inside another repository must not take its commit."""
    top = _git(root, "rev-parse", "--show-toplevel")
    if not top or Path(top).resolve() != root.resolve():
        return None, False
    dirty = bool(_git(root, "status", "--porcelain", "--untracked-files=no"))
    return _git(root, "rev-parse", "HEAD"), dirty


def _cache_value(build_dir: Path, name: str) -> str | None:
    """A variable of build_dir's CMakeCache.txt or of the compiler descriptions CMake wrote."""
    for line in (build_dir / "CMakeCache.txt").read_text().splitlines():
        if line.startswith(name + ":") and "=" in line:
            return line.split("=", 1)[1]
    for found in sorted((build_dir / "CMakeFiles").glob("*/CMake*Compiler.cmake")):
        m = re.search(rf'^set\({name} "([^"]*)"\)', found.read_text(), re.M)
        if m:
            return m.group(1)
    return None


def _cuda_architectures(build_dir: Path) -> list:
    """The GPU architectures the CUDA sources were compiled for (sm_80, ...), from the nvcc flags
    the generator wrote (the default architectures are not in the cache)."""
    found = set()
    for flags in [*build_dir.glob("**/flags.make"), build_dir / "build.ninja"]:
        if flags.is_file():
            found.update(re.findall(r"code=\[?[\w,]*?\bsm_(\d+)", flags.read_text(errors="replace")))
    return [f"sm_{arch}" for arch in sorted(found, key=int)]


def _nccl_header_version(build_dir: Path) -> str | None:
    include = _cache_value(build_dir, "NCCL_INCLUDE_DIR")
    if not include or not (Path(include) / "nccl.h").is_file():
        return None
    text = (Path(include) / "nccl.h").read_text(errors="replace")
    parts = [re.search(rf"^#define NCCL_{p}\s+(\d+)", text, re.M) for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts) if all(parts) else None


def _run(command: list) -> str:
    try:
        proc = subprocess.run(command, capture_output=True, text=True)
    except OSError as e:
        raise BundleError(f"cannot run {command[0]}: {e}") from None
    return proc.stdout + proc.stderr


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def assemble(build_dir: Path, dest: Path, preset: str, limit_mib: float, root: Path = REPO,
             out=sys.stdout) -> dict:
    """Copies the binaries of BINARIES from build_dir (debug info stripped) and the libraries
    they load that the GPU machine lacks into dest, with env.sh and manifest.json. The bundle is
    put together beside dest and replaces it only when complete and within limit_mib."""
    build_dir, dest = build_dir.resolve(), dest.resolve()
    binaries = {name: build_dir / rel for name, rel in BINARIES.items()}
    for name, path in binaries.items():
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise BundleError(f"{path} is missing: build the {name} target of {build_dir} first")
    ldd = {name: _run(["ldd", str(path)]) for name, path in binaries.items()}
    sel = select_libraries(ldd)
    if sel.missing:
        raise BundleError("not found here, so it cannot be carried: " + "; ".join(
            f"{lib} (needed by {', '.join(who)})" for lib, who in sorted(sel.missing.items())))

    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    (partial / "bin").mkdir(parents=True)
    (partial / "lib").mkdir()
    for name, path in binaries.items():
        target = partial / "bin" / name
        # Only the debug sections go: the symbol table stays for readable backtraces.
        proc = subprocess.run(["strip", "--strip-debug", "-o", str(target), str(path)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise BundleError(f"strip --strip-debug {path} failed: {proc.stderr.strip()}")
    for name, path in sorted(sel.carried.items()):
        # Copied under the name the binaries ask for, the symlinks here resolved.
        shutil.copyfile(os.path.realpath(path), partial / "lib" / name)

    commit, dirty = checkout_head(root)
    commit = commit or "unknown"
    (partial / "env.sh").write_text(env_script(commit, dirty))
    files = sorted(p for p in partial.rglob("*") if p.is_file())
    objdump = "".join(_run(["objdump", "-p", str(p)]) for p in files if p.parent.name in ("bin", "lib"))
    manifest = {
        "commit": commit,
        "dirty": dirty,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "preset": preset,
        "build_type": _cache_value(build_dir, "CMAKE_BUILD_TYPE"),
        "cuda_architectures": _cuda_architectures(build_dir),
        "built_against": {"cuda": _cache_value(build_dir, "CMAKE_CUDA_COMPILER_VERSION"),
                          "nccl": _nccl_header_version(build_dir),
                          "cxx": _cache_value(build_dir, "CMAKE_CXX_COMPILER_VERSION")},
        "requires": required_versions(objdump),
        "source_digest": source_digest(root),
        "files": [{"path": p.relative_to(partial).as_posix(), "size": p.stat().st_size}
                  for p in files],
        "left_to_machine": dict(sorted(sel.left.items())),
    }
    total = sum(f["size"] for f in manifest["files"])
    manifest["total_size"] = total
    (partial / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    total += (partial / "manifest.json").stat().st_size

    for f in manifest["files"]:
        print(f"{f['size']:>12,}  {f['path']}", file=out)
    print(f"{total:>12,}  total ({_mib(total)}, limit {limit_mib:g} MiB)", file=out)
    if total > limit_mib * 2**20:
        shutil.rmtree(partial, ignore_errors=True)
        raise BundleError(f"the bundle would be {_mib(total)}, over its limit of {limit_mib:g} MiB")
    shutil.rmtree(dest, ignore_errors=True)
    partial.rename(dest)
    print(f"left to the GPU machine: {', '.join(manifest['left_to_machine'])}", file=out)
    print(f"needs at least: {', '.join(manifest['requires'].values())}", file=out)
    print(f"bundle: {dest} (commit {commit[:12]}{', dirty' if dirty else ''})", file=out)
    return manifest


def check(bundle: Path, root: Path = REPO, out=sys.stdout, err=sys.stderr) -> bool:
    """Whether the bundle is complete and every binary in it loads here with its env.sh: every
    library and symbol resolves, the carried ones from its lib/. Prints where the libraries left
    to this machine were found, and warns (without failing) when the checkout here is not what
    the bundle was built from."""
    bundle = bundle.resolve()
    try:
        manifest = json.loads((bundle / "manifest.json").read_text())
    except (OSError, ValueError) as e:
        print(f"gpu-bundle: {bundle}/manifest.json is unreadable ({e}): rebuild the bundle with "
              f"ci/gpu-bundle", file=err)
        return False
    ok = True
    for f in manifest.get("files", []):
        path = bundle / f["path"]
        size = path.stat().st_size if path.is_file() else None
        if size != f["size"]:
            print(f"gpu-bundle: {f['path']} is {'missing' if size is None else f'{size} bytes'}, "
                  f"the manifest says {f['size']} bytes: the bundle is damaged or incomplete",
                  file=err)
            ok = False
    if not ok:
        return False
    print(f"bundle {bundle}: commit {manifest['commit'][:12]}"
          f"{' (dirty)' if manifest.get('dirty') else ''}, built {manifest['date']}, preset "
          f"{manifest['preset']}, {len(manifest['files'])} files, {_mib(manifest['total_size'])}",
          file=out)
    where: dict = {}
    for name in BINARIES:
        binary = bundle / "bin" / name
        text = _run(["bash", "-c", 'source "$1/env.sh" && exec ldd -r "$2"', "bash",
                     str(bundle), str(binary)])
        problems = ldd_problems(text)
        for lib in parse_ldd(text):
            if lib.path and lib.name in manifest["left_to_machine"]:
                where.setdefault(lib.name, lib.path)
            elif lib.path and machine_group(lib.name) is None \
                    and not os.path.realpath(lib.path).startswith(str(bundle / "lib") + os.sep):
                problems.append(f"{lib.name} => {lib.path}, not the bundle's copy in lib/")
        if problems:
            ok = False
            print(f"FAIL {name}:", file=err)
            for line in problems:
                print(f"  {line}", file=err)
        else:
            print(f"ok   {name} loads", file=out)
    for name, path in sorted(where.items()):
        if machine_group(name) == "CUDA, NCCL and driver":
            print(f"     {name} => {path}", file=out)
    if not ok:
        print("gpu-bundle: a library or symbol above is not found here. NCCL may live only in a "
              "Python environment: put the python3 whose site-packages hold nvidia/nccl/lib on "
              "PATH, or set MESHGATE_BUNDLE_PYTHON to it, and source env.sh again. An undefined "
              f"symbol means an older library than the one built against "
              f"({manifest.get('built_against')}).", file=err)

    head, _ = checkout_head(root)
    digest = source_digest(root)
    if digest != manifest.get("source_digest"):
        print(f"warning: the sources here (lib/, harness/runner/, CMake files) differ from those "
              f"the bundle was built from (commit {manifest['commit'][:12]}"
              f"{', dirty' if manifest.get('dirty') else ''}; here: "
              f"{head[:12] if head else 'no git checkout'}): rebuild it with ci/gpu-bundle",
              file=err)
    elif head and head != manifest["commit"]:
        print(f"warning: the bundle was built at commit {manifest['commit'][:12]}, this checkout "
              f"is at {head[:12]} (the binaries' sources are the same)", file=err)
    return ok


def main(argv: list | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu_bundle.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("targets", help="print the CMake targets a bundle holds, one per line")
    p = sub.add_parser("assemble", help="assemble a bundle from a build directory")
    p.add_argument("build_dir", type=Path)
    p.add_argument("dest", type=Path)
    p.add_argument("--preset", default="gpu-bundle")
    p.add_argument("--limit-mib", type=float, default=LIMIT_MIB)
    p = sub.add_parser("check", help="check that a bundle loads here")
    p.add_argument("bundle", type=Path)
    sub.add_parser("digest", help="print the fingerprint of the sources a bundle is built from")
    args = parser.parse_args(argv)
    try:
        if args.command == "targets":
            print("\n".join(BINARIES))
        elif args.command == "assemble":
            assemble(args.build_dir, args.dest, args.preset, args.limit_mib)
        elif args.command == "check":
            return 0 if check(args.bundle) else 1
        else:
            print(source_digest(REPO))
    except BundleError as e:
        print(f"gpu-bundle: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
