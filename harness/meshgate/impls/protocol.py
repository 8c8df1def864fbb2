"""The implementation side of meshgate.impl/1 (docs/impl-protocol.md): one JSON object per line
on stdin, one answer per line on stdout. An implementation in Python defines a handler per kind
and calls `serve`; anything it prints goes to stderr, so stdout carries only answers."""

from __future__ import annotations

import json
import sys
import traceback
from typing import Callable

PROTOCOL = "meshgate.impl/1"

# dtype names of the protocol's tensor files and their sizes in bytes
DTYPE_SIZES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2,
               "int64": 8, "int32": 4, "int8": 1, "uint8": 1}


class Unsupported(Exception):
    """The implementation cannot express this case: the row is a skip with this reason."""


class Rejected(Exception):
    """The operation raised as it would for a user: judged against the case's expect_error.
    `error` is the exception's type name, e.g. ValueError."""

    def __init__(self, error: str, message: str):
        super().__init__(f"{error}: {message}")
        self.error = error
        self.message = message

    @classmethod
    def of(cls, exc: BaseException) -> "Rejected":
        return cls(type(exc).__name__, str(exc))


# A handler takes (request, perf, dir) and returns (observables, time_s or None).
Handler = Callable[[dict, "dict | None", str], "tuple[dict, list[float] | None]"]


def serve(name: str, version: str, info: dict, handlers: dict[str, Handler],
          on_bye: Callable[[], None] | None = None, stdin=None, stdout=None) -> int:
    """Answers requests until bye or the end of stdin. Exceptions other than Unsupported and
    Rejected become an `error` answer with the traceback's last line; the loop goes on."""
    stdin = stdin or sys.stdin
    out = stdout or sys.stdout
    # Whatever the libraries print must not reach the protocol's channel.
    sys.stdout = sys.stderr

    def answer(obj: dict) -> None:
        out.write(json.dumps(obj, allow_nan=False) + "\n")
        out.flush()

    try:
        for line in stdin:
            line = line.strip()
            if not line:
                continue
            request = json.loads(line)
            kind = request.get("type")
            if kind == "hello":
                answer({"type": "hello", "protocol": PROTOCOL, "name": name, "version": version,
                        "info": info, "kinds": sorted(handlers)})
            elif kind == "bye":
                break
            elif kind == "case":
                answer(_run_case(handlers, request))
            else:
                answer({"type": "case", "status": "error",
                        "message": f"unknown request type {kind!r}"})
    finally:
        if on_bye:
            on_bye()
    return 0


def _run_case(handlers: dict[str, Handler], request: dict) -> dict:
    handler = handlers.get(request.get("kind"))
    if handler is None:
        return {"type": "case", "status": "unsupported",
                "reason": f"does not implement the {request.get('kind')} kind"}
    try:
        observables, time_s = handler(request["request"], request.get("perf"), request["dir"])
    except Unsupported as e:
        return {"type": "case", "status": "unsupported", "reason": str(e)}
    except Rejected as e:
        return {"type": "case", "status": "rejected", "error": e.error, "message": e.message}
    except Exception as e:  # the implementation broke: an error row, and the loop goes on
        traceback.print_exc(file=sys.stderr)
        return {"type": "case", "status": "error", "message": f"{type(e).__name__}: {e}"}
    answer = {"type": "case", "status": "ok", "observables": observables}
    if time_s is not None:
        answer["samples"] = {"time_s": list(time_s)}
    return answer
