"""JSON Schemas of the problem and schedule files, and validation against them."""

from __future__ import annotations

import difflib
import json
import math
from functools import lru_cache
from importlib import resources
from typing import Any

import fastjsonschema
import jsonschema

from ppsolve.errors import InputError
from ppsolve.limits import MAX_DEPTH, MAX_MAGNITUDE, MIN_MAGNITUDE

SCHEMA_NAMES = ("problem", "schedule", "transformer", "hardware", "gpus")


@lru_cache(maxsize=None)
def load_schema(name: str) -> dict:
    """The JSON Schema of a file format (``SCHEMA_NAMES``)."""
    if name not in SCHEMA_NAMES:
        raise ValueError(f"unknown schema {name!r}; choose from {', '.join(SCHEMA_NAMES)}")
    text = resources.files(__package__).joinpath(f"{name}.schema.json").read_text(encoding="utf-8")
    return json.loads(text)


@lru_cache(maxsize=None)
def _validator(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(load_schema(name))


@lru_cache(maxsize=None)
def _fast_validator(name: str):
    """The same schema compiled to Python by fastjsonschema: about 50 times faster on the ops of a large
    schedule. It only says whether a file passes; the messages come from jsonschema."""
    return fastjsonschema.compile(load_schema(name), use_default=False)  # never write defaults into the file


def field_path(prefix: str, path: Any) -> str:
    """Render a JSON path as ``problem.time.forward[3]``."""
    out = prefix
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _show(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, float) or math.isfinite(value) else str(value)


def _describe(error: jsonschema.ValidationError, prefix: str) -> InputError:
    """Turn one jsonschema error into a one-line InputError naming the field."""
    where = field_path(prefix, error.absolute_path)
    value = error.instance
    kind = error.validator
    if kind == "required":
        missing = error.message.split("'")[1]
        return InputError(field_path(where, [missing]), "is required")
    if kind == "additionalProperties":
        extra = sorted(set(value) - set(error.schema.get("properties", {})))
        extra = [e for e in extra if not e.startswith("x-")]
        name = extra[0] if extra else "?"
        properties = error.schema.get("properties", {})
        known = sorted(properties)
        # a field's other names (another framework's config key) first, then spelling
        close = [k for k in known if name in properties[k].get("x-synonyms", ())] or \
            difflib.get_close_matches(name, known, n=1)
        hint = (f"did you mean '{close[0]}'?" if close
                else f"expected one of: {', '.join(known)}; put annotations under an 'x-' name")
        return InputError(field_path(where, [name]), f"unknown field ({hint})")
    if kind == "type":
        wanted = error.validator_value
        wanted = " or ".join(wanted) if isinstance(wanted, list) else wanted
        return InputError(where, f"must be {wanted}, got {_json_type(value)}")
    if kind == "minimum":
        return InputError(where, f"must be >= {error.validator_value}, got {_show(value)}")
    if kind == "maximum":
        return InputError(where, f"must be <= {error.validator_value}, got {_show(value)}")
    if kind == "exclusiveMinimum":
        return InputError(where, f"must be > {error.validator_value}, got {_show(value)}")
    if kind == "const":
        return InputError(where, f"must be {_show(error.validator_value)}, got {_show(value)}")
    if kind == "enum":
        options = ", ".join(_show(v) for v in error.validator_value)
        return InputError(where, f"must be one of {options}, got {_show(value)}")
    if kind == "minItems":
        return InputError(where, f"must have at least {error.validator_value} entries")
    return InputError(where, error.message)


def validate(instance: Any, name: str, prefix: str, largest: float = MAX_MAGNITUDE,
             smallest: float = MIN_MAGNITUDE) -> None:
    """Raise InputError for the first violation of schema ``name`` in ``instance`` (numbers: see
    :func:`check_values`)."""
    if not isinstance(instance, dict):
        raise InputError(prefix, f"must be a JSON object, got {_json_type(instance)}")
    check_values(instance, prefix, largest, smallest)
    try:
        _fast_validator(name)(instance)
        return
    except fastjsonschema.JsonSchemaException:
        pass  # jsonschema finds the violation and names it (or, where the two differ, accepts)
    errors = list(_validator(name).iter_errors(instance))
    if errors:
        # Report the shallowest, then an unknown field (the likely cause of a missing one: a typo),
        # then the first in document order: the root cause.
        # A wrong format tag comes first: the file is probably not a ppsolve file at all.
        errors.sort(key=lambda e: (not _about_format(e), len(e.absolute_path),
                                   e.validator != "additionalProperties", [str(p) for p in e.absolute_path]))
        raise _describe(errors[0], prefix)


def _about_format(error: jsonschema.ValidationError) -> bool:
    path = list(error.absolute_path)
    return path == ["format"] or (not path and error.validator == "required" and "'format'" in error.message)


def check_values(value: Any, where: str, largest: float = MAX_MAGNITUDE, smallest: float = 0.0) -> None:
    """Refuse nesting deeper than MAX_DEPTH and numbers that are not finite, pass ``largest`` in magnitude,
    or are non-zero and below ``smallest`` in magnitude.

    Iterative, so a deeply nested file cannot exhaust the interpreter's stack; runs
    before the schema check, which would recurse into it. Only containers go on the
    stack: the numbers of a container are checked where they stand (a schedule's ops
    are most of a large file).
    """
    _check_number(value, where, (), largest, smallest)
    if not isinstance(value, (dict, list)):
        return
    stack: list[tuple[Any, tuple, int]] = [(value, (), 0)]
    while stack:
        item, path, depth = stack.pop()
        if depth >= MAX_DEPTH:
            raise InputError(field_path(where, path), f"is nested deeper than {MAX_DEPTH} levels")
        pairs = item.items() if isinstance(item, dict) else enumerate(item)
        children = []
        for key, child in pairs:
            if isinstance(child, (dict, list)):
                children.append((child, (*path, key), depth + 1))
            elif isinstance(child, (int, float)) and not isinstance(child, bool) and (
                    not -largest <= child <= largest or (child and -smallest < child < smallest)):
                _check_number(child, where, (*path, key), largest, smallest)
        stack.extend(reversed(children))


def _check_number(item: Any, where: str, path: tuple, largest: float, smallest: float) -> None:
    """The error for a number that is not finite or out of ``smallest..largest`` in magnitude (and not
    0), nothing for anything else."""
    if isinstance(item, bool) or not isinstance(item, (int, float)):
        return
    if isinstance(item, float) and not math.isfinite(item):
        raise InputError(field_path(where, path), f"must be a finite number, got {item}")
    if abs(item) > largest:
        raise InputError(field_path(where, path),
                         f"must be at most {largest:g} in magnitude (ppsolve's limit), got {_big(item)}")
    if item and abs(item) < smallest:
        raise InputError(field_path(where, path),
                         f"must be 0 or at least {smallest:g} in magnitude (ppsolve's limit), got {item:g}")


def _big(number: int | float) -> str:
    """A huge number shown briefly (an int of thousands of digits is not printed whole)."""
    if isinstance(number, float):
        return f"{number:g}"
    digits = len(str(abs(number))) if number.bit_length() < 10_000 else None
    return f"an integer of {digits} digits" if digits else "an integer of more than 3000 digits"
