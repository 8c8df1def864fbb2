"""DTensor's flattened-mesh merge of a Partial("avg") dim of size 1 with a Partial("sum") dim
all-reduces with avg over both, halving the sum.

(Partial("avg"), Partial("sum")) -> (Replicate(), Replicate()) on a 1x2 mesh (A, B) whose
dims are flattened. The value is the avg over A (one rank: itself) of the sum over B. The
merge pass turns a sum/avg mix into a sum followed by a scale, but only when the avg dims'
size is above 1; with A of size 1 it keeps the first transform's reduce op, avg, and issues
one all_reduce(avg) over A+B: the sum over B's two ranks divided by 2.

Only torch: 2 gloo processes on this machine. Exit code 1 when the bug shows, 0 when
it does not, 2 when the script could not tell (a rank raised, or the control is wrong).
    python3 sum_avg_merge_size_one_avg.py
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
from torch.distributed.tensor import DTensor, Partial, Replicate

WORLD = 2
SOURCE = (Partial("avg"), Partial("sum"))
TARGET = (Replicate(), Replicate())
CONTRIBUTIONS = (10.0, 13.0)  # rank 0's and rank 1's: the global value is 10 + 13 = 23
EXPECTED = sum(CONTRIBUTIONS)


def redistribute(rank: int, flatten: bool) -> list:
    """Every rank's value after the redistribution, on every rank."""
    mesh = init_device_mesh("cpu", (1, 2), mesh_dim_names=("A", "B"))
    if flatten:
        mesh["A", "B"]._flatten("A_B")  # what lets DTensor merge collectives over A and B
    local = torch.tensor([CONTRIBUTIONS[rank]])
    dtensor = DTensor.from_local(local, mesh, SOURCE, run_check=False)
    out = dtensor.redistribute(mesh, TARGET).to_local()
    gathered = [None] * WORLD
    dist.all_gather_object(gathered, out.item())
    return gathered


def worker(rank: int, init_file: str, result_file: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=WORLD, timeout=datetime.timedelta(seconds=120))
    # The unflattened control warns that a flattened A, B would merge its all_reduces.
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
    control = redistribute(rank, flatten=False)
    actual = redistribute(rank, flatten=True)
    if rank == 0:
        print(f"torch {torch.__version__}")
        print(f"{SOURCE} -> {TARGET} on a 1x2 mesh (A, B), contributions {list(CONTRIBUTIONS)}")
        print(f"expected on every rank:        {[EXPECTED] * WORLD}")
        print(f"A, B not flattened (control):  {control}")
        print(f"A, B flattened (actual):       {actual}")
        if control != [EXPECTED] * WORLD:
            print("the control is wrong too: this is not the bug this script reproduces")
            verdict = 2
        elif actual != [EXPECTED] * WORLD:
            print(f"BUG: {actual} instead of {EXPECTED} (the sum over B divided by B's size)")
            verdict = 1
        else:
            print("OK: every rank holds the sum")
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
