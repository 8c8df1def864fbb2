"""kind: gemm under PyTorch: Y = act(alpha * op(X) @ op(W) + bias), computed two ways, each
answered as an output of its own (docs/impl-protocol.md, gemm):

- `torch_addmm`: the bias (and, where PyTorch has one, the activation) handed to the product's
  own call: torch.addmm / torch._addmm_activation (cuBLASLt's BIAS, RELU_BIAS and GELU_BIAS
  epilogues on CUDA), torch.baddbmm for a batch; written through `out=` into Y as stored, so a
  padded ldy reaches PyTorch's strided-output handling.
- `torch_unfused`: what a user writes without fusion: matmul, then `* alpha`, `+ bias` and the
  activation, each a kernel of its own with a rounding after it.

The inputs are meshgate's stored buffers; op(X) and op(W) are strided views into them (offsets,
padded leading dimensions and batch strides as the case has them, so a misaligned pointer stays
misaligned), transposed as the layout says. The files are read and written with torch alone:
numpy is not needed."""

from __future__ import annotations

import math
import os
import time

import torch
import torch.nn.functional as F

from ..protocol import Unsupported

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
ELEMENT_SIZES = {"float32": 4, "float16": 2, "bfloat16": 2}
# The workspace meshgate's request carries by default; PyTorch sizes cuBLAS's workspace once per
# process (CUBLAS_WORKSPACE_CONFIG, TORCH_CUBLASLT_WORKSPACE_SIZE), never per call.
DEFAULT_WORKSPACE = 32 << 20


def _read_buffer(descriptor: dict) -> torch.Tensor:
    dtype = DTYPES.get(descriptor["dtype"])
    if dtype is None:
        raise ValueError(f"gemm input of dtype {descriptor['dtype']!r}")
    count = math.prod(descriptor["shape"])
    size = os.path.getsize(descriptor["path"])
    if size != count * ELEMENT_SIZES[descriptor["dtype"]]:
        raise ValueError(f"{descriptor['path']} holds {size} bytes, not {count} x "
                         f"{descriptor['dtype']}")
    if count == 0:
        return torch.empty(0, dtype=dtype)
    # A private mapping: the input file is never written.
    return torch.from_file(descriptor["path"], shared=False, size=count, dtype=dtype)


def _write_output(path: str, y: torch.Tensor, dtype_name: str) -> dict:
    y = y.detach().to("cpu").contiguous()
    if y.numel() == 0:
        open(path, "wb").close()
    else:
        out = torch.from_file(path, shared=True, size=y.numel(), dtype=y.dtype)
        out.copy_(y.reshape(-1))
        del out  # unmaps, so the bytes are in the file before the answer names it
    return {"path": path, "dtype": dtype_name, "shape": list(y.shape)}


def _view(flat: torch.Tensor, view: dict) -> torch.Tensor:
    return torch.as_strided(flat, view["shape"], view["stride"], view["offset"])


def _activate(epilogue: str, y: torch.Tensor) -> torch.Tensor:
    if epilogue == "relu_bias":
        return torch.relu(y)
    if epilogue == "gelu_bias":
        # meshgate's GELU_BIAS is cuBLASLt's: the tanh approximation.
        return F.gelu(y, approximate="tanh")
    return y


