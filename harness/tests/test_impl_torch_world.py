"""The adapter's world of gloo ranks (meshgate/impls/torch/world.py): a rank that stops answering
breaks the world with an error that says where it stands, importing a case's module is not
counted against the case's allowance, a module that cannot be imported is the rank's error, not a
broken world, and a world grows by adding workers to those it has."""

from __future__ import annotations

import sys
import tempfile
import textwrap
import time
import unittest
from pathlib import Path
from unittest import mock

from tests.support import torch_tests_skip_reason

# Workers import these modules by name. The slow one sleeps on import for longer than a case's
# allowance in these tests (twice COLLECTIVE_TIMEOUT_S, patched to 3 s below: a loaded machine
# still starts a group of two ranks in that time).
SLOW_TASKS = textwrap.dedent("""
    import time

    time.sleep(10)


    def echo(rank, size, argument):
        return [rank, size, argument]
""")
TASKS = textwrap.dedent("""
    import os
    import time


    def echo(rank, size, argument):
        return [rank, size, argument]


    def pid(rank, size, argument):
        return os.getpid()


    def stuck_on_rank_one(rank, size, argument):
        if rank == 1:
            time.sleep(600)
        return rank
""")


@unittest.skipIf(torch_tests_skip_reason(), torch_tests_skip_reason())
class TorchWorld(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        from meshgate.impls.torch import world
        cls.world = world
        cls.tmp = tempfile.TemporaryDirectory()
        (Path(cls.tmp.name) / "meshgate_world_tasks.py").write_text(TASKS)
        (Path(cls.tmp.name) / "meshgate_world_slow_tasks.py").write_text(SLOW_TASKS)
        # Spawned workers take the parent's sys.path: they find the modules there. The tests
        # share one world where they can (each starts workers that import torch).
        sys.path.insert(0, cls.tmp.name)
        cls.timeout = mock.patch.object(world, "COLLECTIVE_TIMEOUT_S", 3.0)
        cls.timeout.start()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.world.shutdown()
        cls.timeout.stop()
        sys.path.remove(cls.tmp.name)
        cls.tmp.cleanup()

    def test_a_slow_import_is_not_the_case_s_time_and_happens_once(self):
        started = time.monotonic()
        self.assertEqual(self.world.run(2, "meshgate_world_slow_tasks", "echo", ["a", "b"]),
                         [[0, 2, "a"], [1, 2, "b"]])
        self.assertGreater(time.monotonic() - started, 10)
        started = time.monotonic()
        self.assertEqual(self.world.run(2, "meshgate_world_slow_tasks", "echo", [1, 2]),
                         [[0, 2, 1], [1, 2, 2]])
        self.assertLess(time.monotonic() - started, 10)

    def test_a_module_that_cannot_be_imported_is_the_rank_s_error(self):
        with self.assertRaises(self.world.RankError) as raised:
            self.world.run(2, "meshgate_no_such_module", "echo", [None, None])
        self.assertEqual(raised.exception.error, "ModuleNotFoundError")
        self.assertIn("meshgate_no_such_module", raised.exception.message)
        # The world did not break: no rank joined a group for the failed case.
        self.assertEqual(self.world.run(2, "meshgate_world_tasks", "echo", [0, 0]),
                         [[0, 2, 0], [1, 2, 0]])

    def test_a_world_grows_keeping_its_workers(self):
        first = self.world.run(2, "meshgate_world_tasks", "pid", [None] * 2)
        grown = self.world.run(3, "meshgate_world_tasks", "pid", [None] * 3)
        self.assertEqual(grown[:2], first)
        self.assertNotIn(grown[2], first)
        self.assertEqual(self.world.run(3, "meshgate_world_tasks", "echo", [1, 2, 3]),
                         [[0, 3, 1], [1, 3, 2], [2, 3, 3]])

    def test_a_stuck_rank_breaks_the_world_saying_where_it_stands(self):
        started = time.monotonic()
        with self.assertRaises(self.world.WorldBroken) as raised:
            self.world.run(3, "meshgate_world_tasks", "stuck_on_rank_one", [None] * 3)
        message = str(raised.exception)
        self.assertIn("ranks [1] running meshgate_world_tasks.stuck_on_rank_one", message)
        self.assertIn("no answer within 6 s", message)
        self.assertRegex(message, r"rank 1 at:\n.*meshgate_world_tasks\.py\", line \d+ in "
                                  r"stuck_on_rank_one")
        self.assertLess(time.monotonic() - started, 120)
        # The broken world is gone: the next case gets a fresh one.
        self.assertIsNone(self.world._world)
        self.assertEqual(self.world.run(2, "meshgate_world_tasks", "echo", [7, 8]),
                         [[0, 2, 7], [1, 2, 8]])


if __name__ == "__main__":
    unittest.main()
