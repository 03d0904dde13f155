"""The in-order bound: every op's earliest start and least tail with microbatches in index order,
then one machine per device.

Without offload, microbatches may be taken in index order for every (kind, stage) at once: the
k-th earliest F(s, .) belongs to microbatch k, and so on (the relabelling argument of
``ppsolve.solvers.cpsat.constraints.symmetry``: slots keep their times, every memory event
depends only on its stage and kind, and sorted slots keep every dependency). So some optimal
schedule satisfies, for every op o = (kind, s, j):

- ``S(o) >= E(p) + lag`` for each dependency p of its microbatch;
- ``S(o) >= E(kind, s, j - 1)`` (index order);
- for a forward, the cap of its device, counting stage s alone: when F(s, j) starts, the
  microbatches whose B(s, .) has not ended hold an activation each and those whose W(s, .) has
  not ended a weight hold, and in index order those are the latest ones. With ``a`` still active
  (a <= floor(cap / activation) - 1), B(s, j - a - 1) has ended, and W(s, j - a - h - 1) with h
  the holds that fit in what is left: F(s, j) starts no sooner than the least, over a, of the
  later of those two ends.

Heads (earliest starts) follow from these by a forward pass and tails (the least time that
must pass after an op ends until the makespan) by a backward pass over the same rules (the cap
as its precedences F(s, j) after B(s, j - q)). The cap makes the passes circular (a forward
waits for an earlier microbatch's B), so they are repeated while they rise, at most
``ROUNDS`` times: each round starts from valid bounds and keeps them valid, so stopping early
only leaves the bound lower. Each device is then one machine whose ops have these heads and
tails: the preemptive schedule by largest tail first (Jackson's) is a lower bound on
``max(E(o) + tail(o))`` over its ops, hence on the makespan.

Not for problems that may offload or recompute (zeros): the relabelling needs every memory event
to depend only on its stage and kind, and a recomputed forward allocates keep[s] where a kept one
allocates its activation (and the cap rule above counts whole activations).

It binds where a device holds several stages, as a V-shape's first device (the first stage and
the last): +0.5 % to +2.8 % on 22 of the V-shape problems of ``instances/scale``.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from ppsolve.memory import memory_lags
from ppsolve.ops import OpKind
from ppsolve.problem import Problem
from ppsolve.tolerance import EPS

ROUNDS = 64
MAX_CAP_RULES = 64  # the cap's choices of ``a`` are taken in at most this many blocks (see _cap_wait)


def _in_order(a: np.ndarray, d: float) -> np.ndarray:
    """x[j] = max(a[j], x[j - 1] + d): the earliest starts of ops of one duration run in order."""
    k = np.arange(len(a)) * d
    return np.maximum.accumulate(a - k) + k


def _in_order_back(a: np.ndarray, d: float) -> np.ndarray:
    """x[j] = max(a[j], x[j + 1] + d): the tails of ops of one duration run in order."""
    return _in_order(a[::-1], d)[::-1]


def _shift(x: np.ndarray, by: int) -> np.ndarray:
    """y[j] = x[j - by], and 0 where j - by < 0 (no such microbatch: no wait)."""
    y = np.zeros_like(x)
    if by < len(x):
        y[by:] = x[:len(x) - by]
    return y


def _shift_back(x: np.ndarray, by: int) -> np.ndarray:
    """y[j] = x[j + by], and 0 where j + by is past the last microbatch."""
    return _shift(x[::-1], by)[::-1]


class Passes:
    """Heads and tails of every (kind, stage) as arrays over the microbatches."""

    def __init__(self, problem: Problem, order, duration: dict, deps: dict):
        self.p, self.order, self.dur, self.deps = problem, order, duration, deps
        self.m = problem.microbatches
        self.succ: dict = {key: [] for key in order}
        for key in order:
            for k, s, lag in deps[key]:
                self.succ[(k, s)].append((key, lag))
        self.split = problem.split_backward
        self.head = {key: np.zeros(self.m) for key in order}
        self.tail = {key: np.zeros(self.m) for key in order}
        self.cap_rules: dict[int, list] = {}  # stage -> [(active, holds)] the cap allows
        self.cap_lags: dict[int, list] = {}   # stage -> [(kind, q)]: F(s, j) after kind(s, j - q)
        for s in range(problem.num_stages):
            cap = problem.capacity[problem.placement[s]]
            act = problem.activation.at(s, 0)  # the same for every microbatch here
            if cap is None or act <= EPS or cap < act - EPS:
                continue
            hold = problem.weight_hold.at(s, 0) if self.split else 0.0
            most = int(math.floor((cap - act) / act + EPS))  # microbatches still active beside a new one
            if most >= self.m - 1:
                continue  # the cap holds every microbatch at once: it never delays a forward
            rules = []
            for lo, hi in _blocks(most + 1):
                room = cap - act - lo * act
                rules.append((lo, hi, None if hold <= EPS else int(math.floor(room / hold + EPS))))
            self.cap_rules[s] = rules
            self.cap_lags[s] = memory_lags(cap, act, hold)

    def _cap_wait(self, s: int) -> np.ndarray:
        """Earliest starts of F(s, .) that the cap of its device allows (stage s alone).

        The least over ``a`` of max(end of B(s, j - a - 1), end of W(s, j - a - h(a) - 1)), taken over
        blocks lo <= a <= hi: ends rise with j, and a + h(a) falls as a rises (a hold is at most an
        activation), so max(end of B(s, j - hi - 1), end of W(s, j - lo - h(lo) - 1)) is at most every
        term of its block; the work is at most ``MAX_CAP_RULES`` passes over the microbatches however
        large the cap is beside an activation.
        """
        end_b = self.head[(OpKind.B, s)] + self.dur[(OpKind.B, s)]
        end_w = self.head[(OpKind.W, s)] + self.dur[(OpKind.W, s)] if self.split else None
        best = np.full(self.m, np.inf)
        for lo, hi, holds in self.cap_rules[s]:
            when = _shift(end_b, hi + 1)  # B(s, j - active - 1) has ended, active <= hi
            if end_w is not None and holds is not None:
                when = np.maximum(when, _shift(end_w, lo + holds + 1))
            best = np.minimum(best, when)
        return best

    def forward(self) -> bool:
        changed = False
        for key in self.order:
            kind, s = key
            a = self.head[key].copy()
            for k, ds, lag in self.deps[key]:
                np.maximum(a, self.head[(k, ds)] + self.dur[(k, ds)] + lag, out=a)
            if kind is OpKind.F and s in self.cap_rules:
                np.maximum(a, self._cap_wait(s), out=a)
            new = _in_order(a, self.dur[key])
            if np.any(new > self.head[key] + EPS):
                changed = True
            self.head[key] = new
        return changed

    def backward(self) -> bool:
        changed = False
        for key in reversed(self.order):
            kind, s = key
            a = self.tail[key].copy()
            for v, lag in self.succ[key]:
                np.maximum(a, self.tail[v] + self.dur[v] + lag, out=a)
            for waiting, q in self.cap_lags.get(s, ()):
                if waiting is kind:  # F(s, j + q) waits for this op of microbatch j
                    f = (OpKind.F, s)
                    np.maximum(a, _shift_back(self.tail[f] + self.dur[f], q), out=a)
            new = _in_order_back(a, self.dur[key])
            if np.any(new > self.tail[key] + EPS):
                changed = True
            self.tail[key] = new
        return changed


def _blocks(count: int) -> list[tuple[int, int]]:
    """``range(count)`` as at most ``MAX_CAP_RULES`` consecutive blocks (lo, hi), inclusive."""
    size = -(-count // MAX_CAP_RULES)
    return [(lo, min(count, lo + size) - 1) for lo in range(0, count, size)]


def _one_machine(heads: np.ndarray, durations: np.ndarray, tails: np.ndarray) -> float:
    """The least max(end + tail) of a preemptive schedule on one machine (largest tail first)."""
    order = np.argsort(heads, kind="stable")
    r, p, q = heads[order].tolist(), durations[order].tolist(), tails[order].tolist()
    n, i, t, best = len(r), 0, 0.0, 0.0
    ready: list = []  # [-tail, remaining]
    while i < n or ready:
        if not ready and t < r[i]:
            t = r[i]
        while i < n and r[i] <= t + EPS:
            heapq.heappush(ready, [-q[i], p[i]])
            i += 1
        job = ready[0]
        until = r[i] if i < n else math.inf
        if t + job[1] <= until + EPS:
            t += job[1]
            heapq.heappop(ready)
            best = max(best, t - job[0])
        else:
            job[1] -= until - t
            t = until
    return best


def sequence_bounds(problem: Problem, order, duration: dict, deps: dict) -> tuple[float, ...]:
    """Per device, the in-order one-machine bound (zeros when the problem may offload or recompute);
    ``problem``'s microbatches must be interchangeable (no cost differs between them: else pass its
    least-cost relaxation, ``ppsolve.bounds.relaxation.least_costs``)."""
    if problem.can_offload or problem.can_recompute or problem.microbatches == 0:
        return tuple(0.0 for _ in range(problem.devices))
    passes = Passes(problem, order, duration, deps)
    for _ in range(ROUNDS):
        rising = passes.forward()
        rising = passes.backward() or rising
        if not rising:
            break
    out = []
    for d in range(problem.devices):
        keys = [key for key in order if problem.placement[key[1]] == d]
        if not keys:
            out.append(0.0)
            continue
        heads = np.concatenate([passes.head[key] for key in keys])
        tails = np.concatenate([passes.tail[key] for key in keys])
        durations = np.concatenate([np.full(problem.microbatches, duration[key]) for key in keys])
        out.append(_one_machine(heads, durations, tails))
    return tuple(out)
