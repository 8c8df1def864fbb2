"""kind: fsdp under PyTorch: a stack of Linear layers trained for a few SGD steps under FSDP2
(`fully_shard`) on the gloo world, and the same model trained in this process on the
concatenated batch (docs/impl-protocol.md, fsdp).

Every rank builds the model from the case's seed, applies `fully_shard` to each Linear and then
to the root (`shard: per_layer`) or to the root alone (`shard: root`) on a 1-D mesh (FSDP) or a
2-D (replicate, shard) mesh (HSDP), and trains on its own rows of each step's global batch:
rank r takes rows r*batch to (r+1)*batch, the loss is the mean squared error over them, so that
FSDP's gradient averaging over every rank gives the gradient of the mean over the whole batch,
which the reference computes in one process. Each phase of each step (forward, backward,
optimizer step) is counted with CommDebugMode, as PyTorch's own FSDP tests count it, with the
bytes of each collective: the largest buffer of the call (the gathered output of an all_gather,
the input of a reduce_scatter, the buffer of an all_reduce), as nccl-tests sizes a call. After
the last step every rank answers the full parameters (`full_tensor()`)."""

from __future__ import annotations

import inspect
import os

from .. import protocol
from . import local_world, world

DTYPES = ("float32", "float64")


def _fully_shard():
    """PyTorch's fully_shard, or Unsupported naming what this release lacks. It is public in
    torch.distributed.fsdp from 2.6; before that it lived in torch.distributed._composable.fsdp."""
    try:
        from torch.distributed.fsdp import fully_shard
        return fully_shard
    except ImportError:
        pass
    try:
        from torch.distributed._composable.fsdp import fully_shard
        return fully_shard
    except ImportError:
        raise protocol.Unsupported(
            "this torch release has no fully_shard (torch.distributed.fsdp.fully_shard, "
            "FSDP2)") from None


def _comm_debug_mode():
    try:
        from torch.distributed.tensor.debug import CommDebugMode
    except ImportError:
        try:
            from torch.distributed._tensor.debug import CommDebugMode
        except ImportError:
            raise protocol.Unsupported(
                "this torch release has no CommDebugMode "
                "(torch.distributed.tensor.debug), which counts the collectives") from None
    return CommDebugMode


def _require_apis() -> None:
    fully_shard = _fully_shard()
    _comm_debug_mode()
    parameters = inspect.signature(fully_shard).parameters
    for name in ("mesh", "reshard_after_forward"):
        if name not in parameters:
            raise protocol.Unsupported(f"fully_shard of this torch release takes no {name!r}")


def handle(request: dict, perf: dict | None, directory: str):
    if perf is not None:
        raise protocol.Unsupported("timing fsdp training steps")
    if local_world.selected():
        # Not reached through the adapter's main (the kind is gloo-only there); kept so that a
        # direct call says why.
        raise protocol.Unsupported("fsdp in the local world: fully_shard's hooks and streams "
                                   "need real ranks; run it with --impl torch (gloo)")
    if request["dtype"] not in DTYPES:
        raise protocol.Unsupported(f"dtype {request['dtype']!r} (known: float32, float64)")
    if request["shard"] not in ("per_layer", "root"):
        raise protocol.Unsupported(f"shard {request['shard']!r} (known: per_layer, root)")
    if request["model"].get("activation", "relu") not in ("relu", "none"):
        raise protocol.Unsupported(f"activation {request['model']['activation']!r}")
    if len(request["mesh"]["shape"]) not in (1, 2):
        raise protocol.Unsupported("a mesh of more than 2 dims (FSDP takes 1, HSDP 2)")
    _require_apis()
    size = int(request["world"])
    common = {key: request[key] for key in ("mesh", "model", "seed", "dtype", "shard",
                                            "reshard_after_forward", "steps", "batch", "lr")}
    workers = world.get(size).size
    arguments = []
    for rank in range(workers):
        argument = dict(common)
        argument["directory"] = directory
        arguments.append(argument)
    try:
        results = world.run(size, __name__, "run_rank", arguments)
    except world.RankError as e:
        raise RuntimeError(f"rank {e.rank} raised {e.error}: {e.message}\n{e.trace}") from None
    rejected = [r for r in results[:size] if r is not None and "rejected" in r]
    if rejected:
        error, message = rejected[0]["rejected"]
        raise protocol.Rejected(error, message)
    params = {str(rank): results[rank]["params"] for rank in range(size)}
    steps = {str(rank): results[rank]["steps"] for rank in range(size)}
    reference = {name: _write_tensor(tensor, os.path.join(directory, f"reference-{name}.bin"))
                 for name, tensor in _train_reference(common, size).items()}
    return {"params": params, "reference": reference, "steps": steps}, None


def _torch_dtype(name: str):
    import torch
    return {"float32": torch.float32, "float64": torch.float64}[name]


def _model(arg: dict):
    """The case's model, initialised from its seed the same way on every rank and in the
    reference: Linear layers with the activation between them (none after the last)."""
    import torch

    dtype = _torch_dtype(arg["dtype"])
    sizes = arg["model"]["layers"]
    bias = bool(arg["model"].get("bias", True))
    layers = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(arg["seed"]))
        for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
            if i:
                if arg["model"].get("activation", "relu") == "relu":
                    layers.append(torch.nn.ReLU())
                else:
                    layers.append(torch.nn.Identity())
            layers.append(torch.nn.Linear(a, b, bias=bias, dtype=dtype))
    return torch.nn.Sequential(*layers)


