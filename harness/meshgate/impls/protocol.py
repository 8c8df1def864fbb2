"""The implementation side of meshgate.impl/1 (docs/impl-protocol.md). meshgate-runner starts
the implementation with a channel of its own: two pipes, whose ends it finds as file
descriptors named in MESHGATE_IMPL_FDS="READ,WRITE" (3 and 4): one JSON request per line on the
first, one answer per line on the second. Its stdout and stderr both go to the runner's log of
the implementation, so nothing a library prints can reach the channel. An implementation in
Python defines a handler per kind and calls `serve`."""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Callable, TextIO

PROTOCOL = "meshgate.impl/1"
FDS_VARIABLE = "MESHGATE_IMPL_FDS"

# dtype names of the protocol's tensor files and their sizes in bytes
DTYPE_SIZES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2,
               "int64": 8, "int32": 4, "int8": 1, "uint8": 1}


class Unsupported(Exception):
    """The implementation cannot express this case: the row is a skip with this reason."""


def unsupported_row(reason: str) -> dict:
    """The entry of one row of a case's observables (a collective's `sizes`) that the
    implementation does not run, in place of that row's observables: the runner writes the row
    as skipped with `reason` and judges the case's other rows as usual (docs/impl-protocol.md,
    "Rows an implementation does not run"). A case none of whose rows runs is Unsupported as a
    whole instead."""
    if not isinstance(reason, str) or not reason:
        raise ValueError("an unsupported row needs a reason")
    return {"unsupported": reason}


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


class ChannelError(Exception):
    """The program has no protocol channel: it was not started by meshgate-runner."""


# Where progress() writes while serve() answers a case; None outside a case.
_progress_channel: Callable[[dict], None] | None = None


def progress(doing: str) -> None:
    """Tells the runner that set-up which is not the case's own work is under way (a world of
    worker processes starting, a module loading in each): the runner restarts the case timeout,
    up to four case timeouts for the whole answer (docs/impl-protocol.md, "Timeouts and
    failures"). A no-op outside a case."""
    if _progress_channel is not None:
        _progress_channel({"type": "progress", "doing": doing})


# A handler takes (request, perf, dir) and returns (observables, time_s or None).
Handler = Callable[[dict, "dict | None", str], "tuple[dict, list[float] | None]"]


def channel_fds(environ=None) -> tuple[int, int]:
    """(read fd, write fd) of the channel the runner passed, from MESHGATE_IMPL_FDS."""
    value = (os.environ if environ is None else environ).get(FDS_VARIABLE)
    if not value:
        raise ChannelError(
            f"this program implements {PROTOCOL} for meshgate-runner, which starts it and passes "
            f"the channel for requests and answers in {FDS_VARIABLE} (docs/impl-protocol.md); "
            f"run it through meshgate, e.g. `meshgate run CASES --impl NAME=COMMAND`")
    try:
        read_fd, write_fd = (int(part) for part in value.split(","))
    except ValueError:
        raise ChannelError(f"{FDS_VARIABLE}={value!r} is not READ,WRITE (two file "
                           f"descriptors, e.g. 3,4)") from None
    for fd in (read_fd, write_fd):
        if fd <= 2:
            raise ChannelError(f"{FDS_VARIABLE}={value!r}: the channel is never stdin, stdout "
                               f"or stderr")
        try:
            os.fstat(fd)
        except OSError as e:
            raise ChannelError(f"{FDS_VARIABLE}={value!r}: fd {fd} is not open ({e.strerror}); "
                               f"was the program started by meshgate-runner?") from None
    return read_fd, write_fd


def open_channel(environ=None) -> tuple[TextIO, TextIO]:
    """The channel as (requests, answers) text files, moved off the fds the runner gave (to
    fresh ones that no child process inherits), with fd 1 checked not to lead into it."""
    read_fd, write_fd = channel_fds(environ)
    # Fresh fds, close-on-exec and not inheritable: a worker process or a subprocess never
    # holds the channel (a dead implementation's workers would keep the runner waiting), and a
    # file a library opens later at fd 3 or 4 is not it.
    requests_fd, answers_fd = os.dup(read_fd), os.dup(write_fd)
    os.close(read_fd)
    os.close(write_fd)
    _keep_stdout_off(answers_fd)
    requests = os.fdopen(requests_fd, "r", encoding="utf-8", newline="\n")
    answers = os.fdopen(answers_fd, "w", encoding="utf-8", newline="\n")
    return requests, answers


def _keep_stdout_off(answers_fd: int) -> None:
    """Whatever prints to fd 1 (Python's print, a C library's printf, a child process) goes to
    the log: the runner makes fd 1 the log, and should a launcher in between have pointed fd 1
    at the answer pipe, fd 1 becomes fd 2 here."""
    try:
        out, answers = os.fstat(1), os.fstat(answers_fd)
    except OSError:
        return
    if (out.st_dev, out.st_ino) == (answers.st_dev, answers.st_ino):
        sys.stdout.flush()
        os.dup2(2, 1)


def serve(name: str, version: str, info: dict, handlers: dict[str, Handler],
          on_bye: Callable[[], None] | None = None, requests: TextIO | None = None,
          answers: TextIO | None = None) -> int:
    """Answers requests until bye or the end of the requests. Without `requests` and
    `answers` (tests give files of their own) they are the runner's channel; a program
    started without one gets a message on stderr and exit code 2. Exceptions other than
    Unsupported and Rejected become an `error` answer with the traceback's last line; the
    loop goes on."""
    global _progress_channel
    if requests is None or answers is None:
        try:
            requests, answers = open_channel()
        except ChannelError as e:
            print(f"{name}: {e}", file=sys.stderr)
            return 2

    def answer(obj: dict) -> None:
        answers.write(json.dumps(obj, allow_nan=False) + "\n")
        answers.flush()

    try:
        for line in requests:
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
                _progress_channel = answer
                try:
                    answer(_run_case(handlers, request))
                finally:
                    _progress_channel = None
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
