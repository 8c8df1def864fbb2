"""torch.argmax of a DTensor sharded on a dim other than the first, over every dim, breaks a tie
between ranks by rank instead of returning the first maximal element.

torch.argmax's documentation: "If there are multiple maximal values then the indices of the
first maximal value are returned", the first in the flattened (row-major) order. A 4x4 tensor
holds its maximum, 9, at (0, 2) and (3, 0): flat indices 2 and 12, so argmax is 2. Sharded
Shard(1) over 2 ranks, (0, 2) lives on rank 1 and (3, 0) on rank 0; DTensor's argmax over
every dim answers 12, the candidate of the lower rank. Sharded Shard(0) (the control), rank
order is flat order and the answer is 2. argmin has the same tie-break.

Only torch: 2 gloo processes on this machine. Exit code 1 when the bug shows, 0 when
it does not, 2 when the script could not tell (a rank raised, or the control is wrong).
    python3 argmax_tie_across_shards.py
"""

import datetime
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

WORLD = 2
GLOBAL = [[1.0, 2.0, 9.0, 3.0],
          [8.0, 2.0, 6.0, 4.0],
          [0.0, 1.0, 2.0, 5.0],
          [9.0, 1.0, 2.0, 3.0]]


def answers(placement) -> dict:
    """argmax and argmin (of the negated tensor) over every dim, on the DTensor sharded by
    `placement`."""
    mesh = init_device_mesh("cpu", (WORLD,))
    tensor = torch.tensor(GLOBAL)
    return {
        "argmax": torch.argmax(distribute_tensor(tensor, mesh, [placement])).full_tensor().item(),
        "argmin": torch.argmin(distribute_tensor(-tensor, mesh, [placement])).full_tensor().item(),
    }


def worker(rank: int, init_file: str, result_file: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=WORLD, timeout=datetime.timedelta(seconds=120))
    verdict = 2
    try:
        control = answers(Shard(0))
        actual = answers(Shard(1))
        if rank == 0:
            tensor = torch.tensor(GLOBAL)
            expected = {"argmax": torch.argmax(tensor).item(),
                        "argmin": torch.argmin(-tensor).item()}
            print(f"torch {torch.__version__}")
            print(f"a 4x4 tensor whose maximum 9 is at flat indices 2 and 12, on {WORLD} ranks")
            print(f"expected (torch on the whole tensor): {expected}")
            print(f"Shard(0) (control):                  {control}")
            print(f"Shard(1) (actual):                   {actual}")
            if control != expected:
                print("the control is wrong too: this is not the bug this script reproduces")
            elif actual != expected:
                print("BUG: the tie between ranks went to the lower rank, not the first element")
                verdict = 1
            else:
                print("OK: the first maximal element wins")
                verdict = 0
    except Exception as e:  # noqa: BLE001 - a release that raises cannot tell
        if rank == 0:
            print(f"torch {torch.__version__}: raised {type(e).__name__}: {e}")
    if rank == 0:
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
        except Exception as e:  # noqa: BLE001 - a rank that died cannot tell
            print(f"a rank failed: {type(e).__name__}: {e}")
            return 2


if __name__ == "__main__":
    sys.exit(main())
