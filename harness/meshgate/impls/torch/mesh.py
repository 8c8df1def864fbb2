"""The mesh kind on PyTorch: real DeviceMesh objects under PyTorch's fake process group, built
once per rank whose view the case observes (the process group torn down between ranks), with
the case's flattens and ops applied as user code would: mesh._flatten, mesh[names],
mesh._unflatten, mesh._get_all_submeshes and DeviceMesh._concatenate."""

from __future__ import annotations

import contextlib
import time

from .. import protocol
from . import layout as layout_ops


def torch_model() -> str:
    return "two_level" if layout_ops.has_two_level() else "one_level"


@contextlib.contextmanager
def fake_world(rank: int, world_size: int):
    """A default process group of the fake backend, seen from `rank`; PyTorch's own DeviceMesh
    tests build meshes on it without any other process."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()


def mesh_layout_text(mesh_layout) -> str:
    """mesh._layout as meshgate prints the layout of a mesh: 2-level, the axes side by side as
    top-level modes ("((2),(4)):((4),(1))", "(()):(())"); 1-level, the layout itself."""
    if layout_ops.has_two_level():
        shapes = "(" + ",".join(layout_ops.tuple_text(tuple(a.shape)) for a in mesh_layout) + ")"
        strides = "(" + ",".join(layout_ops.tuple_text(tuple(a.stride)) for a in mesh_layout) + ")"
        return shapes + ":" + strides
    return layout_ops.layout_text(mesh_layout.shape, mesh_layout.stride)


def dim_groups(mesh) -> list[list[list[int]]]:
    """Per dim, the rank groups DeviceMesh creates for it (the ranks _init_one_process_group
    hands to new_group): the dim's layout remapped over the root's rank map, one row per
    complement offset."""
    import torch.distributed._mesh_layout as ml
    groups = []
    for d in range(mesh.ndim):
        axis = mesh._layout[d]
        if layout_ops.has_two_level():
            view = ml._MeshLayout([axis]).remap_to_tensor(mesh._rank_map)
        else:
            view = axis.nest().remap_to_tensor(mesh._rank_map)
        groups.append(view.reshape(-1, mesh.size(d)).tolist())
    return groups


def build_root(spec: dict):
    import torch
    from torch.distributed.device_mesh import DeviceMesh
    names = tuple(spec["names"]) if spec.get("names") else None
    ranks = [int(r) for r in spec["ranks"]]
    if spec.get("shape") is not None:
        mesh_tensor = torch.tensor(ranks, dtype=torch.int).reshape(spec["shape"])
        return DeviceMesh("cpu", mesh_tensor, mesh_dim_names=names)
    shape, stride = layout_ops.parse_layout(spec["layout"])
    if layout_ops.has_two_level():
        mesh_layout = layout_ops.two_level_mesh_layout(shape, stride)
    else:
        mesh_layout = layout_ops.one_level_mesh_layout(shape, stride, "a mesh from a layout")
    return DeviceMesh("cpu", _layout=mesh_layout,
                      _rank_map=torch.tensor(ranks, dtype=torch.int), mesh_dim_names=names)


def _flatten(mesh, spec: dict):
    source = mesh[tuple(spec["dims"])] if spec.get("dims") is not None else mesh
    return source._flatten(spec.get("name"))


def _require(obj, attr: str, op: str):
    if not hasattr(obj, attr):
        raise protocol.Unsupported(f"{op} needs DeviceMesh.{attr}, which torch lacks")
    return getattr(obj, attr)


def execute(request: dict):
    """Builds the root mesh, registers the root flattens and applies the ops on the current
    rank's process group: (current mesh, submeshes or None)."""
    from torch.distributed.device_mesh import DeviceMesh
    root = build_root(request["mesh"])
    for spec in request.get("flatten") or []:
        _flatten(root, spec)
    mesh, submeshes = root, None
    for op in request.get("ops") or []:
        (name, value), = op.items()
        if name == "slice":
            mesh = mesh[tuple(value)]
        elif name == "flatten":
            mesh = _flatten(mesh, value)
        elif name == "unflatten":
            unflatten = _require(mesh, "_unflatten", "unflatten")
            mesh = unflatten(value["dim"], tuple(value["sizes"]), tuple(value["names"]))
        elif name == "submeshes":
            submeshes = _require(mesh, "_get_all_submeshes", "submeshes")(value)
        elif name == "concatenate":
            concatenate = _require(DeviceMesh, "_concatenate", "concatenate")
            mesh = concatenate([mesh[tuple(names)] for names in value])
        else:
            raise ValueError(f"unknown mesh op {name!r}")
    return mesh, submeshes


