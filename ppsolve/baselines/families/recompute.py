"""Recompute as published (contract version 3), and recomputing just enough microbatches to fit a cap.

* ``1f1b-recompute``, ``interleaved-1f1b-recompute``: Megatron-LM's full activation
  recompute (``--recompute-granularity full``) on 1F1B and on interleaved 1F1B. Every
  (s,j) is recomputed: F(s,j) keeps only ``recompute.keep[s]`` and R(s,j) runs right
  before B(s,j), the order being otherwise the plain schedule's.
* ``1f1b-adapipe``, ``interleaved-1f1b-adapipe``: recompute chosen per stage, as AdaPipe
  (Sun et al., "AdaPipe: Optimizing Pipeline Parallelism with Adaptive Recomputation and
  Partitioning", ASPLOS 2024) chooses it: each stage recomputes only as much as its
  device's memory needs. AdaPipe chooses per layer within a stage and re-partitions the
  layers; the problem fixes the partition and recomputes whole stage activations, so here
  a stage is recomputed wholly or not at all. The rule: while a device exceeds its cap,
  recompute every microbatch of one more of its stages, the one with the least recompute
  time per memory saved (``recompute.time[s] / recompute_saving(s)``, their means over the
  microbatches when these differ; ties: the larger saving, then the lower stage), and time the
  plan again. On the linear placement that recomputes exactly the stages of the devices over
  the cap, the fewest that fit.
  When every stage of a device over its cap is recomputed and it still does not fit, the
  method refuses with what that device needs.

:func:`fit_by_recompute` is the warm start's lever: it recomputes, on each device over its
cap, just enough microbatches of any plan, chosen from the memory curve.
"""

from __future__ import annotations

import math
import time
from typing import Iterable, NamedTuple, Sequence

from ppsolve.baselines.common import (Orders, Requirement, finish, memory_text, over_capacity, with_recompute,
                                      with_w_after_b)
from ppsolve.baselines.families.interleaved import interleaved_orders, megatron_warmup
from ppsolve.baselines.families.onef1b import onef1b_orders
from ppsolve.errors import InfeasibleError
from ppsolve.memory import memory_curves
from ppsolve.method_types import RunOptions
from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem
from ppsolve.schedule import Schedule, ScheduledOp
from ppsolve.simulator import simulate
from ppsolve.tolerance import EPS, exceeds

LINEAR_RECOMPUTE = Requirement(placements=("linear",), recompute=True)
INTERLEAVED_RECOMPUTE = Requirement(placements=("interleaved", "linear"), recompute=True)


def stage_pairs(problem: Problem, stages: Iterable[int]) -> list[tuple[int, int]]:
    """Every (stage, microbatch) of ``stages``."""
    return [(s, j) for s in stages for j in range(problem.microbatches)]


def interleaved_plain(problem: Problem) -> Orders:
    """Megatron's interleaved 1F1B, W right after B (the ``interleaved-1f1b`` baseline's orders)."""
    return [with_w_after_b(problem, o) for o in interleaved_orders(problem, megatron_warmup(problem))]


def _full(name: str, plain) -> callable:
    def build(problem: Problem, options: RunOptions) -> Schedule:
        started = time.perf_counter()
        orders = with_recompute(plain(problem), stage_pairs(problem, range(problem.num_stages)))
        return finish(problem, orders, name, options, started, params={"recomputed": "all"})
    build.__name__ = f"build_{name.replace('-', '_')}"
    return build


build_1f1b_recompute = _full("1f1b-recompute", onef1b_orders)
build_interleaved_recompute = _full("interleaved-1f1b-recompute", interleaved_plain)


def stage_saving(problem: Problem, stage: int) -> float:
    """What recomputing one activation of ``stage`` saves: the same for every microbatch, or, when
    microbatches differ, their mean."""
    if not problem.per_microbatch:
        return problem.recompute_saving(stage, 0)
    return sum(problem.recompute_saving(stage, j) for j in range(problem.microbatches)) / problem.microbatches


def recompute_ratio(problem: Problem, stage: int) -> float:
    """Recompute time per memory saved of ``stage``'s activations, over all its microbatches (inf when
    they save nothing)."""
    saving = stage_saving(problem, stage)
    if saving <= 0:
        return math.inf
    if not problem.per_microbatch:
        return problem.duration(OpKind.R, stage, 0) / saving
    return problem.durations[OpKind.R].total(stage) / problem.microbatches / saving


def adapipe_stages(problem: Problem, orders: Orders) -> tuple[list[int], list[ScheduledOp]]:
    """The stages the AdaPipe-like rule recomputes in ``orders`` (see the module docstring), in the order
    it chose them (each round, one more stage of every device over its cap), and the timing of the
    plan; the plan may still exceed a cap when no stage is left."""
    chosen: list[int] = []
    while True:
        ops = simulate(problem, with_recompute(orders, stage_pairs(problem, chosen)))
        more = []
        for device, _, _ in over_capacity(problem, ops):
            left = [s for s in problem.stages_of_device[device] if s not in chosen and stage_saving(problem, s) > 0]
            if left:
                more.append(min(left, key=lambda s: (recompute_ratio(problem, s), -stage_saving(problem, s), s)))
        if not more:
            return chosen, ops
        chosen += sorted(more)


