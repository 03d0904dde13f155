"""``greedy``: a list scheduler for any placement and backward mode, within the memory cap.

It is the solver's warm start and the fallback when no published schedule
applies. It runs the list scheduler (:mod:`ppsolve.baselines.engines.listsched`) on the
real costs with each device's capacity as its limit (on small problems with
several chunks per device also with forwards ahead of backwards), and when the problem has
an offload link it also tries offloading the activations that wait longest
(estimated from the critical path between a stage's F and its B, and kept only
where that wait hides the round trip over the link). Under a cap it also tries
lean reservations (see :class:`ListPolicy`), which let offloading pay off. A
forward that the scheduler holds until an offload frees its memory waits for
that offload in the plan (contract version 2); on small problems the packing
without such waits is tried as well. Every candidate is timed
by the simulator; the fastest one within the caps wins. If none fits (a
simulated offload finishing later than the scheduler assumed), it retries with
each device's limit lowered by what the simulation overshot, for a few rounds,
and then refuses with the device and figures that did not fit. On a V-shape
with two chunks and a cap it also times the published orders that may fit it
(the ZB-V heuristic with the cap as its limit, the V-Half and V-Min blocks,
and on small problems the best block of the building-block search within the cap).
"""

from __future__ import annotations

import time
from dataclasses import replace

from ppsolve.baselines.common import SMALL_OPS, finish, lower_bound, most_offload, smallest
from ppsolve.baselines.engines.listsched import ListPolicy, list_orders
from ppsolve.baselines.families.vblocks import block_rows, orders_of, timing
from ppsolve.baselines.families.vpattern import pattern_orders, v_half_block, v_min_block
from ppsolve.baselines.families.zbv_auto import zbv_orders
from ppsolve.bounds import min_capacity, require_feasible_capacity
from ppsolve.errors import DeadlockError, InfeasibleError
from ppsolve.memory import peak_memory
from ppsolve.method_types import RunOptions
from ppsolve.ops import OpKind
from ppsolve.problem import Problem
from ppsolve.schedule import Schedule
from ppsolve.simulator import simulate
from ppsolve.tolerance import EPS, exceeds

# the building-block search runs while d * max(m, 2d) is at most this (its rows grow with both)
BLOCK_SEARCH_SIZE = 256


def estimated_wait(problem: Problem, stage: int) -> float:
    """Least time between the end of F(stage, j) and the start of B(stage, j), for any j: the rest of its
    round trip on the shortest microbatch of each later stage."""
    S, m = problem.num_stages, problem.microbatches
    wait = 0.0
    for u in range(stage + 1, S):
        lat = min(problem.latency(u - 1, u, j) for j in range(m))
        wait += problem.forward.low(u) + problem.durations[OpKind.B].low(u) + 2 * lat
    return wait


