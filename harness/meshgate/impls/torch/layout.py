"""The layout kind on PyTorch: the layout algebra of torch.distributed._pycute and the layout
operations of torch.distributed._mesh_layout, on the literal arguments of the case. Layouts
travel in CuTe notation ("(2,(1,6)):(1,(6,2))") and are printed back exactly as meshgate prints
them, so that the runner compares them structurally (8:1 is not (8):(1))."""

from __future__ import annotations

import time
from typing import Any, Callable

from .. import protocol

IntTuple = Any  # an int or a (nested) tuple of ints, as pycute's IntTuple


# ---- CuTe notation ----

def parse_tuple(text: str) -> IntTuple:
    """'8' -> 8, '(2,(1,6))' -> (2, (1, 6)), '()' -> (), '(8,)' and '(8)' -> (8,)."""
    value, pos = _parse_element(text, _skip(text, 0))
    pos = _skip(text, pos)
    if pos != len(text):
        raise ValueError(f"unexpected {text[pos:]!r} after the int tuple in {text!r}")
    return value


def parse_layout(text: str) -> tuple[IntTuple, IntTuple]:
    """'shape:stride' -> (shape, stride)."""
    shape, pos = _parse_element(text, _skip(text, 0))
    pos = _skip(text, pos)
    if pos >= len(text) or text[pos] != ":":
        raise ValueError(f"expected ':' at {pos} in the layout {text!r}")
    stride, pos = _parse_element(text, _skip(text, pos + 1))
    if _skip(text, pos) != len(text):
        raise ValueError(f"unexpected text after the layout {text!r}")
    return shape, stride


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _parse_element(text: str, pos: int) -> tuple[IntTuple, int]:
    if pos < len(text) and text[pos] == "(":
        items = []
        pos = _skip(text, pos + 1)
        if pos < len(text) and text[pos] == ")":
            return (), pos + 1
        while True:
            item, pos = _parse_element(text, _skip(text, pos))
            items.append(item)
            pos = _skip(text, pos)
            if pos < len(text) and text[pos] == ",":
                pos = _skip(text, pos + 1)
                if pos < len(text) and text[pos] == ")":  # (8,): a trailing comma
                    return tuple(items), pos + 1
                continue
            if pos < len(text) and text[pos] == ")":
                return tuple(items), pos + 1
            raise ValueError(f"expected ',' or ')' at {pos} in {text!r}")
    end = pos + 1 if pos < len(text) and text[pos] == "-" else pos
    while end < len(text) and text[end].isdigit():
        end += 1
    if end == pos or text[pos:end] == "-":
        raise ValueError(f"expected an int or '(' at {pos} in {text!r}")
    return int(text[pos:end]), end


def tuple_text(t: IntTuple) -> str:
    """meshgate's to_string of an IntTuple: '8', '(8)', '(2,(1,6))', '()'."""
    if isinstance(t, (tuple, list)):
        return "(" + ",".join(tuple_text(x) for x in t) + ")"
    return str(int(t))


def layout_text(shape: IntTuple, stride: IntTuple) -> str:
    return tuple_text(shape) + ":" + tuple_text(stride)


def int_tuple_value(t: IntTuple):
    """An int tuple as the protocol answers it: an integer, or CuTe text for a tuple."""
    return int(t) if not isinstance(t, (tuple, list)) else tuple_text(t)


# ---- which layout model this torch has ----

def _module(name: str):
    """torch's private module `name`; Unsupported, naming it, on a release without it (2.9.1
    has neither torch.distributed._pycute nor _mesh_layout): a case then skips instead of
    reading as PyTorch's rejection."""
    import importlib
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        import torch
        raise protocol.Unsupported(f"torch {torch.__version__} has no {name}") from e


def mesh_layout_module():
    return _module("torch.distributed._mesh_layout")


def has_two_level() -> bool:
    """PR #172089: one canonical _FlatLayout per mesh dim."""
    return hasattr(mesh_layout_module(), "_FlatLayout")


def model_description() -> str:
    import torch
    if has_two_level():
        return (f"torch {torch.__version__} has the 2-level layout model of PR #172089 "
                f"(_MeshLayout of _FlatLayout axes)")
    return f"torch {torch.__version__} has the 1-level _MeshLayout of PyTorch main"


