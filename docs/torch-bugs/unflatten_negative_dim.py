"""DeviceMesh._unflatten accepts a negative dim but splices as if it were not: dim=-1 builds an
overlapping layout and fails an assertion, where dim=ndim-1 works.

_unflatten checks only `dim >= self.ndim`, so -1 passes; _create_unflatten_mesh then splices
`self._layout.splice(dim, dim + 1, ...)` and `names[dim : dim + 1] = ...`. For dim = -1 that is
the Python slice [-1:0]: the new dims are inserted before the last one and the last one stays,
so the layout covers the same ranks twice and DeviceMesh's constructor raises
"AssertionError: Please use a non-overlapping layout". Negative indices of every other
DeviceMesh and tensor API count from the end, and the type says `dim: int | str`.

Only torch, in one process: PyTorch's fake process group (no collectives run). Exit code 1 when
the bug shows, 0 when it does not (dim=-1 gives the mesh dim=ndim-1 gives, or is refused with a
ValueError), 2 when the script could not tell (the control with dim=ndim-1 fails).
    python3 unflatten_negative_dim.py
"""

import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.testing._internal.distributed.fake_pg import FakeStore


def described(mesh: DeviceMesh) -> tuple:
    return mesh.mesh_dim_names, tuple(mesh.shape), mesh.mesh.tolist()


def main() -> int:
    print(f"torch {torch.__version__}")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=16)
    root = DeviceMesh("cpu", torch.arange(16).reshape(2, 2, 4), mesh_dim_names=("a", "b", "c"))
    try:
        control = described(root._unflatten(2, (2, 2), ("c0", "c1")))
    except Exception as e:  # noqa: BLE001 - any failure of the control means "cannot tell"
        print(f"CANNOT TELL: _unflatten(2, (2, 2)) of a 2x2x4 mesh raised {type(e).__name__}: {e}")
        return 2
    print(f"(2,2,4)._unflatten(2, (2,2))  (control): names {control[0]}, shape {control[1]}")
    try:
        actual = described(root._unflatten(-1, (2, 2), ("c0", "c1")))
    except ValueError as e:
        print(f"(2,2,4)._unflatten(-1, (2,2)) (actual):  refused: ValueError: {e}")
        print("no bug: a negative dim is refused")
        return 0
    except Exception as e:  # noqa: BLE001 - the bug shows as an assertion inside DeviceMesh
        print(f"(2,2,4)._unflatten(-1, (2,2)) (actual):  {type(e).__name__}: {e}")
        print("BUG: dim=-1 is accepted, then spliced as the slice [-1:0], which keeps the last "
              "dim beside the new ones: an overlapping layout")
        return 1
    print(f"(2,2,4)._unflatten(-1, (2,2)) (actual):  names {actual[0]}, shape {actual[1]}")
    if actual != control:
        print("BUG: dim=-1 gives another mesh than dim=2")
        return 1
    print("no bug: dim=-1 unflattens the last dim")
    return 0


if __name__ == "__main__":
    sys.exit(main())
