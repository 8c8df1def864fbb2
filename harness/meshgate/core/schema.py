"""The JSON Schemas meshgate ships (meshgate/schemas/*.schema.json) and a validator for them.

The schemas describe the documents other tools consume: `results-1` (meshgate.results/1, a
run's results.json), `verdicts-1` (what `compare --json` writes), `cases-1` (the case-file
format) and `impl-1` (one line of the implementation protocol, docs/impl-protocol.md). The validator implements the part of JSON Schema 2020-12 they use — type, enum,
const, properties, required, additionalProperties, propertyNames, items, min/maxItems,
minProperties, minLength, pattern, minimum, maximum, exclusiveMinimum, allOf, anyOf, oneOf,
not, if/then and local $ref — with the standard library, and refuses any other keyword, so a
schema can never ask for more than is checked.

With MESHGATE_CHECK_SCHEMA=1 in the environment (the test suite sets it), every results.json
the driver reads or writes is validated and a violation raises SchemaError.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

from . import jsonfile

# schemas/ sits beside the layer folders, in the package itself (the wheel ships it there).
SCHEMA_DIR = Path(__file__).resolve().parents[1] / "schemas"
NAMES = ("results-1", "verdicts-1", "cases-1", "impl-1")
CHECK_ENV = "MESHGATE_CHECK_SCHEMA"

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
}
# Keywords that only annotate.
_ANNOTATIONS = {"$schema", "$id", "$defs", "title", "description", "default", "examples"}
_CHECKED = {"type", "enum", "const", "properties", "required", "additionalProperties",
            "propertyNames", "items", "minItems", "maxItems", "minProperties", "minLength",
            "pattern", "minimum", "maximum", "exclusiveMinimum", "allOf", "anyOf", "oneOf", "not",
            "if", "then", "$ref"}


class SchemaError(ValueError):
    """A document does not match its schema; the message names the file and the JSON path."""


@lru_cache(maxsize=None)
def load(name: str) -> dict:
    """The schema `name` (one of NAMES) as shipped with the driver."""
    if name not in NAMES:
        raise ValueError(f"unknown schema '{name}' (known: {', '.join(NAMES)})")
    return jsonfile.read(SCHEMA_DIR / f"{name}.schema.json")


def errors(instance: Any, schema: dict, root: dict | None = None,
           path: str = "$") -> Iterator[str]:
    """Every way `instance` violates `schema`, as "<json path>: <what>" messages."""
    root = schema if root is None else root
    unknown = set(schema) - _CHECKED - _ANNOTATIONS - {"else"}
    if unknown:
        raise ValueError(f"schema keyword(s) {sorted(unknown)} at {path} are not supported")
    if "$ref" in schema:
        yield from errors(instance, _resolve(root, schema["$ref"]), root, path)
    if "type" in schema:
        wanted = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_TYPES[t](instance) for t in wanted):
            yield f"{path}: expected {' or '.join(wanted)}, got {_describe(instance)}"
            return
    if "enum" in schema and not any(_same(instance, v) for v in schema["enum"]):
        yield f"{path}: {_describe(instance)} is not one of {json.dumps(schema['enum'])}"
    if "const" in schema and not _same(instance, schema["const"]):
        yield f"{path}: expected {json.dumps(schema['const'])}, got {_describe(instance)}"
    if isinstance(instance, dict):
        yield from _object_errors(instance, schema, root, path)
    if isinstance(instance, list):
        if "minItems" in schema and len(instance) < schema["minItems"]:
            yield f"{path}: {len(instance)} item(s), at least {schema['minItems']} required"
        if "maxItems" in schema and len(instance) > schema["maxItems"]:
            yield f"{path}: {len(instance)} item(s), at most {schema['maxItems']} allowed"
        if "items" in schema:
            for i, item in enumerate(instance):
                yield from errors(item, schema["items"], root, f"{path}[{i}]")
    if isinstance(instance, str):
        if "minLength" in schema and len(instance) < schema["minLength"]:
            yield f"{path}: string shorter than {schema['minLength']}"
        if "pattern" in schema and not re.search(schema["pattern"], instance):
            yield f"{path}: {_describe(instance)} does not match /{schema['pattern']}/"
    if _TYPES["number"](instance):
        if "minimum" in schema and instance < schema["minimum"]:
            yield f"{path}: {instance} is below the minimum {schema['minimum']}"
        if "maximum" in schema and instance > schema["maximum"]:
            yield f"{path}: {instance} is above the maximum {schema['maximum']}"
        if "exclusiveMinimum" in schema and instance <= schema["exclusiveMinimum"]:
            yield f"{path}: {instance} is not above {schema['exclusiveMinimum']}"
    for sub in schema.get("allOf", []):
        yield from errors(instance, sub, root, path)
    if "anyOf" in schema and not any(_valid(instance, s, root, path) for s in schema["anyOf"]):
        yield f"{path}: {_describe(instance)} matches none of the anyOf alternatives"
    if "oneOf" in schema:
        matching = sum(_valid(instance, s, root, path) for s in schema["oneOf"])
        if matching != 1:
            yield f"{path}: {_describe(instance)} matches {matching} oneOf alternatives, not 1"
    if "not" in schema and _valid(instance, schema["not"], root, path):
        yield f"{path}: {_describe(instance)} matches a schema it must not"
    if "if" in schema:
        branch = "then" if _valid(instance, schema["if"], root, path) else "else"
        if branch in schema:
            yield from errors(instance, schema[branch], root, path)


def _object_errors(instance: dict, schema: dict, root: dict, path: str) -> Iterator[str]:
    for key in schema.get("required", []):
        if key not in instance:
            yield f"{path}: missing required key '{key}'"
    if "minProperties" in schema and len(instance) < schema["minProperties"]:
        yield f"{path}: at least {schema['minProperties']} key(s) required"
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for key, value in instance.items():
        if "propertyNames" in schema and not _valid(key, schema["propertyNames"], root, path):
            yield f"{path}: key '{key}' is not allowed here"
        if key in properties:
            yield from errors(value, properties[key], root, f"{path}.{key}")
        elif extra is False:
            yield f"{path}: unknown key '{key}'"
        elif isinstance(extra, dict):
            yield from errors(value, extra, root, f"{path}.{key}")


def _valid(instance: Any, schema: dict, root: dict, path: str) -> bool:
    return next(errors(instance, schema, root, path), None) is None


def _resolve(root: dict, ref: str) -> dict:
    if not ref.startswith("#/"):
        raise ValueError(f"only local $ref are supported, not '{ref}'")
    node: Any = root
    for part in ref[2:].split("/"):
        node = node[part]
    return node


def _same(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0 but True != 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return a == b


def _describe(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 60 else text[:57] + "..."


def check(document: Any, name: str, where: str | os.PathLike = "") -> None:
    """Raises SchemaError listing (up to 10) violations of schema `name` by `document`."""
    found = list(errors(document, load(name)))
    if found:
        shown = "\n  ".join(found[:10]) + ("\n  ..." if len(found) > 10 else "")
        raise SchemaError(f"{where or 'document'}: does not match {name}.schema.json:\n  {shown}")


def check_if_asked(document: Any, name: str, where: str | os.PathLike) -> None:
    """check() when MESHGATE_CHECK_SCHEMA is set (the test suite sets it), else nothing."""
    if os.environ.get(CHECK_ENV, "") not in ("", "0"):
        check(document, name, where)


def main(argv: list[str] | None = None) -> int:
    """`python3 -m meshgate.schema NAME FILE...`: validates JSON files (exit 1 on a violation)."""
    parser = argparse.ArgumentParser(prog="python3 -m meshgate.schema",
                                     description="Validate JSON files against a shipped schema.")
    parser.add_argument("name", choices=NAMES, help="which schema")
    parser.add_argument("files", nargs="+", metavar="FILE", help="JSON files to validate")
    args = parser.parse_args(argv)
    code = 0
    for file in args.files:
        try:
            check(jsonfile.read(Path(file), expect=None), args.name, file)
        except (jsonfile.JsonFileError, SchemaError) as e:
            print(e, file=sys.stderr)
            code = 1
    return code


if __name__ == "__main__":
    sys.exit(main())
