#!/usr/bin/env python3
"""A sum all-reduce in Python, tested and timed by meshgate as a `kind: command` case
(cases/allreduce.yaml). meshgate starts one process per rank with torchrun's variables (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...) and reads the verdict each rank writes to
$MESHGATE_RESULT (docs/kinds.md, "Programs").

With PyTorch installed, the all-reduce is torch.distributed's on the gloo backend; without it
(or with --backend python), rank 0 gathers every rank's vector over a socket, sums and sends
the sum back. Every rank checks every element against the exact sum, then times --iters calls.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from array import array
from multiprocessing.connection import Client, Listener

AUTHKEY = b"meshgate-example-allreduce"
CONNECT_TIMEOUT_S = 60


def value(rank: int, i: int) -> float:
    """Rank `rank`'s input at element i: small integers, so that every sum is exact."""
    return float((rank + 1) * (i % 251 + 1))


def expected(world: int, i: int) -> float:
    return float(world * (world + 1) // 2 * (i % 251 + 1))


def first_wrong(result, world: int) -> str:
    """'' when every element is the exact sum, else the first element that is not."""
    for i, got in enumerate(result):
        if got != expected(world, i):
            return f"element {i}: {got}, expected {expected(world, i)}"
    return ""


class TorchAllReduce:
    """torch.distributed on gloo, rendezvous through MASTER_ADDR and MASTER_PORT (env://)."""

    name = "torch.distributed/gloo"

    def __init__(self, rank: int, world: int, elements: int):
        import torch
        import torch.distributed as dist

        self.dist = dist
        dist.init_process_group("gloo", rank=rank, world_size=world)
        index = torch.arange(elements, dtype=torch.int64)
        self.data = ((index % 251 + 1) * (rank + 1)).to(torch.float32)

    def run(self) -> None:
        self.dist.all_reduce(self.data)

    def values(self):
        return self.data.tolist()

    def barrier(self) -> None:
        self.dist.barrier()

    def close(self) -> None:
        self.dist.destroy_process_group()


class SocketAllReduce:
    """Plain Python: rank 0 listens on MASTER_PORT, sums what every rank sends and answers the
    sum to each."""

    name = "python sockets"

    def __init__(self, rank: int, world: int, elements: int):
        self.rank, self.world = rank, world
        self.data = array("d", (value(rank, i) for i in range(elements)))
        address = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
        if rank == 0:
            self.listener = Listener(address, authkey=AUTHKEY)
            peers = {}
            for _ in range(world - 1):
                conn = self.listener.accept()
                peers[conn.recv()] = conn
            self.peers = [peers[r] for r in sorted(peers)]
        else:
            self.server = self._connect(address)
            self.server.send(rank)

    @staticmethod
    def _connect(address):
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        while True:
            try:
                return Client(address, authkey=AUTHKEY)
            except ConnectionRefusedError:  # rank 0 is not listening yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def run(self) -> None:
        if self.rank == 0:
            total = array("d", self.data)
            for conn in self.peers:
                part = array("d")
                part.frombytes(conn.recv_bytes())
                for i, x in enumerate(part):
                    total[i] += x
            payload = total.tobytes()
            for conn in self.peers:
                conn.send_bytes(payload)
            self.data = total
        else:
            self.server.send_bytes(self.data.tobytes())
            self.data = array("d")
            self.data.frombytes(self.server.recv_bytes())

    def values(self):
        return list(self.data)

    def barrier(self) -> None:
        if self.rank == 0:
            for conn in self.peers:
                conn.recv()
            for conn in self.peers:
                conn.send("go")
        else:
            self.server.send("ready")
            self.server.recv()

    def close(self) -> None:
        for conn in getattr(self, "peers", []):
            conn.close()
        if self.rank == 0:
            self.listener.close()
        else:
            self.server.close()


def choose(backend: str):
    if backend == "python":
        return SocketAllReduce
    try:
        import torch.distributed  # noqa: F401
    except ImportError:
        if backend == "torch":
            raise
        return SocketAllReduce
    return TorchAllReduce


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=1000, help="floats per rank")
    parser.add_argument("--iters", type=int, default=0, help="timed calls after the check")
    parser.add_argument("--warmup", type=int, default=2, help="untimed calls before them")
    parser.add_argument("--backend", choices=["auto", "torch", "python"], default="auto",
                        help="torch.distributed when importable (auto), or either one")
    args = parser.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

    kind = choose(args.backend)
    allreduce = kind(rank, world, args.elements)
    allreduce.run()
    wrong = first_wrong(allreduce.values(), world)
    samples = []
    if not wrong and args.iters:
        for _ in range(args.warmup):
            allreduce.run()
        for _ in range(args.iters):
            allreduce.barrier()
            start = time.perf_counter()
            allreduce.run()
            samples.append(time.perf_counter() - start)
    allreduce.close()

    result = {"status": "fail" if wrong else "pass",
              "message": f"rank {rank}: {wrong}" if wrong else "",
              "metrics": {"elements": args.elements, "used_torch": int(kind is TorchAllReduce)},
              # Deterministic facts that `meshgate baseline check` compares between runs.
              "signals": {"world_size": world, "elements": args.elements}}
    if samples:
        result["samples"] = {"time_s": samples}
    with open(os.environ["MESHGATE_RESULT"], "w") as out:
        json.dump(result, out)
    print(f"rank {rank}: {kind.name}, {args.elements} elements, "
          f"{'wrong: ' + wrong if wrong else 'exact'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
