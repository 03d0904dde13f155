"""V-Half and V-Min: a repeating building block on the V-shape, squeezed, then timed on real costs.

This follows the reference implementation of "Pipeline Parallelism with
Controllable Memory" (Qi et al., NeurIPS 2024), written anew. Device i holds
stage i (chunk 0) and stage 2d-1-i (chunk 1). Time is cut into unit slots; each
microbatch takes one block of six slots per device, in which the four ops
F (chunk 0), f (chunk 1), B (chunk 1's backward) and b (chunk 0's) sit at fixed
offsets (:func:`v_half_block`, :func:`v_min_block`); W's go to the free slots.
The repeated block is then squeezed twice on unit costs, moving ops into earlier
free slots without raising the device's peak (first with the W's in place, then
only in the cool-down with W's re-filled into free slots); the resulting
per-device order is what runs, on the real costs.

Memory in slot units: F and f hold one activation each until its W.
"""

from __future__ import annotations

import math

import numpy as np

from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem

# op types in a device's slot lists: F, f, B, b, then W (one list, or one per chunk when split)
_NF, _Nf, _NB, _Nb, _NW = 0, 1, 2, 3, 4
_PERIOD = 6
_FK, _BK, _WK = OpKind.F, OpKind.B, OpKind.W


def v_half_block(d: int) -> list[list[int]]:
    """Offsets of F, f, B, b of microbatch 0 on each device: about half of 1F1B's memory."""
    gap = 3 if d % 2 == 0 else 0
    return [[2 * i, 3 * d - i - 2, 3 * d + gap + 2 * i - 1, 6 * d + gap - i - 2] for i in range(d)]


def v_min_block(d: int) -> list[list[int]]:
    """Offsets of F, f, B, b of microbatch 0 on each device: about a third of 1F1B's memory."""
    gap = 2 if d % 3 == 0 else 0
    return [[i, 2 * d - i - 1, 2 * d + gap + i, 4 * d + gap - i - 1] for i in range(d)]


def _with_w(slots: list[list[int]], split: bool = False) -> list[list[int]]:
    """Add W's: each free slot takes the oldest backward still without its W (split: per chunk,
    chunk 1's first)."""
    out = [list(x) for x in slots[:4]] + ([[], []] if split else [[]])
    taken = sorted((t, kind) for kind in range(4) for t in slots[kind])
    owed = [0, 0]
    slot = 0
    for t, kind in taken + [(math.inf, -1)]:
        while slot < t and (owed[0] or owed[1]):  # a free slot settles an owed W (else stays free)
            k = 0 if owed[0] else 1
            out[_NW + k].append(slot)
            owed[k] -= 1
            slot += 1
        if kind >= _NB:
            owed[kind - _NB if split else 0] += 1
        slot = t + 1
    return out


def _heads(slots: list[list[list[int]]]):
    """Every (slot, device, type, microbatch), in the order the reference visits them."""
    columns = [(times, np.full(len(times), dev), np.full(len(times), kind), np.arange(len(times)))
               for dev, lists in enumerate(slots) for kind, times in enumerate(lists)]
    t, dev, kind, j = (np.concatenate([c[k] for c in columns]).astype(np.int64) for k in range(4))
    rank = np.lexsort((j, kind, dev, t))
    return zip(t[rank].tolist(), dev[rank].tolist(), kind[rank].tolist(), j[rank].tolist())


def _earliest(slots: list[list[list[int]]], dev: int, kind: int, j: int) -> int:
    """The first slot after every input of (dev, kind, j) as the slots stand now."""
    d = len(slots)
    need = -1
    if kind in (_NF, _NB) and dev > 0:
        need = max(need, slots[dev - 1][kind][j])
    if kind in (_Nf, _Nb) and dev + 1 < d:
        need = max(need, slots[dev + 1][kind][j])
    if 0 < kind < _NW:
        need = max(need, slots[dev][kind - 1][j])
    if kind == _NW:
        need = max(need, sorted(slots[dev][_NB] + slots[dev][_Nb])[j])
    if j > 0:
        need = max(need, slots[dev][kind][j - 1])
    return need + 1


