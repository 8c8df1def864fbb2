"""The `redistribute` kind under PyTorch: every rank of a gloo world builds a real DeviceMesh,
registers the case's flattened meshes, wraps its source local tensor in a DTensor and
redistributes it as the case's api says: `internal` is redistribute_local_tensor (R -> P is a
local partition), `public` is DTensor.redistribute (which refuses Partial targets it would have
to create), `full_tensor` is DTensor.full_tensor() (the case's target is Replicate on every
dim). A case with `reduce` applies an op to the source DTensor instead (a reduction:
torch.sum, mean, amax, amin, torch.linalg.vector_norm; argmax, argmin and the indices of
torch.max and torch.min over a dim; the tensor plus a scalar; the transpose t; mm with a second
operand, the tensor's transpose placed as `other` says; or full_tensor, the source itself),
records its result's placements and gathers it with full_tensor(); the collectives of both are
recorded, and the adapter answers the same op on the global tensor computed in this one process
as `reference`, against which meshgate-runner judges every rank's full tensor. A strided shard,
SS(d,k), is _StridedShard(d, split_factor=k): a source (or mm's second operand) with one is
built from the global tensor, which the runner then sends as every rank's input, as a user
builds it: distribute_tensor to Replicate, then DTensor.redistribute to the placements. The
collectives are counted as PyTorch's own tests count them, with CommDebugMode, and each is
written in meshgate's comm-string form from the functional collective's arguments: its process
group names the mesh dims (a flattened mesh's group the dims of the merged transform that uses
it), the reduce op is the collective's, and the tensor dims are those that DTensor's placement
code passed to the functional collective it called.

Gloo has no alltoall, so on CPU DTensor's shard_dim_alltoall gathers and chunks instead; that
all_gather is recorded as the all_to_all it stands for (what PyTorch issues on NCCL), so that
plans compare across backends."""

from __future__ import annotations

import contextlib
import os
import re
import time

from .. import protocol
from . import compiled, local_world, world

_PLACEMENT = re.compile(r"^(S|R|P)(?:\((\w+)\))?$")
_STRIDED = re.compile(r"^SS\(\s*(-?\d+)\s*,\s*(\d+)\s*\)$")


