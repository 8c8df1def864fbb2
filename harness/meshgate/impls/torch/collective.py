"""The collective kind on a gloo world: every rank of the world creates the case's groups with
torch.distributed.new_group (all of them, in the request's order, as PyTorch requires of every
rank of the default group), reads its input buffer, runs the torch.distributed collective on its
group and writes its output buffer; the runner counts the wrong elements. A group keeps the
request's (mesh) order of its ranks, new_group(sort_ranks=False), so that a rank's group rank is
its position in the mesh, as the case's values and block order assume.

"In place" is run only where PyTorch defines an in-place form, never by aliasing tensors that
PyTorch takes as separate ones: all_reduce and broadcast are in place by their documentation
("the function operates in-place"; out of place they run on a copy of the input);
all_gather_into_tensor (all_gather_single) takes its input as the rank's block of its output,
the form PyTorch's own fully_shard issues (torch/distributed/fsdp/_fully_shard/
_fsdp_collectives.py, all_gather_copy_in: the input is output.narrow(0, numel * rank, numel)).
all_to_all_single and reduce_scatter_tensor define no in-place form (separate output and input
tensors, and no use or documentation of aliasing them in torch): their in-place rows are
answered unsupported one by one, with the reason in IN_PLACE_UNDEFINED, and the case's
out-of-place rows run (a case of in-place rows alone is unsupported as a whole).

Each call starts after a barrier of the case's ranks and its time is the slowest rank's, as
meshgate's own collective kind times it."""

from __future__ import annotations

import math
import os
import time

from .. import protocol
from . import world

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")
REDUCE_OPS = {"sum": "SUM", "avg": "AVG", "max": "MAX", "min": "MIN", "product": "PRODUCT"}
DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64", "int8", "uint8")

# Words of the messages with which torch refuses a combination it does not implement (a dtype or
# reduce op a backend lacks): such a case is unsupported, anything else an error.
_REFUSALS = ("not supported", "unsupported", "does not support", "not implemented",
             "cannot use reduceop", "can't be cast")


# Ops whose in-place rows the adapter does not run, and why: aliasing tensors that PyTorch's API
# takes as separate ones tests the adapter's misuse, not PyTorch.
IN_PLACE_UNDEFINED = {
    "all_to_all": (
        "in place: torch.distributed.all_to_all_single defines no in-place form (it takes "
        "separate output and input tensors; NCCL defines no in-place alltoall and MPI allows "
        "aliasing only through MPI_IN_PLACE), so the adapter does not run it on one tensor"),
    "reduce_scatter": (
        "in place: torch.distributed.reduce_scatter_tensor defines no in-place form (it takes "
        "separate output and input tensors and documents no aliasing of the output with the "
        "rank's block of the input, NCCL's in-place reduce_scatter), so the adapter does not "
        "alias them"),
}


class TorchRefused(Exception):
    """torch.distributed refused the collective for its dtype or reduce op."""


def handle(request: dict, perf: dict | None, directory: str):
    spec = _read_request(request)
    # The request's rows this adapter declines (index -> why): only those, so that an op's
    # out-of-place rows still run beside in-place rows PyTorch has no form for.
    declined = {i: IN_PLACE_UNDEFINED[spec["op"]] for i, row in enumerate(spec["sizes"])
                if row["inplace"] and spec["op"] in IN_PLACE_UNDEFINED}
    if len(declined) == len(spec["sizes"]):
        raise protocol.Unsupported(IN_PLACE_UNDEFINED[spec["op"]])
    answered = [i for i in range(len(spec["sizes"])) if i not in declined]
    observables, time_s = _run_rows(spec, [spec["sizes"][i] for i in answered], perf, directory)
    ran = dict(zip(answered, observables))
    sizes = [ran[i] if i in ran else protocol.unsupported_row(declined[i])
             for i in range(len(spec["sizes"]))]
    return {"sizes": sizes}, time_s


