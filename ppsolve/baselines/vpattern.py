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

from ppsolve.ops import B, F, W, Op
from ppsolve.problem import Problem

# op types in a device's slot lists: F, f, B, b, then W (one list, or one per chunk when split)
_NF, _Nf, _NB, _Nb, _NW = 0, 1, 2, 3, 4
_PERIOD = 6


def v_half_block(d: int) -> list[list[int]]:
    """Offsets of F, f, B, b of microbatch 0 on each device: about half of 1F1B's memory."""
    gap = 3 if d % 2 == 0 else 0
    return [[2 * i, 3 * d - i - 2, 3 * d + gap + 2 * i - 1, 6 * d + gap - i - 2] for i in range(d)]


def v_min_block(d: int) -> list[list[int]]:
    """Offsets of F, f, B, b of microbatch 0 on each device: about a third of 1F1B's memory."""
    gap = 2 if d % 3 == 0 else 0
    return [[i, 2 * d - i - 1, 2 * d + gap + i, 4 * d + gap - i - 1] for i in range(d)]


def _with_w(slots: list[list[int]], split: bool = False) -> list[list[int]]:
    """Add W's: each free slot takes the oldest backward still without its W (split: per chunk)."""
    out = [list(x) for x in slots[:4]] + ([[], []] if split else [[]])
    taken = sorted((t, kind) for kind in range(4) for t in slots[kind])
    waiting = [0, 0]
    slot = 0
    for t, kind in taken:
        while slot < t:
            _free_slot(out, waiting, slot)
            slot += 1
        if kind >= _NB:
            waiting[kind - _NB if split else 0] += 1
        slot = t + 1
    while waiting[0] or waiting[1]:
        _free_slot(out, waiting, slot)
        slot += 1
    return out


def _free_slot(out: list[list[int]], waiting: list[int], slot: int) -> None:
    for k in range(2):
        if waiting[k]:
            out[_NW + k].append(slot)
            waiting[k] -= 1
            return


def _peak(slots: list[list[int]]) -> int:
    """A device's peak in activations: +1 at F and f, -1 at W (or at each free slot owing a W)."""
    has_w = len(slots) > 4
    events = sorted((t, kind) for kind in range(len(slots)) for t in slots[kind])
    level = peak = owed = 0
    slot = 0
    for t, kind in events:
        if not has_w:
            gaps = t - slot
            used = min(gaps, owed)
            level -= used
            owed -= used
        if kind <= _Nf:
            level += 1
            peak = max(peak, level)
        elif kind <= _Nb:
            owed += 1
        else:
            level -= 1
        slot = t + 1
    return peak


def _heads(slots: list[list[list[int]]]):
    """Every (slot, device, type, microbatch), in the order the reference visits them."""
    return sorted((t, dev, kind, j) for dev, lists in enumerate(slots)
                  for kind, times in enumerate(lists) for j, t in enumerate(times))


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


def _squeeze(slots: list[list[list[int]]], with_w: bool) -> list[list[list[int]]]:
    """Move ops to earlier free slots without raising the highest device peak, then pack on unit costs.

    With ``with_w`` W's take part and every phase is squeezed; without, only the
    cool-down (after the last chunk-0 forward that follows device 0's first b).
    """
    if with_w:
        slots = [_with_w(lists) for lists in slots]
    slots = [[list(times) for times in lists] for lists in slots]
    limit = max(_peak(lists) for lists in slots)
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
        lists = slots[dev][kind]
        for earlier in range(_earliest(slots, dev, kind, j), t):
            if earlier in occupied[dev]:
                continue
            lists[j] = earlier
            if _peak(slots[dev]) <= limit:
                break
        else:
            lists[j] = t
        occupied[dev].add(lists[j])
    if not with_w:
        slots = [_with_w(lists) for lists in slots]
    return _unit_starts(slots)


def _unit_starts(slots: list[list[list[int]]]) -> list[list[list[int]]]:
    """Start slots when every op lasts one slot and runs as soon as its inputs and device allow."""
    _, starts = _eager(slots, [1.0] * len(slots[0]), 0.0)
    return [[[int(x) for x in times] for times in lists[:4]] for lists in starts]


def _eager(slots: list[list[list[int]]], cost: list[float], comm: float):
    """(per-device order, start times) when ops run in slot order, each as soon as it can."""
    d = len(slots)
    ends: dict[tuple[int, int, int], float] = {}
    free = [0.0] * d
    order: list[list[tuple[int, int]]] = [[] for _ in range(d)]
    starts = [[[0.0] * len(times) for times in lists] for lists in slots]
    for _, dev, kind, j in _heads(slots):
        ready = free[dev]
        if kind in (_NF, _NB) and dev > 0:
            ready = max(ready, ends[(dev - 1, kind, j)] + comm)
        if kind in (_Nf, _Nb) and dev + 1 < d:
            ready = max(ready, ends[(dev + 1, kind, j)] + comm)
        if 0 < kind < _NW:
            ready = max(ready, ends[(dev, kind - 1, j)])
        if j > 0:
            ready = max(ready, ends[(dev, kind, j - 1)])
        starts[dev][kind][j] = ready
        free[dev] = ends[(dev, kind, j)] = ready + cost[kind]
        order[dev].append((kind, j))
    return order, starts


def pattern_orders(problem: Problem, block: list[list[int]]) -> tuple[list[list[Op]], int]:
    """Per-device orders of the squeezed repeated block, and its peak in stage activations."""
    d, m = problem.devices, problem.microbatches
    slots = [[list(range(x, x + _PERIOD * m, _PERIOD)) for x in offsets] for offsets in block]
    slots = _squeeze(slots, with_w=True)
    slots = _squeeze(slots, with_w=False)
    peak = max(_peak(lists) for lists in slots)
    order, _ = _eager([_with_w(lists, split=True) for lists in slots], [1.0] * 6, 0.0)
    orders = []
    for i, seq in enumerate(order):
        up, down = i, 2 * d - 1 - i  # stage of chunk 0, of chunk 1
        make = {_NF: (F, up), _Nf: (F, down), _NB: (B, down), _Nb: (B, up), _NW: (W, down), _NW + 1: (W, up)}
        orders.append([make[kind][0](make[kind][1], j) for kind, j in seq])
    return orders, peak
