"""Interleaved 1F1B (Megatron's virtual pipeline), generalised to any m and v.

Device i holds stages ``c*d + i`` for chunks c = 0..v-1. Microbatches go in
groups of d (when d does not divide m, the remainder joins the first group, so
no group is shorter than d): a group runs chunk 0 for all its microbatches,
then chunk 1, and so on; backwards visit the chunks in reverse. Device i warms
up with ``2(d - 1 - i) + (v - 1) g`` forwards (Megatron's count, g the size of
the first group: d when d divides m; capped at m v), then alternates one
forward and one backward, then drains. With split backward, W runs right
after its B.
"""

from __future__ import annotations

import time

from ppsolve.baselines.common import Requirement, finish, with_w_after_b
from ppsolve.method_types import RunOptions
from ppsolve.ops import B, F, Op
from ppsolve.problem import Problem
from ppsolve.schedule import Schedule

INTERLEAVED = Requirement(placements=("interleaved", "linear"))


def group_sizes(m: int, group: int) -> list[int]:
    """Microbatch groups of ``group``; a remainder joins the first group.

    A group shorter than d would make its later chunks wait for the loop through
    the devices; the largest group first keeps the warm-up, sized on it, enough
    for every later group.
    """
    if m <= group:
        return [m]
    sizes = [group] * (m // group)
    sizes[0] += m % group
    return sizes


def chunk_sequence(m: int, group: int, v: int, reverse: bool) -> list[tuple[int, int]]:
    """(chunk, microbatch) pairs in Megatron's grouped order."""
    out = []
    base = 0
    for size in group_sizes(m, group):
        chunks = range(v - 1, -1, -1) if reverse else range(v)
        for c in chunks:
            out += [(c, base + k) for k in range(size)]
        base += size
    return out


def interleaved_orders(problem: Problem, warmup, group: int | None = None) -> list[list[Op]]:
    """Per-device orders, microbatch groups of ``group`` (default d), ``warmup(i)`` forwards first."""
    d, m, v = problem.devices, problem.microbatches, problem.chunks
    group = group or d
    forwards = chunk_sequence(m, group, v, reverse=False)
    backwards = chunk_sequence(m, group, v, reverse=True)
    total = m * v
    orders = []
    for i in range(d):
        warm = min(warmup(i), total)
        order: list[Op] = [F(c * d + i, j) for c, j in forwards[:warm]]
        for k in range(total - warm):
            c, j = forwards[warm + k]
            cb, jb = backwards[k]
            order += [F(c * d + i, j), B(cb * d + i, jb)]
        order += [B(c * d + i, j) for c, j in backwards[total - warm:]]
        orders.append(order)
    return orders


def megatron_warmup(problem: Problem):
    """Megatron's warm-up count, its chunk term taken over the first (possibly larger) group."""
    d, v = problem.devices, problem.chunks
    first = group_sizes(problem.microbatches, d)[0]
    return lambda i: 2 * (d - 1 - i) + (v - 1) * first


def build_interleaved(problem: Problem, options: RunOptions) -> Schedule:
    started = time.perf_counter()
    orders = [with_w_after_b(problem, o) for o in interleaved_orders(problem, megatron_warmup(problem))]
    return finish(problem, orders, "interleaved-1f1b", options, started)
