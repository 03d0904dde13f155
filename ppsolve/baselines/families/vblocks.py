"""The building-block search on the V-shape: every block within a memory limit, repeated, squeezed, reordered.

This follows the V-shape building-block framework of "Pipeline Parallelism with
Controllable Memory" (Qi et al., NeurIPS 2024) as its reference implementation
searches it, written anew. A device row is a string of unit slots holding
``F`` (chunk 0 forward), ``f`` (chunk 1 forward), ``B`` (chunk 1 backward),
``b`` (chunk 0 backward) and the W's ``W`` (of B) and ``w`` (of b).

* A block gives device 0's six-slot pattern (F at 0; f, B, b anywhere; each W
  in the first free slot after its backward); every later device shifts F and B
  by +delta and f and b by -1 (delta in 1..5, one value for the first ``len0``
  devices and another for the rest).
* The block is repeated, cut to m microbatches, squeezed (each op as early as
  its inputs allow, order kept), its warm-up rebuilt without raising the peak,
  its cool-down rebuilt, and then every free slot is filled with a later op of
  the same device where that keeps the dependencies and the peak.
* Every block whose peak (stage activations held from F to W) is within the
  limit is a candidate; the caller times them on the real costs.
"""

from __future__ import annotations

import functools
import itertools
from collections import deque

from ppsolve.baselines.common import memory_deltas
from ppsolve.baselines.engines.placer import Placer
from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem

_SIZE = 6
_IDS = "FfBbWw"
_F, _B, _W = OpKind.F, OpKind.B, OpKind.W
# [delta F, delta f, delta B, delta b] from one device to the next
_OFFSETS = [(k, -1, k, -1) for k in range(1, 6)]


class _Invalid(Exception):
    """A block whose rows break a rule of the framework."""


_DELTA = {"F": 1, "f": 1, "W": -1, "w": -1, "B": 0, "b": 0, " ": 0}


def _peaks(rows: list[list[str]]) -> list[int]:
    """Each device's peak: stage activations held from F (or f) to its W (or w)."""
    return [max(0, max(itertools.accumulate(map(_DELTA.__getitem__, row)), default=0)) for row in rows]


def _fill_w(pattern: list[int]) -> list[int]:
    taken = {v for v in pattern if v >= 0}
    for back, w in ((2, 4), (3, 5)):
        for k in range(_SIZE):
            pos = (pattern[back] + k) % _SIZE
            if pos not in taken:
                pattern[w] = pos
                taken.add(pos)
                break
    return pattern


def _block(first: list[int], offset0, offset1, len0: int, p: int) -> list[list[int]] | None:
    rows = [first]
    for i in range(p - 1):
        offset = offset0 if i < len0 else offset1
        new, taken = [-1] * _SIZE, set()
        for k, delta in enumerate(offset):
            pos = (rows[-1][k] + delta) % _SIZE
            if pos in taken:
                return None
            taken.add(pos)
            new[k] = pos
        rows.append(_fill_w(new))
    return rows


def _repeat(p: int, m: int, block: list[list[int]]) -> list[list[str]]:
    rows = []
    for pattern in block:
        cell = [" "] * _SIZE
        for k, pos in enumerate(pattern):
            if pos >= 0:
                cell[pos] = _IDS[k]
        rows.append(cell * (4 * p + m + 1))
    return rows


def _clear_from(row: list[str], pos: int, step: int) -> None:
    """Blank ``row[pos]`` and every block's same slot from there on in direction ``step``."""
    if 0 <= pos < len(row):
        cells = range(pos, -1, -_SIZE) if step < 0 else range(pos, len(row), _SIZE)
        row[pos::step * _SIZE] = [" "] * len(cells)


def _keep_m(rows: list[list[str]], m: int) -> None:
    """Keep m occurrences of each op, starting where its inputs can already be there."""
    p = len(rows)
    index = _SIZE
    for ident in "FfBb":
        for i in (range(p) if ident in "FB" else range(p - 1, -1, -1)):
            for _ in range(_SIZE):
                if rows[i][index] == ident:
                    _clear_from(rows[i], index - _SIZE, -1)
                    _clear_from(rows[i], index + _SIZE * m, 1)
                    index += 1
                    if ident in "Bb":
                        w = "W" if ident == "B" else "w"
                        for k in range(_SIZE):
                            if rows[i][index + k] == w:
                                _clear_from(rows[i], index + k - _SIZE, -1)
                                _clear_from(rows[i], index + k + _SIZE * m, 1)
                                break
                    break
                index += 1


