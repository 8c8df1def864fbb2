"""meshgate parity's committed list and its checks, and meshgate compat's classification of
what changed between two implementations or two environments: pure functions on result rows,
and compat end to end on the runner with each side's environment (MESHGATE_RUNNER)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
import unittest
from pathlib import Path

from meshgate.gate import compat, parity
from meshgate.system import implementations

REPO = Path(__file__).resolve().parents[2]


def row(case: str, status: str, kind: str = "redistribute", message: str = "", **metrics) -> dict:
    return {"id": case, "kind": kind, "status": status, "message": message, "plan": [],
            "metrics": metrics}


class ParityList(unittest.TestCase):
    def write(self, document: dict) -> Path:
        folder = Path(tempfile.mkdtemp(prefix="meshgate-parity-"))
        path = folder / "list.json"
        path.write_text(json.dumps(document))
        return path

    def test_a_bug_entry_needs_the_bug_and_the_damage(self):
        path = self.write({"disagreements": [{"case": "s/a", "class": "pytorch-bug", "why": "x"}]})
        with self.assertRaisesRegex(parity.ListError, "needs 'bug'"):
            parity.load_list(path)

    def test_a_meshgate_bug_is_never_listed(self):
        path = self.write({"disagreements": [{"case": "s/a", "class": "meshgate-bug", "why": "x"}]})
        with self.assertRaisesRegex(parity.ListError, "a meshgate bug is fixed, never listed"):
            parity.load_list(path)

    def test_a_case_listed_twice_is_refused(self):
        entry = {"case": "s/a", "class": "by-design", "why": "x"}
        with self.assertRaisesRegex(parity.ListError, "listed twice"):
            parity.load_list(self.write({"disagreements": [entry, entry]}))

    def test_a_list_extends_another_and_overrides_its_entries(self):
        folder = self.write({"disagreements": [
            {"case": "s/both", "class": "pytorch-bug", "bug": "b", "damage": "d", "why": "w"},
            {"case": "s/gloo-only", "class": "by-design", "why": "gloo"}]}).parent
        (folder / "local.json").write_text(json.dumps({"extends": "list.json", "disagreements": [
            {"case": "s/gloo-only", "class": "by-design", "why": "local"},
            {"case": "s/local-only", "class": "by-design", "why": "local"}]}))
        listed = parity.load_list(folder / "local.json")
        by_case = {e["case"]: e for e in listed["disagreements"]}
        self.assertEqual(sorted(by_case), ["s/both", "s/gloo-only", "s/local-only"])
        self.assertEqual(by_case["s/gloo-only"]["why"], "local")
        self.assertTrue(by_case["s/both"].get("inherited"))
        self.assertFalse(by_case["s/local-only"].get("inherited"))
        # An inherited entry whose case the world skips is not stale; one it passes is.
        rows = [row("s/both", "skip", message="torch-local: timing"), row("s/gloo-only", "pass"),
                row("s/local-only", "fail")]
        _, stale, _ = parity.check(rows, listed)
        self.assertEqual([e["case"] for e in stale], ["s/gloo-only"])
        rows[0] = row("s/both", "pass")
        _, stale, _ = parity.check(rows, listed)
        self.assertEqual(sorted(e["case"] for e in stale), ["s/both", "s/gloo-only"])

    def test_extends_names_an_existing_list_of_one_level(self):
        folder = self.write({"extends": "missing.json", "disagreements": []}).parent
        with self.assertRaisesRegex(parity.ListError, "missing.json, which does not exist"):
            parity.load_list(folder / "list.json")
        (folder / "base.json").write_text(json.dumps({"extends": "list.json",
                                                      "disagreements": []}))
        (folder / "top.json").write_text(json.dumps({"extends": "base.json",
                                                     "disagreements": []}))
        with self.assertRaisesRegex(parity.ListError, "extends another list in turn"):
            parity.load_list(folder / "top.json")

    def test_the_committed_local_world_list_extends_the_gloo_one(self):
        root = Path(__file__).resolve().parents[2] / "baselines"
        local = parity.load_list(root / "torch-local-parity.json")
        gloo = parity.load_list(root / "torch-parity.json")
        self.assertEqual({e["case"] for e in gloo["disagreements"]}
                         - {e["case"] for e in local["disagreements"]}, set())
        own = [e for e in local["disagreements"] if not e.get("inherited")]
        self.assertTrue(own)

    def test_unlisted_stale_and_error_rows_are_found(self):
        listed = {"disagreements": [{"case": "s/listed", "class": "by-design", "why": "x"},
                                    {"case": "s/fixed", "class": "by-design", "why": "x"},
                                    {"case": "s/gone", "class": "by-design", "why": "x"}]}
        rows = [row("s/listed", "fail"), row("s/fixed", "pass"), row("s/new", "fail"),
                row("s/broken", "error"), row("s/skipped", "skip", message="torch: no")]
        unlisted, stale, errors = parity.check(rows, listed)
        self.assertEqual([r["id"] for r in unlisted], ["s/new"])
        self.assertEqual([e["case"] for e in stale], ["s/fixed", "s/gone"])
        self.assertEqual([r["id"] for r in errors], ["s/broken"])

    def test_a_run_of_some_cases_judges_only_the_listed_cases_it_ran(self):
        listed = {"disagreements": [{"case": "s/listed", "class": "by-design", "why": "x"},
                                    {"case": "s/fixed", "class": "by-design", "why": "x"},
                                    {"case": "s/elsewhere", "class": "by-design", "why": "x"}]}
        rows = [row("s/listed", "fail"), row("s/fixed", "pass")]
        _, stale, _ = parity.check(rows, listed, whole=False)
        self.assertEqual([e["case"] for e in stale], ["s/fixed"])
        _, stale, _ = parity.check(rows, listed, whole=True)
        self.assertEqual([e["case"] for e in stale], ["s/fixed", "s/elsewhere"])

    def test_a_listed_disagreement_shows_as_known_with_its_class(self):
        from meshgate.commands.parity import _KnownDisagreements

        class Recorder:
            def __init__(self):
                self.lines = []

            def finished(self, tally, case_id, status, seconds, message):
                self.lines.append((case_id, status, message))

        listed = {"disagreements": [{"case": "s/bug", "class": "pytorch-bug"},
                                    {"case": "s/design", "class": "by-design"}]}
        view = _KnownDisagreements(Recorder(), listed)
        for case_id, status in (("s/bug", "fail"), ("s/design", "fail"), ("s/new", "fail"),
                                ("s/ok", "pass")):
            view.finished(None, case_id, status, 0.1, "expected x, got y")
        self.assertEqual(view.view.lines, [("s/bug", "known (pytorch-bug)", ""),
                                           ("s/design", "known (by-design)", ""),
                                           ("s/new", "fail", "expected x, got y"),
                                           ("s/ok", "pass", "expected x, got y")])

    def test_the_table_counts_disagreements_by_class(self):
        listed = {"disagreements": [{"case": "s/a", "class": "pytorch-bug", "bug": "b",
                                     "damage": "d", "why": "w"}]}
        rows = [row("s/a", "fail"), row("s/b", "fail"), row("s/c", "pass"),
                row("s/d", "skip", message="torch: needs 32 gloo ranks")]
        text = parity.render(rows, listed, 1.0, "torch", "2.15.0")
        self.assertIn("| redistribute | 3 | 1 | 2 (1 / 0 / 1) | 0 | 1 |", text)
        self.assertIn("skip redistribute x1: torch: needs 32 gloo ranks", text)

    def test_the_committed_list_is_well_formed(self):
        listed = parity.load_list(Path(__file__).resolve().parents[2] / "baselines"
                                  / "torch-parity.json")
        self.assertEqual(listed["version"], implementations.pinned_torch().split("==")[1])
        self.assertTrue(listed["disagreements"])


class CompatClassification(unittest.TestCase):
    def test_a_new_rejection_and_a_relaxation(self):
        accepted = row("s/a", "pass", plan_dummy=1)
        rejected = row("s/a", "fail", rejected="RuntimeError: no")
        self.assertEqual(compat.classify(accepted, rejected)[0], "new_rejection")
        self.assertEqual(compat.classify(rejected, accepted)[0], "relaxation")

    def test_rejections_by_type_and_by_wording(self):
        a = row("s/a", "pass", rejected="RuntimeError: Can not redistribute, internal use only")
        b = row("s/a", "pass", rejected="RuntimeError: Can not redistribute, only S to P(sum)")
        c = row("s/a", "pass", rejected="ValueError: Can not redistribute")
        self.assertEqual(compat.classify(a, b)[:2], ("representation_change", "error message"))
        self.assertEqual(compat.classify(a, c)[:2], ("semantic_change", "error type"))
        self.assertIsNone(compat.classify(a, dict(a)))

    def test_a_changed_plan_is_semantic_and_a_changed_layout_text_is_representation(self):
        base = dict(row("s/a", "pass"), plan=["all_reduce(A+B, sum)"])
        merged_differently = dict(row("s/a", "pass"), plan=["all_reduce(A, sum)",
                                                           "all_reduce(B, sum)"])
        self.assertEqual(compat.classify(base, merged_differently)[:2], ("semantic_change", "plan"))
        one = row("s/m", "pass", kind="mesh", layout="(2,2):(2,1)", shape=[2, 2])
        two = row("s/m", "pass", kind="mesh", layout="((2),(2)):((2),(1))", shape=[2, 2])
        self.assertEqual(compat.classify(one, two)[0], "representation_change")

    def test_a_skip_on_one_side_is_expressibility(self):
        self.assertEqual(compat.classify(row("s/a", "pass"), row("s/a", "skip"))[0],
                         "expressibility")
        self.assertIsNone(compat.classify(row("s/a", "skip"), row("s/a", "skip")))

    def test_changes_come_worst_first(self):
        base = [row("s/a", "pass", rejected="RuntimeError: x"), row("s/b", "pass"),
                row("s/c", "pass")]
        candidate = [row("s/a", "pass"), row("s/b", "fail", rejected="RuntimeError: y"),
                     row("s/c", "pass")]
        changes = compat.compare(base, candidate)
        self.assertEqual([(c["case"], c["class"]) for c in changes],
                         [("s/b", "new_rejection"), ("s/a", "relaxation")])
        self.assertIn("| new_rejection | 1 |", compat.markdown(changes, "torch 2.13.0",
                                                              "torch 2.15.0", 3))


def sweep_row(case: str, failing: list[str], **counts) -> dict:
    return row(case, "fail" if failing else "pass", kind="gemm_sweep", shapes=100,
               failing_shapes=failing, failure_counts=counts, failing_shapes_truncated=False)


class CompatOfTwoEnvironments(unittest.TestCase):
    def test_a_sweep_splits_its_failing_shapes_by_side(self):
        base = [sweep_row("g/u", ["56x70x38424 bf16 k_tail lt_epilogue", "8x8x9 f16 drift lt_epilogue"],
                          k_tail=1, drift=1),
                row("s/other", "pass")]
        candidate = [sweep_row("g/u", ["8x8x9 f16 drift lt_epilogue", "3x5x70001 bf16 k_tail lt_epilogue"],
                               k_tail=1, drift=1)]
        (sweep,) = compat.sweep_differential(base, candidate)
        self.assertEqual(sweep["only_base"], ["56x70x38424 bf16 k_tail lt_epilogue"])
        self.assertEqual(sweep["only_candidate"], ["3x5x70001 bf16 k_tail lt_epilogue"])
        self.assertEqual(sweep["both"], ["8x8x9 f16 drift lt_epilogue"])
        text = compat.markdown(compat.compare(base, candidate), "cuBLASLt 13.1.0", "cuBLASLt 13.4.1",
                               2, [sweep])
        self.assertIn("## GEMM sweeps", text)
        self.assertIn("| `g/u` | 100 / 100 | drift 1, k_tail 1 | drift 1, k_tail 1 | 1 | 1 | 1 |", text)
        self.assertIn("Failing on the candidate only, `g/u`:\n- `3x5x70001 bf16 k_tail lt_epilogue`", text)
        # The same failures on both sides: a sweep row, nothing one-sided, no change.
        same = compat.sweep_differential(candidate, candidate)
        self.assertEqual((same[0]["only_base"], same[0]["only_candidate"]), ([], []))
        self.assertEqual(compat.compare(candidate, candidate), [])
        # A side that skipped has no failing shapes to split: its status is a change instead.
        self.assertEqual(compat.sweep_differential(base, [row("g/u", "skip", kind="gemm_sweep")]), [])

    def test_each_side_is_labelled_by_the_library_versions_that_differ(self):
        def run(version, path):
            return {"versions": {"meshgate": "0.1.0", "cuda": "13.0", "cublaslt": version,
                                 "cublaslt_library": path}}
        old, new = run("13.1.0", "/cuda/libcublasLt.so.13"), run("13.4.1", "/venv/libcublasLt.so.13")
        self.assertEqual(compat.label("meshgate", old, new), "cuBLASLt 13.1.0 (/cuda/libcublasLt.so.13)")
        self.assertEqual(compat.label("meshgate", new, old), "cuBLASLt 13.4.1 (/venv/libcublasLt.so.13)")
        self.assertEqual(compat.label("meshgate X=1", old, old), "meshgate X=1")
        torch_run = dict(old, impls={"torch": {"version": "2.15.0"}})
        self.assertEqual(compat.label("torch", torch_run, old), "torch 2.15.0")

    def test_sides_that_do_not_differ_and_bad_assignments_are_usage_errors(self):
        from meshgate import cli

        for argv, said in ((["--base-env", "X=1", "--candidate-env", "X=1"], "both sides are meshgate X=1"),
                           ([], "both sides are meshgate"),
                           (["--base-env", "1X=2"], "--base-env '1X=2': expected NAME=VALUE"),
                           (["--candidate-env", "NOVALUE"], "--candidate-env 'NOVALUE'")):
            err = io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                code = cli.main(["compat", *argv, str(REPO / "cases" / "gemm-sweep" / "cpu.yaml")])
            self.assertEqual(code, 2, argv)
            self.assertIn(said, err.getvalue())


@unittest.skipUnless(os.environ.get("MESHGATE_RUNNER"), "needs the runner: set MESHGATE_RUNNER")
class CompatOfTwoEnvironmentsEndToEnd(unittest.TestCase):
    """Each side's runner gets its own environment: a case that reads a variable changes with
    it, and two cuBLASLt builds (the toolkit's, and the one PyTorch's wheels bring) are named."""

    def compat(self, *args: str) -> tuple[int, str, dict, Path]:
        from meshgate import cli

        out_dir = Path(tempfile.mkdtemp(prefix="meshgate-compat-"))
        self.addCleanup(__import__("shutil").rmtree, out_dir, ignore_errors=True)
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = cli.main(["compat", "--out", str(out_dir), *args])
        report = out_dir / "compat.json"
        return code, out.getvalue(), json.loads(report.read_text()) if report.exists() else {}, out_dir

    def test_a_case_that_reads_the_environment_changes_with_it(self):
        case = Path(tempfile.mkdtemp(prefix="meshgate-compat-case-")) / "env.yaml"
        self.addCleanup(__import__("shutil").rmtree, case.parent, ignore_errors=True)
        case.write_text(
            "suite: env\n"
            "cases:\n"
            "  - name: reads-flavour\n"
            "    kind: command\n"
            "    command:\n"
            "      - sh\n"
            "      - -c\n"
            "      - |\n"
            "        printf '{\"status\": \"pass\", \"signals\": {\"flavour\": \"%s\"}}' \\\n"
            "          \"$FLAVOUR\" > \"$MESHGATE_RESULT\"\n", encoding="utf-8")
        code, out, report, _ = self.compat("--base-env", "FLAVOUR=old", "--candidate-env",
                                        "FLAVOUR=new", str(case))
        self.assertEqual(code, 0, out)
        (change,) = report["changes"]
        self.assertEqual((change["case"], change["class"]), ("env/reads-flavour", "semantic_change"))
        self.assertIn("old", change["base"])
        self.assertIn("new", change["candidate"])
        # Both runs record the same versions: the sides are told apart by their settings.
        self.assertTrue(report["base"].endswith("(meshgate FLAVOUR=old)"), report["base"])
        self.assertTrue(report["candidate"].endswith("(meshgate FLAVOUR=new)"), report["candidate"])

    def test_two_cublaslt_builds_run_the_same_cpu_sweep(self):
        wheel_lib = Path(sys.prefix, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}",
                         "site-packages", "nvidia", "cu13", "lib")
        toolkit_lib = Path("/usr/local/cuda/lib64")
        if not (wheel_lib / "libcublasLt.so.13").exists() or \
                not (toolkit_lib / "libcublasLt.so.13").exists():
            self.skipTest("needs the CUDA toolkit's cuBLASLt and the one of PyTorch's wheels")
        code, out, report, out_dir = self.compat(
            "--base-env", f"LD_LIBRARY_PATH={toolkit_lib}", "--candidate-env",
            f"LD_LIBRARY_PATH={wheel_lib}", str(REPO / "cases" / "gemm-sweep" / "cpu.yaml"))
        self.assertEqual(code, 0, out)
        self.assertEqual(report["changes"], [])
        self.assertEqual(sorted(s["case"] for s in report["sweeps"]),
                         ["gemm-sweep-cpu/extreme", "gemm-sweep-cpu/uniform"])
        versions = {side: json.loads((out_dir / side / "results.json").read_text())["run"]["versions"]
                    for side in ("base", "candidate")}
        if versions["base"].get("cublaslt") is None:
            self.skipTest("this runner was built without CUDA: it loads no cuBLASLt")
        self.assertTrue(versions["base"]["cublaslt_library"].startswith(str(toolkit_lib)))
        self.assertTrue(versions["candidate"]["cublaslt_library"].startswith(str(wheel_lib)))
        if versions["base"]["cublaslt"] != versions["candidate"]["cublaslt"]:
            self.assertIn(f"cuBLASLt {versions['base']['cublaslt']}", report["base"])
            self.assertIn(f"cuBLASLt {versions['candidate']['cublaslt']}", report["candidate"])


class ImplNames(unittest.TestCase):
    def test_names_resolve_to_commands(self):
        self.assertIsNone(implementations.resolve(None))
        self.assertIsNone(implementations.resolve("meshgate"))
        toy = implementations.resolve("toy=python3 toy.py --mode 'a b'")
        self.assertEqual(toy.command, ("python3", "toy.py", "--mode", "a b"))
        self.assertEqual(toy.runner_args()[:2], ["--impl", "toy"])
        self.assertEqual(json.loads(toy.runner_args()[3]), ["python3", "toy.py", "--mode", "a b"])

    def test_torch_local_runs_the_torch_adapter_in_its_local_world(self):
        for spec, world in (("torch", "gloo"), ("torch-local", "local")):
            impl = implementations.resolve(spec, check=False)
            self.assertEqual(impl.name, spec)
            self.assertEqual(impl.command[1:], ("-m", "meshgate.impls.torch", "--world", world))
        with self.assertRaisesRegex(implementations.ImplError, "no such Python interpreter"):
            implementations.resolve("torch-local@/nonexistent/venv")

    def test_unknown_names_and_missing_environments_are_refused(self):
        with self.assertRaisesRegex(implementations.ImplError, "unknown implementation"):
            implementations.resolve("tensorflow")
        with self.assertRaisesRegex(implementations.ImplError, "no such Python interpreter"):
            implementations.resolve("torch@/nonexistent/venv")
        with self.assertRaisesRegex(implementations.ImplError, "may hold letters"):
            implementations.resolve("a b=c")

    def test_missing_torch_names_the_pinned_install_command(self):
        import sys
        from unittest import mock

        with mock.patch.object(implementations, "has_torch", return_value=False):
            with self.assertRaises(implementations.ImplError) as caught:
                implementations.resolve("torch")
        self.assertIn(f"{sys.executable} -m pip install '{implementations.pinned_torch()}'",
                      str(caught.exception))

    def test_a_python_adapter_finds_the_meshgate_package(self):
        torch_impl = implementations.Impl("torch", ("python3", "-m", "meshgate.impls.torch"), python="python3")
        env = torch_impl.env({"PYTHONPATH": "/elsewhere"})
        self.assertEqual(env["PYTHONPATH"].split(":")[0], str(implementations.PACKAGE_PARENT))
        self.assertIn("/elsewhere", env["PYTHONPATH"])

    def test_each_side_of_an_ab_runs_its_own_implementation(self):
        from meshgate.system import repeats
        from meshgate.system.launch import Selection

        older = implementations.Impl("torch", ("/venv/bin/python", "-m", "meshgate.impls.torch"),
                           python="/venv/bin/python")
        launcher = repeats.DriverLauncher()
        commands = []
        for side in (repeats.Side(label="base", runner=["runner"], impl=older),
                     repeats.Side(label="candidate", runner=["runner"])):
            setup = launcher.setup(side)
            commands.append(setup.run_command(Selection(paths=["cases"]), Path("/tmp/out"), "id",
                                              resume=False))
        self.assertEqual(commands[0][-4:-2], ["--impl", "torch"])
        self.assertEqual(json.loads(commands[0][-1])[0], "/venv/bin/python")
        self.assertNotIn("--impl", commands[1])


if __name__ == "__main__":
    unittest.main()
