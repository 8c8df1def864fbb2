"""The adapter's world of gloo ranks (meshgate/impls/torch/world.py): a rank that stops answering
breaks the world with an error that says where it stands, importing a case's module is not
counted against the case's allowance, and a module that cannot be imported is the rank's error,
not a broken world."""

from __future__ import annotations

import sys
import tempfile
import textwrap
import time
import unittest
from pathlib import Path
from unittest import mock

from tests.support import torch_tests_skip_reason

# Workers import this module by name: it sleeps on import for longer than a case's allowance
# in these tests (twice COLLECTIVE_TIMEOUT_S, patched to 1 s below).
TASKS = textwrap.dedent("""
    import time

    time.sleep(float(__import__("os").environ.get("MESHGATE_TEST_IMPORT_SLEEP", "0")))


    def echo(rank, size, argument):
        return [rank, size, argument]


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
        # Spawned workers take the parent's sys.path: they find the module there.
        sys.path.insert(0, cls.tmp.name)
        cls.env = mock.patch.dict("os.environ", {"MESHGATE_TEST_IMPORT_SLEEP": "3"})
        cls.env.start()
        cls.timeout = mock.patch.object(world, "COLLECTIVE_TIMEOUT_S", 1.0)
        cls.timeout.start()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.world.shutdown()
        cls.timeout.stop()
        cls.env.stop()
        sys.path.remove(cls.tmp.name)
        cls.tmp.cleanup()

    def setUp(self) -> None:
        self.world.shutdown()  # each test starts its own world

    def test_a_slow_import_is_not_the_case_s_time_and_happens_once(self):
        started = time.monotonic()
        self.assertEqual(self.world.run(2, "meshgate_world_tasks", "echo", ["a", "b"]),
                         [[0, 2, "a"], [1, 2, "b"]])
        self.assertGreater(time.monotonic() - started, 3)
        started = time.monotonic()
        self.assertEqual(self.world.run(2, "meshgate_world_tasks", "echo", [1, 2]),
                         [[0, 2, 1], [1, 2, 2]])
        self.assertLess(time.monotonic() - started, 3)

    def test_a_module_that_cannot_be_imported_is_the_rank_s_error(self):
        with self.assertRaises(self.world.RankError) as raised:
            self.world.run(2, "meshgate_no_such_module", "echo", [None, None])
        self.assertEqual(raised.exception.error, "ModuleNotFoundError")
        self.assertIn("meshgate_no_such_module", raised.exception.message)
        # The world did not break: no rank joined a group for the failed case.
        self.assertEqual(self.world.run(2, "meshgate_world_tasks", "echo", [0, 0]),
                         [[0, 2, 0], [1, 2, 0]])

    def test_a_stuck_rank_breaks_the_world_saying_where_it_stands(self):
        started = time.monotonic()
        with self.assertRaises(self.world.WorldBroken) as raised:
            self.world.run(3, "meshgate_world_tasks", "stuck_on_rank_one", [None] * 3)
        message = str(raised.exception)
        self.assertIn("ranks [1] running meshgate_world_tasks.stuck_on_rank_one", message)
        self.assertIn("no answer within 2 s", message)
        self.assertRegex(message, r"rank 1 at:\n.*meshgate_world_tasks\.py\", line \d+ in "
                                  r"stuck_on_rank_one")
        self.assertLess(time.monotonic() - started, 120)
        # The broken world is gone: the next case gets a fresh one.
        self.assertIsNone(self.world._world)
        self.assertEqual(self.world.run(2, "meshgate_world_tasks", "echo", [7, 8]),
                         [[0, 2, 7], [1, 2, 8]])


if __name__ == "__main__":
    unittest.main()