def _squeeze(rows: list[list[str]]) -> list[list[str]]:
    """Each op as early as its inputs allow, keeping every device's order (unit slots).

    Column by column: first the upward ops (F, B, W) from device 0 up, then the
    downward ones (f, b, w) from the last device down.
    """
    p = len(rows)
    width = len(rows[0])
    cells = sorted((j, c not in "FBW", i if c in "FBW" else -i, i, c)
                   for i, row in enumerate(rows) for j, c in enumerate(row) if c != " ")
    out = [[" "] * width for _ in range(p)]
    count = [dict.fromkeys(_IDS, 0) for _ in range(p)]
    where: dict[tuple[int, int, str], int] = {}
    nxt = [0] * p
    for _, _, _, i, ident in cells:
        c = count[i][ident]
        if ident in "Ww" or (i == 0 and ident in "FB") or (i == p - 1 and ident in "fb"):
            at = nxt[i]
        else:
            before = where.get((c, i - 1 if ident in "FB" else i + 1, ident))
            if before is None:
                raise _Invalid
            at = max(before + 1, nxt[i])
        out[i][at] = ident
        count[i][ident] = c + 1
        where[(c, i, ident)] = at
        nxt[i] = at + 1
    width = max(nxt)
    return [row[:width] for row in out]


def _rebuild_warm_up(rows: list[list[str]], m: int) -> None:
    """Before each device's first b: chunk-0 forwards first, then f's, then B W F/f triples."""
    p = len(rows)
    peak = min(max(_peaks(rows)), 2 * p)
    for i in range(p):
        want_ff = min(i + 1, peak // 2, m)
        want_f = min(peak - want_ff, m)
        n = dict.fromkeys("FfBW", 0)
        for j, c in enumerate(rows[i]):
            if c == "b":
                break
            if c in n:
                n[c] += 1
            elif c != " ":
                raise _Invalid
            rows[i][j] = " "
        used = dict.fromkeys("FfBW", 0)
        row = rows[i]
        j = i

        def put(c: str) -> None:
            if j >= len(row):
                raise _Invalid
            row[j] = c
            used[c] += 1

        for _ in range(2 * (p - 1 - i)):
            if used["F"] < min(want_f, n["F"]):
                put("F")
            j += 1
        for _ in range(i + 1):
            if used["F"] < min(want_f, n["F"]):
                put("F")
            j += 1
            if used["f"] < min(want_ff, n["f"]):
                put("f")
            j += 1
        while any(used[c] < n[c] for c in "FfBW"):
            if used["B"] < n["B"]:
                put("B")
            j += 1
            if used["W"] < n["W"]:
                put("W")
            j += 1
            if used["f"] < n["f"]:
                put("f")
            elif used["F"] < n["F"]:
                put("F")
            j += 1


def _cut_to(rows: list[list[str]], m: int) -> None:
    for row in rows:
        seen = dict.fromkeys(_IDS, 0)
        for j, c in enumerate(row):
            if c != " ":
                if seen[c] >= m:
                    row[j] = " "
                else:
                    seen[c] += 1


def _release_w_early(rows: list[list[str]], peak: int) -> None:
    """Few microbatches: move a device's first W's to the end while it stays within ``peak``."""
    peaks = _peaks(rows)
    least = min(peaks)
    for i, row in enumerate(rows):
        moved = []
        for j in range(len(row)):
            if peaks[i] + len(moved) >= peak:
                break
            if row[j] in "Ww":
                moved.append(row[j])
                row[j] = " "
        row.extend(moved + [" "] * (peak - least - len(moved)))


def _rebuild_cool_down(rows: list[list[str]], m: int) -> list[list[str]]:
    p = len(rows)
    peak = max(_peaks(rows))
    if peak > 2 * p:
        raise _Invalid
    most_bb = min((peak + 1) // 2, m)
    most_b = min(peak - most_bb, m)
    start = -1
    for i, row in enumerate(rows):
        nb = nbb = nw = nww = 0
        last_ff = -1
        for j in range(len(row) - 1, -1, -1):
            c = row[j]
            if c == "f" and last_ff == -1:
                last_ff = j
            if c == "B" and nb < i + 1 and nb < most_b:
                row[j] = " "
                nb += 1
            if c == "b" and nbb < most_bb:
                row[j] = " "
                nbb += 1
        for j in range(len(row) - 1, -1, -1):
            if nw >= nb and nww >= nbb and nw + nww >= peak:
                break
            if row[j] == "W":
                row[j] = " "
                nw += 1
            elif row[j] == "w":
                row[j] = " "
                nww += 1
        if i == 0:
            start = last_ff
        for k in range(nbb):
            _place(row, start - i + 2 * p - 2 * k, "b", must_be_free=True)
        for k in range(nb):
            _place(row, start + 1 + i - 2 * k, "B", must_be_free=False)
    width = 0
    for row in rows:
        owed = {"W": 0, "w": 0}
        last_w = max((j for j, c in enumerate(row) if c in "Ww"), default=-1)
        for j, c in enumerate(row):
            if c in "Bb":
                owed["W" if c == "B" else "w"] += 1
            elif c in "Ww":
                owed[c] -= 1
            elif c == " " and j > last_w:
                for w in "Ww":
                    if owed[w] > 0:
                        row[j] = w
                        owed[w] -= 1
                        break
        row.extend(["W"] * owed["W"] + ["w"] * owed["w"])
        width = max(width, len(row))
    for row in rows:
        row.extend([" "] * (width - len(row)))
    return _squeeze(rows)


def _place(row: list[str], j: int, c: str, must_be_free: bool) -> None:
    if not 0 <= j < len(row) or (must_be_free and row[j] != " "):
        raise _Invalid
    row[j] = c


def _fill_gaps(rows: list[list[str]]) -> None:
    """Fill each free slot with the first later op of its device that may move there (inputs, peak)."""
    p = len(rows)
    peak = max(_peaks(rows))
    width = len(rows[0])
    last = [dict.fromkeys(_IDS, -1) for _ in rows]
    for i, row in enumerate(rows):
        for j, c in enumerate(row):
            if c != " ":
                last[i][c] = j
    level = [0] * p
    count = [dict.fromkeys(_IDS, 0) for _ in range(p)]
    where: dict[tuple[int, int, str], int] = {}

    def record(i: int, c: str, j: int) -> None:
        where[(count[i][c], i, c)] = j
        count[i][c] += 1
        level[i] += 1 if c in "Ff" else -1 if c in "Ww" else 0

    for j in range(width):
        for i in range(p):
            row = rows[i]
            if row[j] != " ":
                record(i, row[j], j)
                continue
            available = {c for c in _IDS if last[i][c] > j}
            delta = top = 0
            for k in range(j + 1, width):
                if not available:
                    break
                c = row[k]
                delta += 1 if c in "Ff" else -1 if c in "Ww" else 0
                before, top = top, max(top, delta)
                if c == " " or c not in available:
                    continue
                available.discard(c)
                if c in "Ff" and level[i] + before >= peak:
                    continue
                if not _inputs_done(c, i, p, count, where, j):
                    continue
                row[j], row[k] = c, " "
                record(i, c, j)
                break


def _inputs_done(c: str, i: int, p: int, count, where, j: int) -> bool:
    n = count[i][c]
    if c in "FB":
        if i > 0:
            return -1 < where.get((n, i - 1, c), -1) < j
        return c == "F" or count[i]["f"] > n
    if c in "fb":
        if i + 1 < p:
            return -1 < where.get((n, i + 1, c), -1) < j
        return count[i]["F" if c == "f" else "B"] > n
    return count[i]["B" if c == "W" else "b"] > n


def _relabel_w(rows: list[list[str]], m: int) -> None:
    """Each W slot serves the oldest backward still without its W."""
    for row in rows:
        if any(row.count(c) != m for c in _IDS):
            raise _Invalid
        queue: deque[str] = deque()
        for j, c in enumerate(row):
            if c in "Bb":
                queue.append("W" if c == "B" else "w")
            elif c in "Ww":
                row[j] = queue.popleft()


def _rows_for(p: int, m: int, block: list[list[int]], limit: int, memo: dict) -> tuple[list[list[str]] | None, int]:
    """The block's rows for m microbatches (None if it breaks a rule or the limit), and its peak.

    ``memo`` maps squeezed repeated rows to their outcome: blocks that squeeze alike end alike.
    """
    spare = max(m, 2 * p)
    rows = _repeat(p, spare, block)
    try:
        _keep_m(rows, spare)
    except IndexError:
        return None, 0
    first_peak = max(_peaks(rows))
    if (m == spare and first_peak > limit) or first_peak > 2 * p:
        return None, first_peak
    try:
        rows = _squeeze(rows)
        key = (tuple("".join(r) for r in rows), first_peak)
        if key not in memo:
            memo[key] = _finish_rows(rows, p, m, spare, limit, first_peak)
        return memo[key]
    except (_Invalid, IndexError):
        return None, first_peak


def _finish_rows(rows, p: int, m: int, spare: int, limit: int, first_peak: int):
    """Warm-up, cut to m, cool-down, gap filling: (rows or None, peak)."""
    try:
        _rebuild_warm_up(rows, spare)
        rows = _squeeze(rows)
        peak = max(_peaks(rows))
        if peak > first_peak:
            return None, first_peak
        if m < spare:
            _cut_to(rows, m)
            if m <= p and 2 * m <= limit:
                _release_w_early(rows, min(2 * p, peak))
            rows = _squeeze(rows)
            first_peak = peak = max(_peaks(rows))
            if peak > limit:
                return None, peak
        rows = _rebuild_cool_down(rows, m)
        _fill_gaps(rows)
        _relabel_w(rows, m)
    except (_Invalid, IndexError):
        return None, first_peak
    peak = max(_peaks(rows))
    return (rows if peak <= first_peak else None), peak


def _ops_of(d: int, i: int) -> dict[str, tuple[OpKind, int]]:
    """What each letter is on device i of a V over d devices: (kind, stage)."""
    up, down = i, 2 * d - 1 - i
    return {"F": (_F, up), "f": (_F, down), "B": (_B, down), "b": (_B, up), "W": (_W, down), "w": (_W, up)}


def orders_of(rows: list[list[str]]) -> list[list[Op]]:
    """Per-device op orders of a block's rows."""
    out = []
    for i, row in enumerate(rows):
        make = _ops_of(len(rows), i)
        seen = dict.fromkeys(_IDS, 0)
        order = []
        for c in row:
            if c != " ":
                kind, stage = make[c]
                order.append(Op(kind, stage, seen[c]))
                seen[c] += 1
        out.append(order)
    return out


def timing(problem: Problem, rows: list[list[str]]) -> tuple[float, list[float]]:
    """(makespan, peak memory per device) of the rows on the problem's real costs.

    Every input of an op sits in an earlier column, so one pass in column order
    places each op as soon as its device and inputs allow (:class:`Placer`, as the simulator does).
    """
    d = len(rows)
    delta = memory_deltas(problem)
    ops = [_ops_of(d, i) for i in range(d)]
    placer = Placer(problem)
    level = [0.0] * d
    peak = [0.0] * d
    for j in range(len(rows[0])):
        for i in range(d):
            c = rows[i][j]
            if c == " ":
                continue
            kind, s = ops[i][c]
            level[i] += delta[kind][s][placer.placed(kind, s)]
            placer.put(kind, s)
            peak[i] = max(peak[i], level[i])
    return max(placer.free), peak


@functools.lru_cache(maxsize=64)
def block_rows(d: int, m: int, limit: int) -> tuple[tuple[tuple[str, ...], ...], ...]:
    """The rows of every building block whose peak is within ``limit`` stage activations (cached)."""
    limit = min(limit, 2 * d)
    firsts = [_fill_w([0, ff, b, bb, -1, -1])
              for ff, b, bb in itertools.permutations(range(1, _SIZE), 3)]
    found: dict[tuple, list[list[str]]] = {}
    memo: dict = {}
    for first in firsts:
        for i0 in range(len(_OFFSETS)):
            for i1 in range(i0 + 1):
                for len0 in range(1, d):
                    block = _block(list(first), _OFFSETS[i0], _OFFSETS[i1], len0, d)
                    if block is None:
                        continue
                    rows, peak = _rows_for(d, m, block, limit, memo)
                    if peak > limit:
                        break
                    if rows is not None:
                        found.setdefault(tuple("".join(r) for r in rows), rows)
    return tuple(tuple(tuple(r) for r in rows) for rows in found.values())