class _Profile:
    """One device's slots by content (free, allocating F/f, backward B/b, W) and its memory in activations.

    With explicit W's the level after each slot is kept and a move is checked on
    the slots it spans; without, each free slot settles one owed W, and the peak
    is recomputed (a queue: W's settled by slot t = free(t) + min(0, min over s <= t of
    backwards(s) - free(s))).
    """

    _FREE, _ALLOC, _BACK, _W = 0, 1, 2, 3

    def __init__(self, lists: list[list[int]], size: int, with_w: bool):
        self.content = np.zeros(size, dtype=np.int8)
        for kind, times in enumerate(lists):
            self.content[times] = self._ALLOC if kind <= _Nf else self._BACK if kind <= _Nb else self._W
        self.with_w = with_w
        if with_w:
            self.level = np.cumsum((self.content == self._ALLOC).astype(np.int32)
                                   - (self.content == self._W).astype(np.int32))

    def peak(self) -> int:
        if self.with_w:
            return max(int(self.level.max()), 0)
        content = self.content
        free = np.cumsum(content == self._FREE)
        owed = np.cumsum(content == self._BACK) - free
        settled = free + np.minimum(np.minimum.accumulate(owed), 0)
        return max(int((np.cumsum(content == self._ALLOC) - settled).max()), 0)

    def move(self, kind: int, start: int, to: int, limit: int) -> bool:
        """Move the op of ``kind`` at slot ``start`` to the free slot ``to`` if the peak stays within ``limit``."""
        code = self._ALLOC if kind <= _Nf else self._BACK if kind <= _Nb else self._W
        content = self.content
        if self.with_w:
            if code == self._ALLOC:
                if self.level[to:start].max() + 1 > limit:
                    return False
                self.level[to:start] += 1
            elif code == self._W:
                self.level[to:start] -= 1
            content[start], content[to] = self._FREE, code
            return True
        content[start], content[to] = self._FREE, code
        if self.peak() <= limit:
            return True
        content[start], content[to] = code, self._FREE
        return False


def _squeeze(slots: list[list[list[int]]], with_w: bool) -> list[list[list[int]]]:
    """Move ops to earlier free slots without raising the highest device peak, then pack on unit costs.

    With ``with_w`` W's take part and every phase is squeezed; without, only the
    cool-down (after the last chunk-0 forward that follows device 0's first b).
    """
    if with_w:
        slots = [_with_w(lists) for lists in slots]
    slots = [[list(times) for times in lists] for lists in slots]
    size = 2 + max(max(times[-1] for times in lists) for lists in slots)
    profiles = [_Profile(lists, size, with_w) for lists in slots]
    limit = max(profile.peak() for profile in profiles)
    occupied = [set() for _ in slots]
    phase = 0
    last = len(slots[0][_NF]) - 1
    for t, dev, kind, j in _heads(slots):
        if kind == _Nb and dev == 0 and phase == 0:
            phase = 1
        if phase == 1:
            if kind == _NF and j == last:
                phase = 2
            occupied[dev].add(t)
            continue
        if phase == 0 and not with_w:
            occupied[dev].add(t)
            continue
        taken = occupied[dev]
        for earlier in range(_earliest(slots, dev, kind, j), t):
            if earlier not in taken and profiles[dev].move(kind, t, earlier, limit):
                slots[dev][kind][j] = earlier
                break
        taken.add(slots[dev][kind][j])
    if not with_w:
        slots = [_with_w(lists) for lists in slots]
    return _unit_starts(slots)


def _unit_starts(slots: list[list[list[int]]]) -> list[list[list[int]]]:
    """Start slots when every op lasts one slot and ops run in slot order, each as soon as its
    inputs and its device allow."""
    d = len(slots)
    ends = [[[0] * len(times) for times in lists] for lists in slots]
    free = [0] * d
    for _, dev, kind, j in _heads(slots):
        mine = ends[dev]
        ready = free[dev]
        if kind < _NW:
            src = dev - 1 if kind == _NF or kind == _NB else dev + 1
            if 0 <= src < d and ends[src][kind][j] > ready:
                ready = ends[src][kind][j]
            if kind and mine[kind - 1][j] > ready:
                ready = mine[kind - 1][j]
        if j and mine[kind][j - 1] > ready:
            ready = mine[kind][j - 1]
        free[dev] = mine[kind][j] = ready + 1
    return [[[end - 1 for end in times] for times in lists[:4]] for lists in ends]


def _device_orders(slots: list[list[list[int]]]) -> list[list[tuple[int, int]]]:
    """Each device's (type, microbatch) in slot order."""
    return [[(kind, j) for _, kind, j in sorted((t, kind, j) for kind, times in enumerate(lists)
                                                  for j, t in enumerate(times))] for lists in slots]


def pattern_orders(problem: Problem, block: list[list[int]]) -> tuple[list[list[Op]], int]:
    """Per-device orders of the squeezed repeated block, and its peak in stage activations."""
    d, m = problem.devices, problem.microbatches
    slots = [[list(range(x, x + _PERIOD * m, _PERIOD)) for x in offsets] for offsets in block]
    slots = _squeeze(slots, with_w=True)
    slots = _squeeze(slots, with_w=False)
    size = 2 + max(max(times[-1] for times in lists) for lists in slots)
    peak = max(_Profile(lists, size, with_w=False).peak() for lists in slots)
    order = _device_orders([_with_w(lists, split=True) for lists in slots])
    orders = []
    for i, seq in enumerate(order):
        up, down = i, 2 * d - 1 - i  # stage of chunk 0, of chunk 1
        make = [(_FK, up), (_FK, down), (_BK, down), (_BK, up), (_WK, down), (_WK, up)]  # by type
        orders.append([Op(*make[kind], j) for kind, j in seq])
    return orders, peak
