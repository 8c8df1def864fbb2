"""A redistribution under torch.compile (`compile: true` of a redistribute case): the same call
the case's api makes, compiled by Dynamo and AOTAutograd, whose forward graphs are kept (an
aot_autograd backend whose compiler records each graph and runs it as traced, no code
generation), so that the collectives are read from the graphs PyTorch runs rather than counted
at run time; around a graph break, code runs eagerly, and its collectives are recorded as they
run, in order with the runs of the graphs.

A graph names each collective's op, process group and reduce op, not the tensor dims DTensor's
placement code passed (a gather of dim 1 is a gather of dim 0 between a permute and its
inverse): those are the eager run's, while the compiled run issues the same collectives
(with_dims). Graph breaks (Dynamo's counter) and the number of graphs are answered beside."""

from __future__ import annotations

import contextlib

from .. import protocol

# The functional collectives of a forward graph, by their op packet name, as meshgate writes
# them.
_KINDS = {
    "_c10d_functional.all_reduce": "all_reduce",
    "_c10d_functional.all_gather_into_tensor": "all_gather",
    "_c10d_functional.reduce_scatter_tensor": "reduce_scatter",
    "_c10d_functional.all_to_all_single": "all_to_all",
    "_dtensor.shard_dim_alltoall": "all_to_all",
}


def require_api() -> None:
    import torch
    try:
        from torch._dynamo.backends.common import aot_autograd  # noqa: F401
    except ImportError:
        raise protocol.Unsupported(
            f"torch {torch.__version__.split('+')[0]} lacks "
            f"torch._dynamo.backends.common.aot_autograd, which `compile` needs") from None


@contextlib.contextmanager
def replaced(originals: dict, replacements: dict):
    """Each (module, name) of `replacements` set to its function for the block (those that
    `originals` holds: a release may lack some), then every original put back."""
    for key, function in replacements.items():
        if key in originals:
            setattr(*key, function)
    try:
        yield
    finally:
        for key, function in originals.items():
            setattr(*key, function)


class _Eager:
    """The functional collectives DTensor's code calls as it runs eagerly around a graph
    break, in the order everything ran, beside a mark for each run of a compiled graph. A call
    made while Dynamo or AOTAutograd traces (fake tensors) is part of a graph and is read from
    it; the calls an all_to_all makes inside itself are its own."""

    def __init__(self):
        self.sequence: list[tuple] = []  # ("graph", index) or ("eager", (kind, group, op))
        self.depth = 0

    def called(self, kind: str, tensor, group, reduce_op=None) -> None:
        import torch
        from torch._subclasses.fake_tensor import is_fake
        if self.depth or torch.compiler.is_compiling() or is_fake(tensor):
            return
        import torch.distributed._functional_collectives as funcol
        op = str(reduce_op).lower() if reduce_op is not None else None
        self.sequence.append(("eager", (kind, funcol._resolve_group_name(group), op)))

    @contextlib.contextmanager
    def patched(self, gather_name: str, scatter_name: str):
        import torch.distributed._functional_collectives as funcol
        import torch.distributed.tensor.placement_types as placement_types

        originals = {
            (funcol, "all_reduce"): funcol.all_reduce,
            (funcol, gather_name): getattr(funcol, gather_name),
            (funcol, scatter_name): getattr(funcol, scatter_name),
            (placement_types, "shard_dim_alltoall"): placement_types.shard_dim_alltoall,
        }
        eager = self

        def all_reduce(tensor, *args, **kwargs):  # DTensor passes reduceOp and group by keyword
            reduce_op = kwargs.get("reduceOp", args[0] if args else None)
            group = kwargs.get("group", args[1] if len(args) > 1 else None)
            eager.called("all_reduce", tensor, group, reduce_op)
            return originals[(funcol, "all_reduce")](tensor, *args, **kwargs)

        def gather(tensor, gather_dim, group, *args, **kwargs):
            eager.called("all_gather", tensor, group)
            return originals[(funcol, gather_name)](tensor, gather_dim, group, *args, **kwargs)

        def scatter(tensor, reduce_op, scatter_dim, group, *args, **kwargs):
            eager.called("reduce_scatter", tensor, group, reduce_op)
            return originals[(funcol, scatter_name)](tensor, reduce_op, scatter_dim, group,
                                                     *args, **kwargs)

        def alltoall(tensor, gather_dim, shard_dim, mesh, mesh_dim):
            eager.called("all_to_all", tensor, (mesh, mesh_dim))
            eager.depth += 1
            try:
                return originals[(placement_types, "shard_dim_alltoall")](
                    tensor, gather_dim, shard_dim, mesh, mesh_dim)
            finally:
                eager.depth -= 1

        with replaced(originals, {(funcol, "all_reduce"): all_reduce,
                                  (funcol, gather_name): gather, (funcol, scatter_name): scatter,
                                  (placement_types, "shard_dim_alltoall"): alltoall}):
            yield


