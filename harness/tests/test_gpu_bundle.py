"""ci/gpu_bundle.py, the bundle of GPU binaries for a machine that cannot build meshgate: which
libraries travel (from canned ldd output), the env.sh that finds the rest there, the size limit,
and the check of a bundle on the machine it reached. No build needed: the binaries here are
copies of a system executable."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from tests.support import once

REPO = Path(__file__).resolve().parents[2]


def load_gpu_bundle():
    spec = importlib.util.spec_from_file_location("gpu_bundle", REPO / "ci" / "gpu_bundle.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_bundle"] = module   # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


gb = load_gpu_bundle()

# ldd of meshgate-runner and of the NCCL test binary of a gpu-bundle build on Debian 12 with
# the CUDA toolkit in /usr/local/cuda (its libraries in lib/) and OpenBLAS by alternatives.
RUNNER_LDD = """\
\tlinux-vdso.so.1 (0x00007fa07c406000)
\tlibyaml-cpp.so.0.7 => /lib/x86_64-linux-gnu/libyaml-cpp.so.0.7 (0x00007fa07c39e000)
\tlibopenblas.so.0 => /lib/x86_64-linux-gnu/libopenblas.so.0 (0x00007fa079d18000)
\tlibcublas.so.13 => /usr/local/cuda/lib/libcublas.so.13 (0x00007fa076600000)
\tlibcublasLt.so.13 => /usr/local/cuda/lib/libcublasLt.so.13 (0x00007fa050600000)
\tlibcudart.so.13 => /usr/local/cuda/lib/libcudart.so.13 (0x00007fa050200000)
\tlibnccl.so.2 => /usr/local/cuda/lib/libnccl.so.2 (0x00007fa044a00000)
\tlibstdc++.so.6 => /lib/x86_64-linux-gnu/libstdc++.so.6 (0x00007fa044600000)
\tlibm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x00007fa07c2bc000)
\tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007fa07c29c000)
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007fa04481e000)
\tlibgfortran.so.5 => /lib/x86_64-linux-gnu/libgfortran.so.5 (0x00007fa044200000)
\t/lib64/ld-linux-x86-64.so.2 (0x00007fa07c408000)
\tlibrt.so.1 => /lib/x86_64-linux-gnu/librt.so.1 (0x00007fa07c295000)
\tlibpthread.so.0 => /lib/x86_64-linux-gnu/libpthread.so.0 (0x00007fa07c290000)
\tlibdl.so.2 => /lib/x86_64-linux-gnu/libdl.so.2 (0x00007fa07c28b000)
\tlibquadmath.so.0 => /lib/x86_64-linux-gnu/libquadmath.so.0 (0x00007fa07c244000)
"""
NCCL_TEST_LDD = """\
\tlinux-vdso.so.1 (0x00007ff899e38000)
\tlibcudart.so.13 => /usr/local/cuda/lib/libcudart.so.13 (0x00007ff899a00000)
\tlibnccl.so.2 => /usr/local/cuda/lib/libnccl.so.2 (0x00007ff88e200000)
\tlibstdc++.so.6 => /lib/x86_64-linux-gnu/libstdc++.so.6 (0x00007ff88de00000)
\tlibm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x00007ff899cc2000)
\tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007ff8999e0000)
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007ff88e01e000)
\t/lib64/ld-linux-x86-64.so.2 (0x00007ff899e3a000)
"""
# The same runner on a GPU machine without NCCL where the loader looks, checked with `ldd -r`.
BROKEN_LDD = """\
\tlibyaml-cpp.so.0.7 => /b/lib/libyaml-cpp.so.0.7 (0x00007fa07c39e000)
\tlibnccl.so.2 => not found
\tlibstdc++.so.6 => /lib/x86_64-linux-gnu/libstdc++.so.6 (0x00007fa044600000)
./bin/meshgate-runner: /lib/x86_64-linux-gnu/libstdc++.so.6: version `GLIBCXX_3.4.32' not found (required by ./bin/meshgate-runner)
undefined symbol: ncclAlltoAll\t(./bin/meshgate-runner)
"""
OBJDUMP = """\
Version References:
  required from libgcc_s.so.1:
    0x0b792650 0x00 24 GCC_3.0
  required from libm.so.6:
    0x06969189 0x00 26 GLIBC_2.29
  required from libcublas.so.13:
    0x0ef62133 0x00 13 libcublas.so.13
  required from libc.so.6:
    0x069691b4 0x00 31 GLIBC_2.34
    0x09691a75 0x00 09 GLIBC_2.2.5
  required from libstdc++.so.6:
    0x0297f840 0x00 23 GLIBCXX_3.4.30
    0x0297f879 0x00 21 GLIBCXX_3.4.9
    0x0afd17f3 0x00 15 CXXABI_1.3.13
Version References:
  required from libgfortran.so.5:
    0x0858a3e8 0x00 05 GFORTRAN_8
  required from libc.so.6:
    0x069691b3 0x00 04 GLIBC_2.33
"""


class LibrarySelection(unittest.TestCase):
    def test_parse_ldd_reads_paths_the_loader_and_the_vdso(self):
        libs = {lib.name: lib for lib in gb.parse_ldd(RUNNER_LDD)}
        self.assertEqual(libs["libopenblas.so.0"].path, "/lib/x86_64-linux-gnu/libopenblas.so.0")
        self.assertEqual(libs["ld-linux-x86-64.so.2"].path, "/lib64/ld-linux-x86-64.so.2")
        self.assertIsNone(libs["linux-vdso.so.1"].path)
        self.assertEqual(len(libs), 17)
        broken = {lib.name: lib for lib in gb.parse_ldd(BROKEN_LDD)}
        self.assertFalse(broken["libnccl.so.2"].found)
        self.assertEqual(set(broken), {"libyaml-cpp.so.0.7", "libnccl.so.2", "libstdc++.so.6"})

    def test_the_bundle_carries_yaml_cpp_openblas_and_fortran_and_nothing_the_machine_has(self):
        sel = gb.select_libraries({"meshgate-runner": RUNNER_LDD,
                                   "meshgate_comm_nccl_test": NCCL_TEST_LDD})
        self.assertEqual(sel.carried, {
            "libyaml-cpp.so.0.7": "/lib/x86_64-linux-gnu/libyaml-cpp.so.0.7",
            "libopenblas.so.0": "/lib/x86_64-linux-gnu/libopenblas.so.0",
            "libgfortran.so.5": "/lib/x86_64-linux-gnu/libgfortran.so.5",
            "libquadmath.so.0": "/lib/x86_64-linux-gnu/libquadmath.so.0"})
        self.assertEqual(sel.missing, {})
        self.assertEqual(sel.left["libnccl.so.2"], "CUDA, NCCL and driver")
        self.assertEqual(sel.left["libstdc++.so.6"], "C++ runtime")
        self.assertEqual(sel.left["ld-linux-x86-64.so.2"], "glibc")
        self.assertEqual(set(sel.left), {
            "linux-vdso.so.1", "libcublas.so.13", "libcublasLt.so.13", "libcudart.so.13",
            "libnccl.so.2", "libstdc++.so.6", "libm.so.6", "libgcc_s.so.1", "libc.so.6",
            "ld-linux-x86-64.so.2", "librt.so.1", "libpthread.so.0", "libdl.so.2"})

    def test_a_library_not_found_here_is_missing_unless_the_machine_provides_it(self):
        text = RUNNER_LDD.replace("libyaml-cpp.so.0.7 => /lib/x86_64-linux-gnu/libyaml-cpp.so.0.7 "
                                  "(0x00007fa07c39e000)", "libyaml-cpp.so.0.7 => not found")
        text = text.replace("libnccl.so.2 => /usr/local/cuda/lib/libnccl.so.2 (0x00007fa044a00000)",
                            "libnccl.so.2 => not found")
        sel = gb.select_libraries({"meshgate-runner": text, "meshgate-plan": text})
        self.assertEqual(sel.missing, {"libyaml-cpp.so.0.7": ["meshgate-runner", "meshgate-plan"]})
        self.assertNotIn("libyaml-cpp.so.0.7", sel.carried)
        self.assertIn("libnccl.so.2", sel.left)

    def test_machine_groups(self):
        left = {"libc.so.6": "glibc", "libm.so.6": "glibc", "libmvec.so.1": "glibc",
                "libresolv.so.2": "glibc", "libnss_files.so.2": "glibc",
                "ld-linux-x86-64.so.2": "glibc", "libstdc++.so.6": "C++ runtime",
                "libgcc_s.so.1": "C++ runtime", "libcuda.so.1": "CUDA, NCCL and driver",
                "libnvidia-ml.so.1": "CUDA, NCCL and driver",
                "libnvrtc.so.13": "CUDA, NCCL and driver",
                "libnvrtc-builtins.so.13.0": "CUDA, NCCL and driver",
                "libcublasLt.so.13": "CUDA, NCCL and driver", "libnccl.so.2": "CUDA, NCCL and driver"}
        for name, group in left.items():
            self.assertEqual(gb.machine_group(name), group, name)
        for name in ("libgfortran.so.5", "libquadmath.so.0", "libopenblas.so.0", "libblas.so.3",
                     "libyaml-cpp.so.0.7", "libgomp.so.1", "libmpi.so.40", "libhwloc.so.15",
                     "libmagic.so.1", "libcommon.so", "libdlfoo.so.1", "libcudnn.so.9",
                     "libstdc++fs.so"):
            self.assertIsNone(gb.machine_group(name), name)

    def test_ldd_problems_name_missing_libraries_versions_and_symbols(self):
        problems = gb.ldd_problems(BROKEN_LDD)
        self.assertEqual(len(problems), 3)
        self.assertIn("libnccl.so.2 => not found", problems)
        self.assertTrue(any("GLIBCXX_3.4.32" in p for p in problems))
        self.assertTrue(any("ncclAlltoAll" in p for p in problems))
        self.assertEqual(gb.ldd_problems(RUNNER_LDD), [])

    def test_required_versions_are_the_newest_of_the_machines_runtimes(self):
        self.assertEqual(gb.required_versions(OBJDUMP), {
            "CXXABI": "CXXABI_1.3.13", "GCC": "GCC_3.0", "GLIBC": "GLIBC_2.34",
            "GLIBCXX": "GLIBCXX_3.4.30"})


def write_exec(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


@unittest.skipUnless(shutil.which("bash"), "needs bash")
class EnvScript(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="meshgate-bundle-env-")
        self.addCleanup(tmp.cleanup)
        self.tmp = Path(tmp.name).resolve()
        self.bundle = self.tmp / "bundle"
        (self.bundle / "lib").mkdir(parents=True)
        (self.bundle / "bin").mkdir()
        (self.bundle / "env.sh").write_text(gb.env_script("0123abc", True))
        # NVIDIA's CUDA 13 wheels put their libraries in nvidia/cu13/lib, NCCL's in nvidia/nccl/lib.
        self.site = self.tmp / "venv" / "site-packages"
        for pkg in ("nccl", "cu13"):
            (self.site / "nvidia" / pkg / "lib").mkdir(parents=True)
        (self.site / "nvidia" / "no_lib_folder").mkdir()
        self.cuda = self.tmp / "cuda"
        (self.cuda / "lib64").mkdir(parents=True)
        self.existing = self.tmp / "existing"
        self.existing.mkdir()
        # A python3 whose sys.path holds the fake site-packages.
        self.pybin = self.tmp / "pybin"
        write_exec(self.pybin / "python3",
                   f'#!/bin/sh\nPYTHONPATH="{self.site}" exec "{sys.executable}" "$@"\n')

    def source(self, script: str, path: str, cwd: Path | None = None, **env) -> dict:
        """Sources env.sh (twice when `script` says so) under `set -euo pipefail` and returns
        the variables it sets, or raises when bash fails."""
        shell = shutil.which("bash")
        body = ("set -euo pipefail\n" + script + "\n"
                'for v in LD_LIBRARY_PATH MESHGATE_RUNNER MESHGATE_PLAN MESHGATE_GPU_BUNDLE '
                'MESHGATE_COMMIT MESHGATE_DIRTY; do printf "%s=%s\\n" "$v" "${!v:-}"; done\n'
                'declare -F _mg_add >/dev/null && echo LEAK=_mg_add\n'
                '[ -z "${_mg_path+x}${_mg_bundle+x}" ] || echo LEAK=variables\n'
                'true\n')
        proc = subprocess.run([shell, "-c", body], cwd=cwd or self.tmp, capture_output=True,
                              text=True, env={"PATH": path, **env})
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return dict(line.split("=", 1) for line in proc.stdout.splitlines())

    def test_bundle_then_toolkit_then_pip_nvidia_then_previous_entries(self):
        old = f"/does/not/exist::{self.existing}:{self.bundle}/lib"
        got = self.source("source bundle/env.sh\nsource bundle/env.sh", f"{self.pybin}:/usr/bin:/bin",
                          CUDA_HOME=str(self.cuda), LD_LIBRARY_PATH=old)
        entries = got["LD_LIBRARY_PATH"].split(":")
        self.assertEqual(entries[0], f"{self.bundle}/lib")
        self.assertEqual(entries[1], f"{self.cuda}/lib64")
        nccl, cu13 = (entries.index(str(self.site / "nvidia" / p / "lib")) for p in ("nccl", "cu13"))
        self.assertLess(1, min(nccl, cu13))
        self.assertEqual(entries[-1], str(self.existing))
        self.assertEqual(len(entries), len(set(entries)), "an entry repeats after sourcing twice")
        self.assertNotIn("", entries)
        self.assertNotIn("/does/not/exist", entries)
        self.assertEqual(got["MESHGATE_RUNNER"], f"{self.bundle}/bin/meshgate-runner")
        self.assertEqual(got["MESHGATE_PLAN"], f"{self.bundle}/bin/meshgate-plan")
        self.assertEqual(got["MESHGATE_GPU_BUNDLE"], str(self.bundle))
        self.assertEqual((got["MESHGATE_COMMIT"], got["MESHGATE_DIRTY"]), ("0123abc", "1"))
        self.assertNotIn("LEAK", got)

    def test_no_python_no_failure(self):
        # Only builtins are needed: no PATH at all, bash started by its full path.
        got = self.source(f"cd bundle\nsource env.sh", "/nonexistent")
        self.assertEqual(got["LD_LIBRARY_PATH"].split(":")[0], f"{self.bundle}/lib")
        self.assertNotIn("nvidia", got["LD_LIBRARY_PATH"])
        self.assertEqual(got["MESHGATE_RUNNER"], f"{self.bundle}/bin/meshgate-runner")

    def test_a_failing_python_is_ignored_and_another_can_be_named(self):
        broken = write_exec(self.tmp / "broken" / "python3", "#!/bin/sh\necho oops >&2\nexit 3\n")
        got = self.source(f"source {self.bundle}/env.sh", f"{broken.parent}:/usr/bin:/bin")
        self.assertNotIn("nvidia", got["LD_LIBRARY_PATH"])
        got = self.source(f"source {self.bundle}/env.sh", f"{broken.parent}:/usr/bin:/bin",
                          MESHGATE_BUNDLE_PYTHON=str(self.pybin / "python3"))
        self.assertIn(str(self.site / "nvidia" / "nccl" / "lib"), got["LD_LIBRARY_PATH"].split(":"))

    def test_commit_names_are_checked(self):
        self.assertIn("MESHGATE_DIRTY=0", gb.env_script("abc", False))
        with self.assertRaises(gb.BundleError):
            gb.env_script("abc; rm -rf /", False)


class SourceDigest(unittest.TestCase):
    def test_changes_with_the_binaries_sources_only(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            (root / "lib" / "gemm").mkdir(parents=True)
            (root / "lib" / "gemm" / "gemm.cpp").write_text("int x;\n")
            (root / "CMakeLists.txt").write_text("project(x)\n")
            (root / "docs.md").write_text("a\n")
            first = gb.source_digest(root)
            (root / "docs.md").write_text("b\n")
            (root / "lib" / "__pycache__").mkdir()
            (root / "lib" / "__pycache__" / "x.pyc").write_bytes(b"\0")
            self.assertEqual(gb.source_digest(root), first)
            (root / "lib" / "gemm" / "gemm.cpp").write_text("int y;\n")
            self.assertNotEqual(gb.source_digest(root), first)


@unittest.skipUnless(shutil.which("git"), "needs git")
class CheckoutHead(unittest.TestCase):
    def test_only_the_top_of_a_checkout_has_a_commit(self):
        with tempfile.TemporaryDirectory() as tmp:
            repo = Path(tmp) / "repo"
            (repo / "copy").mkdir(parents=True)
            git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
            subprocess.run(git + ["init", "-q"], check=True)
            (repo / "a").write_text("1\n")
            subprocess.run(git + ["add", "a"], check=True)
            subprocess.run(git + ["commit", "-q", "-m", "a"], check=True)
            commit, dirty = gb.checkout_head(repo)
            self.assertRegex(commit, "^[0-9a-f]{40}$")
            self.assertFalse(dirty)
            (repo / "a").write_text("2\n")
            self.assertEqual(gb.checkout_head(repo), (commit, True))
            # A copy of the tree inside another repository is no checkout of its own.
            self.assertEqual(gb.checkout_head(repo / "copy"), (None, False))


EXECUTABLE = Path("/bin/true")


@unittest.skipUnless(all(shutil.which(t) for t in ("ldd", "strip", "objdump", "bash"))
                     and EXECUTABLE.is_file(), "needs ldd, binutils and bash")
@once("assembles and checks a whole bundle")
class AssembleAndCheck(unittest.TestCase):
    """assemble and check on a fake build directory whose binaries are copies of /bin/true
    (glibc only, so no library travels)."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="meshgate-bundle-")
        self.addCleanup(tmp.cleanup)
        self.tmp = Path(tmp.name).resolve()
        self.build = self.tmp / "build"
        for rel in gb.BINARIES.values():
            (self.build / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(EXECUTABLE, self.build / rel)
        (self.build / "CMakeCache.txt").write_text("CMAKE_BUILD_TYPE:STRING=RelWithDebInfo\n")
        self.root = self.tmp / "src"
        (self.root / "lib").mkdir(parents=True)
        (self.root / "lib" / "a.cpp").write_text("int a;\n")
        self.dest = self.tmp / "bundle"

    def assemble(self, limit_mib=48.0):
        out = io.StringIO()
        manifest = gb.assemble(self.build, self.dest, "gpu-bundle", limit_mib, root=self.root, out=out)
        return manifest, out.getvalue()

    def check(self):
        out, err = io.StringIO(), io.StringIO()
        ok = gb.check(self.dest, root=self.root, out=out, err=err)
        return ok, out.getvalue(), err.getvalue()

    def test_a_complete_bundle_passes_its_check(self):
        manifest, printed = self.assemble()
        self.assertEqual(sorted(p.name for p in (self.dest / "bin").iterdir()), sorted(gb.BINARIES))
        self.assertEqual(list((self.dest / "lib").iterdir()), [])
        self.assertEqual(manifest["commit"], "unknown")   # no git checkout at root
        self.assertEqual(manifest["build_type"], "RelWithDebInfo")
        self.assertIn("libc.so.6", manifest["left_to_machine"])
        self.assertIn("GLIBC", manifest["requires"])
        on_disk = json.loads((self.dest / "manifest.json").read_text())
        self.assertEqual(on_disk["files"], manifest["files"])
        self.assertIn("env.sh", [f["path"] for f in on_disk["files"]])
        self.assertIn("total (", printed)
        self.assertFalse(self.dest.with_name("bundle.partial").exists())
        ok, out, err = self.check()
        self.assertTrue(ok, err)
        self.assertEqual(out.count(" loads"), len(gb.BINARIES))
        self.assertEqual(err, "")

    def test_a_damaged_bundle_or_other_sources_are_reported(self):
        self.assemble()
        (self.root / "lib" / "a.cpp").write_text("int b;\n")
        ok, _, err = self.check()
        self.assertTrue(ok)
        self.assertIn("differ from those the bundle was built from", err)
        (self.dest / "bin" / "meshgate-plan").write_bytes(b"\0")
        ok, _, err = self.check()
        self.assertFalse(ok)
        self.assertIn("bin/meshgate-plan is 1 bytes", err)
        (self.dest / "manifest.json").unlink()
        ok, _, err = self.check()
        self.assertFalse(ok)
        self.assertIn("manifest.json is unreadable", err)

    def test_a_binary_that_does_not_load_fails_the_check(self):
        self.assemble()
        # A library the binary asks for that neither the bundle nor the machine has.
        fake = self.dest / "bin" / "meshgate_gemm_test"
        fake.write_bytes(b"#!/bin/sh\n")
        manifest = json.loads((self.dest / "manifest.json").read_text())
        for f in manifest["files"]:
            if f["path"] == "bin/meshgate_gemm_test":
                f["size"] = fake.stat().st_size
        (self.dest / "manifest.json").write_text(json.dumps(manifest))
        ok, _, err = self.check()
        self.assertFalse(ok)
        self.assertIn("FAIL meshgate_gemm_test", err)
        self.assertIn("not a dynamic executable", err)

    def test_over_the_limit_the_previous_bundle_stays(self):
        self.assemble()
        before = (self.dest / "manifest.json").read_text()
        with self.assertRaisesRegex(gb.BundleError, "over its limit of 0.01 MiB"):
            self.assemble(limit_mib=0.01)
        self.assertEqual((self.dest / "manifest.json").read_text(), before)
        self.assertFalse(self.dest.with_name("bundle.partial").exists())

    def test_a_missing_binary_names_its_target(self):
        os.unlink(self.build / gb.BINARIES["meshgate_comm_nccl_test"])
        with self.assertRaisesRegex(gb.BundleError, "meshgate_comm_nccl_test target"):
            self.assemble()
        self.assertFalse(self.dest.exists())


if __name__ == "__main__":
    unittest.main()
