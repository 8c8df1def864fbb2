"""LocalTensorMode's reduce_scatter with the avg op returns float32 for an integer tensor.

PyTorch's local world (torch.distributed._local_tensor.LocalTensorMode) runs every rank of an
SPMD program in one process and computes each collective across the ranks' local tensors. A
collective keeps its input's dtype on every backend. Under LocalTensorMode, the functional
reduce_scatter_tensor with reduce op "avg" of an int64 tensor returns float32 (the unrounded
averages), while all_reduce with "avg" of the same tensor returns int64. DTensor reaches it
through redistribute_local_tensor of a Partial(avg) tensor to Shard(0).

One process, PyTorch's fake process group, 4 ranks. Exit 1: the bug shows; 0: fixed; 2: the
control (all_reduce avg keeps int64) failed or torch lacks LocalTensorMode."""

import sys

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

RANKS = 4


def main() -> int:
    try:
        from torch.distributed._local_tensor import LocalTensor, LocalTensorMode
    except ImportError:
        print(f"torch {torch.__version__} has no LocalTensorMode")
        return 2
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=RANKS)
    group = dist.group.WORLD
    try:
        with LocalTensorMode(RANKS):
            # Rank r holds 3 + r everywhere: the average is 4.5.
            x = LocalTensor({r: torch.full((8, 6), 3 + r, dtype=torch.int64)
                             for r in range(RANKS)})
            # wait_tensor: the functional collectives return tensors still in flight.
            reduced = funcol.wait_tensor(funcol.all_reduce(x, "avg", group))
            scattered = funcol.wait_tensor(funcol.reduce_scatter_tensor(x, "avg", 0, group))
            all_reduce = {r: t.dtype for r, t in reduced._local_tensors.items()}
            reduce_scatter = {r: t.dtype for r, t in scattered._local_tensors.items()}
            first = scattered._local_tensors[0].reshape(-1)[0].item()
    finally:
        dist.destroy_process_group()
    print(f"torch {torch.__version__}: input int64 on {RANKS} ranks")
    print(f"  all_reduce(avg)     -> {sorted(set(map(str, all_reduce.values())))}")
    print(f"  reduce_scatter(avg) -> {sorted(set(map(str, reduce_scatter.values())))}, "
          f"rank 0's first element {first}")
    if set(all_reduce.values()) != {torch.int64}:
        print("control failed: all_reduce(avg) changed the dtype too")
        return 2
    if set(reduce_scatter.values()) != {torch.int64}:
        print("BUG: reduce_scatter(avg) returned another dtype than its int64 input")
        return 1
    print("fixed: reduce_scatter(avg) keeps int64")
    return 0


if __name__ == "__main__":
    sys.exit(main())