def handle(request: dict, perf: dict | None, directory: str):
    size = int(request["world"])
    mesh = request["mesh"]
    if mesh.get("layout") is not None:
        raise protocol.Unsupported(
            "a mesh given by a layout that leaves ranks of its rank map to other rows; the "
            "adapter builds DeviceMesh from a row-major rank tensor")
    inputs = request["inputs"]
    common = {
        "shape": [int(s) for s in mesh["shape"]],
        "names": list(mesh.get("names") or [str(i) for i in range(len(mesh["shape"]))]),
        "ranks": [int(r) for r in mesh["ranks"]],
        "flatten": request.get("flatten", []),
        "tensor": request["tensor"],
        "from": request["from"],
        "to": request["to"],
        "optimize": bool(request.get("optimize", True)),
        "api": request.get("api", "internal"),
        "planner": request.get("planner", "greedy"),
        "reduce": request.get("reduce"),
        "global": request.get("global"),
        "compile": bool(request.get("compile", False)),
        "shard_order": request.get("shard_order"),
        "perf": perf,
    }
    if common["api"] not in ("internal", "public", "full_tensor"):
        raise protocol.Unsupported(f"api {common['api']!r} (known: internal, public, "
                                   f"full_tensor)")
    reference = None
    if common["reduce"] is not None:
        if perf is not None:
            raise protocol.Unsupported("timing a reduction of a DTensor")
        whole = _read_tensor(request["global"])
        other = whole.t().contiguous() if common["reduce"]["op"] == "mm" else None
        reference = _write_tensor(_reduce(whole, common["reduce"], other),
                                  os.path.join(directory, "reference.bin"))
    if common["planner"] not in ("greedy", "min_cost"):
        raise protocol.Unsupported(f"planner {common['planner']!r} (known: greedy, min_cost)")
    _require_apis(common)
    if common["compile"]:
        if local_world.selected():
            raise protocol.Unsupported("torch.compile in the local world; compile it with "
                                       "--impl torch (gloo)")
        if perf is not None:
            raise protocol.Unsupported("timing a compiled redistribution")
        compiled.require_api()
    if local_world.selected():
        if perf is not None:
            raise protocol.Unsupported(
                "timing in the local world, whose ranks run one after another in one process; "
                "time it with --impl torch (gloo)")
        local_world.require_api()
    workers = size if local_world.selected() else world.get(size).size
    arguments = []
    for rank in range(workers):
        argument = dict(common)
        argument["input"] = inputs.get(str(rank))
        argument["output"] = os.path.join(directory, f"out-{rank}.bin")
        arguments.append(argument)
    try:
        if local_world.selected():
            results = run_local(size, arguments)
        else:
            results = world.run(size, __name__, "run_rank", arguments)
    except world.RankError as e:
        # Not PyTorch refusing the redistribution (those come back as results): the adapter or
        # the world broke on that rank.
        raise RuntimeError(f"rank {e.rank} raised {e.error}: {e.message}\n{e.trace}") from None
    rejected = [r for r in results if r is not None and "rejected" in r]
    if rejected:
        error, message = rejected[0]["rejected"]
        raise protocol.Rejected(error, message)
    comms, outputs, warnings, placements = {}, {}, {}, {}
    for rank, result in enumerate(results):
        if result is None or "output" not in result:
            continue
        comms[str(rank)] = result["comms"]
        outputs[str(rank)] = result["output"]
        warnings[str(rank)] = result["warnings"]
        if "placements" in result:
            placements[str(rank)] = result["placements"]
    if reference is not None:
        return {"comms": comms, "outputs": outputs, "warnings": warnings,
                "placements": placements, "reference": reference}, None
    time_s = None
    if perf is not None:
        samples = [r["time_s"] for r in results if r is not None and r.get("time_s")]
        time_s = [max(column) for column in zip(*samples)] if samples else []
    observables = {"comms": comms, "outputs": outputs, "warnings": warnings}
    if common["compile"]:
        # Every mesh rank compiles the same graph; the most graph breaks any rank saw.
        answered = [r["compile"] for r in results if r is not None and "compile" in r]
        observables["compile"] = {
            "graph_breaks": max((c["graph_breaks"] for c in answered), default=0),
            "graphs": max((c["graphs"] for c in answered), default=0)}
    if request.get("torch_cost") is not None:
        observables["torch_cost"] = torch_costs(request)
    return observables, time_s


def _require_apis(common: dict) -> None:
    """Unsupported, naming each missing function, on a torch release that lacks what the
    adapter records or what the case asks for. A release without the merge pass
    (_optimize_transform_infos) runs unmerged: `optimize: false` then changes nothing."""
    import torch
    import torch.distributed._functional_collectives as funcol
    import torch.distributed.tensor._redistribute as redistribute
    import torch.distributed.tensor.placement_types as placement_types
    gather, scatter = _gather_scatter_names(funcol)
    needed = [(funcol, gather), (funcol, scatter), (placement_types, "shard_dim_alltoall")]
    if common["planner"] == "min_cost":
        needed.append((redistribute, "use_min_cost_redistribution_plan"))
    if not common["optimize"] and hasattr(redistribute, "_optimize_transform_infos"):
        needed.append((redistribute, "disable_redistribute_transform_optimization"))
    if _is_strided(common["from"]) or _is_strided((common.get("reduce") or {}).get("other")):
        needed.append((placement_types, "_StridedShard"))
    if common.get("shard_order"):
        import torch.distributed.tensor._dtensor_spec as dtensor_spec
        needed.append((dtensor_spec, "ShardOrderEntry"))
    missing = [f"{module.__name__}.{name}" for module, name in needed if not hasattr(module, name)]
    if missing:
        release = torch.__version__.split("+")[0]
        raise protocol.Unsupported(f"torch {release} lacks {', '.join(missing)}, which the "
                                   f"adapter needs for this case")


def _gather_scatter_names(funcol) -> tuple[str, str]:
    """The functional collectives DTensor's placement code calls to gather and to scatter:
    all_gather_single / reduce_scatter_single, or on releases before them (2.11 and older)
    all_gather_tensor / reduce_scatter_tensor, which take the same arguments."""
    return ("all_gather_single" if hasattr(funcol, "all_gather_single") else "all_gather_tensor",
            "reduce_scatter_single" if hasattr(funcol, "reduce_scatter_single")
            else "reduce_scatter_tensor")


