"""The flags of the command line: the library fields they set, and the reading of their values.

The library names the field or parameter an error is about (``layout.parallel.tensor``), and a
name in backticks inside a message is another one (``needs `layout.parallel.tensor` > 1``).
:func:`cli_text` writes each as the flag that sets it, where the command has that flag; a key
ending in ``*`` also stands for the parts of its value (``shrink.layers``, ``partition[2]``).
"""

from __future__ import annotations

import argparse
import re

from ppsolve.errors import InputError, PpsolveError

FLAGS = {
    # the cost model (ppsolve problem)
    "layout.parallel.tensor": "--tensor-parallel",
    "layout.parallel.context": "--context-parallel",
    "layout.parallel.data": "--data-parallel",
    "layout.parallel.sharding": "--optimizer-sharding",
    "layout.parallel.sequence": "--sequence-parallel",
    "layout.capacity": "--capacity",
    "layout.placement": "--placement",
    "layout.backward": "--backward",
    "recompute": "--recompute",
    "tokens_per_microbatch": "--tokens-per-microbatch",
    "split_documents": "--split-documents",
    "micro_batch_size": "--micro-batch-size",
    "documents": "--documents",
    "gpu": "--gpu",
    "hardware": "--hardware",
    "shrink*": "--shrink",
    "partition*": "--partition",
    # the executor (ppsolve run, ppsolve profile)
    "model": "--model",
    "runtime": "--runtime",
    "steps": "--steps",
    "device": "--device",
    "placement": "--placement",
    "lengths.tokens": "--microbatch-tokens",
    "lengths": "--lengths",
    # export and the studies
    "exporter": "--to",
    "format": "--format",
    "capacities": "--capacities",
}

_NAMED = re.compile(r"`([\w.\[\]-]+)`")


def flag_of(field: str, options: set[str]) -> str | None:
    """The flag that sets ``field`` (with the rest of a part's name: ``--shrink.layers``), or None when the
    table has none or the command has no such option."""
    for key, flag in FLAGS.items():
        base = key.rstrip("*")
        rest = field[len(base):]
        if field.startswith(base) and (rest == "" or key.endswith("*") and rest[0] in ".["):
            return flag + rest if flag in options else None
    return None


def positive_number(text: str, flag: str, expected: str) -> float:
    """``text`` as a number > 0, or an InputError for ``flag`` (``expected`` says what it must be)."""
    try:
        value = float(text)
    except ValueError:
        raise InputError(flag, f"must be {expected}, got {text!r}") from None
    if not value > 0:
        raise InputError(flag, f"must be > 0, got {text}")
    return value


def cli_text(error: PpsolveError, parser: argparse.ArgumentParser) -> str:
    """``error`` as the command line says it: fields and backticked names written as flags."""
    options = {s for action in parser._actions for s in action.option_strings}
    text = str(error)
    if isinstance(error, InputError) and error.field:
        text = f"{flag_of(error.field, options) or error.field}: {error.message}"
    return _NAMED.sub(lambda m: flag_of(m.group(1), options) or m.group(0), text)
