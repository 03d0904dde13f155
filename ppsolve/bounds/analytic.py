"""Lower bounds on the makespan and the least memory capacity that admits a schedule.

Every method reports its gap against :func:`makespan_lower_bound`, and an
infeasible capacity is explained with :func:`min_capacity`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ppsolve.bounds.admission import admission_bound, admission_starts
from ppsolve.bounds.drain import least_drain
from ppsolve.bounds.first_backward import least_idle_before, stage_forwards
from ppsolve.bounds.last_backward import least_last_tail
from ppsolve.bounds.chains import Chains, columns, longest_from, microbatch_chains, one_microbatch
from ppsolve.bounds.relaxation import least_costs
from ppsolve.errors import InfeasibleError
from ppsolve.bounds.held import forward_allocates, least_held
from ppsolve.bounds.idle import Group, least_starts, most_work
from ppsolve.bounds.prices import transfer_time
from ppsolve.ops import OpKind
from ppsolve.problem import Problem
from ppsolve.bounds.recompute import forced_recompute, recomputed_area
from ppsolve.bounds.slots import slot_bound
from ppsolve.bounds.sequence import sequence_bounds
from ppsolve.tolerance import EPS, exceeds, slack


@dataclass(frozen=True)
class MakespanBound:
    """The bound and the figures it is the largest of."""

    value: float
    device_bounds: tuple[float, ...]
    critical_path: float
    memory_bounds: tuple[float, ...] = ()
    idle_bounds: tuple[float, ...] = ()
    admission_bounds: tuple[float, ...] = ()
    sequence_bounds: tuple[float, ...] = ()
    recompute_bounds: tuple[float, ...] = ()  # load + the recompute the cap forces (0: cannot recompute)
    forced_recompute: tuple[float, ...] = ()  # that recompute time, per device
    drain_bounds: tuple[float, ...] = ()  # load + forced idle, the drain with its recompute and reloads paid
    last_backward_bounds: tuple[float, ...] = ()  # load + idle before the first B + the tail after the last B
    # load + recompute against the activations the cap holds at once (0: not above the figures before it)
    slot_bounds: tuple[float, ...] = ()

    @property
    def binding(self) -> str:
        candidates = [(self.critical_path, "critical path of one microbatch")]
        candidates += [(b, f"load of device {d}") for d, b in enumerate(self.device_bounds)]
        candidates += [(b, f"memory cap of device {d}") for d, b in enumerate(self.memory_bounds)]
        candidates += [(b, f"load and forced idle of device {d}") for d, b in enumerate(self.idle_bounds)]
        candidates += [(b, f"load of device {d} after the cap of stage 0's device spaces the microbatches")
                       for d, b in enumerate(self.admission_bounds)]
        candidates += [(b, f"ops of device {d} with microbatches in order (earliest starts and tails)")
                       for d, b in enumerate(self.sequence_bounds)]
        candidates += [(b, f"load of device {d} with the recompute its cap forces")
                       for d, b in enumerate(self.recompute_bounds)]
        candidates += [(b, f"load and forced idle of device {d}, with the recompute and reloads of its drain")
                       for d, b in enumerate(self.drain_bounds)]
        candidates += [(b, f"load of device {d}, its forced idle before its first B and the tail after its last B, "
                            "which only the W its cap holds fill")
                       for d, b in enumerate(self.last_backward_bounds)]
        candidates += [(b, f"load of device {d} with the activations its cap lets it hold at once")
                       for d, b in enumerate(self.slot_bounds)]
        top = max(c[0] for c in candidates)
        ties = (name for value, name in candidates if value >= top - slack(top))  # ties: the simplest
        return next(ties, candidates[0][1])


MAX_IDLE_TIMES = 256  # times t_B at which the idle before the first B is evaluated, at most (in blocks beyond)


def device_bound(problem: Problem, device: int, chains: Chains) -> float:
    """Head + load + tail of one device.

    Two valid bounds, the larger is kept: (a) the earliest start of any of its
    ops, plus all its compute, plus what must follow its last op (with split
    backward a W can be last, so nothing); (b) with split backward, the same
    for its F and B ops alone, after which the W of that B and the backward
    chain below it still have to run. Loads are sums over the microbatches; the
    head and the tail are the least over them (whichever microbatch comes first or last).
    """
    stages = problem.stages_of_device[device]
    if not stages:
        return 0.0
    items = chains.items(stages)
    head = min(chains.f_head[i] for i in items)
    load = problem.device_load(device)
    after_last_b = min(chains.b_tail[i] for i in items)
    if not problem.split_backward:
        return head + load + after_last_b
    fb_load = chains.weight * sum(problem.forward.at(*i) + problem.backward_input.at(*i) for i in items)
    return max(head + load, head + fb_load + after_last_b)


def _lifetime(problem: Problem, stage: int, microbatch: int) -> float:
    """Least time from F(s, j) starting to B(s, j) ending: the round trip to the last stage and back."""
    after = longest_from(problem, (OpKind.F, stage), microbatch)
    return after[(OpKind.B, stage)] + problem.duration(OpKind.B, stage, microbatch)


def _least_sum(values: list[float], weight: int, count: int) -> float:
    """The sum of the ``count`` smallest of ``values``, each standing for ``weight`` equal ones."""
    if min(values) == max(values):
        return count * values[0]
    total, left = 0.0, count
    for v in sorted(values):
        take = min(weight, left)
        total, left = total + take * v, left - take
        if not left:
            break
    return total


def memory_bound(problem: Problem, device: int, chains: Chains) -> float:
    """A makespan bound from the memory cap of ``device`` (0 when it is unbounded): the larger of
    the round trips in flight (below) and memory x time (:func:`memory_time_bound`).

    Microbatch j keeps at least ``least_held(s, j)`` of stage s on the device over
    [start of F(s, j), end of B(s, j)) (its activation less the offloadable share,
    or its checkpoint when recomputed; an R only lengthens it), an interval of at least
    the round-trip time L_sj. Of the n microbatches that keep some (kept > 0), a cap C
    lets at most q = floor(C / least kept) of these half-open intervals overlap.
    Intervals that overlap at most q at a time split into q chains of disjoint ones,
    so one chain holds ceil(n / q) of them, at least as long together as the ceil(n / q)
    shortest: makespan >= (earliest F(s)) + their sum + (least that must follow a B(s)).
    """
    cap = problem.capacity[device]
    if cap is None:
        return 0.0
    best = 0.0
    for s in problem.stages_of_device[device]:
        kept = {j: least_held(problem, s, microbatch=j) for j in chains.columns}
        holding = [j for j in chains.columns if kept[j] > 0]
        if not holding:
            continue
        q = max(1, math.floor(cap / min(kept[j] for j in holding) + EPS))
        n = chains.weight * len(holding)
        if q >= n:
            continue
        trips = _least_sum([_lifetime(problem, s, j) for j in holding], chains.weight, math.ceil(n / q))
        best = max(best, min(chains.f_head[(s, j)] for j in holding) + trips
                   + min(chains.b_tail[(s, j)] for j in holding))
    return max(best, memory_time_bound(problem, device, chains))


def memory_time_bound(problem: Problem, device: int, chains: Chains) -> float:
    """head + (least memory x time the device's microbatches need) / cap.

    From its first F on, a device holds at most the cap, so the integral of its memory over
    [head, makespan] is at most cap * (makespan - head). (s, j) with x of its activation a sent to
    host (0 <= x <= the offloadable share) holds a - x over [S(F), E(B)), of length l >= L_s (the
    round trip); x over [S(F), E(OFFLOAD)) and [S(RELOAD), E(B)), together at least
    F + B + x tau with tau = 1/d2h + 1/h2d (so l >= that too); and the weight hold over
    [E(B), E(W)), at least W long. Its area is at least
    g(x) = (a - x) max(L, F + B + x tau) + x (F + B + x tau) + hold W, smallest at
    x = min(share, (L - F - B) / (2 tau)) (g is a convex parabola up to where F + B + x tau = L,
    and grows after it). Where (s, j) may be recomputed instead (rule 10: not both), its area is the
    lesser of g's least and ``recomputed_area`` (the R's time is left out here; it counts in
    ``ppsolve.bounds.recompute``). Every (s, j) with its own sizes, durations and round trip.
    """
    cap = problem.capacity[device]
    stages = problem.stages_of_device[device]
    if cap is None or cap <= 0 or not stages:
        return 0.0
    tau = transfer_time(problem)
    area = 0.0
    items = chains.items(stages)
    for s, j in items:
        fb = problem.duration(OpKind.F, s, j) + problem.duration(OpKind.B, s, j)
        # every path from F(0) to B(s) runs through F(s): the round trip is B's earliest end less F's start
        trip = chains.b_head[(s, j)] + problem.duration(OpKind.B, s, j) - chains.f_head[(s, j)]
        a, share = problem.activation.at(s, j), problem.max_offload(s, j)
        x = 0.0 if tau <= 0 else min(share, max(0.0, trip - fb) / (2 * tau))
        kept_area = a * trip - x * (trip - fb) + tau * x * x
        if problem.recompute is not None:
            kept_area = min(kept_area, recomputed_area(problem, s, trip, j))
        area += kept_area
        if problem.split_backward:
            area += problem.weight_hold.at(s, j) * problem.duration(OpKind.W, s, j)
    return min(chains.f_head[i] for i in items) + chains.weight * area / cap


@dataclass(frozen=True)
class _DeviceData:
    """One device's (stage, microbatch) items with the figures the idle bound needs (in stage order)."""

    F: tuple[float, ...]
    BW: tuple[float, ...]  # B + W (fused: B)
    W: tuple[float, ...]  # 0 when fused
    hold: tuple[float, ...]  # held from B's end to W's end (0 when fused)
    offload: tuple[float, ...]  # the most of one activation that may go to host
    kept: tuple[float, ...]  # the least one activation holds from F's start to B's end (least_held)
    first: tuple[float, ...]  # the least F allocates at its start (forward_allocates)