def _run_rows(spec: dict, rows: list, perf: dict | None, directory: str):
    """(one observables entry per row, the perf samples or None) of the rows that run."""
    spec = dict(spec, sizes=rows)
    spec["perf"] = perf
    spec["dir"] = directory
    _check_group_order(spec["groups"])
    size = spec["world"]
    ranks = world.get(size).size
    try:
        per_rank = world.run(size, __name__, "run_rank", [spec] * ranks)
    except world.RankError as e:
        if e.error == TorchRefused.__name__:
            raise protocol.Unsupported(e.message) from e
        raise
    members = [r for group in spec["groups"] for r in group]
    sizes = []
    slowest = []
    for row_index, row in enumerate(spec["sizes"]):
        per_call = zip(*(per_rank[r][row_index]["time"] for r in members))
        # Every call's time is the slowest rank's; the verified call is the first.
        times = [max(call) for call in per_call]
        timed = times[1 + perf["warmup"]:] if perf else times[:1]
        slowest.append(timed)
        entry = {"outputs": {}, "time_s": timed}
        for r in members:
            result = per_rank[r][row_index]
            entry["outputs"][str(r)] = result["output"]
            if "send" in result:
                entry.setdefault("sends", {})[str(r)] = result["send"]
        sizes.append(entry)
    time_s = None
    if perf:
        # The runner's samples time the largest size of the first in-place setting (of the
        # rows that run).
        first = spec["sizes"][0]["inplace"]
        candidates = [i for i, row in enumerate(spec["sizes"]) if row["inplace"] == first]
        largest = max(candidates, key=lambda i: spec["sizes"][i]["bytes"])
        time_s = slowest[largest]
    return sizes, time_s


def _read_request(request: dict) -> dict:
    op = request["op"]
    if op not in OPS:
        raise ValueError(f"unknown collective op {op!r}")
    dtype = request["dtype"]
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}")
    reduce = request.get("reduce")
    if (reduce is not None) != (op in ("all_reduce", "reduce_scatter")):
        raise ValueError(f"{op} with reduce {reduce!r}")
    if reduce is not None and reduce not in REDUCE_OPS:
        raise ValueError(f"unknown reduce op {reduce!r}")
    groups = [[int(r) for r in group] for group in request["groups"]]
    size = int(request["world"])
    if not groups or any(not group for group in groups):
        raise ValueError("a collective needs at least one non-empty group")
    members = [r for group in groups for r in group]
    if len(set(members)) != len(members) or not all(0 <= r < size for r in members):
        raise ValueError(f"groups {groups} are not disjoint groups of ranks 0 to {size - 1}")
    root = request.get("root")
    if op == "broadcast" and not (isinstance(root, int) and 0 <= root < len(groups[0])):
        raise ValueError(f"broadcast root {root!r} is not a rank of the group")
    return {"op": op, "dtype": dtype, "reduce": reduce, "root": root, "groups": groups,
            "world": size, "sizes": request["sizes"]}


def _check_group_order(groups: list) -> None:
    """A group's ranks come in mesh order, and a rank's position there is its group rank.
    new_group sorts them by global rank unless told sort_ranks=False, which older torch lacks."""
    import inspect
    import torch.distributed as dist
    if all(group == sorted(group) for group in groups):
        return
    if "sort_ranks" not in inspect.signature(dist.new_group).parameters:
        unsorted = next(group for group in groups if group != sorted(group))
        raise protocol.Unsupported(
            f"the group {unsorted} is not in global rank order, and this torch's "
            "torch.distributed.new_group orders a group's ranks by global rank (it has no "
            "sort_ranks=False)")


def _new_group(ranks: list):
    import torch.distributed as dist
    if ranks == sorted(ranks):
        return dist.new_group(ranks)
    return dist.new_group(ranks, sort_ranks=False)


