"""DTensor's flattened-mesh merge of reduce_scatters checks evenness on the wrong shape.

(Replicate(), Partial("sum"), Partial("sum")) -> (Shard(0), Shard(0), Shard(0)) of a tensor of
4 rows on a 2x2x2 mesh (A, B, C) whose dims B and C are flattened. The plan chunks A first
(2 rows per rank), then merges the reduce_scatters on B and C into one over the flattened
group, because 4 rows divide by B*C = 4. But the tensor it scatters is the 2 local rows: split
over 4 ranks they go 1, 1, 0, 0 where nesting B then C puts them 1, 0, 1, 0. Ranks 1, 2, 5 and
6 end with the wrong local shape, and full_tensor() assembles the wrong tensor.

Only torch: 8 gloo processes on this machine. Exit code 1 when the bug shows, 0 when
it does not, 2 when the script could not tell (a rank raised, or the control is wrong).
    python3 reduce_scatter_merge_after_chunk.py
"""

import datetime
import logging
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard

WORLD = 8
SOURCE = (Replicate(), Partial("sum"), Partial("sum"))
TARGET = (Shard(0), Shard(0), Shard(0))
FULL = [4.0, 8.0, 12.0, 16.0]  # the global tensor: every rank contributes [1, 2, 3, 4]


def redistribute(flatten: bool):
    """Every rank's local tensor after the redistribution, and the global tensor that
    full_tensor() assembles from them."""
    mesh = init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("A", "B", "C"))
    if flatten:
        mesh["B", "C"]._flatten("B_C")  # what lets DTensor merge collectives over B and C
    # Each rank contributes [1, 2, 3, 4]: the sum over B and C is FULL.
    local = torch.arange(1, 5, dtype=torch.float32)
    dtensor = DTensor.from_local(local, mesh, SOURCE, run_check=False)
    out = dtensor.redistribute(mesh, TARGET)
    gathered = [None] * WORLD
    dist.all_gather_object(gathered, out.to_local().tolist())
    return gathered, out.full_tensor().tolist()


def worker(rank: int, init_file: str, result_file: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=WORLD, timeout=datetime.timedelta(seconds=120))
    # The unflattened control warns that a flattened B, C would merge its reduce_scatters.
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
    control, control_full = redistribute(flatten=False)
    actual, actual_full = redistribute(flatten=True)
    if rank == 0:
        # torch.chunk's split of 4 rows over A, B, C nested: rank a*4 + b*2 + c holds
        # row 2a + b when c == 0, nothing when c == 1.
        expected = [[4.0 * (2 * (r // 4) + (r // 2) % 2 + 1)] if r % 2 == 0 else []
                    for r in range(WORLD)]
        print(f"torch {torch.__version__}")
        print(f"{SOURCE} -> {TARGET} on a 2x2x2 mesh (A, B, C)")
        print(f"expected local tensors per rank:  {expected}, full_tensor() {FULL}")
        print(f"B, C not flattened (control):     {control}, full_tensor() {control_full}")
        print(f"B, C flattened (actual):          {actual}, full_tensor() {actual_full}")
        wrong = [r for r in range(WORLD) if actual[r] != expected[r]]
        if control != expected or control_full != FULL:
            print("the control is wrong too: this is not the bug this script reproduces")
            verdict = 2
        elif wrong or actual_full != FULL:
            print(f"BUG: ranks {wrong} end with the wrong local tensor; full_tensor() "
                  f"{actual_full} instead of {FULL}")
            verdict = 1
        else:
            print("OK: every rank holds its shard")
            verdict = 0
        with open(result_file, "w") as f:
            f.write(str(verdict))
    dist.destroy_process_group()


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "init")
        result_file = os.path.join(tmp, "verdict")
        try:
            # The ranks fork from one process that imported torch once, rather than each
            # importing it: on a machine with few cores that is most of the script's time.
            mp.set_forkserver_preload(["torch", "torch.distributed.tensor"])
            mp.start_processes(worker, args=(init_file, result_file), nprocs=WORLD,
                               start_method="forkserver")
            with open(result_file) as f:
                return int(f.read())
        except Exception as e:  # a rank raised: the script could not tell either way
            print(f"could not run the reproduction: {type(e).__name__}: {e}")
            return 2


if __name__ == "__main__":
    sys.exit(main())