def _device_data(problem: Problem, items: list[tuple[int, int]], recompute: bool = True) -> _DeviceData:
    """The figures of ``items`` (stage, microbatch); ``recompute`` False: as if no forward were recomputed."""
    split = problem.split_backward
    d = problem.duration
    return _DeviceData(
        tuple(d(OpKind.F, s, j) for s, j in items),
        tuple(d(OpKind.B, s, j) + (d(OpKind.W, s, j) if split else 0.0) for s, j in items),
        tuple(d(OpKind.W, s, j) if split else 0.0 for s, j in items),
        tuple(problem.weight_hold.at(s, j) if split else 0.0 for s, j in items),
        tuple(problem.max_offload(s, j) for s, j in items),
        tuple(least_held(problem, s, recompute=recompute, microbatch=j) for s, j in items),
        tuple(forward_allocates(problem, s, j) if recompute else problem.activation.at(s, j) for s, j in items))


@dataclass(frozen=True)
class _IdleParts:
    """The figures of ``idle_bound``: T >= load + before + after when the first B must start before the
    last F ends (``adds``), else T >= load + max(before, after)."""

    items: list
    data: _DeviceData
    load: float
    before: float  # least t_B less the F work before it
    after: float  # least T - t* less the B and W work after it
    adds: bool
    # the least idle before the first B alone, less the R run then: ``before``, or where no R is shorter than
    # its F also the figure as if nothing were recomputed (``idle_bound``'s argument) and the forwards counted
    # by stage with the link (``ppsolve.bounds.first_backward``); T >= load + this + any idle after the first B
    least_before: float

    def total(self, after: float) -> float:
        return self.load + (self.before + after if self.adds else max(self.before, after))