def _graph_collectives(graph) -> list[tuple[str, str | None, str | None]]:
    """(kind, group name, reduce op) of each collective of an FX graph, in order."""
    found = []
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        packet = getattr(node.target, "_overloadpacket", None)
        kind = _KINDS.get(str(packet)) if packet is not None else None
        if kind is None:
            continue
        args = node.args
        group = args[-1] if args and isinstance(args[-1], str) else None
        reduce_op = str(args[1]).lower() if kind in ("all_reduce", "reduce_scatter") else None
        found.append((kind, group, reduce_op))
    return found


class Unreadable(RuntimeError):
    """The compiled run issued collectives that neither its graphs nor the eager code around
    its graph breaks showed: the adapter cannot say which (its error, not PyTorch refusing)."""


def check_readable(issued: list, eager_calls: list, breaks: int) -> None:
    """Unreadable where the compiled run broke its graph and fewer collectives were read than
    eager issued: a collective can then run where neither a kept graph nor the recorded eager
    code shows it (a frame Dynamo resumes after the break), so a shorter list is no evidence
    that the compiled run issued fewer. Without a break, the one graph holds them all."""
    if breaks and len(issued) < len(eager_calls):
        raise Unreadable(f"the compiled run broke its graph {breaks} time(s) and "
                         f"{len(issued)} of eager's {len(eager_calls)} collectives were read "
                         f"from its graphs and the eager code around the breaks")


def with_dims(issued: list, eager_calls: list) -> list:
    """The compiled run's collectives (kind, group, reduce op) with the tensor dims of the
    eager run's (kind, group, reduce op, dims), which the graph no longer shows, while the two
    issue the same; from the first difference on, dims are unknown (None). gloo's all_to_all
    is an all_gather and a chunk in a graph: where eager issued an all_to_all over the group,
    it is written as that all_to_all."""
    out, same = [], True
    for i, (kind, group, reduce_op) in enumerate(issued):
        twin = eager_calls[i] if same and i < len(eager_calls) else None
        if twin is not None and twin[1] == group and twin[2] == reduce_op and (
                twin[0] == kind or (twin[0] == "all_to_all" and kind == "all_gather")):
            out.append(twin)
        else:
            same = False
            out.append((kind, group, reduce_op, None))
    return out


def run(call, argument, gather_name: str, scatter_name: str):
    """call(argument) compiled: (its result, the collectives as (kind, group, reduce op) in the
    order they ran, in the graphs and eagerly around graph breaks, graph breaks, graphs)."""
    import torch
    import torch._dynamo
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.utils import counters

    eager = _Eager()
    graphs: list[list] = []

    def keep_graph(gm, example_inputs):
        index = len(graphs)
        graphs.append(_graph_collectives(gm.graph))

        def forward(*args):
            eager.sequence.append(("graph", index))
            return gm.forward(*args)
        return forward

    torch._dynamo.reset()
    counters.clear()
    with eager.patched(gather_name, scatter_name):
        compiled = torch.compile(call, backend=aot_autograd(fw_compiler=keep_graph))
        out = compiled(argument)
    issued = []
    for what, detail in eager.sequence:
        issued.extend(graphs[detail] if what == "graph" else [detail])
    breaks = sum(counters["graph_break"].values())
    torch._dynamo.reset()
    return out, issued, breaks, len(graphs)