def offload_candidates(problem: Problem) -> list[frozenset[int]]:
    """Sets of stages worth offloading, longest-waiting first: the top half, then all."""
    if not problem.can_offload:
        return []
    scored = []
    for s in range(problem.num_stages - 1):
        amount = most_offload(problem, s)
        if amount <= 0:
            continue
        trip = problem.duration(OpKind.OFFLOAD, s, amount=amount) + problem.duration(OpKind.RELOAD, s, amount=amount)
        slack = estimated_wait(problem, s) - trip
        if slack >= 0:
            scored.append((slack, s))
    scored.sort(reverse=True)
    stages = [s for _, s in scored]
    if not stages:
        # nothing hides its round trip: still offer the longest-waiting ones for tight caps
        stages = sorted(range(problem.num_stages - 1), key=lambda s: -estimated_wait(problem, s))
        stages = [s for s in stages if most_offload(problem, s) > 0]
    out = []
    for size in (max(1, len(stages) // 2), len(stages)):
        chosen = frozenset(stages[:size])
        if chosen and chosen not in out:
            out.append(chosen)
    return out


def published_orders(problem: Problem, caps) -> list[tuple[str, list]]:
    """Orders of the published V-shape schedules that may fit the caps (V-shape, two chunks, split backward).

    The ZB-V heuristic with the smallest cap as its limit, the V-Half and V-Min
    blocks, and (up to BLOCK_SEARCH_SIZE) the fastest block of the building-block
    search that fits; each is timed and checked against the caps by the caller.
    """
    if problem.placement_name != "vshape" or problem.chunks != 2 or not problem.split_backward:
        return []
    out = []
    limit = min(c for c in caps if c is not None)
    least = smallest(problem.activation)
    orders = zbv_orders(problem, limit)
    if orders is not None:
        out.append(("zb-v heuristic within the cap", orders))
    for name, block in (("v-half block", v_half_block), ("v-min block", v_min_block)):
        orders, peak = pattern_orders(problem, block(problem.devices))
        if peak * least <= limit + EPS:
            out.append((name, orders))
    if problem.devices * max(problem.microbatches, 2 * problem.devices) <= BLOCK_SEARCH_SIZE:
        best = None
        # a stage that holds nothing: no limit in activations (block_rows caps it)
        in_flight = 2 * problem.devices if least <= 0 else int(limit / least + EPS)
        for rows in block_rows(problem.devices, problem.microbatches, in_flight):
            makespan, peaks = timing(problem, rows)
            if _fits(caps, peaks) and (best is None or makespan < best[0]):
                best = (makespan, rows)
        if best is not None:
            out.append(("building-block search", orders_of(best[1])))
    return out


def _fits(caps, peaks: list[float]) -> bool:
    return not any(exceeds(p, c) for p, c in zip(peaks, caps))


def _attempt(problem: Problem, policy: ListPolicy):
    """(makespan, offloaded, orders, amounts, ops, peaks) or None when the scheduler gets stuck.

    Peaks are computed only under a cap (an empty list otherwise).
    """
    try:
        orders, amounts, waits = list_orders(problem, policy)
    except DeadlockError:
        return None
    ops = simulate(problem, orders, amounts, waits)
    makespan = max(op.end for op in ops)
    bounded = any(c is not None for c in policy.limit)
    return makespan, sum(amounts.values()), orders, amounts, ops, peak_memory(problem, ops) if bounded else []


def build_greedy(problem: Problem, options: RunOptions) -> Schedule:
    """Within the caps; with ``ignore_capacity`` and caps no schedule can keep, within the least that works."""
    started = time.perf_counter()
    try:
        require_feasible_capacity(problem)
        (makespan, offloaded, orders, amounts, ops, peaks), policy = _search(problem, problem.capacity)
    except InfeasibleError:
        if not options.ignore_capacity:
            raise
        least = min_capacity(problem)
        caps = tuple(None if c is None else max(c, n) for c, n in zip(problem.capacity, least))
        (makespan, offloaded, orders, amounts, ops, peaks), policy = _search(problem, caps)
    if isinstance(policy, str):
        params = {"order": policy}
    else:
        params = {"offload_stages": sorted(policy.offload)} if policy.offload else {}
        if policy.forward_first:
            params["forward_first"] = True
        if policy.lean:
            params["lean"] = True
        if policy.offload and policy.wait_for_offloads:
            params["forwards_wait_for_offloads"] = True
    return finish(problem, orders, "greedy", options, started, amounts=amounts, params=params, ops=ops)


def _search(problem: Problem, caps):
    """The fastest candidate within ``caps``: ((makespan, offloaded, orders, amounts, ops, peaks), policy)."""
    caps = tuple(caps)
    bounded = any(c is not None for c in caps)
    target = lower_bound(problem) * (1 + 1e-4)  # within 0.01% of the bound: stop
    small = len(problem.kinds) * problem.num_stages * problem.microbatches <= SMALL_OPS  # more candidates
    policies = [ListPolicy(limit=caps)]
    if problem.chunks > 1 and small:
        policies.append(ListPolicy(limit=caps, forward_first=True))
    if bounded:
        offloads = offload_candidates(problem)
        # large problems: only the largest offload set (each candidate costs a simulation)
        policies += [ListPolicy(limit=caps, offload=stages) for stages in (offloads if small else offloads[-1:])]
        # lean reservations: more microbatches in flight while offloads free memory
        lean_sets = [frozenset()] + offloads if small else offloads[-1:]
        lean_policies = [ListPolicy(limit=caps, offload=stages, lean=True) for stages in lean_sets]
        # the one most likely to be fastest under a cap goes second: a result at the bound ends the search
        policies = policies[:1] + lean_policies[-1:] + policies[1:] + lean_policies[:-1]
        if small:  # offloads that free memory only for the compute op after the next (no waits) pack differently
            policies += [replace(pol, wait_for_offloads=False) for pol in policies if pol.offload]
    best = None
    overshoot = None  # the smallest excess seen: (excess, device, peak, cap)
    for policy in policies:
        result = _attempt(problem, policy)
        if result is not None and bounded and not _fits(caps, result[5]):
            worst = max((p - c, d, p, c) for d, (p, c) in enumerate(zip(result[5], caps)) if c is not None)
            overshoot = worst if overshoot is None else min(overshoot, worst)
        if result is None or (bounded and not _fits(caps, result[5])):
            continue
        if best is None or result[:2] < best[0][:2]:
            best = (result, policy)
        if best[0][0] <= target:
            break
    if bounded and small and (best is None or best[0][0] > target):
        for name, orders in published_orders(problem, caps):
            ops = simulate(problem, orders)
            peaks = peak_memory(problem, ops)
            result = (max(op.end for op in ops), 0.0, orders, {}, ops, peaks)
            if _fits(caps, peaks) and (best is None or result[:2] < best[0][:2]):
                best = (result, name)
    if best is None and bounded:
        best = _tighten(problem, policies, caps)
    if best is None:
        where = ""
        if overshoot is not None:
            _, d, peak, cap = overshoot
            where = f": device {d} reaches {peak:g}, capacity is {cap:g}"
        raise InfeasibleError(f"greedy could not keep within the memory capacity{where} (an offload cannot finish "
                              "before the next forward of its device starts); try a larger capacity or a faster link")
    return best


def _tighten(problem: Problem, policies: list[ListPolicy], caps):
    """Retry each policy with limits lowered by what the simulation overshot, a few rounds."""
    for policy in policies:
        limit = list(caps)
        for _ in range(6):
            result = _attempt(problem, ListPolicy(limit=tuple(limit), offload=policy.offload))
            if result is None:
                break
            peaks = result[5]
            if _fits(caps, peaks):
                return result, policy
            for d, (p, c) in enumerate(zip(peaks, caps)):
                if c is not None and p > c:
                    limit[d] = limit[d] - (p - c)
    return None