def _idle_parts(problem: Problem, device: int, chains: Chains) -> _IdleParts | None:
    """The parts of ``idle_bound`` (None: the device holds no stage)."""
    stages = problem.stages_of_device[device]
    if not stages:
        return None
    items = chains.items(stages)
    x, m, cap = _device_data(problem, items), chains.weight, problem.capacity[device]
    head = min(chains.f_head[i] for i in items)
    first_b = min(chains.b_head[i] for i in items)
    f_tail = min(chains.f_tail[i] for i in items)
    all_f, all_bw = m * sum(x.F), m * sum(x.BW)
    load = problem.device_load(device)
    if cap is None:
        before = max(head, first_b - all_f)
        return _IdleParts(items, x, load, before, f_tail - all_bw, False, before)
    link = problem.offload if problem.can_offload else None
    heads = [chains.f_head[i] for i in items]
    d2h = link.d2h if link else 0.0
    front, before = _idle_before(x, heads, m, cap, head, first_b, d2h)
    back = min(all_bw, most_work([Group(m, ((k, bw), (h, w)) if w > 0 else ((k, bw),))
                                  for k, bw, h, w in zip(x.kept, x.BW, x.hold, x.W)], cap))
    b_tail = min(chains.b_tail[i] for i in items)
    after = max(0.0, f_tail - back, _after_last_f(x, m, cap, f_tail, b_tail, link.h2d if link else 0.0))
    no_shorter_r = problem.recompute is not None and all(problem.duration(OpKind.R, *i) >= f
                                                         for i, f in zip(items, x.F))
    by_stage = 0.0  # the forwards before t_B counted by stage (needs every R at least its F, or no recompute)
    if problem.recompute is None or no_shorter_r:
        by_stage = least_idle_before(stage_forwards(problem, items, chains.f_head, m), cap, first_b, d2h) or 0.0
    if problem.recompute is None:
        before = max(before, by_stage)
    least_before = before
    if no_shorter_r:
        whole = _device_data(problem, items, recompute=False)
        least_before = max(before, _idle_before(whole, heads, m, cap, head, first_b, d2h)[1], by_stage)
    return _IdleParts(items, x, load, before, after, front < all_f - EPS, least_before)


