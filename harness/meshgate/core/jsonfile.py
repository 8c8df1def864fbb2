"""The one reader of the JSON documents the driver is given: results, baselines, signals,
calibration, comparison and verdict files, the nightly state, build stamps and the JSON held in
the history database.

Whatever a file holds, the answer is a document of the expected type or one error naming the
file and what is wrong, never a traceback: bytes that are not UTF-8 (the offset of the first
one; a UTF-16 byte order mark is named), JSON that does not parse (its line and column),
nesting or numbers beyond what the json module reads, strings holding lone surrogates (JSON
escapes can spell them; no UTF-8 file, SQLite column or report can hold them) and a top level
of another type. A UTF-8 byte order mark is allowed.

Each caller names the exception to raise (its own InputError, SignalsError, ... that its
command maps to exit code 2) and, where there is one, the remedy to append."""

from __future__ import annotations

import codecs
import json
import re
from pathlib import Path
from typing import Any, Optional


class JsonFileError(ValueError):
    """An unusable JSON document; the message names where it came from and what is wrong."""


# JSON's names for the types json.loads returns: "expected a JSON object, found null".
_NAMES = {dict: "a JSON object", list: "a JSON array", str: "a string", int: "an integer",
          float: "a number", bool: "true or false", type(None): "null"}
# The escape of a UTF-16 surrogate (\ud800 to \udfff): only with one can a decoded string
# hold a lone surrogate. An escaped backslash before the u matches too, which costs a check
# and refuses nothing.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def json_name(value: Any) -> str:
    """What `value` is, in JSON's words: "a JSON object", "a string", "null", ..."""
    return _NAMES.get(type(value), type(value).__name__)


def type_name(kind: type) -> str:
    """The JSON name of a type json.loads returns: "a JSON object" for dict, ..."""
    return _NAMES[kind]


def _fail(error: type[Exception], source: Any, problem: str, hint: str) -> Exception:
    return error(f"{source}: {problem}" + (f": {hint}" if hint else ""))


def decode(data: bytes, source: Any, *, error: type[Exception] = JsonFileError,
           hint: str = "") -> str:
    """`data` as text: strict UTF-8, a byte order mark allowed and dropped."""
    start = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        text = data[start:].decode("utf-8")
    except UnicodeDecodeError as e:
        offset = start + e.start
        utf16 = "; it starts with a UTF-16 byte order mark" if data.startswith(
            (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) else ""
        raise _fail(error, source, f"not UTF-8 text (byte 0x{data[offset]:02x} at offset "
                                   f"{offset}{utf16})", hint) from None
    nul = data.find(b"\x00")
    if nul >= 0:  # no JSON text holds one: UTF-16 without a byte order mark, or binary data
        raise _fail(error, source, f"not UTF-8 JSON text (a NUL byte at offset {nul})", hint)
    return text


def parse(text: str, source: Any, expect: Optional[type] = dict, *,
          error: type[Exception] = JsonFileError, hint: str = "") -> Any:
    """The JSON document in `text` (from `source`, which messages name), checked to be an
    instance of `expect` (any type when None)."""
    if not text.strip():
        expected = f", expected {type_name(expect)}" if expect else ""
        raise _fail(error, source, f"empty{expected}", hint)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        at = f"line {e.lineno}, column {e.colno}" if "\n" in text.strip() else f"column {e.colno}"
        raise _fail(error, source, f"not valid JSON: {e.msg}: {at}", hint) from None
    except RecursionError:
        raise _fail(error, source, "not readable JSON: nested too deeply", hint) from None
    except ValueError as e:  # an integer of more digits than Python converts
        # What precedes the ';' says what is wrong; the rest is advice to Python programmers.
        raise _fail(error, source, f"not readable JSON: {str(e).split(';')[0]}", hint) from None
    if _SURROGATE_ESCAPE.search(text):
        try:
            json.dumps(data, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as e:
            raise _fail(error, source, f"a string holds a lone surrogate "
                                       f"(\\u{ord(e.object[e.start]):04x}), which is not text",
                        hint) from None
    if expect is not None and not isinstance(data, expect):
        raise _fail(error, source, f"expected {type_name(expect)}, found {json_name(data)}", hint)
    return data


def read(path: Path, expect: Optional[type] = dict, *, error: type[Exception] = JsonFileError,
         hint: str = "") -> Any:
    """The JSON document in the file `path` (decode, then parse)."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise _fail(error, path, f"cannot read: {e.strerror or e}", hint) from None
    return parse(decode(data, path, error=error, hint=hint), path, expect, error=error, hint=hint)
