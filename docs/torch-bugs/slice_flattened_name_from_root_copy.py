"""Slicing a flattened dim name from a DeviceMesh equal to its root, but not the root object,
raises a bare KeyError from inside DeviceMesh.

A 2x4 root mesh (dp, tp) registers the flattened name dp_tp. DeviceMesh._concatenate of
root["dp"] and root["tp"] gives a mesh equal to the root (same layout, same ranks, ==) that is
another object. Slicing "dp_tp" from it passes _get_slice_mesh_layout, which decides "this is
the root" by value (`self != self._get_root_mesh()`) and so finds dp_tp among the root's
flattened names; then _create_sub_mesh looks the name up in `self._flatten_mapping`, the copy's
own registry, which is empty: KeyError('dp_tp'). One of the two must change: slice from the
root's registry (the name passed validation), or refuse the name in validation.

Only torch, in one process: PyTorch's fake process group (no collectives run; the mesh and its
groups are metadata). Exit code 1 when the bug shows, 0 when it does not (the slice gives
ranks 0..7, or the name is refused with an error that says so), 2 when the script could not
tell (the control on the root fails, or the copy is not equal to the root).
    python3 slice_flattened_name_from_root_copy.py
"""

import sys
import warnings

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.testing._internal.distributed.fake_pg import FakeStore

EXPECTED = list(range(8))


def main() -> int:
    print(f"torch {torch.__version__}")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=8)
    # Slicing a flattened name from the root is deprecated but supported: that is the control.
    warnings.filterwarnings("ignore", message="Slicing a flattened dim from root mesh")
    try:
        root = DeviceMesh("cpu", torch.arange(8).reshape(2, 4), mesh_dim_names=("dp", "tp"))
        root["dp", "tp"]._flatten("dp_tp")
        control = root["dp_tp"].mesh.tolist()
        copy = DeviceMesh._concatenate([root["dp"], root["tp"]])
    except Exception as e:  # noqa: BLE001 - any failure of the control means "cannot tell"
        print(f"CANNOT TELL: the control (root['dp_tp'], _concatenate) raised "
              f"{type(e).__name__}: {e}")
        return 2
    print(f"root['dp_tp'] (control):          {control}")
    if control != EXPECTED:
        print(f"CANNOT TELL: the control gave {control}, expected {EXPECTED}")
        return 2
    print(f"copy == root: {copy == root}; copy is root: {copy is root}")
    if copy != root:
        print("CANNOT TELL: _concatenate no longer gives a mesh equal to the root")
        return 2
    try:
        actual = copy["dp_tp"].mesh.tolist()
    except KeyError as e:
        print(f"copy['dp_tp'] (actual):           KeyError {e}")
        print("BUG: the name passes validation (the copy counts as the root by value), then "
              "the slice looks it up in the copy's own, empty, registry")
        return 1
    except (ValueError, RuntimeError) as e:
        print(f"copy['dp_tp'] (actual):           refused: {type(e).__name__}: {e}")
        print("no bug: the name is refused with an error of its own")
        return 0
    print(f"copy['dp_tp'] (actual):           {actual}")
    if actual != EXPECTED:
        print(f"BUG: the slice gave ranks {actual}, expected {EXPECTED}")
        return 1
    print("no bug: the copy slices the root's flattened name")
    return 0


if __name__ == "__main__":
    sys.exit(main())