def drain_bound(problem: Problem, device: int, chains: Chains, parts: _IdleParts | None, floor: float = 0.0) -> float:
    """``idle_bound`` with the idle after the last F counted with the recompute and reloads that the
    microbatches the device still holds then bring (``ppsolve.bounds.drain``, where the argument is);
    0 where the problem has no lever or the device no cap. T >= load + before + after holds with any
    lower bound on T - t* less the B and W work after t*: the R ops after t* are part of that time.
    And T >= head + load + that figure whatever t_B: every F, and every B and W not after t*, runs
    between the device's head and t*.

    The search (``least_drain``) runs only where the figure could exceed ``floor`` (a bound already
    known): it is at most its value at one choice of what is held, whole activations that fit the cap
    (no lever used). Elsewhere the figure with 0 for the drain, also valid."""
    if not (problem.can_recompute or problem.can_offload) or problem.capacity[device] is None or parts is None:
        return 0.0
    items = parts.items
    f_tail = min(chains.f_tail[i] for i in items)
    head = min(chains.f_head[i] for i in items)

    def bound(drain: float) -> float:
        return max(parts.total(max(parts.after, drain)), head + parts.load + drain)

    if bound(max(0.0, f_tail - _whole_fill(problem, items, chains.weight))) <= floor:
        return bound(0.0)
    c = min(problem.duration(OpKind.B, *i) + chains.b_tail[i] for i in items)
    return bound(least_drain(problem, items, chains.weight, f_tail, c))


def last_backward_bound(problem: Problem, device: int, chains: Chains, parts: _IdleParts | None) -> float:
    """load + the idle the cap forces before the device's first B (``_IdleParts.least_before``, at
    least its head) + the idle after its last B that the W ops its cap lets it hold cannot fill
    (``ppsolve.bounds.last_backward``, where the argument is); 0 without a cap or split backward."""
    if parts is None or problem.capacity[device] is None or not problem.split_backward:
        return 0.0
    return parts.load + parts.least_before + least_last_tail(problem, parts.items, chains.weight, chains.b_tail)


