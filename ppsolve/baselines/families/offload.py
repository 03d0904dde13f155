"""PipeOffload's schedules: grouped interleaving (GIS, GIS-H), its offload (PO-H, PO-F), 1F1B full offload.

GIS follows the reference's group-interleaved building block. With microbatch
groups of g (the last one may be short) and chunk c = s // d, device i places
each pass at a position (in units of one pass):

* F(chunk c, microbatch j = r g + k): ``3 (g c + k + g v r) + i``
* B(chunk v-1-c, j): ``3 (g (v-1) + (d-1-i) + g c + k + g v r) + i + 1``; W one after its B

and runs them in that order (groups of g spaced by g; the reference also spaces
groups of 1 by a larger K, with a further delay of every (v / gcd(v, K))-th chunk).
Device i thus warms up with ``(v-1) g + (d-1-i)`` forwards, then runs F, B, W in
turn, holding ``(v-1) g + d - i`` stage activations at most. GIS takes g = d
(``d v`` on device 0, as 1F1B); GIS-H the least group the reference allows,
``ceil(d/2)`` raised until one group's F+B+W on a device covers a microbatch's
forward (or backward) through one chunk of every device (``g (v-1) + d`` on device 0).

PO-H offloads the first ``max(1, v // 2)`` chunks of groups of 1 spaced by GIS-H's g
(the reference's offload script), PO-F every chunk of GIS,
with the reference's offload pass (:mod:`ppsolve.baselines.engines.offload_pass`).
``1f1b-offload`` is PipeOffload's Figure 1: 1F1B, every activation but the last
stage's to host right after its F and back before its B, forwards waiting for
the offloads before them. Where a plan breaks the memory cap, stricter forms of the
same offloads are tried (``memory_policy`` in the schedule's parameters).
"""

from __future__ import annotations

import math
import time

from ppsolve.baselines.common import Requirement, finish
from ppsolve.baselines.engines.offload_pass import Plan, fitted, full_offload_plan, reference_plan
from ppsolve.baselines.families.onef1b import onef1b_orders
from ppsolve.method_types import RunOptions
from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem
from ppsolve.schedule import Schedule

INTERLEAVED_SPLIT = Requirement(placements=("interleaved", "linear"), backward=("split",))
INTERLEAVED_SPLIT_OFFLOAD = Requirement(placements=("interleaved", "linear"), backward=("split",), offload=True)
LINEAR_OFFLOAD = Requirement(placements=("linear",), offload=True)


def least_group(problem: Problem) -> int:
    """The reference's least group: ceil(d/2), raised until max(F+B+W) * g covers a chunk's F (or B) sum
    (each the largest over microbatches)."""
    d, v, m = problem.devices, problem.chunks, problem.microbatches
    fbw = max(sum(problem.duration(kind, s, j) for kind in problem.kinds)
              for s in range(problem.num_stages) for j in range(m))
    chunk_sum = max(sum(problem.duration(kind, c * d + i, j) for i in range(d))
                    for kind in (OpKind.F, OpKind.B) for c in range(v) for j in range(m))
    group = (d + 1) // 2
    while group < d and fbw * group < chunk_sum:
        group += 1
    return group


def gis_orders(problem: Problem, group: int, spacing: int) -> list[list[Op]]:
    """Per-device orders of the reference's building block: microbatch groups of ``group``,
    chunk c's forwards ``spacing`` passes after chunk c-1's (the module docstring's positions)."""
    d, v, m = problem.devices, problem.chunks, problem.microbatches
    g, K = group, spacing
    period = v // math.gcd(v, K // g)
    orders = []
    for i in range(d):
        last_f = 3 * K * (v - 1) + 3 * g * ((v - 1) // period) + i
        placed: list[tuple[int, Op]] = []
        for j in range(m):
            r, k = divmod(j, g)
            for c in range(v):
                offset = 3 * (K * c + k + g * (c // period) + g * v * r)
                placed.append((offset + i, Op(OpKind.F, c * d + i, j)))
                b = last_f + 3 * (d - 1 - i) + 1 + offset
                stage = (v - 1 - c) * d + i
                placed.append((b, Op(OpKind.B, stage, j)))
                placed.append((b + 1, Op(OpKind.W, stage, j)))
        placed.sort()
        orders.append([op for _, op in placed])
    return orders


def gis_shape(problem: Problem, half: bool, offload: bool = False) -> tuple[int, int]:
    """(group, spacing). GIS: groups of d. GIS-H: groups of the least group g (Table 1's g(v-1) + d).
    PO-H: groups of 1 spaced by g, the reference's offload script default (smoother per chunk)."""
    if not half:
        return problem.devices, problem.devices
    g = least_group(problem)
    return (1, g) if offload else (g, g)


def offload_chunks(problem: Problem, full: bool) -> int:
    return problem.chunks if full else max(1, problem.chunks // 2)


def _finish_plan(problem: Problem, plan: Plan, orders: list[list[Op]], stages, name: str, options: RunOptions,
                 started: float, params: dict) -> Schedule:
    plan, ops = fitted(problem, plan, orders, stages)
    params = dict(params, memory_policy=plan.policy, offloaded_activations=plan.offloaded)
    return finish(problem, plan.orders, name, options, started, amounts=plan.amounts, waits=plan.waits,
                  params=params, ops=ops)


def _build_gis(name: str, half: bool):
    def build(problem: Problem, options: RunOptions) -> Schedule:
        started = time.perf_counter()
        group, spacing = gis_shape(problem, half)
        return finish(problem, gis_orders(problem, group, spacing), name, options, started,
                      params={"group": group, "spacing": spacing})
    build.__name__ = f"build_{name.replace('-', '_')}"
    return build


def _build_po(name: str, full: bool):
    def build(problem: Problem, options: RunOptions) -> Schedule:
        started = time.perf_counter()
        group, spacing = gis_shape(problem, half=not full, offload=True)
        chunks = offload_chunks(problem, full)
        stages = [s for s in range(problem.num_stages) if s // problem.devices < chunks]
        orders = gis_orders(problem, group, spacing)
        plan = reference_plan(problem, orders, stages)
        return _finish_plan(problem, plan, orders, stages, name, options, started,
                            {"group": group, "spacing": spacing, "offload_chunks": chunks})
    build.__name__ = f"build_{name.replace('-', '_')}"
    return build


def build_1f1b_offload(problem: Problem, options: RunOptions) -> Schedule:
    started = time.perf_counter()
    orders = onef1b_orders(problem)
    return _finish_plan(problem, full_offload_plan(problem, orders), orders, None, "1f1b-offload", options,
                        started, {})


build_gis = _build_gis("gis", half=False)
build_gis_h = _build_gis("gis-h", half=True)
build_po_h = _build_po("po-h", full=False)
build_po_f = _build_po("po-f", full=True)