def _adapipe(name: str, plain) -> callable:
    def build(problem: Problem, options: RunOptions) -> Schedule:
        started = time.perf_counter()
        orders = plain(problem)
        chosen, ops = adapipe_stages(problem, orders)
        over = over_capacity(problem, ops)
        if over and not options.ignore_capacity:
            d, need, cap = max(over, key=lambda o: o[1] - o[2])
            raise InfeasibleError(f"{name} needs {memory_text(need)} on device {d} with every stage of it "
                                  f"recomputed, capacity is {memory_text(cap)} (--ignore-capacity builds it anyway)")
        return finish(problem, with_recompute(orders, stage_pairs(problem, chosen)), name, options, started,
                      params={"recomputed_stages": sorted(chosen)}, ops=ops)
    build.__name__ = f"build_{name.replace('-', '_')}"
    return build


build_1f1b_adapipe = _adapipe("1f1b-adapipe", onef1b_orders)
build_interleaved_adapipe = _adapipe("interleaved-1f1b-adapipe", interleaved_plain)


# ----- recomputing just enough microbatches (the warm start's plans) -----

def fit_by_recompute(problem: Problem, orders: Sequence[Sequence[Op]],
                     waits=None, prefer: str = "longest",
                     amounts=None) -> tuple[Orders, list[ScheduledOp]]:
    """``orders`` with R(s,j) right before B(s,j) for just enough (s,j) that every device fits its cap,
    and their timing; InfeasibleError when no more choice helps.

    Rounds: time the plan; on each device over its cap, walk its memory curve in time and, at each
    instant still over the cap after the pairs chosen so far, recompute pairs that hold a whole
    activation there (F started, the op before B not yet ended; neither recomputed, in ``orders`` or
    before, nor offloaded),
    in the order ``prefer`` names (see ``PREFER``), until that instant fits; time the plan again
    (R shifts the times). ``waits`` and ``amounts``: the plan's explicit waits and its offloads' amounts
    (see :func:`ppsolve.simulator.simulate`).
    """
    excluded = {(op.stage, op.microbatch) for order in orders for op in order
                if op.kind in (OpKind.OFFLOAD, OpKind.R)}  # offloaded, or recomputed already
    chosen: set[tuple[int, int]] = set()
    for _ in range(problem.num_stages * problem.microbatches + 1):
        plan = with_recompute(orders, chosen)
        ops = simulate(problem, plan, amounts, waits)
        over = over_capacity(problem, ops)
        if not over:
            return plan, ops
        curves = memory_curves(problem, ops)
        picks = [pair for d, _, cap in over
                 for pair in _picks(problem, ops, curves[d], d, cap, chosen | excluded, prefer)]
        if not picks:
            d, need, cap = max(over, key=lambda o: o[1] - o[2])
            raise InfeasibleError(f"recomputing does not fit device {d}: it needs {memory_text(need)}, "
                                  f"capacity is {memory_text(cap)}")
        chosen.update(picks)
    raise InfeasibleError("recomputing did not converge")  # each round adds a pair: unreachable


class Held(NamedTuple):
    """A pair of a device that recomputing would shrink, in one timing of the plan."""

    start: float  # its F starts: from here it holds a whole activation
    until: float  # the compute op before its B ends: its R would start here
    stage: int
    microbatch: int
    hidden: float  # how much of its R the device's wait before the B would hide


# Which held pair :func:`fit_by_recompute` recomputes first: "longest", the one held longest after
# the instant (the fewest recomputes: it covers the most instants after it); "hidden", the one whose
# R fits best in the wait before its B (where its device would idle), then the longest.
PREFER = {"longest": lambda h: (h.until, -h.start), "hidden": lambda h: (h.hidden, h.until, -h.start)}


def _held(problem: Problem, ops: Sequence[ScheduledOp], device: int, excluded: set) -> list[Held]:
    """The pairs of ``device`` that recomputing would shrink (saving > 0, not in ``excluded``)."""
    compute = sorted((op for op in ops if op.device == device and op.kind.is_compute), key=lambda op: op.start)
    forward_start = {(op.stage, op.microbatch): op.start for op in compute if op.kind is OpKind.F}
    out = []
    for at, op in enumerate(compute):
        pair = (op.stage, op.microbatch)
        if op.kind is OpKind.B and pair not in excluded and problem.recompute_saving(*pair) > 0:
            until = compute[at - 1].end if at > 0 else op.start
            if until > forward_start[pair]:
                hidden = min(op.start - until, problem.duration(OpKind.R, *pair))
                out.append(Held(forward_start[pair], until, op.stage, op.microbatch, hidden))
    return out


def _picks(problem: Problem, ops: Sequence[ScheduledOp], curve: list[tuple[float, float]], device: int,
           cap: float, excluded: set, prefer: str) -> list[tuple[int, int]]:
    """The pairs of ``device`` to recompute next (see :func:`fit_by_recompute`)."""
    key = PREFER[prefer]
    held = sorted(_held(problem, ops, device, excluded))
    picks: list[Held] = []
    nxt = 0
    waiting: list[Held] = []  # held at the instant, not picked
    for t, level in curve:
        if not exceeds(level, cap):
            continue
        while nxt < len(held) and held[nxt].start <= t:
            waiting.append(held[nxt])
            nxt += 1
        waiting = [h for h in waiting if h.until > t]
        excess = level - cap - sum(problem.recompute_saving(h.stage, h.microbatch) for h in picks
                                   if h.start <= t < h.until)
        while excess > EPS and waiting:
            first = max(waiting, key=key)
            waiting.remove(first)
            picks.append(first)
            excess -= problem.recompute_saving(first.stage, first.microbatch)
    return [(h.stage, h.microbatch) for h in picks]
