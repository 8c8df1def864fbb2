"""The JSON Schemas meshgate ships (meshgate/schemas/*.schema.json) and their validation.

The schemas describe the documents other tools consume: `results-1` (meshgate.results/1, a
run's results.json), `verdicts-1` (what `compare --json` writes), `cases-1` (the case-file
format) and `impl-1` (one line of the implementation protocol, docs/impl-protocol.md).
Documents are validated by jsonschema (JSON Schema 2020-12), pinned in pyproject.toml's
optional dependency `schemas` (ci/bootstrap installs it). The schemas may use the keywords
listed in CHECKED (and annotations); any other keyword is refused, so a schema can never ask
for more than is checked (jsonschema only annotates `format`, say). Each violation is reported
as "<JSON path of the failing key>: <what>", e.g. `$.cases[3].status: "passed" is not one of
["pass", "fail", "error", "skip"]`. A results document is also held to the kinds its runner
registered (`run.kinds`): a row of another kind is a violation too.

The driver itself runs on the standard library alone: jsonschema is imported only when a
document is validated, which `python3 -m meshgate.schema` does and, with
MESHGATE_CHECK_SCHEMA=1 in the environment (the test suite sets it), every results.json the
driver writes or takes from the runner; a violation raises SchemaError.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

from . import files, jsonfile

# schemas/ sits beside the layer folders, in the package itself (the wheel ships it there).
SCHEMA_DIR = Path(__file__).resolve().parents[1] / "schemas"
NAMES = ("results-1", "verdicts-1", "cases-1", "impl-1")
CHECK_ENV = "MESHGATE_CHECK_SCHEMA"

# Keywords that only annotate.
ANNOTATIONS = {"$schema", "$id", "$defs", "title", "description", "default", "examples"}
# The keywords the shipped schemas use; a schema with another one is refused.
CHECKED = {"type", "enum", "const", "properties", "required", "additionalProperties",
           "propertyNames", "items", "minItems", "maxItems", "minProperties", "minLength",
           "pattern", "minimum", "maximum", "exclusiveMinimum", "allOf", "anyOf", "oneOf", "not",
           "if", "then", "else", "$ref"}
# Keywords whose value is a schema, a list of schemas or a mapping of names to schemas.
_SUBSCHEMA = {"additionalProperties", "propertyNames", "items", "not", "if", "then", "else"}
_SUBSCHEMA_LISTS = {"allOf", "anyOf", "oneOf"}
_SUBSCHEMA_MAPS = {"properties", "$defs"}


class SchemaError(ValueError):
    """A document does not match its schema; the message names the file and the JSON path."""


class ValidatorMissing(SchemaError):
    """jsonschema, which validates documents, is not installed; the message says how to."""


@lru_cache(maxsize=None)
def load(name: str) -> dict:
    """The schema `name` (one of NAMES) as shipped with the driver."""
    if name not in NAMES:
        raise ValueError(f"unknown schema '{name}' (known: {', '.join(NAMES)})")
    return jsonfile.read(SCHEMA_DIR / f"{name}.schema.json")


def _refuse_unknown_keywords(schema: Any, path: str = "$") -> None:
    if not isinstance(schema, dict):
        return
    unknown = set(schema) - CHECKED - ANNOTATIONS
    if unknown:
        raise ValueError(f"schema keyword(s) {sorted(unknown)} at {path} are not supported")
    for key, value in schema.items():
        if key in _SUBSCHEMA:
            _refuse_unknown_keywords(value, f"{path}.{key}")
        elif key in _SUBSCHEMA_LISTS and isinstance(value, list):
            for i, sub in enumerate(value):
                _refuse_unknown_keywords(sub, f"{path}.{key}[{i}]")
        elif key in _SUBSCHEMA_MAPS and isinstance(value, dict):
            for sub_name, sub in value.items():
                _refuse_unknown_keywords(sub, f"{path}.{key}.{sub_name}")


def _validator(schema: dict) -> Any:
    """A jsonschema validator of `schema` (2020-12); ValidatorMissing without jsonschema."""
    try:
        import jsonschema
    except ImportError:
        pin = files.pinned("jsonschema", "jsonschema==4.25.1")
        raise ValidatorMissing(f"validating a document needs jsonschema: install the pinned version "
                               f"with\n  {sys.executable} -m pip install '{pin}'\n(or run ci/bootstrap)") from None
    _refuse_unknown_keywords(schema)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _json_path(parts: Any) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def _describe(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 60 else text[:57] + "..."


def _what(error: Any, validator: Any) -> list[str]:
    """What a jsonschema error says, in the words of the driver's messages (one per key where a
    keyword finds several)."""
    kind, value, instance = error.validator, error.validator_value, error.instance
    if "propertyNames" in error.relative_schema_path:
        return [f"key '{instance}' is not allowed here"]
    if kind == "type":
        wanted = value if isinstance(value, list) else [value]
        return [f"expected {' or '.join(wanted)}, got {_describe(instance)}"]
    if kind == "enum":
        return [f"{_describe(instance)} is not one of {json.dumps(value)}"]
    if kind == "const":
        return [f"expected {json.dumps(value)}, got {_describe(instance)}"]
    if kind == "required":
        return [f"missing required key '{key}'" for key in value if key not in instance]
    if kind == "additionalProperties" and value is False:
        known = error.schema.get("properties", {})
        return [f"unknown key '{key}'" for key in instance if key not in known]
    if kind == "minProperties":
        return [f"at least {value} key(s) required"]
    if kind == "minItems":
        return [f"{len(instance)} item(s), at least {value} required"]
    if kind == "maxItems":
        return [f"{len(instance)} item(s), at most {value} allowed"]
    if kind == "minLength":
        return [f"string shorter than {value}"]
    if kind == "pattern":
        return [f"{_describe(instance)} does not match /{value}/"]
    if kind == "minimum":
        return [f"{instance} is below the minimum {value}"]
    if kind == "maximum":
        return [f"{instance} is above the maximum {value}"]
    if kind == "exclusiveMinimum":
        return [f"{instance} is not above {value}"]
    if kind == "anyOf":
        return [f"{_describe(instance)} matches none of the anyOf alternatives"]
    if kind == "oneOf":
        matching = sum(validator.evolve(schema=sub).is_valid(instance) for sub in value)
        return [f"{_describe(instance)} matches {matching} oneOf alternatives, not 1"]
    if kind == "not":
        return [f"{_describe(instance)} matches a schema it must not"]
    return [error.message]


# The order in which the messages of one value are listed: its type, its value, its keys, its items.
_KEYWORD_ORDER = ("type", "enum", "const", "required", "minProperties", "propertyNames", "additionalProperties",
                  "minItems", "maxItems", "minLength", "pattern", "minimum", "maximum", "exclusiveMinimum",
                  "anyOf", "oneOf", "not")


def _order(error: Any) -> tuple:
    """Messages in document order, and at one path in _KEYWORD_ORDER."""
    path = [(0, p, "") if isinstance(p, int) else (1, 0, str(p)) for p in error.absolute_path]
    rank = _KEYWORD_ORDER.index(error.validator) if error.validator in _KEYWORD_ORDER else len(_KEYWORD_ORDER)
    return path, rank


def errors(instance: Any, schema: dict) -> Iterator[str]:
    """Every way `instance` violates `schema`, as "<json path>: <what>" messages. Where a value
    has the wrong type, the other keywords at its path are not reported (they would only
    restate it). ValueError when the schema uses a keyword outside CHECKED."""
    return _messages(_validator(schema), instance)


def _messages(validator: Any, instance: Any) -> Iterator[str]:
    found = sorted(validator.iter_errors(instance), key=_order)
    mistyped = {_json_path(e.absolute_path) for e in found if e.validator == "type"}
    said: set[str] = set()  # jsonschema reports `required` once per missing key, each naming them all here
    for error in found:
        path = _json_path(error.absolute_path)
        if path in mistyped and error.validator != "type" and "propertyNames" not in error.relative_schema_path:
            continue
        for what in _what(error, validator):
            message = f"{path}: {what}"
            if message not in said:
                said.add(message)
                yield message


@lru_cache(maxsize=None)
def _shipped_validator(name: str) -> Any:
    return _validator(load(name))


def unregistered_kinds(document: Any) -> Iterator[str]:
    """Rows of a results document whose kind the runner that wrote them did not know, as
    messages like the schema's. The runner records its kinds, built-in and registered, in
    `run.kinds`; a schema cannot say "one of the kinds named elsewhere in the document", so the
    rows are checked against them here. A document without `run.kinds` (an older runner's, or
    one `meshgate import` made of another tool's results) has nothing to check against. An
    error row for a case the runner never described has the kind ""."""
    run = document.get("run") if isinstance(document, dict) else None
    kinds = run.get("kinds") if isinstance(run, dict) else None
    cases = document.get("cases") if isinstance(document, dict) else None
    if not isinstance(kinds, list) or not isinstance(cases, list):
        return
    for i, row in enumerate(cases):
        kind = row.get("kind") if isinstance(row, dict) else None
        if isinstance(kind, str) and kind and kind not in kinds:
            yield (f"$.cases[{i}].kind: {_describe(kind)} is not one of the kinds the runner "
                   f"registered (run.kinds: {json.dumps(kinds)})")


def check(document: Any, name: str, where: str | os.PathLike = "") -> None:
    """Raises SchemaError listing (up to 10) violations of schema `name` by `document`; for
    results-1, rows of kinds the runner did not register (unregistered_kinds) too."""
    validator = _shipped_validator(name)
    found = [] if validator.is_valid(document) else list(_messages(validator, document))
    if name == "results-1":
        found += unregistered_kinds(document)
    if found:
        shown = "\n  ".join(found[:10]) + ("\n  ..." if len(found) > 10 else "")
        raise SchemaError(f"{where or 'document'}: does not match {name}.schema.json:\n  {shown}")


def check_if_asked(document: Any, name: str, where: str | os.PathLike) -> None:
    """check() when MESHGATE_CHECK_SCHEMA is set (the test suite sets it), else nothing."""
    if os.environ.get(CHECK_ENV, "") not in ("", "0"):
        check(document, name, where)


def main(argv: list[str] | None = None) -> int:
    """`python3 -m meshgate.schema NAME FILE...`: validates JSON files (exit 1 on a violation, 2
    without jsonschema)."""
    parser = argparse.ArgumentParser(prog="python3 -m meshgate.schema",
                                     description="Validate JSON files against a shipped schema.")
    parser.add_argument("name", choices=NAMES, help="which schema")
    parser.add_argument("files", nargs="+", metavar="FILE", help="JSON files to validate")
    args = parser.parse_args(argv)
    code = 0
    for file in args.files:
        try:
            check(jsonfile.read(Path(file), expect=None), args.name, file)
        except ValidatorMissing as e:
            print(f"python3 -m meshgate.schema: {e}", file=sys.stderr)
            return 2
        except (jsonfile.JsonFileError, SchemaError) as e:
            print(e, file=sys.stderr)
            code = 1
    return code


if __name__ == "__main__":
    sys.exit(main())