def _full_mesh_rows(mesh) -> list[int]:
    """Every rank of the mesh's full tensor (all rows), as the root's rank map places them."""
    return mesh._layout.remap_to_tensor(mesh._rank_map).flatten().tolist()


def observe(request: dict) -> dict:
    ranks = [int(r) for r in request["mesh"]["ranks"]]
    asked = request.get("observe") or {}
    coordinate_ranks = [int(r) for r in asked.get("coordinates") or []]
    view_ranks = [int(r) for r in asked.get("mesh_for_rank") or []]
    primary = int(request["rank"]) if request.get("rank") is not None else ranks[0]
    world = max(ranks + coordinate_ranks + view_ranks + [primary]) + 1

    with fake_world(primary, world):
        mesh, submeshes = execute(request)
        observables = {
            "layout": mesh_layout_text(mesh._layout),
            "shape": list(mesh.shape),
            "names": list(mesh.mesh_dim_names) if mesh.mesh_dim_names else None,
            "groups": dim_groups(mesh),
        }
        if asked.get("submeshes"):
            observables["submeshes"] = (None if submeshes is None else
                                        [s.mesh.flatten().tolist() for s in submeshes])
        in_mesh = set(_full_mesh_rows(mesh))
        coordinates, views = {}, {}
        if primary in coordinate_ranks:
            c = mesh.get_coordinate()
            coordinates[str(primary)] = None if c is None else list(c)
        if primary in view_ranks:
            views[str(primary)] = mesh.mesh.tolist()

    for rank in sorted(set(coordinate_ranks + view_ranks) - {primary}):
        if rank not in in_mesh and rank in coordinate_ranks and rank not in view_ranks:
            # The rank is in no row: get_coordinate() is None there, but with several rows the
            # mesh cannot even be constructed on that rank (its .mesh has no row to show).
            coordinates[str(rank)] = None
            continue
        with fake_world(rank, world):
            other, _ = execute(request)
            if rank in coordinate_ranks:
                c = other.get_coordinate()
                coordinates[str(rank)] = None if c is None else list(c)
            if rank in view_ranks:
                views[str(rank)] = other.mesh.tolist()
    observables["coordinates"] = coordinates
    observables["mesh_for_rank"] = views
    return observables


def rejected(e: Exception) -> protocol.Rejected:
    """PyTorch's exception as a rejection: its class and words. str() of a KeyError is the repr
    of its argument, quoted ('"Invalid mesh_dim_names ..."'); the words are the argument."""
    if isinstance(e, KeyError) and len(e.args) == 1 and isinstance(e.args[0], str):
        return protocol.Rejected(type(e).__name__, e.args[0])
    return protocol.Rejected.of(e)


def handle(request: dict, perf: dict | None, directory: str):
    # The runner lists the layout models whose answer it can judge (the case's own, and the
    # other one where meshgate's two models leave something of the case to judge); torch
    # computes the one it has and says which.
    have = torch_model()
    models = request.get("models") or [request.get("model")]
    if have not in models:
        why = (request.get("unjudged_models") or {}).get(have)
        raise protocol.Unsupported(
            f"the case is written for the {request.get('model')} layout model; "
            f"{layout_ops.model_description()}"
            + (f"; meshgate judges no {have} answer to it: {why}" if why else ""))
    try:
        observables = observe(request)
    except (protocol.Unsupported, protocol.Rejected):
        raise
    except Exception as e:  # PyTorch raised, as it would for a user
        raise rejected(e) from e
    observables["model"] = have
    if perf is None:
        return observables, None
    ranks = [int(r) for r in request["mesh"]["ranks"]]
    primary = int(request["rank"]) if request.get("rank") is not None else ranks[0]
    world = max(ranks + [primary]) + 1
    samples = []
    with fake_world(primary, world):
        for i in range(int(perf["warmup"]) + int(perf["iters"])):
            t0 = time.perf_counter()
            execute(request)
            if i >= int(perf["warmup"]):
                samples.append(time.perf_counter() - t0)
    return observables, samples
