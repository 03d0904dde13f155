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

Each item takes one lever at most (keep, offload some amount, or recompute). The most area the
items can save with recompute time theta and offloaded amount X is at most, for any prices
mu, nu >= 0 (weak duality: each item's choice pays its time and link at those prices),
mu theta + nu X + m sum_s max(0, delta_s - mu R_s, max_y (r_s(y) - nu y)) (``_most_saving``; the
least over mu is at one of a few breakpoints, nu is searched, and any pair tried is valid). So if
m sum(A0) - C (T - H) exceeds that at theta = T - D and X = X(T), no schedule ends by T. The
saving bound rises with T and the left side falls, so the least T that passes is found by
bisection; every T that fails is a valid bound. At the first T that passes, any schedule that ends
by it recomputes on the device for more than every theta that still fails there: the least
recompute time the cap forces on a schedule that short (a longer one may need less).

Per-microbatch costs (contract version 4): every (s, j) is an item with its own figures (its round
trip from its own chain), m = 1 each; the argument is the same item by item.
"""

from __future__ import annotations

from dataclasses import dataclass

from ppsolve.bounds.prices import golden_min, link_rate, transfer_time
from ppsolve.ops import OpKind
from ppsolve.problem import Problem
from ppsolve.tolerance import slack

_ITERATIONS = 50
_GOLDEN = 30


@dataclass(frozen=True)
class _Stage:
    """One item's figures for the area argument: a stage's (each microbatch alike) or one (s, j)'s."""

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


def _hold_area(problem: Problem, stage: int, microbatch: int) -> float:
    """The weight hold over [E(B), E(W)) (split backward; else 0)."""
    if not problem.split_backward:
        return 0.0
    return problem.weight_hold.at(stage, microbatch) * problem.duration(OpKind.W, stage, microbatch)


def recomputed_area(problem: Problem, stage: int, trip: float, j: int) -> float:
    """The least area (memory x time) over [S(F), E(B)) of a recomputed (s, j) with round trip
    ``trip`` (module docstring; the weight hold after B is not in it)."""
    f, b, r = (problem.duration(k, stage, j) for k in (OpKind.F, OpKind.B, OpKind.R))
    a, keep = problem.activation.at(stage, j), problem.recompute.keep.at(stage, j)
    return keep * max(trip, f + r + b) + (a - keep) * (r + b)


def _stages(problem: Problem, device: int, chains, tau: float) -> list[_Stage]:
    """The items of ``device`` (``chains``: a ``ppsolve.bounds.chains.Chains``)."""
    out = []
    for s, j in chains.items(problem.stages_of_device[device]):
        f, b = problem.duration(OpKind.F, s, j), problem.duration(OpKind.B, s, j)
        trip = chains.b_head[(s, j)] + b - chains.f_head[(s, j)]
        rho = max(0.0, trip - f - b)
        x_best = 0.0 if tau <= 0 else min(problem.max_offload(s, j), rho / (2 * tau))
        a = problem.activation.at(s, j)
        area = a * trip + _hold_area(problem, s, j)
        saved = a * trip - recomputed_area(problem, s, trip, j)
        out.append(_Stage(area, rho, x_best, saved, problem.duration(OpKind.R, s, j)))
    return out


def _offload_value(st: _Stage, tau: float, nu: float) -> float:
    """The most rho y - tau y^2 - nu y over 0 <= y <= x_best: one item's offload at link price ``nu``."""
    if tau <= 0 or st.x_best <= 0 or st.rho <= nu:
        return 0.0
    y = min(st.x_best, (st.rho - nu) / (2 * tau))
    return (st.rho - nu) * y - tau * y * y


def _most_saving(stages: list[_Stage], m: int, tau: float, time: float, amount: float) -> float:
    """An upper bound on the area that recompute time ``time`` and a total offloaded ``amount`` can
    save, each item using one lever at most (rule 10): by weak duality, for any prices mu, nu >= 0,
    the saving is at most mu time + nu amount + m sum_s max(0, delta - mu R, offload value at nu).
    For a given nu the least over mu is at 0 or where an item's best option changes; nu is searched
    by golden section over [0, max rho] (any nu tried is a valid bound; the least one is kept)."""
    time, amount = max(0.0, time), max(0.0, amount)

    def at(nu: float) -> float:
        offs = [_offload_value(st, tau, nu) for st in stages]
        mus = {0.0} | {(st.delta - o) / st.r for st, o in zip(stages, offs) if st.r > 0 and st.delta > o}
        return nu * amount + min(mu * time + m * sum(max(0.0, st.delta - mu * st.r, o) for st, o in zip(stages, offs))
                                 for mu in mus)

    top = max(st.rho for st in stages)
    if tau <= 0 or amount <= 0 or top <= 0:
        return at(top)  # no offload saves area: every offload value is 0 at nu = max rho
    return golden_min(at, 0.0, top, _GOLDEN)


def forced_recompute(problem: Problem, device: int, chains, device_bound: float) -> ForcedRecompute:
    """The bound of the module docstring for ``device`` (``chains``: the microbatches' chains, a
    ``ppsolve.bounds.chains.Chains``; ``device_bound``: head + load + tail)."""
    cap = problem.capacity[device]
    if not problem.can_recompute or cap is None or cap <= 0 or not problem.stages_of_device[device]:
        return ForcedRecompute(0.0, 0.0)
    tau = transfer_time(problem)
    stages = _stages(problem, device, chains, tau)
    m, rate = chains.weight, link_rate(problem)
    head = min(chains.f_head[i] for i in chains.items(problem.stages_of_device[device]))
    total = m * sum(st.area for st in stages)

    def short(t: float) -> float:
        """Area over what the cap holds over [head, t]."""
        return total - cap * (t - head)

    allowed = slack(total)  # rounding: a figure that passes within it passes

    def fails(t: float, time: float | None = None) -> bool:
        """Whether no schedule ends by ``t`` (recomputing for at most ``time``, default all it can)."""
        time = t - device_bound if time is None else time
        return short(t) > _most_saving(stages, m, tau, time, rate * (t - head)) + allowed

    lo, hi = device_bound, max(device_bound, head + total / cap)
    if fails(lo):
        for _ in range(_ITERATIONS):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if fails(mid) else (lo, mid)
    else:
        hi = lo
    # at hi (which passes), the most recompute time that still fails bounds what any schedule ending by hi needs
    least, most = 0.0, hi - device_bound
    if not fails(hi, least):
        return ForcedRecompute(lo, 0.0)
    for _ in range(_ITERATIONS):
        mid = (least + most) / 2
        least, most = (mid, most) if fails(hi, mid) else (least, mid)
    return ForcedRecompute(lo, least)
