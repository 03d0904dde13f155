"""Memory of each device over time, exactly as SPEC.md counts it."""

from __future__ import annotations

import math
from numbers import Integral
from typing import Iterable, Sequence

import numpy as np

from ppsolve.ops import KIND_CODE, OpKind
from ppsolve.problem import Problem
from ppsolve.tolerance import EPS

_F, _B, _W, _R, _OFF, _REL = OpKind.F, OpKind.B, OpKind.W, OpKind.R, OpKind.OFFLOAD, OpKind.RELOAD
_KEPT_F = len(KIND_CODE)  # the row of a recomputed forward, which allocates only what it keeps


def _signed_sizes(problem: Problem) -> np.ndarray:
    """Per kind code, stage and microbatch, the signed amount of an op's one memory event: +activation at
    the start of F (+keep when (s,j) is recomputed, row ``_KEPT_F``), +(activation - keep) at the
    start of R, what B (and W when split) release at their end; transfers move their amount
    (+ at the start of RELOAD, - at the end of OFFLOAD) and have no entry here."""
    S, M = problem.num_stages, problem.microbatches
    sizes = np.zeros((len(KIND_CODE) + 1, S, M))
    act = problem.activation.array
    hold = problem.weight_hold.array if problem.split_backward else np.zeros((S, M))
    sizes[KIND_CODE[_F]] = act
    sizes[KIND_CODE[_B]] = -(act - hold)
    sizes[KIND_CODE[_W]] = -hold
    if problem.recompute is not None:
        keep = problem.recompute.keep.array
        sizes[_KEPT_F] = keep
        sizes[KIND_CODE[_R]] = act - keep
    return sizes


class _Events:
    """Every op's memory event as columns, grouped by device and sorted as they count: by time;
    at one instant releases before allocations, except that an activation whose own allocation
    (its F's, or its R's) is at the same instant as its release counts that allocation first
    (zero-length ops: a runtime allocates before it frees); otherwise in the order of ``ops``.
    ``ops`` are ScheduledOp-like objects (kind, stage, microbatch, start, end, amount); the event
    is on the device that holds the op's stage."""

    def __init__(self, problem: Problem, ops: Iterable):
        ops = list(ops)
        codes = [KIND_CODE.get(op.kind, -1) for op in ops]
        if -1 in codes:
            raise ValueError(f"no memory rule for op kind {ops[codes.index(-1)].kind!r}")
        code = np.array(codes, dtype=np.int64)
        stage = np.array([op.stage for op in ops], dtype=np.int64)
        mb = np.array([op.microbatch for op in ops], dtype=np.int64)
        amount = np.array([op.amount for op in ops], dtype=float)
        allocates = (code == KIND_CODE[_F]) | (code == KIND_CODE[_REL]) | (code == KIND_CODE[_R])
        start = np.array([op.start for op in ops], dtype=float)
        time = np.where(allocates, start, np.array([op.end for op in ops], dtype=float))
        delta = np.where(code == KIND_CODE[_OFF], -amount, np.where(code == KIND_CODE[_REL], amount, 0.0))
        compute = code < KIND_CODE[_OFF]
        recomputed = {(op.stage, op.microbatch) for op in ops if op.kind is _R}
        if recomputed:
            row = code.copy()
            for i in np.flatnonzero(code == KIND_CODE[_F]).tolist():
                if (ops[i].stage, ops[i].microbatch) in recomputed:
                    row[i] = _KEPT_F
        else:
            row = code
        delta[compute] = _signed_sizes(problem)[row[compute], stage[compute], mb[compute]]
        tier = np.where(allocates, 2, 0)
        within = np.zeros(len(ops), dtype=np.int64)
        self._count_own_allocations_first(code, stage, mb, time, delta, tier, within)
        device = np.asarray(problem.placement, dtype=np.int64)[stage]
        keep = delta != 0
        device, time, tier, within, delta = device[keep], time[keep], tier[keep], within[keep], delta[keep]
        order = np.lexsort((within, tier, time, device))
        self.time, self.delta = time[order], delta[order]
        self.bounds = np.searchsorted(device[order], np.arange(problem.devices + 1)).tolist()

    @staticmethod
    def _count_own_allocations_first(code, stage, mb, time, delta, tier, within) -> None:
        """The tie rule's exception: where a release of (s, j) (end of B, W or OFFLOAD) is at the instant of
        an allocation of (s, j) by its F or R, both count after the other releases and before the other
        allocations (tier 1): each such activation in turn, in the order of its allocations in ``ops``,
        its allocations before its releases (``within``)."""
        owner = (code == KIND_CODE[_F]) | (code == KIND_CODE[_R])
        releases = (code == KIND_CODE[_B]) | (code == KIND_CODE[_W]) | (code == KIND_CODE[_OFF])
        if not owner.any() or not releases.any():
            return
        allocated_at: dict[tuple[int, int, float], list[int]] = {}
        for i in np.flatnonzero(owner).tolist():
            allocated_at.setdefault((int(stage[i]), int(mb[i]), float(time[i])), []).append(i)
        for i in np.flatnonzero(releases).tolist():
            own = allocated_at.get((int(stage[i]), int(mb[i]), float(time[i])))
            if own and delta[i] != 0:
                tier[i] = tier[own] = 1
                within[own] = [2 * k for k in own]
                within[i] = 2 * max(own) + 1

    def of(self, device: int) -> tuple[np.ndarray, np.ndarray]:
        """(times, signed amounts) of one device's events, in the order they count."""
        a, b = self.bounds[device], self.bounds[device + 1]
        return self.time[a:b], self.delta[a:b]


