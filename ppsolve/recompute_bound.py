"""The least recompute a memory cap forces on a device, and the makespan bound it gives.

Only for problems that may recompute (``Problem.can_recompute``); elsewhere the figure is 0 and
no other bound moves.

Fix a device with cap C, its stages s (m microbatches each) and a makespan T. Its memory is 0
before its first forward can start (H, the least F head of its stages), so the integral of its
memory over [H, T] is at most C (T - H). Each (s, j) contributes an area (memory x time) of at
least (L the round trip of stage s, from F(s)'s earliest start to B(s)'s earliest end, with
p2p latencies; a its activation, h its weight hold, F, B, W, R the op durations):

- kept whole: A0 = a L + h W (h over [E(B), E(W)), split backward only);
- offloaded by 0 < x <= share (any partial amount): at least A0 - rho x + tau x^2 for
  x <= x* = min(share, rho / (2 tau)), where rho = L - F - B and tau = 1/d2h + 1/h2d, and never
  below its value at x* (``ppsolve.bounds.memory_time_bound``): a reduction r(x) <= rho min(x, x*)
  - tau min(x, x*)^2, concave and nondecreasing in x;
- recomputed (rule 10: then not offloaded): keep over [S(F), E(B)), at least max(L, F + R + B)
  long, the rest a - keep over [S(R), E(B)), at least R + B long, and h W: a reduction of
  delta = A0 - (keep max(L, F + R + B) + (a - keep)(R + B) + h W), at the price of one R on the
  device.

Two budgets limit the reductions at makespan T:

- link: every offloaded amount leaves at d2h and comes back at h2d on the device's link inside
  [H, T] (a link shared with other devices only leaves less), so the device offloads at most
  X(T) = (T - H) / max(1/d2h, 1/h2d) (duplex) or (T - H) / (1/d2h + 1/h2d) (one lane);
- time: the device's ops, its R ops included, fit [head, T] less what must follow
  (``ppsolve.bounds.device_bound`` with the R ops added: every R starts after its F and ends before
  its B), so the recompute time is at most T - D with D the device bound.

Relaxing rule 10 (an item may count both reductions) and the integrality of the counts only lets
more area go, so: if m sum(A0) - C (T - H) > Off(X(T)) + Rec(T - D), where Off(X) is the most a
total offloaded amount X can reduce (equal amounts per stage by concavity, water-filled by the
marginal rho - 2 tau x across stages) and Rec(theta) the most a recompute time theta can reduce
(fractional knapsack, cheapest R per delta first, at most m per stage), no schedule ends by T.
Both sides are monotone in T (the left falls, the right rises), so the least T that passes is
found by bisection; every T that fails is a valid bound. A schedule that ends by T recomputes on
the device for at least Rec^-1(m sum(A0) - C (T - H) - Off(X(T))): the least recompute time the
cap forces, reported at the least T that passes (a longer schedule may need less).
"""

from __future__ import annotations

from dataclasses import dataclass

from ppsolve.ops import OpKind
from ppsolve.problem import Problem

_ITERATIONS = 60


@dataclass(frozen=True)
class _Stage:
    """One stage's figures for the area argument (per microbatch)."""

    area: float  # A0: its area kept whole
    rho: float  # offload: area saved per unit moved, at first
    x_best: float  # offload: the amount past which moving more saves no more
    delta: float  # recompute: area saved (<= 0: recompute never saves area)
    r: float  # recompute: the R's duration


@dataclass(frozen=True)
class ForcedRecompute:
    """``bound``: no schedule is shorter (0 where the problem cannot recompute); ``time``: the least
    recompute time on the device in any schedule that ends by ``bound``."""

    bound: float
    time: float


def _hold_area(problem: Problem, stage: int) -> float:
    """The weight hold over [E(B), E(W)) (split backward; else 0)."""
    return problem.weight_hold[stage] * problem.duration(OpKind.W, stage) if problem.split_backward else 0.0


def recomputed_area(problem: Problem, stage: int, trip: float) -> float:
    """The least area (memory x time) over [S(F), E(B)) of a recomputed (s, j) with round trip
    ``trip`` (module docstring; the weight hold after B is not in it)."""
    f, b, r = (problem.duration(k, stage) for k in (OpKind.F, OpKind.B, OpKind.R))
    a, keep = problem.activation[stage], problem.recompute.keep[stage]
    return keep * max(trip, f + r + b) + (a - keep) * (r + b)


