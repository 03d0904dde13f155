"""The decision variables of the CP-SAT model: one interval per op, offload choices, makespan."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ortools.sat.python import cp_model

from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem
from ppsolve.solvers.scaling import Scaling, trivial_horizon

if TYPE_CHECKING:
    from ppsolve.solvers.window import Window

# a window's times come from float arithmetic: within this many model units of an integer they are that integer
SNAP = 1e-3

Key = tuple[int, int]  # (stage, microbatch)


@dataclass
class Transfer:
    """The optional OFFLOAD and RELOAD of one (stage, microbatch), present iff ``chosen``.

    In a window model (:func:`build_window_variables`) ``chosen`` may be True (the transfer is
    there), and a transfer fixed in time has ints for its start and end and no interval.
    """

    chosen: cp_model.IntVar | bool
    amount: int
    off_start: cp_model.IntVar | int
    off_end: cp_model.IntVar | int
    off: cp_model.IntervalVar | None
    rel_start: cp_model.IntVar | int
    rel_end: cp_model.IntVar | int
    rel: cp_model.IntervalVar | None

    @property
    def present(self) -> cp_model.IntVar | None:
        """The literal its constraints are enforced under (None: always there)."""
        return None if self.chosen is True else self.chosen


@dataclass
class Variables:
    """Every variable, keyed by op; times are in the model's integer units (see scaling).

    A window model also holds fixed ops, as ints (a start rounded down, an end rounded up):
    constraints between two of them are left out. ``keys`` are the (stage, microbatch) whose
    memory the model tracks.
    """

    model: cp_model.CpModel
    problem: Problem
    scaling: Scaling
    horizon: int
    start: dict[Op, cp_model.IntVar] = field(default_factory=dict)
    end: dict[Op, cp_model.IntVar] = field(default_factory=dict)
    interval: dict[Op, cp_model.IntervalVar] = field(default_factory=dict)
    transfers: dict[Key, Transfer] = field(default_factory=dict)
    makespan: cp_model.IntVar | None = None
    # (size var, start var, end var) of every variable-length memory interval, for hints.
    spans: list[tuple[cp_model.IntVar, cp_model.IntVar, cp_model.IntVar]] = field(default_factory=list)
    peaks: list[cp_model.IntVar] = field(default_factory=list)
    keys: list[Key] = field(default_factory=list)

    def span(self, start: cp_model.IntVar, end: cp_model.IntVar, name: str,
             present: cp_model.IntVar | None = None) -> cp_model.IntervalVar:
        """An interval [start, end) of variable length (optional when ``present`` is given)."""
        size = self.model.new_int_var(0, self.horizon, f"size_{name}")
        self.spans.append((size, start, end))
        if present is None:
            return self.model.new_interval_var(start, size, end, name)
        return self.model.new_optional_interval_var(start, size, end, present, name)


def build_variables(model: cp_model.CpModel, problem: Problem, scaling: Scaling, offload: bool,
                    upper: int | None = None, check=lambda: None) -> Variables:
    """Intervals for every compute op, and optional transfers where ``offload`` and a stage allows it.

    ``upper`` (a makespan known to be reachable) tightens the horizon.
    """
    H = trivial_horizon(problem, scaling)
    if upper is not None:
        H = min(H, upper)
    v = Variables(model, problem, scaling, H)
    for index, op in enumerate(problem.compute_ops()):
        if index % 1000 == 0:
            check()  # the time budget (raises when model building runs out of time)
        dur = scaling.duration[(op.kind, op.stage)]
        name = f"{op.kind.value}_{op.stage}_{op.microbatch}"
        start = model.new_int_var(0, max(0, H - dur), f"s_{name}")
        end = model.new_int_var(dur, H, f"e_{name}")
        v.start[op], v.end[op] = start, end
        v.interval[op] = model.new_interval_var(start, dur, end, f"i_{name}")
    if offload and problem.offload is not None:
        for s in range(problem.num_stages):
            amount = scaling.offload_amount[s]
            if amount <= 0 or problem.max_offload(s) <= 0:
                continue
            d_off, d_rel = scaling.duration[(OpKind.OFFLOAD, s)], scaling.duration[(OpKind.RELOAD, s)]
            for j in range(problem.microbatches):
                name = f"{s}_{j}"
                chosen = model.new_bool_var(f"offload_{name}")
                os_ = model.new_int_var(0, H, f"s_off_{name}")
                oe = model.new_int_var(0, H, f"e_off_{name}")
                rs = model.new_int_var(0, H, f"s_rel_{name}")
                re_ = model.new_int_var(0, H, f"e_rel_{name}")
                off = model.new_optional_interval_var(os_, d_off, oe, chosen, f"i_off_{name}")
                rel = model.new_optional_interval_var(rs, d_rel, re_, chosen, f"i_rel_{name}")
                v.transfers[(s, j)] = Transfer(chosen, amount, os_, oe, off, rs, re_, rel)
    v.makespan = model.new_int_var(0, H, "makespan")
    v.keys = [(s, j) for s in range(problem.num_stages) for j in range(problem.microbatches)]
    return v


class EmptyWindow(Exception):
    """A free op has no room between its bounds (after rounding): the window has no solution."""


def build_window_variables(model: cp_model.CpModel, problem: Problem, scaling: Scaling, window: "Window",
                           check=lambda: None) -> Variables:
    """Variables of a window (:mod:`ppsolve.solvers.window`): an interval for each free op within
    its bounds, optional transfers for its choosable keys, ints for the fixed ops it refers to,
    and ``makespan`` for the objective (the longest path through the window)."""
    sc = scaling
    up = lambda x: sc.time(x, up=True, tolerance=SNAP)  # noqa: E731
    down = lambda x: sc.time(x, up=False, tolerance=SNAP)  # noqa: E731
    v = Variables(model, problem, sc, up(window.horizon))
    v.keys = list(window.keys)

    def bounds(op: Op, dur: int) -> tuple[int, int]:
        lo, hi = up(window.low[op]), down(window.high[op])
        if lo + dur > hi:
            raise EmptyWindow(str(op))
        return lo, hi

    def timed(op: Op, dur: int, present=None):
        lo, hi = bounds(op, dur)
        name = f"{op.kind.value}_{op.stage}_{op.microbatch}"
        start = model.new_int_var(lo, hi - dur, f"s_{name}")
        end = model.new_int_var(lo + dur, hi, f"e_{name}")
        if present is None:
            return start, end, model.new_interval_var(start, dur, end, f"i_{name}")
        return start, end, model.new_optional_interval_var(start, dur, end, present, f"i_{name}")

    for index, sop in enumerate(window.free):
        if index % 500 == 0:
            check()
        if sop.kind.is_compute:
            op = sop.op
            v.start[op], v.end[op], v.interval[op] = timed(op, sc.duration[(op.kind, op.stage)])
    for op, sop in window.fixed.items():
        if op.kind.is_compute:
            v.start[op], v.end[op] = down(sop.start), up(sop.end)
    free = {sop.op: sop for sop in window.free}
    transfer_keys = {(op.stage, op.microbatch) for op in list(free) + list(window.fixed) if op.kind.is_transfer}
    for s, j in sorted(transfer_keys | set(window.choosable)):
        off, rel = Op(OpKind.OFFLOAD, s, j), Op(OpKind.RELOAD, s, j)
        if (s, j) in window.choosable:
            chosen = model.new_bool_var(f"offload_{s}_{j}")
            amount = sc.offload_amount[s]
            d_off, d_rel = sc.duration[(OpKind.OFFLOAD, s)], sc.duration[(OpKind.RELOAD, s)]
            os_, oe, oi = timed(off, d_off, chosen)
            rs, re_, ri = timed(rel, d_rel, chosen)
            v.transfers[(s, j)] = Transfer(chosen, amount, os_, oe, oi, rs, re_, ri)
            continue
        parts = []
        for op in (off, rel):
            sop = free.get(op) or window.fixed.get(op)
            if sop is None:  # its partner is out of the model's reach: it cannot matter
                parts = None
                break
            dur = max(1, up(sop.end - sop.start))
            if op in free:
                parts.append(timed(op, dur))
            else:
                parts.append((down(sop.start), up(sop.end), None))
        if parts is None:
            continue
        amount = min(sc.memory(sop.amount, up=False), sc.activation[s])
        (os_, oe, oi), (rs, re_, ri) = parts
        v.transfers[(s, j)] = Transfer(True, amount, os_, oe, oi, rs, re_, ri)
    top = max(window.tails.values(), default=0.0) + max(window.high.values())
    v.makespan = model.new_int_var(0, up(top), "makespan")
    return v
