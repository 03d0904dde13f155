"""Costs as data: one value of a problem field for every (stage, microbatch).

Contract version 4 lets a problem give a time or a memory size per stage (a number or a list of S) or per
stage and microbatch (S lists of m). A :class:`Grid` holds either form behind one reader: ``grid.at(s, j)``
answers for any op, ``grid.row(s)`` gives a stage's m values and ``grid.array`` the (S, m) array the
vectorised engines index. A grid given per stage keeps one value a stage (no memory or speed cost for the
uniform case) and also reads as the per-stage tuple it was (``grid[s]``, ``list(grid)``, ``max(grid)``);
a per-microbatch grid refuses that reading with :class:`PerMicrobatchError`, so a part of ppsolve that
still asks "how long is F of stage s" fails loudly on such a problem instead of answering for the wrong
microbatch.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import numpy as np

from ppsolve.errors import InputError


class PerMicrobatchError(InputError):
    """A per-stage value was asked of a field that the problem gives per microbatch."""

    def __init__(self, field: str):
        super().__init__(f"problem.{field}", "differs per microbatch here, and this part of ppsolve reads one "
                                             "value per stage")


class Grid:
    """An immutable (stage, microbatch) table of one cost, stored per stage when it does not vary."""

    __slots__ = ("field", "microbatches", "_stage", "_rows", "__dict__")

    def __init__(self, field: str, microbatches: int, *, per_stage: tuple[float, ...] | None = None,
                 rows: tuple[tuple[float, ...], ...] | None = None):
        if (per_stage is None) == (rows is None):
            raise ValueError("give per_stage or rows")
        self.field = field
        self.microbatches = microbatches
        self._stage = per_stage
        self._rows = rows

    @classmethod
    def of_stages(cls, field: str, values, microbatches: int) -> "Grid":
        return cls(field, microbatches, per_stage=tuple(float(v) for v in values))

    @classmethod
    def of_rows(cls, field: str, rows) -> "Grid":
        """A per-microbatch grid of S rows of m values; it keeps that form (a file round-trips as written)."""
        rows = tuple(tuple(float(v) for v in row) for row in rows)
        return cls(field, len(rows[0]) if rows else 0, rows=rows)

    # ----- the form -----
    @property
    def per_microbatch(self) -> bool:
        """Whether the values are given per (stage, microbatch)."""
        return self._rows is not None

    @property
    def stages(self) -> int:
        return len(self._rows) if self._rows is not None else len(self._stage)

    @cached_property
    def varies(self) -> bool:
        """Whether some stage has microbatches of different values."""
        return self._rows is not None and any(min(row) != max(row) for row in self._rows if row)

    # ----- per op -----
    def at(self, stage: int, microbatch: int) -> float:
        """The value of ``stage`` for ``microbatch``."""
        if self._rows is not None:
            return self._rows[stage][microbatch]
        return self._stage[stage]

    def row(self, stage: int) -> tuple[float, ...]:
        """The m values of ``stage``."""
        if self._rows is not None:
            return self._rows[stage]
        return (self._stage[stage],) * self.microbatches

    @cached_property
    def array(self) -> np.ndarray:
        """The (S, m) values; a read-only broadcast view of S values when given per stage."""
        if self._rows is not None:
            out = np.array(self._rows, dtype=float).reshape(len(self._rows), self.microbatches)
        else:
            out = np.broadcast_to(np.asarray(self._stage, dtype=float)[:, None], (len(self._stage), self.microbatches))
        out.flags.writeable = False
        return out

    # ----- per stage, over its microbatches -----
    def low(self, stage: int) -> float:
        """The smallest value of ``stage`` over its microbatches."""
        return min(self._rows[stage]) if self._rows is not None else self._stage[stage]

    def high(self, stage: int) -> float:
        """The largest value of ``stage`` over its microbatches."""
        return max(self._rows[stage]) if self._rows is not None else self._stage[stage]

    def total(self, stage: int) -> float:
        """The sum of ``stage``'s values over its microbatches."""
        return sum(self._rows[stage]) if self._rows is not None else self.microbatches * self._stage[stage]

    def map(self, field: str, fn) -> "Grid":
        """A grid of the same form with ``fn`` applied to every value."""
        if self._rows is not None:
            return Grid(field, self.microbatches, rows=tuple(tuple(fn(v) for v in row) for row in self._rows))
        return Grid(field, self.microbatches, per_stage=tuple(fn(v) for v in self._stage))

    def combine(self, field: str, other: "Grid", fn) -> "Grid":
        """A grid of ``fn(a, b)`` per (stage, microbatch); per stage when both are."""
        if self._rows is None and other._rows is None:
            return Grid(field, self.microbatches, per_stage=tuple(fn(a, b) for a, b in zip(self._stage, other._stage)))
        return Grid(field, self.microbatches, rows=tuple(tuple(fn(a, b) for a, b in zip(self.row(s), other.row(s)))
                                                         for s in range(self.stages)))

    def columns(self, microbatches: list[int] | range) -> "Grid":
        """The grid of a problem with only these microbatches (renumbered 0..)."""
        if self._rows is None:
            return Grid(self.field, len(microbatches), per_stage=self._stage)
        return Grid(self.field, len(microbatches), rows=tuple(tuple(row[j] for j in microbatches)
                                                              for row in self._rows))

    def to_json(self) -> Any:
        """The file's form: one number for equal stages, a list of S, or S lists of m."""
        if self._rows is not None:
            return [list(row) for row in self._rows]
        values = self._stage
        if values and all(v == values[0] for v in values):
            return values[0]
        return list(values)

    # ----- the per-stage reading (a tuple of S values), refused per microbatch -----
    def _per_stage(self) -> tuple[float, ...]:
        if self._rows is not None:
            raise PerMicrobatchError(self.field)
        return self._stage

    def __getitem__(self, stage):
        return self._per_stage()[stage]

    def __iter__(self):
        return iter(self._per_stage())

    def __len__(self) -> int:
        return self.stages

    def __eq__(self, other) -> bool:
        if isinstance(other, Grid):
            return self._stage == other._stage and self._rows == other._rows and \
                self.microbatches == other.microbatches
        if isinstance(other, tuple) and self._rows is None:
            return self._stage == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self._stage, self._rows, self.microbatches))

    def __repr__(self) -> str:
        return f"Grid({self.field}, {self.to_json()!r})"