def _torch_dtype(name: str):
    import torch
    dtypes = {"float64": torch.float64, "float32": torch.float32, "float16": torch.float16,
              "bfloat16": torch.bfloat16, "int64": torch.int64, "int32": torch.int32,
              "int8": torch.int8, "uint8": torch.uint8}
    if name not in dtypes:
        raise protocol.Unsupported(f"dtype {name}")
    return dtypes[name]


def _dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _is_strided(placements) -> bool:
    return any(_STRIDED.match(p.strip()) for p in placements or [])


def _placement(text: str):
    from torch.distributed.tensor import Partial, Replicate, Shard
    strided = _STRIDED.match(text.strip())
    if strided:
        from torch.distributed.tensor.placement_types import _StridedShard
        return _StridedShard(int(strided.group(1)), split_factor=int(strided.group(2)))
    m = _PLACEMENT.match(text.strip())
    if not m:
        raise ValueError(f"placement {text!r} is not of the form S(d), SS(d,k), R, P(op)")
    kind, arg = m.groups()
    if kind == "S":
        return Shard(int(arg))
    if kind == "R":
        return Replicate()
    return Partial(arg or "sum")


_REDUCTIONS = ("sum", "mean", "amax", "amin", "vector_norm", "all", "any")
# Ops whose answer is an index tensor (int64): argmax and argmin over every dim or over `dim`,
# and the indices of torch.max or torch.min over `dim`.
_INDEX_OPS = ("argmax", "argmin", "max_indices", "min_indices")
_OPS = _REDUCTIONS + _INDEX_OPS + ("add", "t", "mm", "full_tensor")


def _reduce(tensor, reduce: dict, other=None):
    """The case's op on `tensor` (a DTensor or a plain tensor): a reduction over every dim, or
    over `dim` when the case names one; an index op; add, the tensor plus the case's `scalar`
    (a Python number); t; mm with `other` (the tensor's transpose); or full_tensor (the tensor
    itself, which the caller gathers)."""
    import torch
    op, dim = reduce["op"], reduce.get("dim")
    if op not in _OPS:
        raise protocol.Unsupported(f"op {op!r} (known: {', '.join(_OPS)})")
    if op == "t":
        return tensor.t()
    if op == "mm":
        return torch.mm(tensor, other)
    if op == "full_tensor":
        return tensor
    if op == "add":
        return tensor + reduce["scalar"]
    if op in ("max_indices", "min_indices"):
        return getattr(torch, op.split("_")[0])(tensor, dim=dim).indices
    if op == "vector_norm":
        return torch.linalg.vector_norm(tensor) if dim is None else \
            torch.linalg.vector_norm(tensor, dim=dim)
    function = getattr(torch, op)
    return function(tensor) if dim is None else function(tensor, dim=dim)


def _placement_text(placement) -> str:
    """S(d), R, P(op) as the case files write them; a Partial subclass (vector_norm's
    _NormPartial) adds its class and norm: _NormPartial(sum, norm=2)."""
    from torch.distributed.tensor import Partial, Replicate, Shard
    if isinstance(placement, Shard) and type(placement) is Shard:
        return f"S({placement.dim})"
    if type(placement).__name__ == "_StridedShard":
        return f"SS({placement.dim},{placement.split_factor})"
    if isinstance(placement, Replicate):
        return "R"
    if type(placement) is Partial:
        return f"P({placement.reduce_op})"
    if isinstance(placement, Partial):
        norm = getattr(placement, "norm_type", None)
        extra = "" if norm is None else f", norm={norm:g}" if isinstance(norm, (int, float)) \
            else f", norm={norm}"
        return f"{type(placement).__name__}({placement.reduce_op}{extra})"
    return repr(placement)


def _read_tensor(descriptor: dict):
    import torch
    dtype = _torch_dtype(descriptor["dtype"])
    with open(descriptor["path"], "rb") as f:
        data = bytearray(f.read())
    flat = torch.frombuffer(data, dtype=dtype) if data else torch.empty(0, dtype=dtype)
    return flat.reshape(descriptor["shape"]).clone()


def _write_tensor(tensor, path: str) -> dict:
    import torch
    t = tensor.detach().contiguous().cpu()
    if t.dtype == torch.bool:  # torch.all / torch.any: the protocol's dtypes have no bool
        t = t.to(torch.uint8)
    # reshape(-1): a 0-dim tensor (a full reduction) cannot be viewed as bytes
    raw = t.reshape(-1).view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8)
    with open(path, "wb") as f:
        f.write(raw.numpy().tobytes())
    return {"path": path, "dtype": _dtype_name(t.dtype), "shape": list(t.shape)}


