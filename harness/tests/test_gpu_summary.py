"""ci/gpu_summary.py on results a GPU machine wrote (an NVIDIA H100 80GB HBM3 running
cases/gemm/cuda-regression.yaml: three of its cases, samples dropped, host anonymised), and
ci/gpu-validate's `cases` stage in parts and its `nccl` stage, on a stand-in GPU machine: a
fake nvidia-smi and nvcc, and a bundle whose runner is the driver tests' fake runner."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

from .support import FakeRunner, option_values, once

REPO = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "gpu" / "h100-gemm-cuda-results.json"


class GpuSummaryTest(unittest.TestCase):
    def summary(self, *folders: Path) -> list[str]:
        done = subprocess.run([sys.executable, str(REPO / "ci" / "gpu_summary.py"),
                               *map(str, folders)], capture_output=True, text=True, check=False)
        self.assertEqual(done.returncode, 0, done.stderr)
        return done.stdout.splitlines()

    def test_parts_of_one_run_make_one_sorted_table(self):
        document = json.loads(FIXTURE.read_text())
        with tempfile.TemporaryDirectory() as tmp:
            # One part finished (results.json), one was stopped (results.jsonl only).
            finished, stopped = Path(tmp, "part-1"), Path(tmp, "part-2")
            finished.mkdir()
            stopped.mkdir()
            first, *rest = document["cases"]
            (finished / "results.json").write_text(json.dumps(dict(document, cases=rest)))
            (stopped / "results.jsonl").write_text(json.dumps(first) + "\n")
            lines = self.summary(stopped, finished)
        self.assertEqual(lines[0].split(" | ")[3], "TFLOP/s")
        rows = [line for line in lines if line.startswith("| gemm-cuda/")]
        self.assertEqual([r.split(" | ")[0] for r in rows],
                         ["| gemm-cuda/01-large-square-bf16-bias",
                          "| gemm-cuda/16-misaligned-bias-offset-1",
                          "| gemm-cuda/30-workspace-and-split-k-drift"])
        square = rows[0].split(" | ")
        self.assertEqual(square[2], "0.754 (cold 0.736)")  # fused over the best alternative
        self.assertEqual(square[3], "lt_epilogue 732; unfused 552; cublas 537; lt_beta_bias 532")
        self.assertEqual(square[4], "lt_epilogue")
        self.assertEqual(square[5], "id 66 tile 24 splitk 1 ws 4")  # the fused path's algorithm
        # A fused path that fell back has no ratio, and says what ran instead and why.
        misaligned = rows[1].split(" | ")
        self.assertEqual(misaligned[2], "n/a (fell back)")
        self.assertIn("unfused (bias pointer is 2-byte aligned", misaligned[4])
        # Split-K asked for but not taken by cuBLASLt: said, since no drift can show then.
        self.assertIn("split-K applied in 0/3 configurations", rows[2])
        self.assertEqual(lines[-1], "3 pass")


@unittest.skipUnless(shutil.which("bash"), "needs bash")
@once("every case of cases/ through the real runner")
class CasesInPartsTest(unittest.TestCase):
    IDS = [f"gemm-cuda/{n:02d}-case" for n in range(1, 6)]
    ONE_RANK = [{"id": "collectives-one-rank/all-reduce-float32-avg", "kind": "collective",
                 "tags": ["smoke", "one-rank"], "outcome": "pass"},
                {"id": "redistribute-single-dim/one-rank-s0-to-r", "kind": "redistribute",
                 "tags": ["smoke", "one-rank"], "outcome": "pass"},
                {"id": "collectives-smoke/all-gather-3-ranks", "kind": "collective",
                 "tags": ["smoke"], "outcome": "skip"}]

    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="meshgate-gpu-validate-")
        self.addCleanup(tmp.cleanup)
        self.dir = Path(tmp.name)
        self.fake = FakeRunner({"cases": [{"id": i, "kind": "gemm", "tags": ["gpu"],
                                           "outcome": "pass"} for i in self.IDS] + self.ONE_RANK})
        self.addCleanup(self.fake.__exit__)
        tools = self.dir / "tools"
        tools.mkdir()
        for name, text in {"nvidia-smi": "echo 'GPU 0: Stand-in GPU'", "nvcc": "true"}.items():
            (tools / name).write_text(f"#!/bin/sh\n{text}\n")
            (tools / name).chmod(0o755)
        bundle = self.dir / "bundle"
        (bundle / "bin").mkdir(parents=True)
        runner = bundle / "bin" / "meshgate-runner"
        runner.write_text(f"#!/bin/sh\nexec {sys.executable} {self.fake.command[1]} \"$@\"\n")
        # The test binaries log their arguments and print what FAKE_GTEST_OUTPUT holds.
        self.gtest_log = self.dir / "gtest-args"
        for binary in ("meshgate-runner", "meshgate_gemm_test", "meshgate_comm_nccl_test"):
            target = bundle / "bin" / binary
            if not target.exists():
                target.write_text(f"#!/bin/sh\necho \"{binary} $*\" >>{self.gtest_log}\n"
                                  "printf '%s\\n' \"$FAKE_GTEST_OUTPUT\"\n")
            target.chmod(0o755)
        (bundle / "env.sh").write_text(f"export MESHGATE_GPU_BUNDLE={bundle}\n"
                                       f"export MESHGATE_RUNNER={runner}\n")
        self.env = dict(self.fake.env, PATH=f"{tools}:{os.environ['PATH']}",
                        MESHGATE_GPU_BUNDLE=str(bundle), MESHGATE_CASE_PIECES="2",
                        MESHGATE_GPU_VALIDATE_OUT=str(self.dir / "out"),
                        FAKE_GTEST_OUTPUT="[  PASSED  ] 3 tests.")

    def validate(self, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(REPO / "ci" / "gpu-validate"), *argv], env=self.env,
                              capture_output=True, text=True, check=False)

    def test_every_case_runs_in_exactly_one_part_and_the_summary_joins_them(self):
        done = self.validate("cases")
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        parts = [option_values(argv, "--case") for argv in self.fake.run_launches()]
        self.assertEqual(parts, [self.IDS[0::2], self.IDS[1::2]])
        out = self.dir / "out"
        self.assertTrue((out / "cases" / "part-1" / "results.json").is_file())
        self.assertTrue((out / "cases" / "part-2" / "results.json").is_file())
        summary = (out / "summary.md").read_text().splitlines()
        self.assertEqual([line.split(" | ")[0][2:] for line in summary
                          if line.startswith("| gemm-cuda/")], self.IDS)
        self.assertEqual(summary[-1], "5 pass")

    def test_one_part_alone_and_a_part_that_does_not_exist(self):
        done = self.validate("cases", "2")
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertEqual([option_values(argv, "--case") for argv in self.fake.run_launches()],
                         [self.IDS[1::2]])
        done = self.validate("cases", "3")
        self.assertEqual(done.returncode, 1)
        self.assertIn("cases 3: a part from 1 to 2 (MESHGATE_CASE_PIECES)", done.stderr)

    def test_several_stages_in_one_call_and_names_checked_first(self):
        done = self.validate("check", "cases", "2", "nccl")
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        launches = self.fake.run_launches()
        self.assertEqual([option_values(argv, "--case") for argv in launches[:1]], [self.IDS[1::2]])
        self.assertEqual(option_values(launches[1], "--tag"), ["one-rank"])
        for argv in (["check", "cases", "nccl", "cuda"], ["check", "2"], []):
            done = self.validate(*argv)
            self.assertEqual(done.returncode, 2, argv)
            self.assertNotIn("Stand-in GPU", done.stdout)  # nothing ran, not even check
        self.assertIn("part 2 follows no 'cases'", self.validate("check", "2").stderr)
        self.assertIn("unknown stage 'cuda'", self.validate("cuda").stderr)
        self.assertEqual(len(self.fake.run_launches()), 2)

    def test_a_skipped_gpu_case_fails_its_part(self):
        scenario = json.loads(self.fake.scenario.read_text())
        scenario["cases"][3].update(outcome="skip", message="no CUDA device visible")
        self.fake.scenario.write_text(json.dumps(scenario))
        self.assertEqual(self.validate("cases", "1").returncode, 0)  # cases 1, 3 and 5
        done = self.validate("cases", "2")
        self.assertEqual(done.returncode, 1, done.stdout + done.stderr)
        self.assertIn(f"{self.IDS[3]}: skip: no CUDA device visible", done.stderr)
        self.assertIn("cases 2/2: not every GPU case passed", done.stderr)

    def test_tests_run_the_gpu_tests_and_a_skipped_one_fails_the_stage(self):
        done = self.validate("tests")
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertEqual(self.gtest_log.read_text().splitlines(), [
            "meshgate_gemm_test --gtest_filter=LtGemm.*:LtPlan.*:LtOperands.* --gtest_brief=0",
            # the test of a machine without a GPU is left out, not counted as a skip
            "meshgate_comm_nccl_test --gtest_filter=-Nccl.WithoutAGpuNcclWorldSaysSo --gtest_brief=0"])
        self.env["FAKE_GTEST_OUTPUT"] = "[  SKIPPED ] LtGemm.Bias"
        done = self.validate("tests")
        self.assertEqual(done.returncode, 1, done.stdout + done.stderr)
        self.assertIn("gemm-tests skipped GPU tests on a GPU machine", done.stderr)

    def test_a_bundle_needs_no_compiler_on_the_gpu_machine(self):
        tools = self.dir / "tools"
        (tools / "nvcc").unlink()
        self.env["PATH"] = f"{tools}:/usr/bin:/bin"
        done = self.validate("check", "tests")
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertIn("Stand-in GPU", done.stdout)
        # Building is what needs it, and says so.
        self.env["MESHGATE_GPU_BUNDLE"] = "none"
        done = self.validate("build")
        self.assertEqual(done.returncode, 1, done.stdout + done.stderr)
        self.assertIn("nvcc not found", done.stderr)

    def test_nccl_runs_the_one_rank_cases_on_the_nccl_backend_and_all_must_pass(self):
        done = self.validate("nccl")
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        [argv] = self.fake.run_launches()
        self.assertEqual(option_values(argv, "--backend"), ["nccl"])
        self.assertEqual(option_values(argv, "--tag"), ["one-rank"])
        self.assertIn("2 of 2 case(s) pass", done.stdout)

        # A case skipped on the GPU machine (e.g. no device visible to NCCL) fails the stage.
        scenario = json.loads(self.fake.scenario.read_text())
        scenario["cases"][-2].update(outcome="skip", message="no CUDA device visible")
        self.fake.scenario.write_text(json.dumps(scenario))
        done = self.validate("nccl")
        self.assertEqual(done.returncode, 1, done.stdout + done.stderr)
        log = (self.dir / "out" / "nccl.log").read_text()
        self.assertIn("redistribute-single-dim/one-rank-s0-to-r: skip: no CUDA device visible", log)
        self.assertIn("1 of 2 case(s) pass", log)
        self.assertIn("did not pass every case", done.stderr)

    def test_sweep_runs_the_cases_once_on_each_cublaslt_build(self):
        # The runner notes the library path each launch was given before it runs.
        runner, paths = self.dir / "bundle" / "bin" / "meshgate-runner", self.dir / "ld-paths"
        runner.write_text(f"#!/bin/sh\necho \"$1 $LD_LIBRARY_PATH\" >>{paths}\n"
                          f"exec {sys.executable} {self.fake.command[1]} \"$@\"\n")
        libs = [str(self.dir / "toolkit-lib"), str(self.dir / "wheel-lib")]
        self.env["MESHGATE_SWEEP_LIBS"] = " ".join(libs)
        done = self.validate("sweep")
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        runs = [line.split(" ", 1)[1] for line in paths.read_text().splitlines()
                if line.startswith("run ")]
        self.assertEqual([path.split(":")[0] for path in runs], libs)
        self.assertIn("# meshgate compat:", done.stdout)
        self.assertTrue((self.dir / "out" / "sweep" / "compat.json").is_file())
        # One build is no comparison.
        self.env["MESHGATE_SWEEP_LIBS"] = libs[0]
        done = self.validate("sweep")
        self.assertEqual(done.returncode, 1, done.stdout + done.stderr)
        self.assertIn("sweep needs two folders of cuBLASLt", done.stderr)

    def test_all_pass_needs_a_case(self):
        (self.dir / "empty").mkdir()
        (self.dir / "empty" / "results.json").write_text(json.dumps({"cases": []}))
        done = subprocess.run([sys.executable, str(REPO / "ci" / "gpu_summary.py"), "--all-pass",
                               str(self.dir / "empty")], capture_output=True, text=True)
        self.assertEqual(done.returncode, 1)
        self.assertIn("no case ran in", done.stderr)


if __name__ == "__main__":
    unittest.main()
