"""Hypothesis strategies that damage ppsolve's bundled problem and schedule files.

Shared by the CI fuzz test (tests/core/test_fuzz.py) and the longer campaign
(benchmarks/reports/fuzz_campaign.py). A mutation picks a place in the JSON tree and
changes its type, puts in NaN/inf or huge and tiny numbers, changes a list's
length, adds an unknown (often misspelt) field, drops or duplicates an op,
nests a value deeply, removes the offload block, or damages the text itself.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from tests.helpers import ROOT

PROBLEM_FILES = ("instances/example.json", "instances/linear-fused-uneven-p2p-6x12.json",
                 "instances/interleaved-v2-split-4x8.json", "instances/interleaved-offload-shared-8x16.json")
SCHEDULE_FILES = ("docs/example/example-cpsat.json",)

NUMBERS = st.one_of(
    st.integers(-3, 20),
    st.integers(-10 ** 20, 10 ** 20),
    st.sampled_from([10 ** 15, 10 ** 16, 10 ** 19, 10 ** 308, 10 ** 400, 2 ** 63, 10 ** 9, 10 ** 6]),
    st.sampled_from([1e308, -1e308, 5e-324, 1e-300, 1e-12, 1e15, 1e16, 0.5, -0.0]),
    st.floats(allow_nan=True, allow_infinity=True),
)
VALUES = st.one_of(NUMBERS, st.text(max_size=6), st.none(), st.booleans(),
                   st.lists(st.integers(-2, 9), max_size=9), st.just({}), st.just([]))


def load(relative: str) -> Any:
    return json.loads((ROOT / relative).read_text())


def _paths(value: Any, path: tuple = ()) -> list[tuple]:
    """Every place in the tree (ops of a schedule: only the first few, to keep it quick)."""
    out = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value[:6]):
            out += _paths(item, (*path, index))
    return out


def _parent(data: Any, path: tuple) -> tuple[Any, Any]:
    for part in path[:-1]:
        data = data[part]
    return data, path[-1]


@st.composite
def mutation(draw, data: Any) -> Any:
    """One damaging change applied to a copy of ``data``."""
    data = copy.deepcopy(data)
    path = draw(st.sampled_from([p for p in _paths(data) if p]))
    parent, key = _parent(data, path)
    kind = draw(st.sampled_from(["value", "value", "value", "delete", "unknown", "length", "nest",
                                 "duplicate_op", "drop_op", "no_offload"]))
    if kind == "value":
        parent[key] = draw(VALUES)
    elif kind == "delete":
        del parent[key]
    elif kind == "unknown" and isinstance(parent, dict):
        name = draw(st.one_of(st.just(str(key)[:-1] + "x"), st.just(str(key)[1:]), st.text(min_size=1, max_size=5)))
        parent[name] = draw(VALUES)
    elif kind == "length":
        target = parent[key]
        if isinstance(target, list) and target:
            parent[key] = target[:-1] if draw(st.booleans()) else target + target[-1:]
        elif isinstance(target, (int, float)) and not isinstance(target, bool):
            parent[key] = [target] * draw(st.integers(0, 40))
    elif kind == "nest":
        value = parent[key]
        for _ in range(draw(st.integers(1, 60))):
            value = [value]
        parent[key] = value
    elif kind in ("duplicate_op", "drop_op") and isinstance(data.get("ops"), list) and data["ops"]:
        index = draw(st.integers(0, len(data["ops"]) - 1))
        if kind == "drop_op":
            del data["ops"][index]
        else:
            data["ops"].insert(index, copy.deepcopy(data["ops"][index]))
    elif kind == "no_offload":
        problem = data.get("problem", data)
        if isinstance(problem, dict):
            problem.pop("offload", None)
    return data


@st.composite
def damaged_text(draw, data: Any) -> str:
    """The file's text after 1-3 mutations, sometimes with its text cut or a character replaced."""
    for _ in range(draw(st.integers(1, 3))):
        data = draw(mutation(data))
    text = json.dumps(data)  # NaN/Infinity as JSON extensions: the reader must name them
    damage = draw(st.sampled_from(["none", "none", "none", "cut", "char"]))
    if damage == "cut":
        text = text[: draw(st.integers(0, len(text)))]
    elif damage == "char" and text:
        at = draw(st.integers(0, len(text) - 1))
        text = text[:at] + draw(st.sampled_from(list('{}[]",:0e-. x'))) + text[at + 1:]
    return text