def _whole_fill(problem: Problem, items: list, weight: int) -> float:
    """B and W work that whole activations of ``items`` bring within the cap (a whole number of each, the
    most work per unit of memory first): one choice of what is held, so the least drain is at most
    f - this."""
    room, work = problem.capacity[problem.placement[items[0][0]]], 0.0
    split = problem.split_backward
    values = [(problem.duration(OpKind.B, s, j) + (problem.duration(OpKind.W, s, j) if split else 0.0),
               problem.activation.at(s, j)) for s, j in items]
    for value, size in sorted(values, key=lambda v: -v[0] / v[1] if v[1] > 0 else -math.inf):
        take = weight if size <= 0 else min(weight, math.floor(room / size))
        work, room = work + take * value, room - take * size
        if room <= 0:
            break
    return work


def idle_bound(parts: _IdleParts | None) -> float:
    """Load of a device (its ``parts``, from ``_idle_parts``) plus the idle time it cannot avoid before
    its first B and after its last F.

    Before its first B starts (at t_B >= the earliest B start EB) a device runs only forwards, and
    each of them still holds its activation (less what went to host) when the last one starts.
    After its last F ends (at t*) it runs only B and W of microbatches it still holds at t* (B to
    run: the activation less what is on host; W alone: the weight hold). So:

    - memory: the forwards before t_B, and the B and W after t*, fit the cap as a knapsack
      (``ppsolve.bounds.idle.most_work``): idle before t_B >= t_B - that work; idle after t* >= the least
      tail after an F - that work. Before t_B, k forwards of one stage end no sooner than its
      earliest F start plus k of them, so t_B also limits how many of each stage can be there
      (``_forwards_before_first_b``);
    - host link: past the cap, activation must leave for host before the next forward may start,
      and each share leaves only after its forward ends, at d2h over one lane; read backwards in
      time, the last B's need their shares back, at h2d, before they start
      (``ppsolve.bounds.idle.least_starts``).

    When the cap cannot hold every forward at once, the first B starts before the last F ends and
    the two idle spans add up; otherwise only the larger counts.

    Recompute (contract v3): a recomputed forward holds only keep[s] (``least_held``,
    ``forward_allocates``), and an R is no F, B or W: with W_FBW the device's F, B and W time and
    c1, c2 the compute inside [0, t_B] and [t*, T], T >= W_FBW + (all R) + (t_B - c1) + (tail - c2),
    and the R time inside the two spans is at most all R, so T >= W_FBW + (t_B - c1') + (tail - c2')
    with c1', c2' their F, B and W time alone: the bound below, with the lesser weights. The host-link
    part counts only the checkpoint as held (the rest may come back by R rather than by the link).
    And where no R is shorter than its F (R defaults to F), the idle before t_B as if nothing were
    recomputed counts alone too. Split the forwards before t_B into Q, recomputed with R at or after
    t_B, and K, the others (not recomputed, or with R before t_B). T >= W_FBW + (all R) + t_B
    - (F of K and Q) - (R before t_B) >= W_FBW + t_B - (F of K) + (R of Q - F of Q), the last term
    >= 0. Take for an item of K its F's start (not recomputed) or its R's start: from then on it
    holds its activation less what went to host, and these events are at least a forward apart
    (R >= F), each share leaving only after its op ends: the knapsack and ``least_starts`` above
    hold for K as they do without recompute (Q's checkpoints only add memory).

    On a device of several stages the forwards before t_B are also counted stage by stage, each at its own
    activation and F, with what the link can have moved by then (``ppsolve.bounds.first_backward``).

    Per-microbatch costs: every (s, j) is an item of its own in the knapsacks (count 1, its own
    sizes and durations, its own earliest F end), and the arguments that count ops alike
    (``least_starts``, the B's and W's after t*) take the least size, the least gap and the
    largest work over the items, which keeps each inequality; heads and tails are the least.
    """
    if parts is None:
        return 0.0
    return max(parts.total(parts.after), parts.load + parts.least_before)


def _idle_before(x: _DeviceData, heads: list[float], m: int, cap: float, head: float, first_b: float,
                 d2h: float) -> tuple[float, float]:
    """(the most forward work the cap lets run before t_B, the least idle before t_B); each item of ``x``
    stands for ``m`` microbatches (``Chains.weight``)."""
    # Forwards before t_B: the last one holds at least what its F allocated (none of it on host yet).
    budget = cap - min(a - k for a, k in zip(x.first, x.kept))
    front = min(m * sum(x.F), most_work([Group(m, ((k, f),)) for k, f in zip(x.kept, x.F)], budget))
    timed = _forwards_before_first_b(x, heads, m, list(x.kept), budget, first_b)
    return front, max(head, timed, _before_first_b(x, m, cap, head, first_b, d2h))


