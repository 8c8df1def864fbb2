import io
import json
import os
import shutil
import tempfile
import unittest
from pathlib import Path

from meshgate.core import files
from meshgate.system import build
from meshgate.system.build import BuildError

from .support import FAKE_RUNNER, FIXTURES

REPO = Path(__file__).resolve().parents[2]


class BuildTest(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="meshgate-build-")
        self.addCleanup(tmp.cleanup)
        self.root = Path(tmp.name) / "repo"
        (self.root / "ci").mkdir(parents=True)
        shutil.copy(REPO / "ci" / "preset", self.root / "ci" / "preset")
        # A stand-in for ci/bootstrap that records each call and can report missing packages.
        self.bootstrap_log = Path(tmp.name) / "bootstrap.log"
        bootstrap = self.root / "ci" / "bootstrap"
        bootstrap.write_text(
            "#!/bin/sh\n"
            f"echo called >> {self.bootstrap_log}\n"
            'if [ -n "$FAKE_BOOTSTRAP_MISSING" ]; then\n'
            '  echo "bootstrap: missing packages: $FAKE_BOOTSTRAP_MISSING"\n'
            '  echo "  sudo apt-get install -y $FAKE_BOOTSTRAP_MISSING" >&2\n'
            "  exit 1\n"
            "fi\n"
            "echo 'bootstrap: all 14 packages present'\n")
        bootstrap.chmod(0o755)
        bin_dir = Path(tmp.name) / "bin"
        bin_dir.mkdir()
        (bin_dir / "cmake").symlink_to(FIXTURES / "fake_cmake.py")
        self.log = Path(tmp.name) / "cmake.jsonl"
        self.context_log = Path(tmp.name) / "cmake-context.jsonl"
        self.env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE_CMAKE_LOG": str(self.log),
                    "FAKE_CMAKE_CONTEXT_LOG": str(self.context_log), "MESHGATE_PRESET": "cpu"}
        self.jobs = str(build.build_jobs(self.env))
        self.out = io.StringIO()

    def calls(self):
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def build(self, mode="noop", preset=None):
        return build.runner_command(self.root, preset, dict(self.env, FAKE_CMAKE_MODE=mode),
                                    self.out)

    def test_first_build_configures_then_builds_the_runner_target(self):
        command = self.build()
        self.assertEqual(command,
                         [str(self.root / "build/cpu/harness/runner/meshgate-runner")])
        self.assertEqual(self.calls(), [["--preset", "cpu"],
                                        ["--build", "--preset", "cpu", "--target",
                                         "meshgate-runner", "-j", self.jobs]])

    def bootstrap_calls(self):
        return len(self.bootstrap_log.read_text().splitlines()) if self.bootstrap_log.exists() else 0

    def test_first_build_checks_system_packages_quietly(self):
        self.build()
        self.assertEqual(self.bootstrap_calls(), 1)
        self.assertNotIn("bootstrap", self.out.getvalue())
        self.build()
        self.assertEqual(self.bootstrap_calls(), 1)  # a configured tree skips the check

    def test_missing_packages_stop_the_build_with_the_install_command(self):
        env = dict(self.env, FAKE_BOOTSTRAP_MISSING="libyaml-cpp-dev")
        with self.assertRaisesRegex(BuildError, "could not install"):
            build.runner_command(self.root, None, env, self.out)
        self.assertIn("sudo apt-get install -y libyaml-cpp-dev", self.out.getvalue())
        self.assertEqual(self.calls(), [])

    def test_configured_tree_is_only_built_and_a_noop_build_is_quiet(self):
        self.build()
        self.out = io.StringIO()
        self.log.unlink()
        self.build()
        self.assertEqual(self.calls(), [["--build", "--preset", "cpu", "--target",
                                         "meshgate-runner", "-j", self.jobs]])
        self.assertEqual(self.out.getvalue(), "")

    def test_tree_configured_before_a_target_existed_is_configured_again(self):
        # `cmake --build --target meshgate-plan` on a Makefile without that target fails
        # instead of re-running CMake, so the driver configures first.
        self.build()
        (self.root / "build" / "cpu" / "Makefile").write_text(
            "meshgate-runner: cmake_check_build_system\n")
        self.assertFalse(build.knows_target(self.root / "build" / "cpu", build.PLAN_TARGET))
        self.log.unlink()
        self.build()
        self.assertEqual(self.calls()[0], ["--preset", "cpu"])
        self.assertTrue(build.knows_target(self.root / "build" / "cpu", build.PLAN_TARGET))

    def test_builds_on_every_usable_cpu(self):
        expected = len(os.sched_getaffinity(0))
        self.assertEqual(build.build_jobs({}), expected)
        self.build()
        self.assertEqual(self.calls()[-1][-2:], ["-j", str(expected)])

    def test_cmake_build_parallel_level_sets_the_jobs(self):
        self.assertEqual(build.build_jobs({"CMAKE_BUILD_PARALLEL_LEVEL": "7"}), 7)
        self.env["CMAKE_BUILD_PARALLEL_LEVEL"] = "3"
        self.build()
        self.assertEqual(self.calls()[-1][-2:], ["-j", "3"])

    def test_builds_share_ccache_entries_across_checkouts(self):
        self.build()
        contexts = [json.loads(line) for line in self.context_log.read_text().splitlines()]
        for context in contexts:
            self.assertEqual(context["env"], {"CCACHE_BASEDIR": str(self.root.resolve()),
                                              "CCACHE_NOHASHDIR": "1"})

    def test_a_basedir_that_covers_the_checkout_is_kept(self):
        env = build.ccache_env({"CCACHE_BASEDIR": "/"}, self.root)
        self.assertEqual(env["CCACHE_BASEDIR"], "/")
        env = build.ccache_env({"CCACHE_BASEDIR": "/nonexistent"}, self.root)
        self.assertEqual(env["CCACHE_BASEDIR"], str(self.root.resolve()))

    def test_a_failed_configure_is_run_again(self):
        with self.assertRaises(BuildError):
            self.build("configure_fail")
        (self.root / "build" / "cpu").mkdir(parents=True)
        (self.root / "build" / "cpu" / "CMakeCache.txt").write_text("# left by the failure\n")
        self.log.unlink()
        self.build()
        self.assertEqual(self.calls()[0], ["--preset", "cpu"])

    def test_compiling_shows_cmake_output(self):
        self.build()
        self.out = io.StringIO()
        self.build("compile")
        self.assertIn("Building CXX object", self.out.getvalue())
        self.assertIn("[100%] Built target meshgate-runner", self.out.getvalue())

    def test_compile_failure_shows_output_and_raises(self):
        with self.assertRaisesRegex(BuildError, "failed with exit code 2"):
            self.build("fail")
        self.assertIn("main.cpp:3:1: error: expected ';'", self.out.getvalue())

    def test_a_failure_no_compiler_reported_names_the_failing_tool(self):
        with self.assertRaises(BuildError) as caught:
            self.build("archive_fail")
        message = str(caught.exception)
        self.assertNotIn("compile error", message)
        self.assertIn("the failing step said: gmake[2]: *** [lib/layout/CMakeFiles/meshgate_layout"
                      ".dir/build.make:97: lib/layout/libmeshgate_layout.a] Error 1", message)
        with self.assertRaisesRegex(BuildError, "fix the compile error above"):
            self.build("fail")

    def test_a_second_build_waits_for_the_first_and_says_so(self):
        import threading

        self.build()  # configured, so both builds below only build
        hold = self.root / "hold"
        env = dict(self.env, FAKE_CMAKE_HOLD=str(hold))
        first_out, second_out = io.StringIO(), io.StringIO()
        first = threading.Thread(target=build.runner_command,
                                 args=(self.root, None, env, first_out))
        first.start()
        started = Path(str(hold) + ".started")
        while not started.exists():
            pass
        started.unlink()
        second = threading.Thread(target=build.runner_command,
                                  args=(self.root, None, env, second_out))
        second.start()
        # The second is waiting on the lock, not building: cmake did not start again.
        second.join(timeout=1.0)
        self.assertTrue(second.is_alive())
        self.assertFalse(started.exists())
        self.assertIn("another meshgate command is building", second_out.getvalue())
        hold.write_text("")
        first.join(timeout=10)
        second.join(timeout=10)
        self.assertFalse(first.is_alive() or second.is_alive())
        builds = [c for c in self.calls() if c[0] == "--build"]
        self.assertEqual(len(builds), 3)

    def test_missing_compiler_points_to_bootstrap(self):
        with self.assertRaisesRegex(BuildError, "ci/bootstrap"):
            self.build("configure_fail")
        self.assertIn("No CMAKE_CXX_COMPILER could be found", self.out.getvalue())

    def test_missing_cmake_points_to_bootstrap(self):
        env = dict(self.env, PATH=str(self.root))
        with self.assertRaisesRegex(BuildError, "cmake not found on PATH: run ci/bootstrap"):
            build.runner_command(self.root, None, env, self.out)

    def test_preset_comes_from_ci_preset_or_the_option(self):
        self.assertEqual(build.preset_for(self.root, None, dict(self.env, MESHGATE_PRESET="tsan")),
                         "tsan")
        self.assertEqual(build.preset_for(self.root, "asan", self.env), "asan")
        self.build(preset="asan")
        self.assertEqual(self.calls()[0], ["--preset", "asan"])

    def test_meshgate_runner_skips_the_build(self):
        command = build.runner_command(self.root, None, {"MESHGATE_RUNNER": str(FAKE_RUNNER)},
                                       self.out)
        self.assertEqual(command, [str(FAKE_RUNNER)])
        self.assertEqual(self.calls(), [])

    def test_meshgate_runner_must_be_executable(self):
        with self.assertRaisesRegex(BuildError, "MESHGATE_RUNNER=/nonexistent/runner"):
            build.runner_command(self.root, None, {"MESHGATE_RUNNER": "/nonexistent/runner"})

    def test_source_root_is_the_repository(self):
        self.assertEqual(files.source_root(), REPO)
        self.assertTrue(os.access(REPO / "meshgate", os.X_OK))


if __name__ == "__main__":
    unittest.main()
