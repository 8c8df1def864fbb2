"""DTensor's flattened-mesh merge of an integer (Partial("sum"), Partial("avg")) ->
(Replicate(), Replicate()) divides with true division: the local tensor comes back float32
under a DTensor that still says int64, or (through the public API) a non-integral average is
truncated, where the same redistribution without the flattened mesh refuses.

An int64 tensor of 2 elements on a 2x2 mesh (A, B); rank 1 contributes 1, the others 0. The
value is the sum over A of the avg over B: 0.5, which an integer tensor cannot hold. Without a
flattened mesh, DTensor issues all_reduce(sum) over A and all_reduce(avg) over B, and the avg
refuses to divide integers in place (RuntimeError). With A and B flattened, the merge pass
issues one all_reduce(sum) over A+B followed by `local / avg_scale` (true division in
`_redistribute.py`): a float32 [0.5, 0.5] from redistribute_local_tensor, and an int64 [0, 0]
from DTensor.redistribute and full_tensor. A merge of collectives must not change the result.

Only torch: 4 gloo processes on this machine. Exit code 1 when the bug shows (the flattened
path answers where the unflattened one refuses, or the two answer differently), 0 when both
paths agree, 2 when the script could not tell (a rank failed outside the redistribution).
    python3 integer_avg_merge.py
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
from torch.distributed.tensor._dtensor_spec import DTensorSpec
from torch.distributed.tensor._redistribute import redistribute_local_tensor

WORLD = 4
SOURCE = (Partial("sum"), Partial("avg"))
TARGET = (Replicate(), Replicate())
PATHS = ("DTensor.redistribute", "DTensor.full_tensor", "redistribute_local_tensor")


def answer(dtensor: DTensor, mesh, path: str) -> str:
    """What one path gives on this rank: the local result's dtype and values, or the refusal."""
    try:
        if path == "DTensor.redistribute":
            out = dtensor.redistribute(mesh, TARGET).to_local()
        elif path == "DTensor.full_tensor":
            out = dtensor.full_tensor()
        else:
            target = DTensorSpec(mesh, TARGET, tensor_meta=dtensor._spec.tensor_meta)
            out = redistribute_local_tensor(dtensor._local_tensor, dtensor._spec, target)
    except (RuntimeError, ValueError) as e:
        return f"refused: {type(e).__name__}"
    return f"{out.dtype} {out.tolist()}"


def worker(rank: int, init_file: str, result_file: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=WORLD, timeout=datetime.timedelta(seconds=120))
    # The unflattened control warns that a flattened A, B would merge its all_reduces.
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
    answers = {}
    for flatten in (False, True):
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("A", "B"))
        if flatten:
            mesh["A", "B"]._flatten("A_B")  # what lets DTensor merge collectives over A and B
        local = torch.full((2,), 1 if rank == 1 else 0, dtype=torch.int64)
        dtensor = DTensor.from_local(local, mesh, SOURCE, run_check=False)
        for path in PATHS:
            answers[flatten, path] = answer(dtensor, mesh, path)
    if rank == 0:
        print(f"torch {torch.__version__}")
        print(f"int64 {SOURCE} -> {TARGET} on a 2x2 mesh (A, B); the value is 0.5")
        for path in PATHS:
            print(f"{path:26} A, B not flattened (control): {answers[False, path]}")
            print(f"{'':26} A, B flattened (actual):       {answers[True, path]}")
        differ = [p for p in PATHS if answers[False, p] != answers[True, p]]
        if differ:
            print(f"BUG: the flattened mesh changes the answer of {', '.join(differ)}")
            verdict = 1
        else:
            print("OK: both paths give the same answer with and without the flattened mesh")
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
