"""PipeOffload's grouped interleaving (GIS, GIS-H) and its offload schedules (PO-H, PO-F).

GIS is interleaved 1F1B with split backward and a shorter warm-up: device i
runs ``(v - 1) g + (d - 1 - i)`` forwards before its first backward, g being the
size of the first microbatch group (groups of d for GIS; of ceil(d / 2) for
GIS-H, which halves the chunk term of the warm-up and so the activations in
flight; a remainder joins the first group). W runs right after its B.

PO-H and PO-F put PipeOffload's offload on top of GIS-H and GIS: PO-H moves the
activations of the first half of each device's chunks (the longest-lived), PO-F
those of every chunk but the last stage. Each OFFLOAD is issued right after
its F; each RELOAD as late as its B allows, i.e. after the last compute op that
still leaves enough compute before the B to hide the reload. An activation whose
F and B are too close to hide both transfers stays on the device. Transfers
use the device's real link lanes (a shared link serialises its devices).
"""

from __future__ import annotations

import time

from ppsolve.baselines.common import Requirement, finish, with_w_after_b
from ppsolve.baselines.interleaved import group_sizes, interleaved_orders
from ppsolve.methods import RunOptions
from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem
from ppsolve.schedule import Schedule

INTERLEAVED_SPLIT = Requirement(placements=("interleaved", "linear"), backward=("split",))
INTERLEAVED_SPLIT_OFFLOAD = Requirement(placements=("interleaved", "linear"), backward=("split",), offload=True)


def gis_orders(problem: Problem, group: int) -> list[list[Op]]:
    """Grouped interleaved orders with microbatch groups of ``group`` and the short warm-up."""
    d, v = problem.devices, problem.chunks
    first = group_sizes(problem.microbatches, group)[0]
    orders = interleaved_orders(problem, lambda i: (v - 1) * first + (d - 1 - i), group)
    return [with_w_after_b(problem, order) for order in orders]


def gis_group(problem: Problem, half: bool) -> int:
    d = problem.devices
    return max(1, (d + 1) // 2) if half else d


def add_offload(problem: Problem, orders: list[list[Op]], stages: set[int]) -> tuple[list[list[Op]], dict]:
    """Insert OFFLOAD right after each chosen F and RELOAD as late as its B allows."""
    amounts: dict[tuple[int, int], float] = {}
    durations = {kind: [problem.duration(kind, s) for s in range(problem.num_stages)] for kind in problem.kinds}
    _F, _B = OpKind.F, OpKind.B
    out = []
    for order in orders:
        compute = list(order)
        b_position = {(s, j): k for k, (kind, s, j) in enumerate(compute) if kind is _B}
        # cumulative compute time before each position
        before = [0.0]
        total = 0.0
        for kind, s, _ in compute:
            total += durations[kind][s]
            before.append(total)
        after_f: dict[int, Op] = {}
        before_op: dict[int, list[Op]] = {}
        for k_f, (kind, s, j) in enumerate(compute):
            if kind is not _F or s not in stages:
                continue
            amount = problem.max_offload(s)
            if amount <= 0:
                continue
            k_b = b_position[(s, j)]
            down = problem.duration(OpKind.OFFLOAD, s, amount)
            up = problem.duration(OpKind.RELOAD, s, amount)
            # compute between F's end and B's start must hide both transfers
            if before[k_b] - before[k_f + 1] < down + up:
                continue
            # reload issued after op k-1 ends: the latest k with compute k..b-1 >= up
            k = k_b
            while k > k_f + 1 and before[k_b] - before[k] < up:
                k -= 1
            if before[k_b] - before[k] < up or before[k] - before[k_f + 1] < down:
                continue
            amounts[(s, j)] = amount
            after_f[k_f] = Op(OpKind.OFFLOAD, s, j)
            before_op.setdefault(k, []).append(Op(OpKind.RELOAD, s, j))
        actions: list[Op] = []
        for k, op in enumerate(compute):
            if k in before_op:
                actions += before_op[k]
            actions.append(op)
            if k in after_f:
                actions.append(after_f[k])
        out.append(actions)
    return out, amounts


def offload_stages(problem: Problem, full: bool) -> set[int]:
    """Stages PO-F / PO-H move to host: every chunk, or the first half of each device's chunks."""
    last = problem.num_stages - 1
    chosen = set()
    for stages in problem.stages_of_device:
        keep = stages if full else stages[: max(1, len(stages) // 2)]
        chosen.update(s for s in keep if s != last)
    return chosen


def build_gis(problem: Problem, options: RunOptions) -> Schedule:
    started = time.perf_counter()
    group = gis_group(problem, half=False)
    return finish(problem, gis_orders(problem, group), "gis", options, started, params={"group": group})


def build_gis_h(problem: Problem, options: RunOptions) -> Schedule:
    started = time.perf_counter()
    group = gis_group(problem, half=True)
    return finish(problem, gis_orders(problem, group), "gis-h", options, started, params={"group": group})


def _build_po(name: str, full: bool):
    def build(problem: Problem, options: RunOptions) -> Schedule:
        started = time.perf_counter()
        group = gis_group(problem, half=not full)
        stages = offload_stages(problem, full)
        orders, amounts = add_offload(problem, gis_orders(problem, group), stages)
        return finish(problem, orders, name, options, started, amounts=amounts,
                      params={"group": group, "offload_stages": sorted(stages)})
    build.__name__ = f"build_{name.replace('-', '_')}"
    return build


build_po_h = _build_po("po-h", full=False)
build_po_f = _build_po("po-f", full=True)
