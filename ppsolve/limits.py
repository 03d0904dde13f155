"""The largest inputs ppsolve accepts, checked before any work is done.

Every command answers an input beyond these at once with one error line that
names the limit, instead of running for minutes or exhausting memory. They
are documented in docs/limits.md; change them here only.
"""

from __future__ import annotations

from typing import Any

from ppsolve.errors import InputError

MAX_DEVICES = 1024
"""Pipeline ranks ``devices``."""
MAX_MICROBATCHES = 16384
"""Microbatches ``microbatches``."""
MAX_CHUNKS = 64
"""Stages per device ``chunks``."""
MAX_OPS = 100_000
"""Ops of one iteration: compute ops ``devices * chunks * microbatches * (3 split, 2 fused)``; a schedule
file may hold up to twice as many (an OFFLOAD and a RELOAD per forward at most)."""
MAX_MAGNITUDE = 1e12
"""The largest absolute value of any number in a file (times, memory, bandwidth, start and end), and of a
transfer's duration (amount / bandwidth): MAX_OPS ops this long still sum far inside a 64-bit integer,
the solver's domain."""
MIN_MAGNITUDE = 1e-12
"""The smallest absolute value of a non-zero number in a problem: with MAX_MAGNITUDE, every ratio and
product of two of its numbers stays within 1e-24..1e24, far inside a float's range (5e-324 or 1e-300
beside 1e12 would overflow a quotient to infinity)."""
MAX_SCHEDULE_MAGNITUDE = 1e18
"""The largest absolute value of a number in a schedule file outside its problem (start, end, metrics,
bounds): 2 * MAX_OPS ops and as many latencies, each at most MAX_MAGNITUDE, end by 4e17, so every
schedule ppsolve writes for a problem it accepts is one it reads back."""
MAX_TIME_RANGE = 1e9
"""The longest duration in a problem (an op, the p2p latency, moving a stage's whole offloadable share)
over its shortest non-zero one: sums of 100 000 ops still resolve the shortest to about 1e-2 of itself
in 64-bit floats (a reload of 1e-12 beside forwards of 1e12 vanished in them and deadlocked the runtime)."""
MAX_SECONDS = 1e9
"""The longest time limit a command takes (``--time-limit``, ``--split``), in seconds (31 years): a limit
is written into the schedule file, so it stays a number ppsolve reads back."""
MAX_DEPTH = 32
"""The deepest nesting of lists and objects in a file."""
MAX_DOCUMENTS = 100_000
"""Documents of one batch (``ppsolve problem --documents``): packing them takes about a second."""

COUNT_LIMITS = {"devices": MAX_DEVICES, "microbatches": MAX_MICROBATCHES, "chunks": MAX_CHUNKS}


def check_counts(data: dict, where: str) -> None:
    """Refuse a problem whose devices, microbatches, chunks or op count pass the limits.

    Called after the schema check (so the counts are integers >= 1) and before anything is built.
    """
    for key, limit in COUNT_LIMITS.items():
        value = data.get(key, 1)
        if value > limit:
            raise InputError(f"{where}.{key}", f"must be <= {limit} (ppsolve's limit), got {_short(value)}")
    ops = compute_op_count(data)
    if ops > MAX_OPS:
        raise InputError(where, f"has {ops} compute ops (devices x chunks x microbatches x "
                                f"{_kinds(data)}); ppsolve's limit is {MAX_OPS}")


def check_documents(count: int, where: str) -> None:
    """Refuse a batch of more than MAX_DOCUMENTS documents."""
    if count > MAX_DOCUMENTS:
        raise InputError(where, f"has {count} documents; ppsolve's limit is {MAX_DOCUMENTS}")


def check_transfer_time(amount: float, bandwidth: float, where: str) -> None:
    """Refuse a bandwidth so small that moving ``amount`` would take longer than MAX_MAGNITUDE."""
    if amount / bandwidth > MAX_MAGNITUDE:
        raise InputError(where, f"too small: moving {amount:g} would take {amount / bandwidth:.3g}, beyond "
                                f"ppsolve's limit of {MAX_MAGNITUDE:g} per op")


def check_time_range(durations: list[tuple[float, str]], where: str) -> None:
    """Refuse durations (value, field) whose longest passes MAX_TIME_RANGE times the shortest non-zero one."""
    present = [(value, name) for value, name in durations if value > 0]
    if not present:
        return
    (short, short_at), (long, long_at) = min(present), max(present)
    if long > MAX_TIME_RANGE * short:
        raise InputError(where, f"durations span {short:g} ({short_at}) to {long:g} ({long_at}), beyond ppsolve's "
                                f"limit of {MAX_TIME_RANGE:g} between the shortest and the longest")


def check_seconds(value: float, where: str) -> None:
    """Refuse a time limit that is not > 0 and at most MAX_SECONDS (NaN included)."""
    if not 0 < value <= MAX_SECONDS:
        raise InputError(where, f"must be > 0 seconds and at most {MAX_SECONDS:g}, got {value:g}")


def compute_op_count(data: dict) -> int:
    """Compute ops of a (schema-valid) problem dict."""
    return data["devices"] * data.get("chunks", 1) * data["microbatches"] * _kinds(data)


def _kinds(data: dict) -> int:
    return 2 if data.get("backward", "split") == "fused" else 3


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 20 else f"{text[:8]}...({len(text)} digits)"