def parse_grid(raw: Any, stages: int, microbatches: int, where: str, field: str) -> Grid:
    """A file's number, list of S, or S lists of m as a :class:`Grid`; a wrong shape names the entry."""
    if not isinstance(raw, list):
        return Grid.of_stages(field, (raw,) * stages, microbatches)
    if len(raw) != stages:
        raise InputError(where, f"must have {stages} entries (one per stage), got {len(raw)}")
    nested = [isinstance(v, list) for v in raw]
    if not any(nested):
        return Grid.of_stages(field, raw, microbatches)
    for s, (row, is_list) in enumerate(zip(raw, nested)):
        if not is_list:
            raise InputError(f"{where}[{s}]", f"must be a list of {microbatches} numbers (one per microbatch) like "
                                              f"the other stages, got {row!r}")
        if len(row) != microbatches:
            raise InputError(f"{where}[{s}]", f"must have {microbatches} entries (one per microbatch), got {len(row)}")
        for j, v in enumerate(row):
            if isinstance(v, (list, dict, str, bool)) or v is None:
                raise InputError(f"{where}[{s}][{j}]", f"must be a number, got {v!r}")
    return Grid.of_rows(field, raw)


def parse_per_microbatch(raw: Any, microbatches: int, where: str) -> tuple[float, ...]:
    """A number or a list of m numbers (``time.p2p``) as m values."""
    if isinstance(raw, list):
        if len(raw) != microbatches:
            raise InputError(where, f"must have {microbatches} entries (one per microbatch), got {len(raw)}")
        return tuple(float(v) for v in raw)
    return (float(raw),) * microbatches