class _Problem:
    def __init__(self, request: dict):
        self.m, self.n, self.k = request["m"], request["n"], request["k"]
        self.batch = request["batch"]
        self.dtype_name = request["dtype"]
        self.epilogue = request["epilogue"]
        self.alpha = float(request["alpha"])
        self.ldy = request["ldy"]
        self.device = request["device"]
        layout = request["layout"]
        inputs, views = request["inputs"], request["views"]
        device = torch.device("cuda" if self.device == "cuda" else "cpu")
        # Views into the stored buffers, moved whole so that the offsets (and the alignment they
        # give the data pointers) are the case's.
        x = _view(_read_buffer(inputs["x"]).to(device), views["x"])
        w = _view(_read_buffer(inputs["w"]).to(device), views["w"])
        self.x = x.transpose(-1, -2) if layout[0] == "t" else x
        self.w = w.transpose(-1, -2) if layout[1] == "t" else w
        self.bias = None
        if inputs.get("bias") is not None:
            self.bias = _view(_read_buffer(inputs["bias"]).to(device), views["bias"])
        if self.batch == 1:
            self.x, self.w = self.x[0], self.w[0]
        self.dtype = DTYPES[self.dtype_name]
        self.torch_device = device

    def new_output(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Y as stored ([batch, m, ldy], padding NaN) and the view of its logical elements."""
        stored = torch.full((self.batch, self.m, self.ldy), float("nan"), dtype=self.dtype,
                            device=self.torch_device)
        logical = stored[:, :, :self.n]
        return stored, (logical[0] if self.batch == 1 else logical)


def _fused(p: _Problem) -> tuple:
    """(run(out), fused, path): the call that computes Y into `out` with the bias in it."""
    on = f"({p.device})"
    batched = p.batch > 1
    if p.epilogue == "none":
        if batched:
            return (lambda out: torch.baddbmm(out, p.x, p.w, beta=0, alpha=p.alpha, out=out),
                    True, f"torch.baddbmm(beta=0) {on}")
        if p.alpha == 1.0:
            return lambda out: torch.mm(p.x, p.w, out=out), True, f"torch.mm {on}"
        return (lambda out: torch.addmm(out, p.x, p.w, beta=0, alpha=p.alpha, out=out),
                True, f"torch.addmm(beta=0) {on}")
    if batched:
        if p.epilogue == "bias":
            return (lambda out: torch.baddbmm(p.bias, p.x, p.w, alpha=p.alpha, out=out),
                    True, f"torch.baddbmm {on}")

        def batched_activation(out):
            torch.baddbmm(p.bias, p.x, p.w, alpha=p.alpha, out=out)
            out.copy_(_activate(p.epilogue, out))
        # PyTorch has no batched addmm with an activation.
        return (batched_activation, False,
                f"torch.baddbmm + {_activation_name(p.epilogue)} {on}")
    if p.epilogue == "bias":
        return (lambda out: torch.addmm(p.bias, p.x, p.w, alpha=p.alpha, out=out),
                True, f"torch.addmm {on}")
    if p.epilogue == "relu_bias":
        return (lambda out: torch._addmm_activation(p.bias, p.x, p.w, alpha=p.alpha,
                                                    use_gelu=False, out=out),
                True, f"torch._addmm_activation(use_gelu=False) {on}")
    if p.device == "cuda":
        # cuBLASLt's GELU_BIAS epilogue, and PyTorch's fallback after it, are the tanh GELU.
        return (lambda out: torch._addmm_activation(p.bias, p.x, p.w, alpha=p.alpha,
                                                    use_gelu=True, out=out),
                True, f"torch._addmm_activation(use_gelu=True) {on}")

    # On the CPU torch._addmm_activation(use_gelu=True) applies the exact (erf) GELU, which is
    # not the case's: the tanh GELU follows the fused bias instead.
    def cpu_gelu(out):
        torch.addmm(p.bias, p.x, p.w, alpha=p.alpha, out=out)
        out.copy_(F.gelu(out, approximate="tanh"))
    return (cpu_gelu, False,
            f"torch.addmm + {_activation_name(p.epilogue)} {on}; torch._addmm_activation"
            f"(use_gelu=True) is the erf GELU on the CPU")


def _activation_name(epilogue: str) -> str:
    return {"relu_bias": "torch.relu",
            "gelu_bias": "torch.nn.functional.gelu(approximate='tanh')"}[epilogue]


def _unfused(p: _Problem, out: torch.Tensor) -> str:
    y = torch.matmul(p.x, p.w)
    steps = ["torch.matmul"]
    if p.alpha != 1.0:
        y = y * p.alpha
        steps.append("* alpha")
    if p.bias is not None:
        y = y + p.bias
        steps.append("+ bias")
    if p.epilogue in ("relu_bias", "gelu_bias"):
        y = _activate(p.epilogue, y)
        steps.append(_activation_name(p.epilogue))
    out.copy_(y)
    return ", ".join(steps) + f" ({p.device})"


def _check_expressible(request: dict) -> None:
    device = request["device"]
    if device == "cuda" and not torch.cuda.is_available():
        raise Unsupported("device: cuda, and torch.cuda.is_available() is false "
                          f"(torch {torch.__version__}, CUDA {torch.version.cuda})")
    split_k = request.get("split_k", 0)
    if split_k > 1 or (device == "cuda" and split_k == 1):
        raise Unsupported(f"split_k: {split_k}: PyTorch leaves split-K to cuBLASLt's heuristic "
                          "and has no way to ask for a count")
    if device == "cuda" and request.get("workspace", DEFAULT_WORKSPACE) != DEFAULT_WORKSPACE:
        raise Unsupported(f"workspace: {request['workspace']} bytes: PyTorch sizes cuBLAS's "
                          "workspace once per process (CUBLAS_WORKSPACE_CONFIG, "
                          "TORCH_CUBLASLT_WORKSPACE_SIZE), not per call")


class _CudaMatmulSettings:
    """TF32 and reduced-precision split-K reductions as the request asks, restored after."""

    def __init__(self, request: dict):
        self.request = request
        self.saved = None

    def __enter__(self):
        if self.request["device"] != "cuda":
            return self
        m = torch.backends.cuda.matmul
        self.saved = (m.allow_tf32, m.allow_fp16_reduced_precision_reduction,
                      m.allow_bf16_reduced_precision_reduction)
        m.allow_tf32 = bool(self.request.get("tf32", False))
        # split_k_partials float32 keeps split-K's partial sums at compute precision; the
        # output dtype is cuBLASLt's OUTPUT_TYPE reduction, which these flags allow.
        reduced = self.request.get("split_k_partials", "float32") == self.request["dtype"]
        m.allow_fp16_reduced_precision_reduction = reduced
        m.allow_bf16_reduced_precision_reduction = reduced
        return self

    def __exit__(self, *exc):
        if self.saved is not None:
            m = torch.backends.cuda.matmul
            (m.allow_tf32, m.allow_fp16_reduced_precision_reduction,
             m.allow_bf16_reduced_precision_reduction) = self.saved
        return False


def _numerics_env(device: str) -> str:
    version = torch.__version__
    if device == "cuda":
        return (f"torch {version} cuda {torch.version.cuda} "
                f"{torch.cuda.get_device_name()} cuBLAS/cuBLASLt")
    blas = "mkl" if torch.backends.mkl.is_available() else "torch cpu blas"
    return f"torch {version} cpu {blas} ({torch.backends.cpu.get_cpu_capability()})"


def _time(p: _Problem, run, out: torch.Tensor, perf: dict) -> list[float]:
    for _ in range(perf["warmup"]):
        run(out)
    samples = []
    if p.device == "cuda":
        torch.cuda.synchronize()
        for _ in range(perf["iters"]):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            run(out)
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3)
        return samples
    for _ in range(perf["iters"]):
        begin = time.perf_counter()
        run(out)
        samples.append(time.perf_counter() - begin)
    return samples


def handle(request: dict, perf: dict | None, directory: str):
    _check_expressible(request)
    with _CudaMatmulSettings(request):
        p = _Problem(request)
        run, fused, fused_path = _fused(p)
        fused_stored, fused_out = p.new_output()
        run(fused_out)
        unfused_stored, unfused_out = p.new_output()
        unfused_path = _unfused(p, unfused_out)
        if p.device == "cpu" and request.get("tf32"):
            note = "; float32 on the CPU: PyTorch has no TF32 there"
            fused_path += note
            unfused_path += note
        observables = {
            "impls": {
                "torch_addmm": {
                    "output": _write_output(os.path.join(directory, "torch_addmm.bin"),
                                            fused_stored, p.dtype_name),
                    "fused": fused, "path": fused_path},
                "torch_unfused": {
                    "output": _write_output(os.path.join(directory, "torch_unfused.bin"),
                                            unfused_stored, p.dtype_name),
                    "fused": False, "path": unfused_path},
            },
            "numerics_env": _numerics_env(p.device),
        }
        # Timed after the answered outputs are written: they are the first call's.
        time_s = _time(p, run, fused_out, perf) if perf else None
    return observables, time_s
