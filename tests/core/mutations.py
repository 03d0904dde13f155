"""Hypothesis strategies that damage ppsolve's bundled problem and schedule files.

Shared by the CI fuzz test (tests/core/test_fuzz.py) and the longer campaign
(benchmarks/reports/fuzz_campaign.py). A mutation picks a place in the JSON tree and
changes its type, puts in NaN/inf or huge and tiny numbers, changes a list's
length, adds an unknown (often misspelt) field, drops or duplicates an op,
nests a value deeply, removes the offload block, or damages the text itself; or it
changes the problem as a whole: tiny and huge numbers together, control characters,
``$`` and lone surrogates in names and units, a placement that leaves a device
without a stage, every time 0, a capacity below one activation, many duplicated ops.
"""

from __future__ import annotations

import copy
import json
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
TINY = st.sampled_from([5e-324, 1e-300, 1e-13, 1e-12, 1e-9])
HUGE = st.sampled_from([1e12, 8.6e10, 1e11, 999999999999.0])
ODD_TEXT = st.one_of(st.sampled_from(["$x^2$", "$$", "a\nb", "\x00\x1b[31m", "\ud800", "tab\there", "\u202e$"]),
                     st.text(alphabet=st.characters(blacklist_categories=()), max_size=6))
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
                                 "duplicate_op", "drop_op", "no_offload", "whole_problem", "whole_problem"]))
    if kind == "whole_problem":
        return draw(problem_change(data))
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


def _problem_of(data: Any) -> dict | None:
    """The problem part of a problem or schedule file, when it is still an object."""
    problem = data.get("problem", data) if isinstance(data, dict) else None
    return problem if isinstance(problem, dict) else None


def _numbers(value: Any, path: tuple = ()) -> list[tuple]:
    """Paths of the numbers in a tree (not booleans)."""
    if isinstance(value, dict):
        return [p for key, item in value.items() for p in _numbers(item, (*path, key))]
    if isinstance(value, list):
        return [p for index, item in enumerate(value) for p in _numbers(item, (*path, index))]
    return [path] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


@st.composite
def problem_change(draw, data: Any) -> Any:
    """A change of the problem as a whole (``data``: a copy, changed in place and returned)."""
    problem = _problem_of(data)
    if problem is None:
        return data
    kind = draw(st.sampled_from(["magnitudes", "odd_text", "empty_device", "zero_times", "low_capacity",
                                 "many_duplicates"]))
    time, memory = problem.get("time"), problem.get("memory")
    if kind == "magnitudes":
        numbers = [p for p in _numbers(problem) if p[0] in ("time", "memory", "offload", "recompute")]
        for value in (draw(TINY), draw(HUGE)):
            if numbers:
                parent, key = _parent(problem, draw(st.sampled_from(numbers)))
                parent[key] = value
    elif kind == "odd_text":
        where = draw(st.sampled_from(["name", "x-units", "key", "op_kind", "method"]))
        text = draw(ODD_TEXT)
        if where == "name":
            problem["name"] = text
        elif where == "x-units":
            problem["x-units"] = {"time": text, "memory": draw(ODD_TEXT)}
        elif where == "key" and isinstance(time, dict):
            time[text] = 1
        elif where == "op_kind" and isinstance(data.get("ops"), list) and data["ops"] \
                and isinstance(data["ops"][0], dict):
            data["ops"][0]["kind"] = text
        elif where == "method" and isinstance(data.get("method"), dict):
            data["method"]["name"] = text
    elif kind == "empty_device":
        devices, chunks = problem.get("devices"), problem.get("chunks", 1)
        if isinstance(devices, int) and isinstance(chunks, int) and 2 <= devices <= 64 and 1 <= chunks <= 8:
            problem["placement"] = [1 + s % (devices - 1) for s in range(devices * chunks)]
    elif kind == "zero_times" and isinstance(time, dict):
        for key in ("forward", "backward_input", "backward_weight", "p2p"):
            time[key] = 0
    elif kind == "low_capacity" and isinstance(memory, dict):
        activation = memory.get("activation")
        least = min(activation) if isinstance(activation, list) and activation else activation
        if isinstance(least, (int, float)) and not isinstance(least, bool):
            memory["capacity"] = least * draw(st.sampled_from([0.0, 0.5, 0.999]))
    elif kind == "many_duplicates" and isinstance(data.get("ops"), list) and data["ops"]:
        ops = data["ops"]
        start = draw(st.integers(0, len(ops) - 1))
        data["ops"] = ops + copy.deepcopy(ops[start:start + draw(st.integers(1, len(ops)))])
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
