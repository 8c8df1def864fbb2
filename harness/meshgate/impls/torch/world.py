"""A world of gloo ranks, one worker process each, kept across cases so that a suite pays the
process launches (and the import of torch in each) once, not per case.

Each task runs one function on every rank: the worker joins a fresh default process group for
it (a prefix of one TCPStore the adapter hosts), calls the function, and destroys every group
afterwards, so that no case sees another's groups and gloo's connections do not pile up. A world
that is too small for a case is replaced by a larger one; ranks of the world outside a case's
mesh take part in the groups' creation, as PyTorch requires of every rank."""

from __future__ import annotations

import datetime
import importlib
import multiprocessing
import multiprocessing.connection
import os
import traceback

# Ranks beyond this are not started (every rank is a process that imports torch): a case that
# needs more is unsupported, with this limit in the reason.
MAX_RANKS = int(os.environ.get("MESHGATE_TORCH_MAX_RANKS", "16"))
# How long gloo waits in one collective before raising; a hung rank then becomes an error.
COLLECTIVE_TIMEOUT_S = float(os.environ.get("MESHGATE_TORCH_COLLECTIVE_TIMEOUT", "60"))


class RankError(Exception):
    """A rank raised: `error` is the exception's type name, `rank` the rank that raised."""

    def __init__(self, rank: int, error: str, message: str, trace: str):
        super().__init__(f"rank {rank}: {error}: {message}")
        self.rank, self.error, self.message, self.trace = rank, error, message, trace


class WorldBroken(Exception):
    """A worker died or stopped answering: the world is gone and the case is an error."""


def _worker_main(rank: int, size: int, port: int, conn) -> None:
    import torch.distributed as dist
    store = dist.TCPStore("127.0.0.1", port, size, is_master=False,
                          timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        serial, module_name, function_name, argument = task
        try:
            dist.init_process_group(
                "gloo", store=dist.PrefixStore(f"case-{serial}", store), rank=rank,
                world_size=size, timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
            try:
                function = getattr(importlib.import_module(module_name), function_name)
                result = ("ok", function(rank, size, argument))
            finally:
                dist.destroy_process_group()
        except Exception as e:  # reported to the adapter, which judges it
            result = ("raised", type(e).__name__, str(e), traceback.format_exc())
        conn.send(result)


class World:
    def __init__(self, size: int):
        import torch.distributed as dist
        self.size = size
        self.serial = 0
        self.store = dist.TCPStore("127.0.0.1", 0, size + 1, is_master=True,
                                   wait_for_workers=False)
        context = multiprocessing.get_context("spawn")
        self.conns = []
        self.procs = []
        for rank in range(size):
            parent, child = context.Pipe()
            proc = context.Process(target=_worker_main, args=(rank, size, self.store.port, child),
                                   daemon=True, name=f"meshgate-torch-rank-{rank}")
            proc.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(proc)

    def run(self, module_name: str, function_name: str, arguments: list) -> list:
        """Calls module.function(rank, size, arguments[rank]) on every rank and returns the
        results in rank order. Raises RankError for the lowest rank that raised."""
        self.serial += 1
        for rank, conn in enumerate(self.conns):
            conn.send((self.serial, module_name, function_name, arguments[rank]))
        results: list = [None] * self.size
        pending = dict(enumerate(self.conns))
        while pending:
            sentinels = {self.procs[r].sentinel: r for r in pending}
            ready = multiprocessing.connection.wait(
                list(pending.values()) + list(sentinels), timeout=COLLECTIVE_TIMEOUT_S * 2)
            if not ready:
                raise WorldBroken(f"ranks {sorted(pending)} gave no answer within "
                                  f"{COLLECTIVE_TIMEOUT_S * 2:g} s")
            for item in ready:
                if item in sentinels:
                    rank = sentinels[item]
                    if rank in pending and not pending[rank].poll():
                        raise WorldBroken(f"the worker of rank {rank} died "
                                          f"(exit code {self.procs[rank].exitcode})")
                    continue
                rank = next(r for r, c in pending.items() if c is item)
                try:
                    results[rank] = item.recv()
                except EOFError:
                    raise WorldBroken(f"the worker of rank {rank} closed its pipe")
                del pending[rank]
        for rank, result in enumerate(results):
            if result[0] == "raised":
                raise RankError(rank, result[1], result[2], result[3])
        return [result[1] for result in results]

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        for proc in self.procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()


_world: World | None = None


def get(size: int) -> World:
    """A world of at least `size` ranks: the current one, or a new one replacing it."""
    global _world
    if size > MAX_RANKS:
        from ..protocol import Unsupported
        raise Unsupported(f"needs {size} gloo ranks, more than MESHGATE_TORCH_MAX_RANKS="
                          f"{MAX_RANKS} worker processes")
    if _world is None or _world.size < size:
        shutdown()
        _world = World(size)
    return _world


def run(size: int, module_name: str, function_name: str, arguments: list) -> list:
    """`World.run` on a world of at least `size` ranks; ranks beyond `size` get None. A broken
    world is dropped so that the next case starts a fresh one."""
    global _world
    world = get(size)
    arguments = list(arguments) + [None] * (world.size - len(arguments))
    try:
        return world.run(module_name, function_name, arguments)
    except WorldBroken:
        shutdown()
        raise


def shutdown() -> None:
    global _world
    if _world is not None:
        _world.close()
        _world = None