def run_rank(rank: int, world_size: int, spec: dict):
    """One rank's part of the case; every rank of the world creates every group."""
    import torch.distributed as dist

    size = spec["world"]
    case_group = dist.new_group(list(range(size))) if size < world_size else None
    made = [_new_group(group) for group in spec["groups"]]
    if rank >= size:
        return None
    place = next(((gi, group.index(rank)) for gi, group in enumerate(spec["groups"])
                  if rank in group), None)
    perf = spec["perf"]
    calls = 1 + (perf["warmup"] + perf["iters"] if perf else 0)
    rows = []
    for row_index, row in enumerate(spec["sizes"]):
        call = None
        if place is not None:
            gi, position = place
            call, output, send = _prepare(spec, row, made[gi], spec["groups"][gi], position, rank)
        result = {"time": []}
        for i in range(calls):
            dist.barrier(group=case_group)
            elapsed = 0.0
            if call is not None:
                start = time.perf_counter()
                call()
                elapsed = time.perf_counter() - start
            result["time"].append(elapsed)
            if i == 0 and call is not None:
                result["output"] = _write(spec, f"output-{row_index}-rank-{rank}.bin", output)
                if send is not None:
                    result["send"] = _write(spec, f"send-{row_index}-rank-{rank}.bin", send)
        rows.append(result)
    return rows


def _prepare(spec: dict, row: dict, group, ranks: list, position: int, rank: int):
    """(call, output, send): the collective on this rank's buffers, the tensor that holds its
    output, and for an out-of-place broadcast's root the input, which the call must not change."""
    import torch
    import torch.distributed as dist

    op, inplace = spec["op"], bool(row["inplace"])
    dtype = getattr(torch, spec["dtype"])
    count = int(row["count"])
    n = len(ranks)
    source = _read(row["inputs"][str(rank)], dtype)
    reduce = getattr(dist.ReduceOp, REDUCE_OPS[spec["reduce"]]) if spec["reduce"] else None
    what = f"torch.distributed.{op}({spec['dtype']}" + (f", {spec['reduce']})" if reduce else ")")

    def guarded(run):
        def call():
            try:
                run()
            except Exception as e:
                text = str(e)
                if any(word in text.lower() for word in _REFUSALS):
                    raise TorchRefused(f"{what} on gloo raised {type(e).__name__}: "
                                       f"{text.splitlines()[0] if text else ''}") from e
                raise
        return call

    send = None
    if op in ("all_reduce", "broadcast"):
        output = source if inplace else source.clone()
        if op == "all_reduce":
            run = lambda: dist.all_reduce(output, op=reduce, group=group)
        else:
            run = lambda: dist.broadcast(output, src=ranks[spec["root"]], group=group)
            if not inplace and position == spec["root"]:
                send = source
    elif op == "all_gather":
        output = _unwritten(count * n, dtype)
        block = output[position * count:(position + 1) * count]
        if inplace:
            block.copy_(source)
        run = lambda: dist.all_gather_into_tensor(output, block if inplace else source,
                                                  group=group)
    elif op in IN_PLACE_UNDEFINED and inplace:
        # handle() declines these rows before any rank runs; never alias them.
        raise AssertionError(f"{op} in place reached a rank")
    elif op == "reduce_scatter":
        output = _unwritten(count, dtype)
        run = lambda: dist.reduce_scatter_tensor(output, source, op=reduce, group=group)
    else:
        output = _unwritten(count * n, dtype)
        run = lambda: dist.all_to_all_single(output, source, group=group)
    return guarded(run), output, send


def _unwritten(elements: int, dtype):
    """An output buffer holding a value no result has (NaN, or the dtype's largest value), so
    that an element the collective leaves unwritten is counted wrong."""
    import torch
    fill = math.nan if dtype.is_floating_point else torch.iinfo(dtype).max
    return torch.full((elements,), fill, dtype=dtype)


def _read(descriptor: dict, dtype):
    import torch
    if descriptor["dtype"] != str(dtype).removeprefix("torch."):
        raise ValueError(f"input {descriptor['path']} is {descriptor['dtype']}, not {dtype}")
    elements = math.prod(descriptor["shape"])
    return torch.from_file(descriptor["path"], shared=False, size=elements, dtype=dtype)


def _write(spec: dict, name: str, tensor) -> dict:
    import torch
    path = os.path.join(spec["dir"], name)
    flat = tensor.contiguous().reshape(-1)
    flat.view(torch.uint8).numpy().tofile(path)
    return {"path": path, "dtype": spec["dtype"], "shape": [flat.numel()]}