def _forwards_before_first_b(x: _DeviceData, heads: list[float], m: int, kept: list[float], budget: float,
                             first_b: float) -> float:
    """Least idle before t_B (over t_B >= EB): t_B less the most forward work that can run before it.

    That work fits the cap (each forward still holds its kept share at t_B) and, per item (a stage,
    or one (s, j)), counts at most the forwards that can end by t_B: the k-th of an item ends no sooner
    than its earliest F start + k F. ``t_B - work`` only rises between the times where one more forward fits, so the
    least is at EB or at one of those times (tried while one more could still fit the cap).
    """
    def ended(t: float, h: float, f: float) -> int:  # forwards of a stage that can have ended by t
        return m if f <= 0 else max(0, min(m, math.floor((t - h) / f + EPS)))

    def most_before(t: float) -> float:
        return most_work([Group(ended(t, h, f), ((k, f),)) for h, f, k in zip(heads, x.F, kept)], budget)

    times = {first_b}
    for h, f, k in zip(heads, x.F, kept):
        fits = 0 if f <= 0 else m if k <= 0 else min(m, math.floor(budget / k + EPS) + 1)
        times.update(t for t in (h + n * f for n in range(1, fits + 1)) if t > first_b)
    if len(times) <= MAX_IDLE_TIMES:
        return min(t - most_before(t) for t in times)
    # Blocks of consecutive times: work before t only rises with t, so first - most_before(last) is at
    # most every t - most_before(t) of a block (a lower bound, with the work capped by the op count).
    ordered = sorted(times)
    size = -(-len(ordered) // MAX_IDLE_TIMES)
    return min(ordered[i] - most_before(ordered[min(len(ordered), i + size) - 1])
               for i in range(0, len(ordered), size))


def _before_first_b(x: _DeviceData, m: int, cap: float, head: float, first_b: float, d2h: float) -> float:
    """Least idle before t_B: with f forwards before it, t_B >= max(EB, start of the f-th + F)."""
    n, f_min, f_max = m * len(x.F), min(x.F), max(x.F)
    starts = least_starts(head, f_min, min(x.first), max(x.offload), cap, d2h, n)
    return min([first_b] + [max(first_b, t + f_min) - f * f_max for f, t in enumerate(starts, 1)])


def _after_last_f(x: _DeviceData, m: int, cap: float, f_tail: float, b_tail: float, h2d: float) -> float:
    """Least idle after t*, read backwards from the makespan: with b B's after t* (the last b), the
    b-th from the end starts at least ``least_starts`` after it (reversed), so the span after t* is
    at least that plus a B (and at least the tail after an F); the work is b B's and W's and the
    W's whose weight holds fit beside them at t*."""
    n, b_min = m * len(x.F), min(x.BW[i] - x.W[i] for i in range(len(x.F)))
    kept, hold, w_max = min(x.kept), min(x.hold), max(x.W)
    ends = least_starts(b_tail, b_min, min(x.first), max(x.offload), cap, h2d, n)
    best = math.inf
    for b, t in enumerate(ends, 1):
        if b * kept > cap + EPS:
            break
        pending = n - b if hold <= 0 else min(n - b, math.floor((cap - b * kept) / hold + EPS))
        best = min(best, max(f_tail, t + b_min) - b * max(x.BW) - pending * w_max)
    return max(0.0, best)


def makespan_lower_bound(problem: Problem) -> MakespanBound:
    """No valid schedule of ``problem`` is shorter than ``.value``."""
    chains = microbatch_chains(problem)  # the microbatches' chains, shared by every figure below
    heads, tails = chains.heads, chains.tails
    devices = tuple(device_bound(problem, d, chains) for d in range(problem.devices))
    memory = tuple(memory_bound(problem, d, chains) for d in range(problem.devices))
    parts = [_idle_parts(problem, d, chains) for d in range(problem.devices)]  # shared by three figures
    idle = tuple(idle_bound(parts[d]) for d in range(problem.devices))
    starts = admission_starts(problem, heads)
    admission = tuple(admission_bound(problem, d, starts, heads, tails) for d in range(problem.devices))
    path = chains.path
    # the in-order argument needs interchangeable microbatches: with per-microbatch costs, the least costs'
    least = least_costs(problem) if problem.per_microbatch else problem
    sequence = sequence_bounds(least, *one_microbatch(least, microbatch=0))
    forced = [forced_recompute(problem, d, chains, devices[d]) for d in range(problem.devices)]
    recompute = tuple(f.bound for f in forced)
    floor = max(max(devices), max(memory), max(idle), max(admission), max(sequence, default=0.0), max(recompute), path)
    slots = tuple(slot_bound(problem, d, chains, devices[d], floor) for d in range(problem.devices))
    floor = max(floor, max(slots))
    drain = tuple(drain_bound(problem, d, chains, parts[d], floor) for d in range(problem.devices))
    last_b = tuple(last_backward_bound(problem, d, chains, parts[d]) for d in range(problem.devices))
    return MakespanBound(max(floor, max(drain), max(last_b)),
                         devices, path, memory, idle, admission, sequence, recompute, tuple(f.time for f in forced),
                         drain, last_b, slots)


def min_capacity(problem: Problem, offload: bool = False, recompute: bool = False) -> list[float]:
    """Per device, the least capacity for which some schedule exists (``offload``, ``recompute``:
    with those levers, where the problem has them).

    While F(s, j) runs, and while R(s, j) runs when it is recomputed (its activation is whole
    again from R's start), every stage of the same device below s still holds microbatch j's
    activation (its B comes after B(s, j)), less what was offloaded, or only its checkpoint when
    recomputed (``least_held``): the need is ``activation[s][j]`` plus the least kept share of the
    stages below, at its largest over the microbatches. It is reached by one microbatch in flight
    with W right after B, each forward waiting for the offloads before it (contract v2), each reload
    after the B above it, each R right before its B.
    """
    return [max(_one_needs(problem, stages, j, offload, recompute) for j in columns(problem)[0])
            for stages in problem.stages_of_device]


def _one_needs(problem: Problem, stages: tuple[int, ...], microbatch: int, offload: bool, recompute: bool) -> float:
    """The least capacity ``stages`` (one device's) need for ``microbatch`` alone (``min_capacity``)."""
    below, worst = 0.0, 0.0
    for s in stages:
        worst = max(worst, below + problem.activation.at(s, microbatch))
        below += least_held(problem, s, offload, recompute, microbatch)
    return worst


def capacity_shortfalls(problem: Problem) -> list[tuple[int, float, float]]:
    """(device, least capacity that could work, capacity) for each device whose cap is too small."""
    need = min_capacity(problem, offload=problem.can_offload, recompute=problem.can_recompute)
    return [(d, need[d], cap) for d, cap in enumerate(problem.capacity) if exceeds(need[d], cap)]


def require_feasible_capacity(problem: Problem) -> None:
    """Raise InfeasibleError naming the least capacity that could work."""
    short = capacity_shortfalls(problem)
    if not short:
        return
    # One line however many devices: the first device that is short, and how many others are.
    device, need, cap = short[0]
    stages = problem.stages_of_device[device]
    names = ", ".join(str(s) for s in stages)
    cols = columns(problem)[0]
    which = "one microbatch" if len(cols) == 1 else "microbatch " + str(max(
        cols, key=lambda j: _one_needs(problem, stages, j, problem.can_offload, problem.can_recompute)))
    text = f"device {device} needs at least {need:g} ({which} on stages {names}"
    levers = " or ".join(name for name, able in (("offload", problem.can_offload),
                                                 ("recompute", problem.can_recompute)) if able)
    text += f"; {min_capacity(problem)[device]:g} without {levers})" if levers else ")"
    others = f"; {len(short) - 1} other device(s) too" if len(short) > 1 else ""
    raise InfeasibleError(f"infeasible memory capacity: {text}, capacity is {cap:g}{others}")
