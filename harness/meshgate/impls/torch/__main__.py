"""`python -m meshgate.impls.torch`: serves meshgate.impl/1 on the channel meshgate-runner passes
(MESHGATE_IMPL_FDS); what torch and gloo print goes to the log, never into the channel."""

from __future__ import annotations

import argparse
import importlib
import platform
import sys

from .. import protocol

# One module per case kind, each with handle(request, perf, dir) -> (observables, time_s).
KIND_MODULES = {
    "layout": "layout",
    "mesh": "mesh",
    "redistribute": "redistribute",
    "collective": "collective",
    "gemm": "gemm",
    "fsdp": "fsdp",
}

# Kinds the local world does not answer: a collective case's ranks each send and receive their
# own buffers around a root, which one SPMD program over LocalTensors does not stand for; an
# fsdp case trains a module whose hooks gather and scatter on real ranks.
GLOO_ONLY_KINDS = ("collective", "fsdp")


def _handler(module_name: str):
    def handle(request, perf, directory):
        module = importlib.import_module(f"{__package__}.{module_name}")
        return module.handle(request, perf, directory)
    return handle


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m meshgate.impls.torch")
    parser.add_argument("--world", choices=("gloo", "local"), default="gloo",
                        help="where a case's ranks run: gloo, one worker process per rank "
                             "(default); local, every rank in this process under "
                             "LocalTensorMode (impl name torch-local)")
    options = parser.parse_args(argv)
    try:
        import torch
    except ImportError as e:
        print(f"--impl torch needs PyTorch in {sys.executable}: {e}", file=sys.stderr)
        return 3
    from . import local_world, world
    name = "torch"
    if options.world == "local":
        local_world.select()
        name = "torch-local"
    info = {
        "world": options.world,
        "python": platform.python_version(),
        "executable": sys.executable,
        "cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "git_version": getattr(torch.version, "git_version", None),
    }
    handlers = {kind: _handler(module) for kind, module in KIND_MODULES.items()
                if options.world == "gloo" or kind not in GLOO_ONLY_KINDS}
    return protocol.serve(name, torch.__version__.split("+")[0], info, handlers,
                          on_bye=world.shutdown)


if __name__ == "__main__":
    sys.exit(main())