def _stages(problem: Problem, device: int, f_head, b_head, tau: float) -> list[_Stage]:
    out = []
    for s in problem.stages_of_device[device]:
        f, b = problem.duration(OpKind.F, s), problem.duration(OpKind.B, s)
        trip = b_head[s] + b - f_head[s]
        rho = max(0.0, trip - f - b)
        x_best = 0.0 if tau <= 0 else min(problem.max_offload(s), rho / (2 * tau))
        area = problem.activation[s] * trip + _hold_area(problem, s)
        saved = problem.activation[s] * trip - recomputed_area(problem, s, trip)
        out.append(_Stage(area, rho, x_best, saved, problem.duration(OpKind.R, s)))
    return out


def _offload_saving(stages: list[_Stage], m: int, tau: float, amount: float) -> float:
    """The most area a total offloaded ``amount`` can save: per item x <= x_best saves
    rho x - tau x^2, so the amounts go where the marginal rho - 2 tau x is largest (water-filling
    on the marginal lam, found by bisection; taking lam a little low only overstates the saving)."""
    if tau <= 0 or amount <= 0:
        return 0.0

    def moved(lam: float) -> list[float]:
        return [min(st.x_best, max(0.0, (st.rho - lam) / (2 * tau))) for st in stages]

    if m * sum(moved(0.0)) <= amount:
        xs = moved(0.0)
    else:
        lo, hi = 0.0, max(st.rho for st in stages)
        for _ in range(_ITERATIONS):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if m * sum(moved(mid)) > amount else (lo, mid)
        xs = moved(lo)  # moves at least ``amount``: a saving at or above the true most
    return m * sum(st.rho * x - tau * x * x for st, x in zip(stages, xs))


def _recompute_saving(stages: list[_Stage], m: int, budget: float) -> float:
    """The most area recompute time ``budget`` can save (fractional, the cheapest R per saving first)."""
    saved, left = 0.0, max(0.0, budget)
    for st in sorted((st for st in stages if st.delta > 0), key=lambda st: st.r / st.delta):
        if st.r <= 0:
            saved += m * st.delta
            continue
        n = min(m, left / st.r)
        saved, left = saved + n * st.delta, left - n * st.r
    return saved


def _least_recompute(stages: list[_Stage], m: int, need: float, slack: float) -> float:
    """The least recompute time that saves ``need`` area, less ``slack`` (inf when it cannot)."""
    time, left = 0.0, need
    for st in sorted((st for st in stages if st.delta > 0), key=lambda st: st.r / st.delta):
        if left <= 0:
            break
        n = min(m, left / st.delta)
        time, left = time + n * st.r, left - n * st.delta
    return time if left <= slack else float("inf")


def _link_rate(problem: Problem) -> float:
    """The most the device can offload and reload per unit of time."""
    if not problem.can_offload:
        return 0.0
    d2h, h2d = 1 / problem.offload.d2h, 1 / problem.offload.h2d
    return 1 / (max(d2h, h2d) if problem.offload.duplex else d2h + h2d)


def forced_recompute(problem: Problem, device: int, f_head, b_head, device_bound: float) -> ForcedRecompute:
    """The bound of the module docstring for ``device`` (``f_head``/``b_head``: per stage, the earliest
    start of F and of B; ``device_bound``: head + load + tail)."""
    cap = problem.capacity[device]
    if not problem.can_recompute or cap is None or cap <= 0 or not problem.stages_of_device[device]:
        return ForcedRecompute(0.0, 0.0)
    tau = 1 / problem.offload.d2h + 1 / problem.offload.h2d if problem.can_offload else 0.0
    stages = _stages(problem, device, f_head, b_head, tau)
    m, rate = problem.microbatches, _link_rate(problem)
    head = min(f_head[s] for s in problem.stages_of_device[device])
    total = m * sum(st.area for st in stages)

    def short(t: float) -> float:
        """Area still over the cap at makespan t after the most offload can save."""
        return total - cap * (t - head) - _offload_saving(stages, m, tau, rate * (t - head))

    slack = 1e-9 * max(1.0, total)  # rounding: a figure that passes within it passes

    def fails(t: float) -> bool:
        return short(t) > _recompute_saving(stages, m, t - device_bound) + slack

    lo, hi = device_bound, max(device_bound, head + total / cap)
    if not fails(lo):
        return ForcedRecompute(lo, max(0.0, _least_recompute(stages, m, short(lo), slack)))
    for _ in range(_ITERATIONS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if fails(mid) else (lo, mid)
    return ForcedRecompute(lo, _least_recompute(stages, m, short(hi), slack))  # hi passes: a finite time
