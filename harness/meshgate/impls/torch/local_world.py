"""The local world: every rank of a case in this one process, under PyTorch's LocalTensorMode
(torch.distributed._local_tensor), which PyTorch's own DTensor tests use to run SPMD code
without processes. A tensor holds one local tensor per rank (a LocalTensor); each collective
DTensor issues is computed across those in place of a backend; the default process group is
the fake backend's, so DeviceMesh builds its groups without peers.

It answers what the gloo world answers (the collectives DTensor issues and every rank's
tensor) without a process per rank, so a case of 64 ranks costs what one of 8 does. What it
cannot stand for: a rank's own control flow (every rank runs the same code at once) and time
(no collective is timed as a backend would run it), so timed cases stay on gloo."""

from __future__ import annotations

import contextlib

from .. import protocol

# Set by `python -m meshgate.impls.torch --world local`.
_selected = False


def select() -> None:
    global _selected
    _selected = True


def selected() -> bool:
    return _selected


def require_api() -> None:
    """Unsupported on a torch release without LocalTensorMode."""
    try:
        from torch.distributed._local_tensor import LocalTensorMode  # noqa: F401
    except ImportError:
        import torch
        raise protocol.Unsupported(
            f"torch {torch.__version__.split('+')[0]} has no LocalTensorMode "
            f"(torch.distributed._local_tensor), which the local world runs on") from None


@contextlib.contextmanager
def ranks(world_size: int, mesh_ranks):
    """A fake default process group of `world_size` ranks and a LocalTensorMode over
    `mesh_ranks` (the ranks whose tensors the case holds); yields the mode."""
    import torch.distributed as dist
    from torch.distributed._local_tensor import LocalTensorMode
    from torch.testing._internal.distributed.fake_pg import FakeStore
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=min(mesh_ranks),
                            world_size=world_size)
    try:
        with LocalTensorMode(frozenset(mesh_ranks)) as mode:
            yield mode
    finally:
        dist.destroy_process_group()


def local_tensor(per_rank: dict):
    """One tensor holding each rank's own."""
    from torch.distributed._local_tensor import LocalTensor
    return LocalTensor(dict(per_rank))


def per_rank(tensor, mesh_ranks) -> dict:
    """Each rank's tensor of `tensor`: a LocalTensor's own, else (a value computed alike on
    every rank) the same tensor for each."""
    from torch.distributed._local_tensor import LocalTensor
    if isinstance(tensor, LocalTensor):
        return {int(rank): t for rank, t in tensor._local_tensors.items()}
    return {int(rank): tensor for rank in mesh_ranks}