def _batch(arg: dict, step: int, world_size: int):
    """The global batch of `step`: world_size * batch rows, drawn from the case's seed."""
    import torch

    dtype = _torch_dtype(arg["dtype"])
    sizes = arg["model"]["layers"]
    generator = torch.Generator().manual_seed(int(arg["seed"]) * 1_000_003 + step + 1)
    rows = world_size * int(arg["batch"])
    x = torch.randn(rows, sizes[0], generator=generator, dtype=torch.float64).to(dtype)
    y = torch.randn(rows, sizes[-1], generator=generator, dtype=torch.float64).to(dtype)
    return x, y


def _train_reference(arg: dict, world_size: int) -> dict:
    """The model trained in one process on each step's whole batch: what the sharded run must
    end with."""
    import torch

    model = _model(arg)
    optimizer = torch.optim.SGD(model.parameters(), lr=float(arg["lr"]))
    for step in range(int(arg["steps"])):
        x, y = _batch(arg, step, world_size)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return {name: p.detach() for name, p in model.named_parameters()}


def _op_name(packet) -> str:
    """A collective's name as meshgate writes it, whichever of c10d's or the functional
    collectives' ops PyTorch issued it through."""
    text = str(packet).split(".")[-1].lower().strip("_")
    for marks, name in ((("allgather", "all_gather"), "all_gather"),
                        (("reduce_scatter",), "reduce_scatter"),
                        (("allreduce", "all_reduce"), "all_reduce"),
                        (("alltoall", "all_to_all"), "all_to_all"),
                        (("broadcast",), "broadcast")):
        if any(m in text for m in marks):
            return name
    return text


def _counter():
    """A CommDebugMode that also adds up each collective's bytes (the largest tensor among the
    call's arguments): CommDebugMode itself counts calls only."""
    import torch
    from torch.utils._pytree import tree_leaves

    base = _comm_debug_mode()

    class Counter(base):
        def __init__(self):
            super().__init__()
            self.bytes: dict = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            before = dict(self.comm_counts)
            out = super().__torch_dispatch__(func, types, args, kwargs)
            for packet, count in self.comm_counts.items():
                if count != before.get(packet, 0):
                    largest = max((t.numel() * t.element_size()
                                   for t in tree_leaves((args, kwargs or {}))
                                   if isinstance(t, torch.Tensor)), default=0)
                    self.bytes[packet] = self.bytes.get(packet, 0) + largest
            return out

        def phase(self) -> dict:
            counts: dict = {}
            for packet, count in self.comm_counts.items():
                if not count:
                    continue
                entry = counts.setdefault(_op_name(packet), {"count": 0, "bytes": 0})
                entry["count"] += int(count)
                entry["bytes"] += int(self.bytes.get(packet, 0))
            return counts

    return Counter


def run_rank(rank: int, world_size: int, arg: dict):
    import torch
    from torch.distributed.device_mesh import init_device_mesh

    fully_shard = _fully_shard()
    counter = _counter()
    shape = tuple(int(s) for s in arg["mesh"]["shape"])
    names = tuple(arg["mesh"]["names"])
    try:
        mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
        model = _model(arg)
        reshard = bool(arg["reshard_after_forward"])
        if arg["shard"] == "per_layer":
            for layer in model:
                if isinstance(layer, torch.nn.Linear):
                    fully_shard(layer, mesh=mesh, reshard_after_forward=reshard)
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
    except (TypeError, ValueError, NotImplementedError, AssertionError) as e:
        # fully_shard refusing the case as a user would see it; every rank refuses alike.
        return {"rejected": (type(e).__name__, str(e))}
    optimizer = torch.optim.SGD(model.parameters(), lr=float(arg["lr"]))
    rows = slice(rank * int(arg["batch"]), (rank + 1) * int(arg["batch"]))
    steps = []
    for step in range(int(arg["steps"])):
        x, y = _batch(arg, step, world_size)
        with counter() as forward:
            loss = torch.nn.functional.mse_loss(model(x[rows]), y[rows])
        with counter() as backward:
            loss.backward()
        with counter() as update:
            optimizer.step()
            optimizer.zero_grad()
        steps.append({"forward": forward.phase(), "backward": backward.phase(),
                      "optimizer": update.phase()})
    params = {}
    for name, parameter in model.named_parameters():
        full = parameter.full_tensor() if hasattr(parameter, "full_tensor") else parameter
        path = os.path.join(arg["directory"], f"rank{rank}-{name}.bin")
        params[name] = _write_tensor(full, path)
    return {"params": params, "steps": steps}


def _write_tensor(tensor, path: str) -> dict:
    import torch

    t = tensor.detach().contiguous().cpu()
    raw = t.reshape(-1).view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8)
    with open(path, "wb") as f:
        f.write(raw.numpy().tobytes())
    return {"path": path, "dtype": {torch.float32: "float32", torch.float64: "float64"}[t.dtype],
            "shape": list(t.shape)}