def memory_events(problem: Problem, ops: Iterable) -> list[list[tuple[float, float]]]:
    """Per device, the (time, delta) events of its activation memory, in the order they count.

    +activation at the start of F (+keep when the schedule recomputes (s,j), and
    +(activation - keep) at the start of R), -amount at the end of OFFLOAD, +amount at the
    start of RELOAD, releases at the end of B (and W when split). Events are sorted
    by time with releases before allocations at one instant, except SPEC's tie rule for an
    activation allocated and released at one instant (its allocation first).
    ``ops`` are ScheduledOp-like objects (kind, stage, device, start, end, amount).
    """
    events = _Events(problem, ops)
    out = []
    for device in range(problem.devices):
        time, delta = events.of(device)
        out.append(list(zip(time.tolist(), delta.tolist())))
    return out


def memory_curves(problem: Problem, ops: Iterable) -> list[list[tuple[float, float]]]:
    """Per device, the step curve of held memory: (time, level after the events at that time)."""
    curves = []
    for device_events in memory_events(problem, ops):
        level, curve = 0.0, [(0.0, 0.0)]
        for time, delta in device_events:
            level += delta
            if curve[-1][0] == time:
                curve[-1] = (time, level)
            else:
                curve.append((time, level))
        curves.append(curve)
    return curves


def peak_memory(problem: Problem, ops: Iterable) -> list[float]:
    """Largest running sum of each device's memory events (releases before allocations)."""
    events = _Events(problem, ops)
    peaks = []
    for device in range(problem.devices):
        _, delta = events.of(device)
        top = np.cumsum(delta).max(initial=0.0)  # the running sum, added in order
        peaks.append(float(top) if top > 0 else 0.0)
    return peaks


def peak_time(problem: Problem, ops: Sequence, device: int) -> float:
    """The first instant at which ``device`` reaches its peak."""
    level = peak = 0.0
    when = 0.0
    for time, delta in memory_events(problem, ops)[device]:
        level += delta
        if level > peak:
            peak, when = level, time
    return when


def memory_lags(cap, activation, hold) -> list[tuple[OpKind, int]]:
    """What a cap on one stage alone implies with its microbatches in index order: F(s, j) starts no
    sooner than kind(s, j - q) ends, for each (kind, q) returned (q < 1: no lag).

    Microbatch j holds its activation from the start of F(s, j) to the end of B(s, j) and its
    weight hold ``hold`` to the end of W(s, j). In index order, if B(s, j-q) has not ended when
    F(s, j) starts, neither have B(s, j-q+1..j-1): q + 1 activations of one stage alone, so
    q = floor(cap / activation); likewise q = floor((cap - activation) / hold) + 1 for W.
    Integers (a solver's model units) divide exactly; other numbers with a tolerance of 1e-9.
    """
    exact = all(isinstance(x, Integral) for x in (cap, activation, hold))

    def floor(x, y) -> int:
        return int(x // y) if exact else int(math.floor(x / y + EPS))

    lags = [(_B, floor(cap, activation))]
    if hold > (0 if exact else EPS):
        lags.append((_W, floor(cap - activation, hold) + 1))
    return lags
