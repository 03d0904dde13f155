"""The makespan bound from the activations a cap lets a device hold at once (its slots).

Fix a device with cap C and an integer c >= 1, and let theta = C / (c + 1): no c + 1 of its items
(stage, microbatch) hold more than theta each at one instant, since together they would hold more
than C. So the intervals over which items hold more than theta ("big") overlap at most c at a time,
and their lengths sum to at most c times the time they may take. An item is big for at least (L its
round trip, from F(s)'s earliest start to B(s)'s earliest end; a its activation, h its weight hold,
keep its checkpoint; W_h its W when h > theta, else 0; fused backward: no W):

- kept: L + W_h when a > theta (a over [S(F), E(B)), then h over [E(B), E(W))), else 0;
- recomputed: R + B + W_h when keep <= theta < a (a from S(R) to E(B)), max(L, F + R + B) + W_h
  when keep > theta; at the price of one R on the device;
- offloaded by x: kept's figure while a - x > theta; else at least F + B + tau x + W_h (a over
  [S(F), E(OFFLOAD)) and [S(RELOAD), E(B)), tau = 1/d2h + 1/h2d), least at x = a - theta, which the
  offloadable share must allow, at the price of x on the host link.

Nothing is big before the device's first F can start (H). Let t_B be the end of its last B: the
schedule ends at T >= t_B + (the least tail after a B of the device). After t_B only W's run; the
pending W's of items whose hold exceeds theta are big, so at most c of them, and the W's left after
t_B take at most E = c Wmax + (the W's of items whose hold is at most theta), Wmax the longest W
whose hold exceeds theta. Those W's may run back to back from t_B (nothing waits for them, and an
earlier release only lowers the memory), so a schedule that ends by T has one that ends by T in which
every big interval ends by min(T, t_B + E) <= T - tail + min(tail, E); in any schedule
every op but those W's runs in [H, t_B]: t_B >= H + load + (recompute time) - E.

So at makespan T the items must save sum(kept figures) - c (T - tail + min(tail, E) - H) of big
time, with recompute time at most T - max(head + load + tail of the device, H + load - E + tail)
and at most (T - H) x the link's rate offloaded (``ppsolve.bounds.recompute`` has the same two budgets). For
any prices mu, nu >= 0 the saving is at most mu (time) + nu (amount) + sum over items of
max(0, delta - mu R, sigma - nu x) (delta, sigma: an item's saving by recompute, by offload; weak
duality, each item one lever at most), so a T where the needed saving exceeds that for some prices
fails: no schedule ends by T. The need falls and the budgets grow with T, so the least T that
passes is found by bisection; every T that fails is a valid bound. Validity: ``tests/bounds`` (the
drawn tiny problems with levers against their exact optima, and ``test_bound_slots.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ppsolve.bounds.prices import golden_min, link_rate, transfer_time
from ppsolve.ops import OpKind
from ppsolve.problem import Problem
from ppsolve.tolerance import slack

_SLOTS = 4  # c = 1 .. _SLOTS
_ITERATIONS = 40
_GOLDEN = 24


@dataclass(frozen=True)
class _Item:
    """One (stage, microbatch) at a threshold: its big time kept, and what each lever saves and costs."""

    kept: float
    delta: float  # big time saved by recompute (0: none)
    r: float  # its R's duration
    sigma: float  # big time saved by offload (0: none)
    x: float  # the least amount offloaded for it


def _items(problem: Problem, device: int, chains, theta: float, tau: float) -> tuple[list[_Item], float, float]:
    """The device's items at threshold ``theta``; the longest W whose hold exceeds theta (Wmax); the W's
    of the items whose hold does not (each standing for one microbatch)."""
    out, wmax, small_w = [], 0.0, 0.0
    split = problem.split_backward
    for s, j in chains.items(problem.stages_of_device[device]):
        f, b = problem.duration(OpKind.F, s, j), problem.duration(OpKind.B, s, j)
        w = problem.duration(OpKind.W, s, j) if split else 0.0
        a = problem.activation.at(s, j)
        hold = problem.weight_hold.at(s, j) if split else 0.0
        w_big = w if hold > theta else 0.0
        if hold > theta:
            wmax = max(wmax, w)
        else:
            small_w += w
        if a <= theta:
            out.append(_Item(0.0, 0.0, 0.0, 0.0, 0.0))
            continue
        trip = chains.b_head[(s, j)] + b - chains.f_head[(s, j)]
        kept = trip + w_big
        delta = r = 0.0
        if problem.can_recompute and problem.recompute_saving(s, j) > 0:
            r = problem.duration(OpKind.R, s, j)
            keep = problem.recompute.keep.at(s, j)
            big = (r + b if keep <= theta else max(trip, f + r + b)) + w_big
            delta = max(0.0, kept - big)
        sigma = x = 0.0
        if tau > 0 and a - theta <= problem.max_offload(s, j):
            x = a - theta
            sigma = max(0.0, kept - (f + b + tau * x + w_big))
        out.append(_Item(kept, delta, r, sigma, x))
    return out, wmax, small_w


def _most_saving(items: list[_Item], weight: int, time: float, amount: float) -> float:
    """An upper bound on the big time the items can save with recompute time ``time`` and ``amount``
    offloaded (module docstring: any prices mu, nu >= 0 give one; nu is searched by golden section,
    the least over mu for each nu is at 0 or where an item's best option changes)."""
    time, amount = max(0.0, time), max(0.0, amount)

    def at(nu: float) -> float:
        offs = [max(0.0, it.sigma - nu * it.x) for it in items]
        mus = {0.0} | {(it.delta - o) / it.r for it, o in zip(items, offs) if it.r > 0 and it.delta > o}
        return nu * amount + min(
            mu * time + weight * sum(max(0.0, it.delta - mu * it.r, o) for it, o in zip(items, offs)) for mu in mus)

    rates = [it.sigma / it.x for it in items if it.x > 0 and it.sigma > 0]
    if not rates or amount <= 0:
        return at(max(rates, default=0.0))  # offload saves nothing at nu = its best rate
    return golden_min(at, 0.0, max(rates), _GOLDEN)


def slot_bound(problem: Problem, device: int, chains, device_bound: float, floor: float = 0.0) -> float:
    """The bound of the module docstring for ``device``, the largest over c = 1 .. 4 (0 when the device
    has no cap, or when no c raises it above ``floor``, a makespan already proven: then it is not
    searched). ``chains``: a ``ppsolve.bounds.chains.Chains``; ``device_bound``: head + load + tail."""
    cap = problem.capacity[device]
    stages = problem.stages_of_device[device]
    if cap is None or cap <= 0 or not stages:
        return 0.0
    tau, rate = transfer_time(problem), link_rate(problem)
    keys = chains.items(stages)
    head = min(chains.f_head[k] for k in keys)
    tail = min(chains.b_tail[k] for k in keys)
    load, m = problem.device_load(device), chains.weight
    best = 0.0
    for c in range(1, _SLOTS + 1):
        theta = cap / (c + 1)
        items, wmax, small_w = _items(problem, device, chains, theta, tau)
        total = m * sum(it.kept for it in items)
        if total <= 0:
            continue  # nothing above this threshold
        after = c * wmax + m * small_w  # the W's that may run after the last B
        no_r = max(device_bound, head + load - after + tail)  # the makespan without any R

        def fails(t: float) -> bool:
            need = total - c * (t - tail + min(tail, after) - head)
            if need <= slack(total):
                return False
            return need > _most_saving(items, m, t - no_r, rate * (t - head)) + slack(total)

        lo = max(no_r, floor, best)
        if not fails(lo):
            continue
        hi = max(lo, head + tail + total / c)  # no saving needed there
        for _ in range(_ITERATIONS):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if fails(mid) else (lo, mid)
        best = max(best, lo)
    return best if best > floor else 0.0
