"""Units of the files ppsolve writes, and plausibility warnings on a problem's figures.

The contract leaves units to the user (one time unit, one memory unit). Every
problem file ppsolve writes (``ppsolve problem``, ``ppsolve profile``) uses
milliseconds and GiB and names them in its ``x-units`` annotation, which
``Problem.units`` reads for reports and plot axes.

The warnings catch figures in the wrong unit, which the contract cannot refuse:
a capacity more than 10^4 activations (bytes beside GiB), stage times (F + B + W)
differing more than 100 times, forwards and backwards differing more than 100 times
in all (seconds beside ms), a capacity above the GPU's memory. They are
warnings (stderr), never errors: a problem may be odd on purpose.
"""

from __future__ import annotations

import sys
from typing import TextIO

UNITS_ANNOTATION = "x-units"
TIME_UNIT, MEMORY_UNIT = "ms", "GiB"
MAX_CAPACITY_IN_ACTIVATIONS = 1e4
MAX_TIME_RATIO = 100.0


def file_units() -> dict:
    """The ``x-units`` annotation of every problem file ppsolve writes."""
    return {"time": TIME_UNIT, "memory": MEMORY_UNIT, "bandwidth": f"{MEMORY_UNIT}/{TIME_UNIT}"}


def plausibility_warnings(problem, gpu_memory: float | None = None) -> list[str]:
    """Warnings about figures that look like the wrong unit (see the module doc). ``gpu_memory``:
    the GPU's memory in the problem's memory unit, when known (the cost model's files record it)."""
    time_unit, memory_unit = problem.units
    out = []
    S = problem.num_stages  # per-microbatch costs: each stage's largest microbatch
    largest = max((problem.activation.high(s) for s in range(S)), default=0.0)
    caps = [c for c in problem.capacity if c is not None]
    if caps and largest > 0 and max(caps) > MAX_CAPACITY_IN_ACTIVATIONS * largest:
        out.append(f"memory.capacity: {max(caps):g} is more than {MAX_CAPACITY_IN_ACTIVATIONS:g} times the largest "
                   f"activation ({largest:g}): is it in the activations' unit ({memory_unit})?")
    if gpu_memory is None:
        gpu_memory = (problem.annotations.get("x-costmodel") or {}).get("memory", {}).get("gpu_memory")
    if caps and gpu_memory is not None and max(caps) > gpu_memory:
        out.append(f"memory.capacity: {max(caps):g} {memory_unit} is above the GPU's memory ({gpu_memory:g} "
                   f"{memory_unit})")
    stage_times = [(problem.forward.high(s) + problem.backward_input.high(s) + problem.backward_weight.high(s), s)
                   for s in range(S)]
    busy = [x for x in stage_times if x[0] > 0]
    if busy and max(busy)[0] > MAX_TIME_RATIO * min(busy)[0]:
        (high, a), (low, b) = max(busy), min(busy)
        out.append(f"time: stage {a}'s F + B + W ({high:g}) is {high / low:.0f} times stage {b}'s ({low:g}): are "
                   f"all times in one unit ({time_unit})?")
    forward = sum(problem.forward.high(s) for s in range(S))
    backward = sum(problem.backward_input.high(s) + problem.backward_weight.high(s) for s in range(S))
    if forward > 0 and backward > 0 and max(forward / backward, backward / forward) > MAX_TIME_RATIO:
        out.append(f"time: the forwards ({forward:g} in all) and the backwards ({backward:g}) differ "
                   f"{max(forward / backward, backward / forward):.0f} times: are all times in one unit "
                   f"({time_unit})?")
    return out


def warn(problem, gpu_memory: float | None = None, stream: TextIO | None = None) -> None:
    """Print :func:`plausibility_warnings` on stderr, one line each."""
    for line in plausibility_warnings(problem, gpu_memory):
        print(f"warning: {line}", file=stream or sys.stderr)