def _missing(what: str) -> protocol.Unsupported:
    return protocol.Unsupported(f"{what} is not in this torch: {model_description()}")


def one_level_mesh_layout(shape: IntTuple, stride: IntTuple, needs: str):
    """A 1-level _MeshLayout (a pycute Layout subclass); Unsupported under the 2-level model,
    naming `needs`, what the op calls on it."""
    if has_two_level():
        raise _missing(f"{needs} of the 1-level _MeshLayout (PyTorch main)")
    return mesh_layout_module()._MeshLayout(shape, stride)


def flat_layout(shape: IntTuple, stride: IntTuple):
    if not has_two_level():
        raise _missing("_FlatLayout (the 2-level model of PR #172089)")
    return mesh_layout_module()._FlatLayout(shape, stride)


def top_level_modes(shape: IntTuple, stride: IntTuple) -> list[tuple[IntTuple, IntTuple]]:
    """The top-level modes of a layout; an int layout is one mode."""
    if isinstance(shape, tuple):
        return list(zip(shape, stride))
    return [(shape, stride)]


def two_level_mesh_layout(shape: IntTuple, stride: IntTuple):
    """A 2-level _MeshLayout with one _FlatLayout axis per top-level mode."""
    ml = mesh_layout_module()
    return ml._MeshLayout([flat_layout(s, d) for s, d in top_level_modes(shape, stride)])


def flat_text(flat) -> str:
    """A _FlatLayout as meshgate prints flat_canonical: '(8):(1)', '(2,2):(4,1)', '():()'."""
    return layout_text(tuple(flat.shape), tuple(flat.stride))


# ---- the ops ----

def _pycute():
    return _module("torch.distributed._pycute")


def _layout(text: str):
    shape, stride = parse_layout(text)
    return _pycute().Layout(shape, stride)


def _pycute_layout_text(layout) -> str:
    return layout_text(layout.shape, layout.stride)


def _prepare(op: str, args: list) -> tuple[Callable[[], Any], Callable[[Any], Any]]:
    """(call, answer): `call` runs PyTorch's operation once (what is timed), `answer` turns its
    result into the protocol's value. Unsupported when this torch lacks the operation."""
    p = _pycute()

    def algebra(fn_name: str, *values):
        fn = getattr(p, fn_name, None)
        if fn is None:
            raise protocol.Unsupported(f"torch.distributed._pycute has no {fn_name}")
        return (lambda: fn(*values)), _pycute_layout_text

    if op == "coalesce":
        return algebra("coalesce", _layout(args[0]), *(parse_arg_tuple(a) for a in args[1:]))
    if op == "filter":
        return algebra("filter", _layout(args[0]))
    if op in ("composition", "logical_divide", "logical_product"):
        return algebra(op, _layout(args[0]), _layout(args[1]))
    if op == "complement":
        return algebra("complement", _layout(args[0]), *(int(a) for a in args[1:]))
    if op in ("right_inverse", "left_inverse"):
        return algebra(op, _layout(args[0]))
    if op in ("size", "cosize"):
        layout = _layout(args[0])
        fn = getattr(p, op)
        return (lambda: fn(layout)), int
    if op in ("crd2idx", "idx2crd"):
        values = [parse_arg_tuple(a) for a in args]
        fn = getattr(p, op)
        return (lambda: fn(*values)), (int if op == "crd2idx" else int_tuple_value)

    shape, stride = parse_layout(args[0])
    ml = mesh_layout_module()
    two_level = has_two_level()
    if op == "mesh_coalesce":
        layout = one_level_mesh_layout(shape, stride, "mesh_coalesce needs _MeshLayout.coalesce")
        return (lambda: layout.coalesce()), _pycute_layout_text
    if op == "all_ranks":
        layout = (flat_layout(shape, stride) if two_level else
                  one_level_mesh_layout(shape, stride, "all_ranks_from_zero"))
        return (lambda: layout.all_ranks_from_zero()), _int_lists
    if op == "global_ranks":
        world = int(args[1])
        layout = (flat_layout(shape, stride) if two_level else
                  one_level_mesh_layout(shape, stride, "global_ranks"))
        return (lambda: layout.global_ranks(world)), _int_lists
    if op == "non_overlapping":
        layout = one_level_mesh_layout(
            shape, stride, "non_overlapping needs the set-based _MeshLayout.check_non_overlap "
            "(the 2-level model checks _FlatLayout.check_orthogonal instead: op orthogonal)")
        if not hasattr(layout, "check_non_overlap"):
            raise _missing("_MeshLayout.check_non_overlap")
        return (lambda: layout.check_non_overlap()), bool
    if op == "remap":
        import torch
        rank_map = torch.tensor([int(r) for r in args[1]], dtype=torch.int64)
        layout = (two_level_mesh_layout(shape, stride) if two_level
                  else one_level_mesh_layout(shape, stride, "remap_to_tensor"))
        return (lambda: layout.remap_to_tensor(rank_map)), (lambda t: _int_lists(t.tolist()))
    if op == "unflatten":
        # The op's result is the 1-level layout that DeviceMesh._unflatten splices in; the
        # 2-level model splices _FlatLayout axes instead, which the mesh kind compares.
        layout = one_level_mesh_layout(
            shape, stride, "unflatten gives the layout that DeviceMesh._unflatten splices into "
            "the 1-level _MeshLayout (the 2-level model splices _FlatLayout axes, which the mesh "
            "kind checks with model: two_level), so it needs the splice and composition")
        dim, sizes = int(args[1]), tuple(int(s) for s in args[2])
        return (lambda: _one_level_unflatten(ml, layout, dim, sizes)), _pycute_layout_text
    if op == "flat_canonical":
        return (lambda: flat_layout(shape, stride)), flat_text
    if op in ("orthogonal", "sorted"):
        flat = flat_layout(shape, stride)
        method = "check_orthogonal" if op == "orthogonal" else "check_sorted"
        if not hasattr(flat, method):
            raise _missing(f"_FlatLayout.{method}")
        return (lambda: getattr(flat, method)()), bool
    raise protocol.Unsupported(f"the torch adapter does not know the layout op {op!r}")


