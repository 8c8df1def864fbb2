"""A world of gloo ranks, one worker process each, kept across cases so that a suite pays the
process launches (and the import of torch, done once for all workers) once, not per case.

Each task runs one function on the first n ranks, n being what the case needs: those workers
join a fresh default process group of n ranks for it (a prefix of one TCPStore the adapter
hosts), call the function, and destroy every group afterwards, so that no case sees another's
groups, gloo's connections do not pile up, and a small case pays for a small group however
large the world has grown. A world too small for a case grows: new workers join, those running
keep their rank and what they imported."""

from __future__ import annotations

import datetime
import importlib
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback

from ..protocol import Unsupported, progress

# Ranks beyond this are not started (every rank is a process that imports torch): a case that
# needs more is unsupported, with this limit in the reason.
MAX_RANKS = int(os.environ.get("MESHGATE_TORCH_MAX_RANKS", "16"))
# How long gloo waits in one collective before raising; a hung rank then becomes an error.
COLLECTIVE_TIMEOUT_S = float(os.environ.get("MESHGATE_TORCH_COLLECTIVE_TIMEOUT", "60"))
# How long a new world's workers may take to start (the first world's wait includes the one
# import of torch and DTensor, tens of seconds on a busy machine with few cores), and then to
# import a kind's module, before its first case gets COLLECTIVE_TIMEOUT_S x 2. Each phase first
# writes a progress line, which restarts the runner's case timeout (300 s by default): a world
# that cannot start is this adapter's error saying so rather than the runner's timeout.
START_TIMEOUT_S = float(os.environ.get("MESHGATE_TORCH_START_TIMEOUT", "240"))


# A stuck rank's error shows this many of its innermost frames, read this long after asking.
STACK_FRAMES = 8
STACK_DUMP_WAIT_S = 1.0


def _main_thread_frames(dump: str) -> list[str]:
    """The frames (innermost first) of the thread in faulthandler's dump that runs the worker's
    loop, else of its first thread."""
    threads, current = [], []
    for line in dump.splitlines():
        if line.startswith(("Thread 0x", "Current thread 0x")):
            current = []
            threads.append(current)
        elif line.strip().startswith("File ") and threads:
            current.append(line.strip())
    for frames in threads:
        if any("_serve" in frame for frame in frames):
            return frames
    return threads[0] if threads else []


class RankError(Exception):
    """A rank raised: `error` is the exception's type name, `rank` the rank that raised."""

    def __init__(self, rank: int, error: str, message: str, trace: str):
        super().__init__(f"rank {rank}: {error}: {message}")
        self.rank, self.error, self.message, self.trace = rank, error, message, trace


class WorldBroken(Exception):
    """A worker died or stopped answering: the world is gone and the case is an error."""


def _worker_main(rank: int, port: int, conn, stack_file: str) -> None:
    import faulthandler

    # A rank that stops answering is asked for its stacks (SIGUSR1): they go to the case's
    # error, which then says where it stuck rather than only that it did.
    with open(stack_file, "w") as stacks:
        faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
        _serve(rank, port, conn)