class _Recorder:
    """Instruments one redistribution: the functional collectives CommDebugMode counts, the
    tensor dims DTensor's placement code passed for each, the flattened transforms of the merge
    pass (to name a flattened group by the dims it merges) and the merge pass's warnings."""

    def __init__(self):
        self.pending_dims: list[tuple[str, tuple[int, int]]] = []
        self.calls: list[tuple[str, str | None, str | None, tuple[int, int] | None]] = []
        self.flattened_groups: dict[str, tuple[int, ...]] = {}
        self.warnings: set[tuple[tuple[int, ...], str]] = set()

    @contextlib.contextmanager
    def patched(self):
        import torch.distributed._functional_collectives as funcol
        import torch.distributed.tensor._redistribute as redistribute
        import torch.distributed.tensor.placement_types as placement_types

        gather, scatter = _gather_scatter_names(funcol)
        originals = {
            (funcol, gather): getattr(funcol, gather),
            (funcol, scatter): getattr(funcol, scatter),
            (placement_types, "shard_dim_alltoall"): placement_types.shard_dim_alltoall,
        }
        # The merge pass and its warning, where this torch has them.
        for name in ("_optimize_transform_infos", "_warn_flatten_optimization_not_possible"):
            if hasattr(redistribute, name):
                originals[(redistribute, name)] = getattr(redistribute, name)
        recorder = self

        def all_gather_single(tensor, gather_dim, group, *args, **kwargs):
            recorder.pending_dims.append(("all_gather", (gather_dim, gather_dim)))
            return originals[(funcol, gather)](tensor, gather_dim, group, *args, **kwargs)

        def reduce_scatter_single(tensor, reduce_op, scatter_dim, group, *args, **kwargs):
            recorder.pending_dims.append(("reduce_scatter", (scatter_dim, scatter_dim)))
            return originals[(funcol, scatter)](tensor, reduce_op, scatter_dim, group, *args,
                                                **kwargs)

        def shard_dim_alltoall(tensor, gather_dim, shard_dim, mesh, mesh_dim):
            # On gloo the all_gather inside stands for this all_to_all (see the module's doc).
            recorder.pending_dims.append(("all_to_all", (gather_dim, shard_dim)))
            before = len(recorder.pending_dims)
            out = originals[(placement_types, "shard_dim_alltoall")](tensor, gather_dim,
                                                                      shard_dim, mesh, mesh_dim)
            del recorder.pending_dims[before - 1:]
            return out

        def optimize(transform_infos, device_mesh, src_placements, dst_placements):
            result = originals[(redistribute, "_optimize_transform_infos")](
                transform_infos, device_mesh, src_placements, dst_placements)
            for info in result:
                if isinstance(info, redistribute._FlattenedTransformInfo):
                    name = info.mesh.get_group(0).group_name
                    recorder.flattened_groups[name] = tuple(info.original_mesh_dims)
            return result

        def warn(device_mesh, mesh_dims, src_placements, dst_placements, num_ops, comm_type,
                 reason):
            recorder.warnings.add((tuple(mesh_dims), reason))
            return originals[(redistribute, "_warn_flatten_optimization_not_possible")](
                device_mesh, mesh_dims, src_placements, dst_placements, num_ops, comm_type,
                reason)

        with compiled.replaced(originals, {
                (funcol, gather): all_gather_single,
                (funcol, scatter): reduce_scatter_single,
                (placement_types, "shard_dim_alltoall"): shard_dim_alltoall,
                (redistribute, "_optimize_transform_infos"): optimize,
                (redistribute, "_warn_flatten_optimization_not_possible"): warn}):
            yield

    def comm_mode(self):
        import torch
        from torch.distributed.tensor.debug import CommDebugMode

        recorder = self
        funcol = torch.ops._c10d_functional
        kinds = {
            funcol.all_reduce: "all_reduce",
            funcol.all_gather_into_tensor: "all_gather",
            funcol.reduce_scatter_tensor: "reduce_scatter",
            funcol.all_to_all_single: "all_to_all",
            torch.ops._dtensor.shard_dim_alltoall: "all_to_all",
        }

        class Mode(CommDebugMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                before = self.get_total_counts()
                out = super().__torch_dispatch__(func, types, args, kwargs)
                if out is not NotImplemented and self.get_total_counts() > before:
                    packet = getattr(func, "_overloadpacket", None)
                    kind = kinds.get(packet)
                    if kind is None:
                        recorder.calls.append((str(func), None, None, None))
                    else:
                        recorder.calls.append(recorder._call(kind, packet, args))
                return out

        return Mode()

    def _call(self, kind, packet, args):
        import torch
        group = args[-1] if isinstance(args[-1], str) else None
        reduce_op = None
        dims = None
        if kind in ("all_reduce", "reduce_scatter"):
            reduce_op = str(args[1]).lower()
        if packet is torch.ops._dtensor.shard_dim_alltoall:
            dims = (int(args[1]), int(args[2]))
        elif self.pending_dims:
            pending_kind, dims = self.pending_dims.pop(0)
            if pending_kind == "all_to_all":
                kind = "all_to_all"
        return (kind, group, reduce_op, dims)


def _render(call, group_dims: dict, names: list[str]) -> str:
    kind, group, reduce_op, dims = call
    if group is None or group not in group_dims:
        return f"{kind}(<unknown group {group}>)"
    if dims is None and kind in ("reduce_scatter", "all_gather", "all_to_all"):
        dims = ("?", "?")  # a compiled collective whose tensor dims no eager twin gives
    where = "+".join(names[d] for d in sorted(group_dims[group]))
    if kind == "all_reduce":
        return f"all_reduce({where}, {reduce_op})"
    if kind == "reduce_scatter":
        return f"reduce_scatter({where}, {reduce_op}, dim={dims[0]})"
    if kind == "all_gather":
        return f"all_gather({where}, dim={dims[0]})"
    if kind == "all_to_all":
        return f"all_to_all({where}, dim={dims[0]}->{dims[1]})"
    return f"{kind}({where})"


def run_rank(rank: int, world_size: int, arg: dict):
    import torch.distributed as dist

    # Every rank of the world creates the mesh's groups, as PyTorch requires; ranks outside the
    # mesh hold no coordinate and do nothing more.
    mesh, group_dims, rejected = _mesh(arg)
    # Ranks outside the mesh hold no groups of it (get_group raises there).
    in_mesh = mesh.get_coordinate() is not None and arg["input"] is not None
    result: dict = {}
    if in_mesh:
        result = rejected or _case(arg, mesh, group_dims, _read_tensor(arg["input"]))
        if "output" in result:
            result["output"] = _write_tensor(result["output"], arg["output"])
    # Every rank returns before the timing starts, so a rejection on one rank is not followed
    # by its peers waiting in a barrier.
    gathered = [None] * world_size
    dist.all_gather_object(gathered, "rejected" in result)
    if any(gathered):
        return result or None
    if arg["perf"] is not None:
        local = _read_tensor(arg["input"]) if in_mesh else None
        result["time_s"] = _timed(arg, mesh, local, in_mesh)
    return result or None


def run_local(world_size: int, arguments: list) -> list:
    """run_rank's answers for every rank at once, in the local world: one mesh, one DTensor whose
    local tensor holds every mesh rank's input, one redistribution; a rank outside the mesh
    answers None, as it does on gloo."""
    arg = arguments[0]
    mesh_ranks = [r for r in arg["ranks"] if arguments[r]["input"] is not None]
    answers: list = [None] * world_size
    with local_world.ranks(world_size, mesh_ranks):
        mesh, group_dims, rejected = _mesh(arg)
        if rejected:
            return [rejected if r in mesh_ranks else None for r in range(world_size)]
        local = local_world.local_tensor({r: _read_tensor(arguments[r]["input"])
                                          for r in mesh_ranks})
        result = _case(arg, mesh, group_dims, local)
        if "output" not in result:
            return [result if r in mesh_ranks else None for r in range(world_size)]
        outputs = local_world.per_rank(result.pop("output"), mesh_ranks)
        for r in mesh_ranks:
            answers[r] = dict(result, output=_write_tensor(outputs[r], arguments[r]["output"]))
    return answers


def _mesh(arg: dict):
    """The case's DeviceMesh with its flattens registered, the mesh dims each group's name
    stands for, and PyTorch's refusal of a flatten (as a rank's answer) or None."""
    import torch
    from torch.distributed.device_mesh import DeviceMesh

    shape, names = arg["shape"], arg["names"]
    mesh_tensor = torch.tensor(arg["ranks"], dtype=torch.int64).reshape(shape)
    mesh = DeviceMesh("cpu", mesh_tensor, mesh_dim_names=tuple(names))
    in_mesh = mesh.get_coordinate() is not None
    group_dims = {mesh.get_group(d).group_name: (d,) for d in range(len(shape))} if in_mesh else {}
    try:
        for f in arg["flatten"]:
            sub = mesh[tuple(f["dims"])]
            flat = sub._flatten(f["name"]) if f.get("name") else sub._flatten()
            if in_mesh:
                group_dims.setdefault(flat.get_group(0).group_name,
                                      tuple(names.index(d) for d in f["dims"]))
    except Exception as e:
        # PyTorch refusing the flatten, as a user would see it. A rank outside the mesh cannot
        # slice it ("it needs to contain the local rank") and has nothing to flatten: it only
        # joins the world-wide calls after.
        return mesh, group_dims, {"rejected": (type(e).__name__, str(e))}
    return mesh, group_dims, None


def _case(arg: dict, mesh, group_dims: dict, local) -> dict:
    """The case on one mesh rank (or, in the local world, on all at once): `local` is the
    source's local tensor. Returns the collectives, the merge pass's warnings, the tensor it
    ends with (`output`) and, for a reduction, the result's placements; or PyTorch's
    refusal."""
    import torch
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor import _redistribute as redistribute

    names = arg["names"]
    recorder = _Recorder()
    try:
        src = tuple(_placement(p) for p in arg["from"])
        dst = tuple(_placement(p) for p in arg["to"])
        global_shape = torch.Size(arg["tensor"]["shape"])
        stride = torch.empty(global_shape, device="meta").stride()
        redistribute._gen_transform_infos.cache_clear()
        with _planning(arg), recorder.patched():
            if arg.get("shard_order"):
                dtensor = _ordered(local, mesh, src, arg["shard_order"])
            elif _is_strided(arg["from"]):
                dtensor = _strided(local, mesh, src)
            else:
                dtensor = DTensor.from_local(local, mesh, src, run_check=False,
                                             shape=global_shape, stride=stride)
            other = None
            if (arg.get("reduce") or {}).get("op") == "mm":
                whole = local if _is_strided(arg["from"]) else _read_tensor(arg["global"])
                other = _strided(whole.t().contiguous(), mesh,
                                 [_placement(p) for p in arg["reduce"]["other"]])
            mode = recorder.comm_mode()
            placements = None
            if arg.get("compile"):
                import torch.distributed._functional_collectives as funcol
                # Eager first: its collectives lend the compiled ones their tensor dims.
                with mode:
                    _redistribute(dtensor, mesh, dst, arg["api"])
                out, issued, breaks, graphs = compiled.run(
                    lambda d: _redistribute(d, mesh, dst, arg["api"]), dtensor,
                    *_gather_scatter_names(funcol))
                compiled.check_readable(issued, recorder.calls, breaks)
                calls = compiled.with_dims(issued, recorder.calls)
            else:
                with mode:
                    if arg.get("reduce") is not None:
                        reduced = _reduce(dtensor, arg["reduce"], other)
                        placements = [_placement_text(p) for p in reduced.placements]
                        out = reduced.full_tensor()
                    else:
                        out = _redistribute(dtensor, mesh, dst, arg["api"])
                calls = recorder.calls
    except compiled.Unreadable:
        raise
    except Exception as e:  # PyTorch refusing the redistribution
        return {"rejected": (type(e).__name__, str(e))}
    # A flattened group is named by the dims of the merged transform that uses it.
    group_dims = dict(group_dims, **recorder.flattened_groups)
    comms = [_render(c, group_dims, names) for c in calls]
    if len(recorder.calls) != mode.get_total_counts():
        raise RuntimeError(f"recorded {len(recorder.calls)} collectives, CommDebugMode counted "
                           f"{mode.get_total_counts()}")
    result = {"comms": comms, "warnings": len(recorder.warnings), "output": out}
    if arg.get("compile"):
        result["compile"] = {"graph_breaks": breaks, "graphs": graphs}
    if placements is not None:
        result["placements"] = placements
    return result


def _strided(whole, mesh, placements):
    """A DTensor of the global tensor `whole` (meshgate cannot shard by a strided shard, so the
    runner sends it whole) placed as a user places it: distributed as Replicate, then
    redistributed to the placements (torch 2.15's distribute_tensor refuses an uneven strided
    shard that DTensor.redistribute makes)."""
    from torch.distributed.tensor import Replicate, distribute_tensor
    replicated = distribute_tensor(whole, mesh, [Replicate()] * mesh.ndim)
    return replicated.redistribute(mesh, placements)


def _ordered(whole, mesh, placements, shard_order):
    """A DTensor of the global tensor `whole` sharded by `placements` in the case's shard order
    (DTensorSpec.shard_order, which no public API takes): PyTorch's own chunking of the
    replicated tensor into that spec, as redistribute_local_tensor makes it."""
    from torch.distributed.tensor import DTensor, Replicate
    from torch.distributed.tensor._dtensor_spec import DTensorSpec, ShardOrderEntry, TensorMeta
    from torch.distributed.tensor._redistribute import redistribute_local_tensor
    meta = TensorMeta(whole.shape, whole.stride(), whole.dtype)
    replicated = DTensorSpec(mesh, (Replicate(),) * mesh.ndim, tensor_meta=meta)
    order = tuple(ShardOrderEntry(tensor_dim=int(e["dim"]),
                                  mesh_dims=tuple(int(m) for m in e["mesh_dims"]))
                  for e in shard_order)
    spec = DTensorSpec(mesh, tuple(placements), tensor_meta=meta, shard_order=order)
    return DTensor(redistribute_local_tensor(whole, replicated, spec), spec, requires_grad=False)


@contextlib.contextmanager
def _planning(arg: dict):
    from torch.distributed.tensor import _redistribute as redistribute
    with contextlib.ExitStack() as stack:
        if not arg["optimize"] and hasattr(redistribute, "_optimize_transform_infos"):
            stack.enter_context(redistribute.disable_redistribute_transform_optimization(True))
        if arg["planner"] == "min_cost":
            stack.enter_context(redistribute.use_min_cost_redistribution_plan(True))
        yield


def _redistribute(dtensor, mesh, dst, api: str):
    from torch.distributed.tensor import _redistribute as redistribute
    from torch.distributed.tensor._dtensor_spec import DTensorSpec
    if api == "public":
        return dtensor.redistribute(mesh, dst).to_local()
    if api == "full_tensor":
        return dtensor.full_tensor()
    target = DTensorSpec(mesh, dst, tensor_meta=dtensor._spec.tensor_meta)
    return redistribute.redistribute_local_tensor(dtensor._local_tensor, dtensor._spec, target)


def _timed(arg: dict, mesh, local, in_mesh: bool) -> list[float]:
    """Seconds of each timed redistribution on this rank (0 outside the mesh), after the
    warm-up; every rank waits for the others before each."""
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor
    perf = arg["perf"]
    dtensor = dst = None
    if in_mesh:
        src = tuple(_placement(p) for p in arg["from"])
        dst = tuple(_placement(p) for p in arg["to"])
        global_shape = torch.Size(arg["tensor"]["shape"])
        dtensor = DTensor.from_local(local, mesh, src, run_check=False, shape=global_shape,
                                     stride=torch.empty(global_shape, device="meta").stride())
    times = []
    with _planning(arg):
        for i in range(int(perf["warmup"]) + int(perf["iters"])):
            dist.barrier()
            t0 = time.perf_counter()
            if in_mesh:
                _redistribute(dtensor, mesh, dst, arg["api"])
            dt = time.perf_counter() - t0
            if i >= int(perf["warmup"]):
                times.append(dt)
    return times


def torch_costs(request: dict) -> dict:
    """PyTorch's own price of the case's redistribution: redistribute_cost (in
    torch/distributed/tensor/_collective_utils.py), the estimate DTensor's sharding propagation
    ranks strategies by, of the plan each planner makes. `direct` is redistribute_cost as
    sharding propagation calls it (no planner forced: the greedy planner, but for non-default
    shard orders); `greedy` and `min_cost` force a planner; `plan` is the case's planner's;
    `identity_from` and `identity_to` price from -> from and to -> to under it; with a `via`
    spec, `via_first` and `via_second` price from -> via and via -> to under it, for the
    triangle inequality. A cost PyTorch rates infinite is "inf" with the step that makes it so
    in `infinite`; a cost whose computation raised is left out and named in `errors`.

    Computed in this process, not on the ranks: the price depends only on the mesh's shape
    and device type and on the tensor's shape and dtype, and a DeviceMesh made without a
    backend (for the mesh's lowest rank) is all redistribute_cost reads."""
    import math
    import torch
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import _collective_utils as collective_utils
    from torch.distributed.tensor import _redistribute as redistribute
    from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta

    release = torch.__version__.split("+")[0]
    if not hasattr(redistribute, "use_min_cost_redistribution_plan"):
        raise protocol.Unsupported(
            f"torch {release} lacks torch.distributed.tensor._redistribute."
            f"use_min_cost_redistribution_plan, which torch_cost prices the min-cost plan with")
    mesh_request = request["mesh"]
    shape = [int(s) for s in mesh_request["shape"]]
    names = list(mesh_request.get("names") or [str(i) for i in range(len(shape))])
    ranks = [int(r) for r in mesh_request["ranks"]]
    try:
        mesh = DeviceMesh("cpu", torch.tensor(ranks, dtype=torch.int64).reshape(shape),
                          mesh_dim_names=tuple(names), _init_backend=False, _rank=min(ranks))
    except TypeError as e:  # a release whose DeviceMesh takes no _init_backend or _rank
        raise protocol.Unsupported(
            f"torch {release} cannot make a DeviceMesh without a backend for a given rank "
            f"({e}), which torch_cost prices on") from None
    global_shape = torch.Size(request["tensor"]["shape"])
    meta = TensorMeta(global_shape, torch.empty(global_shape, device="meta").stride(),
                      _torch_dtype(request["tensor"]["dtype"]))

    def spec(placements):
        return DTensorSpec(mesh, tuple(_placement(p) for p in placements), tensor_meta=meta)

    def forced(planner):
        if planner is None:
            return contextlib.nullcontext()
        return redistribute.use_min_cost_redistribution_plan(planner == "min_cost")

    def why_infinite(a, b, planner) -> str:
        # The first step of the plan that _compute_placement_transition_cost prices at inf
        # (Shard -> Partial, Partial -> another Partial): the step redistribute_cost stops at.
        price = getattr(collective_utils, "_compute_placement_transition_cost", None)
        if price is not None:
            topology = collective_utils.MeshTopoInfo.build_from_mesh(mesh)
            with forced(planner):
                steps = redistribute._gen_transform_infos_non_cached(a, b)
            for step in steps:
                current, target = step.src_dst_placements
                if price(current, target, topology, step.mesh_dim, 1.0)[0] == math.inf:
                    return (f"its plan's step {_placement_text(current)} -> "
                            f"{_placement_text(target)} on mesh dim {names[step.mesh_dim]}, "
                            f"which redistribute_cost prices at inf")
        return "redistribute_cost answers inf"

    planner = request.get("planner", "greedy")
    pairs = {"direct": (request["from"], request["to"], None),
             "greedy": (request["from"], request["to"], "greedy"),
             "min_cost": (request["from"], request["to"], "min_cost"),
             "plan": (request["from"], request["to"], planner),
             "identity_from": (request["from"], request["from"], planner),
             "identity_to": (request["to"], request["to"], planner)}
    via = request["torch_cost"].get("via")
    if via is not None:
        pairs["via_first"] = (request["from"], via, planner)
        pairs["via_second"] = (via, request["to"], planner)
    costs: dict = {}
    infinite: dict = {}
    errors: dict = {}
    try:
        for name, (a_text, b_text, forced_planner) in pairs.items():
            a, b = spec(a_text), spec(b_text)
            # The plan cache is keyed by the specs alone, not by the planner flag.
            redistribute._gen_transform_infos.cache_clear()
            try:
                with forced(forced_planner):
                    value = float(collective_utils.redistribute_cost(a, b))
                if value == math.inf:
                    infinite[name] = why_infinite(a, b, forced_planner)
            except Exception as e:  # PyTorch failing to price a valid spec
                errors[name] = f"{type(e).__name__}: {e}"
                continue
            costs[name] = "inf" if value == math.inf else value
    finally:
        redistribute._gen_transform_infos.cache_clear()
        if hasattr(redistribute, "clear_redistribute_planner_cache"):
            redistribute.clear_redistribute_planner_cache()
    return {"costs": costs, "infinite": infinite, "errors": errors}