def _one_level_unflatten(ml, layout, dim: int, sizes: tuple[int, ...]):
    """The layout step of DeviceMesh._unflatten on PyTorch main (1-level _MeshLayout)."""
    from torch.distributed._pycute import suffix_product
    if hasattr(layout, "unflatten"):
        return layout.unflatten(dim, sizes)
    inner = ml._MeshLayout(sizes, suffix_product(sizes))
    if inner.numel() != layout[dim].numel():
        raise ValueError(f"The product of mesh_sizes={sizes} is {inner.numel()}, but the original "
                         f"dimension at dim={dim} has size {layout[dim].numel()}")
    return layout.splice(dim, dim + 1, layout[dim].composition(inner))


def parse_arg_tuple(value) -> IntTuple:
    return parse_tuple(value) if isinstance(value, str) else value


def _int_lists(value):
    if isinstance(value, (list, tuple)):
        return [_int_lists(v) for v in value]
    return int(value)


# Single ops take microseconds or less, below what one clock read resolves: a timed sample is a
# batch of calls sized once to about 20 us, reported as the time of one call.
_BATCH_TARGET_S = 20e-6
_MAX_BATCH = 1 << 20


def time_calls(call: Callable[[], Any], warmup: int, iters: int) -> list[float]:
    for _ in range(warmup):
        call()
    batch = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(batch):
            call()
        if time.perf_counter() - t0 >= _BATCH_TARGET_S or batch >= _MAX_BATCH:
            break
        batch *= 2
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        for _ in range(batch):
            call()
        samples.append((time.perf_counter() - t0) / batch)
    return samples


def handle(request: dict, perf: dict | None, directory: str):
    op, args = request["op"], request["args"]
    try:
        call, answer = _prepare(op, args)
        result = call()
    except (protocol.Unsupported, protocol.Rejected):
        raise
    except Exception as e:  # PyTorch raised, as it would for a user
        raise protocol.Rejected.of(e) from e
    observables = {"result": answer(result)}
    if perf is None:
        return observables, None
    return observables, time_calls(call, int(perf["warmup"]), int(perf["iters"]))