def _serve(rank: int, port: int, conn) -> None:
    import torch
    import torch.distributed as dist
    # Many ranks share few cores: one compute thread each, or their thread pools fight.
    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, is_master=False,
                          timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    conn.send(("ready",))
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        if task[0] == "import":
            # Importing a case module (DTensor and all it pulls in) is not the case's work: on a
            # loaded machine it takes a good part of the case's allowance, and every rank must
            # hold it before any joins the case's group.
            try:
                importlib.import_module(task[1])
                conn.send(("ok", None))
            except Exception as e:
                conn.send(("raised", type(e).__name__, str(e), traceback.format_exc()))
            continue
        serial, module_name, function_name, argument, participants = task
        try:
            dist.init_process_group(
                "gloo", store=dist.PrefixStore(f"case-{serial}", store), rank=rank,
                world_size=participants, timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
        except Exception as e:
            # A failed join still counts a group in this process, so its next groups' store
            # keys would no longer match the other ranks': the world cannot run another case.
            conn.send(("broken", type(e).__name__, str(e), traceback.format_exc()))
            return
        try:
            try:
                function = getattr(importlib.import_module(module_name), function_name)
                result = ("ok", function(rank, participants, argument))
            finally:
                dist.destroy_process_group()
                _release_case_state()
        except Exception as e:  # reported to the adapter, which judges it
            result = ("raised", type(e).__name__, str(e), traceback.format_exc())
        conn.send(result)


# What gloo says on the ranks whose peer failed first: their error follows from another's.
_FOLLOW_ON = ("Connection closed by peer", "Connection reset by peer", "Broken pipe",
              "Timed out waiting")


def _first_cause(raised: list) -> tuple:
    """The lowest rank whose error is its own, not gloo's report of a peer that went away."""
    for rank, result in raised:
        if not any(text in result[2] for text in _FOLLOW_ON):
            return rank, result
    return raised[0]


FULL_COLLECTION_EVERY = 16
_cases_since_full_collection = 0


def _release_case_state() -> None:
    """Drops what a case left cached, so that its process groups die with it: DTensor's planner
    caches hold specs, specs hold meshes, and a mesh keeps its gloo groups (two threads each)
    alive. Without this every worker gains threads with every case, thousands over a suite.
    Some of those references sit in cycles: a full collection every FULL_COLLECTION_EVERY cases
    frees them at a fraction of the cost of one per case."""
    import gc

    global _cases_since_full_collection

    # Only a module already imported can hold a case's state: looked up, never imported here.
    _redistribute = sys.modules.get("torch.distributed.tensor._redistribute")
    if _redistribute is not None:
        clear = getattr(_redistribute, "clear_redistribute_planner_cache", None)
        if clear is not None:
            clear()
        for name in ("_gen_transform_infos", "_gen_transform_infos_non_cached"):
            cache_clear = getattr(getattr(_redistribute, name, None), "cache_clear", None)
            if cache_clear is not None:
                cache_clear()
    # torch 2.9 keeps each root mesh's flattened meshes in a process-wide map keyed by mesh
    # equality: the next case's equal root mesh would get this case's flattened mesh, whose
    # groups died with this case's process group ("Could not resolve the process group").
    device_mesh = sys.modules.get("torch.distributed.device_mesh")
    resources = getattr(device_mesh, "_mesh_resources", None)
    for name in ("child_to_root_mapping", "root_to_flatten_mapping", "flatten_name_to_root_dims"):
        mapping = getattr(resources, name, None)
        if isinstance(mapping, dict):
            mapping.clear()
    _cases_since_full_collection += 1
    if _cases_since_full_collection >= FULL_COLLECTION_EVERY:
        gc.collect()
        _cases_since_full_collection = 0
    else:
        gc.collect(0)


# What every worker imports before its first task: torch, its process groups and DTensor, which
# the layout, mesh and redistribute kinds use (seconds of CPU each, the case modules themselves
# a fraction of one).
PRELOADED = ("torch", "torch.distributed", "torch.distributed.tensor")


def _worker_context():
    """Workers fork from a server that imported PRELOADED once, rather than each importing it
    afresh: a world of 8 then costs one import of torch instead of eight, which on a machine
    with few cores is most of a short suite's time. The server has run no torch op (no thread
    pool exists to be broken by the fork), and a fork copies its modules, not the adapter's
    state. The server starts with the first world and serves every later one."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOADED))
    return context


class World:
    def __init__(self, size: int):
        import torch.distributed as dist
        self.size = 0
        self.serial = 0
        # No count of workers to wait for: the store serves a world that grows.
        self.store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
        self.conns = []
        self.procs = []
        self.imported: dict[str, int] = {}  # module -> how many workers, from rank 0, hold it
        self.stack_dir = tempfile.mkdtemp(prefix="meshgate-torch-stacks-")
        self.started = 0  # the workers, from rank 0, known to have started
        self.grow(size)

    def grow(self, size: int) -> None:
        """Adds workers up to `size` ranks: those running keep torch imported and their rank,
        so that a suite whose worlds grow 5, 8, 16 starts 16 workers, not 29."""
        context = _worker_context()
        for rank in range(self.size, size):
            parent, child = context.Pipe()
            proc = context.Process(target=_worker_main,
                                   args=(rank, self.store.port, child, self._stack_file(rank)),
                                   daemon=True, name=f"meshgate-torch-rank-{rank}")
            proc.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(proc)
        self.size = max(self.size, size)

    def _stack_file(self, rank: int) -> str:
        return os.path.join(self.stack_dir, f"rank-{rank}.txt")

    def _collect(self, ranks: range, timeout: float, doing: str, hint: str = "") -> list:
        """The next message of each worker of `ranks`, in rank order. WorldBroken when a worker
        dies, closes its pipe, or some have not answered within `timeout` seconds: then the error
        names them, what they were doing, and where their main threads stood."""
        results: dict = {}
        pending = {rank: self.conns[rank] for rank in ranks}
        deadline = time.monotonic() + timeout
        while pending:
            sentinels = {self.procs[r].sentinel: r for r in pending}
            ready = multiprocessing.connection.wait(
                list(pending.values()) + list(sentinels),
                timeout=max(deadline - time.monotonic(), 0))
            if not ready:
                raise WorldBroken(f"ranks {sorted(pending)} {doing}: no answer within "
                                  f"{timeout:g} s{hint}{self._stacks(sorted(pending))}")
            for item in ready:
                if item in sentinels:
                    rank = sentinels[item]
                    if rank in pending and not pending[rank].poll():
                        raise WorldBroken(f"the worker of rank {rank} died {doing} "
                                          f"(exit code {self.procs[rank].exitcode})")
                    continue
                rank = next(r for r, c in pending.items() if c is item)
                try:
                    results[rank] = item.recv()
                except EOFError:
                    raise WorldBroken(f"the worker of rank {rank} closed its pipe {doing}")
                del pending[rank]
        return [results[rank] for rank in ranks]

    def _stacks(self, ranks: list) -> str:
        """Where the main thread of each of `ranks` stands: the innermost STACK_FRAMES frames of
        the Python stacks each dumps on SIGUSR1 (faulthandler, so even a rank stuck in C code
        holding the GIL answers)."""
        for rank in ranks:
            try:
                os.kill(self.procs[rank].pid, signal.SIGUSR1)
            except OSError:
                pass
        time.sleep(STACK_DUMP_WAIT_S)
        parts = []
        for rank in ranks:
            try:
                with open(self._stack_file(rank)) as f:
                    dump = f.read()
            except OSError:
                continue
            frames = _main_thread_frames(dump)
            if frames:
                parts.append(f"rank {rank} at:\n" + "\n".join(frames[:STACK_FRAMES]))
        return "\n" + "\n".join(parts) if parts else ""

    def _wait_started(self) -> None:
        """Waits for the new workers' ready (torch imported, store reached), up to
        START_TIMEOUT_S: starting is not yet a case's work."""
        progress(f"starting torch workers {self.started} to {self.size - 1}")
        self._collect(range(self.started, self.size), START_TIMEOUT_S,
                      f"of a world growing to {self.size} starting",
                      " (MESHGATE_TORCH_START_TIMEOUT)")
        self.started = self.size

    def _import(self, module_name: str) -> None:
        """Has every worker that lacks `module_name` import it, up to START_TIMEOUT_S, before
        its first case there."""
        ranks = range(self.imported.get(module_name, 0), self.size)
        progress(f"importing {module_name} on {len(ranks)} torch workers")
        for rank in ranks:
            self.conns[rank].send(("import", module_name))
        results = self._collect(ranks, START_TIMEOUT_S, f"importing {module_name}",
                                " (MESHGATE_TORCH_START_TIMEOUT)")
        for rank, result in zip(ranks, results):
            if result[0] == "raised":
                raise RankError(rank, result[1], result[2], result[3])
        self.imported[module_name] = self.size

    def run(self, module_name: str, function_name: str, arguments: list) -> list:
        """Calls module.function(rank, n, arguments[rank]) on the first n = len(arguments) ranks,
        which form the case's default process group of n ranks (the others sit this case out,
        so that a small case pays for a small group), and returns the results in rank order.
        Raises RankError for the rank whose error caused the others' (see _first_cause)."""
        if self.started < self.size:
            self._wait_started()
        if self.imported.get(module_name, 0) < self.size:
            self._import(module_name)
        participants = len(arguments)
        progress(f"running on {participants} torch workers")
        self.serial += 1
        for rank in range(participants):
            self.conns[rank].send((self.serial, module_name, function_name, arguments[rank],
                                   participants))
        results = self._collect(range(participants), COLLECTIVE_TIMEOUT_S * 2,
                                f"running {module_name}.{function_name}",
                                " (twice MESHGATE_TORCH_COLLECTIVE_TIMEOUT)")
        for rank, result in enumerate(results):
            if result[0] == "broken":
                raise WorldBroken(f"rank {rank} could not join the case's process group: "
                                  f"{result[1]}: {result[2]}")
        raised = [(rank, r) for rank, r in enumerate(results) if r[0] == "raised"]
        if raised:
            rank, result = _first_cause(raised)
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
        shutil.rmtree(self.stack_dir, ignore_errors=True)


_world: World | None = None


def get(size: int) -> World:
    """A world of at least `size` ranks: the current one, grown where it is smaller."""
    global _world
    if size > MAX_RANKS:
        raise Unsupported(f"needs {size} gloo ranks, more than MESHGATE_TORCH_MAX_RANKS="
                          f"{MAX_RANKS} worker processes")
    if _world is None:
        _world = World(size)
    elif _world.size < size:
        _world.grow(size)
    return _world


def run(size: int, module_name: str, function_name: str, arguments: list) -> list:
    """`World.run` of arguments[:size] on a world of at least `size` ranks: the case's process
    group has exactly `size` ranks. A broken world is dropped so that the next case starts a
    fresh one."""
    global _world
    world = get(size)
    arguments = list(arguments)[:size] + [None] * (size - len(arguments))
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
