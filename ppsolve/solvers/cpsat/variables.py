"""The decision variables of the CP-SAT model: one interval per op, offload choices, makespan."""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING

from ortools.sat.python import cp_model

from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem
from ppsolve.solvers.scaling import Scaling, trivial_horizon

if TYPE_CHECKING:
    from ppsolve.solvers.search.window import Window

# a window's times come from float arithmetic: within this many model units of an integer they are that integer
SNAP = 1e-3

Key = tuple[int, int]  # (stage, microbatch)


@dataclass
class Transfer:
    """The optional OFFLOAD and RELOAD of one (stage, microbatch), present iff ``chosen``.

    ``amount`` (model memory units) is a decision where the transfer is (0 when it is not), split as
    ``amount_r + amount_h``: the part released at B's end and the part of the weight hold (released at
    W's end); the transfers' lengths follow it (:func:`transfer_rate`). In a window model
    (:func:`build_window_variables`) ``chosen`` may be True (the transfer is there), and a transfer
    fixed in time has ints for its start, end and amount and no interval.
    """

    chosen: cp_model.IntVar | bool
    amount: cp_model.IntVar | int
    off_start: cp_model.IntVar | int
    off_end: cp_model.IntVar | int
    off: cp_model.IntervalVar | None
    rel_start: cp_model.IntVar | int
    rel_end: cp_model.IntVar | int
    rel: cp_model.IntervalVar | None
    amount_r: cp_model.IntVar | int = 0
    amount_h: cp_model.IntVar | int = 0
    off_size: cp_model.IntVar | int = 0
    rel_size: cp_model.IntVar | int = 0

    @property
    def present(self) -> cp_model.IntVar | None:
        """The literal its constraints are enforced under (None: always there)."""
        return None if self.chosen is True else self.chosen


@dataclass
class Recompute:
    """The optional R of one (stage, microbatch), present iff ``chosen`` (True: surely there; a window's
    R fixed in time has ints for its start and end and no interval)."""

    chosen: cp_model.IntVar | bool
    start: cp_model.IntVar | int
    end: cp_model.IntVar | int
    interval: cp_model.IntervalVar | None

    @property
    def present(self) -> cp_model.IntVar | None:
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
    recompute: dict[Key, Recompute] = field(default_factory=dict)
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


def optional_recompute(model: cp_model.CpModel, v: Variables, s: int, j: int, chosen, lo: int, hi: int) -> None:
    """An R of (s, j) present iff ``chosen`` (a literal or True), within [lo, hi]."""
    dur = v.scaling.duration(OpKind.R, s, j)
    name = f"R_{s}_{j}"
    start = model.new_int_var(lo, max(lo, hi - dur), f"s_{name}")
    end = model.new_int_var(lo + dur, max(lo + dur, hi), f"e_{name}")
    interval = (model.new_interval_var(start, dur, end, f"i_{name}") if chosen is True
                else model.new_optional_interval_var(start, dur, end, chosen, f"i_{name}"))
    v.recompute[(s, j)] = Recompute(chosen, start, end, interval)


def optional_transfer(model: cp_model.CpModel, v: Variables, s: int, j: int, chosen,
                      off_bounds: tuple[int, int], rel_bounds: tuple[int, int], whole: bool = False) -> None:
    """OFFLOAD and RELOAD of (s, j), present iff ``chosen``, moving a variable amount (1 to the stage's
    share when present, 0 when not; the whole share when ``whole``); their lengths follow the amount
    (:func:`transfer_rate`)."""
    sc, p = v.scaling, v.problem
    top = sc.offload_amount.at(s, j)
    act = sc.activation.at(s, j)
    r = act - (sc.weight_hold.at(s, j) if p.split_backward else 0)
    name = f"{s}_{j}"
    amount = model.new_int_var(0, top, f"amount_{name}")
    a_r = model.new_int_var(0, min(top, r), f"amount_r_{name}")
    a_h = model.new_int_var(0, min(top, act - r), f"amount_h_{name}")
    model.add(amount == a_r + a_h)
    model.add(amount >= (top if whole else 1)).only_enforce_if(chosen)
    model.add(amount == 0).only_enforce_if(chosen.Not())
    parts = []
    for kind, (lo, hi) in ((OpKind.OFFLOAD, off_bounds), (OpKind.RELOAD, rel_bounds)):
        full = sc.duration(kind, s, j)
        size = model.new_int_var(0, full, f"size_{kind.value}_{name}")
        num, den = transfer_rate(p, sc, kind)
        model.add(size * den >= amount * num)
        start = model.new_int_var(lo, hi, f"s_{kind.value}_{name}")
        end = model.new_int_var(lo, hi, f"e_{kind.value}_{name}")
        parts.append((start, end, model.new_optional_interval_var(start, size, end, chosen, f"i_{kind.value}_{name}"),
                      size))
    (os_, oe, off, osz), (rs, re_, rel, rsz) = parts
    v.transfers[(s, j)] = Transfer(chosen, amount, os_, oe, off, rs, re_, rel, a_r, a_h, osz, rsz)


def transfer_rate(problem: Problem, scaling: Scaling, kind: OpKind) -> tuple[int, int]:
    """(num, den): a transfer of ``kind`` moving A model memory units lasts at least A * num / den
    model time units (exact where the bandwidth is a fraction, else rounded up)."""
    per_unit = problem.duration(kind, 0, amount=1.0)  # time per memory unit (one link bandwidth for all stages)
    f = Fraction(per_unit).limit_denominator(10**6)
    if f < per_unit:
        f += Fraction(1, 10**6)
    rate = f * scaling.time_scale / scaling.memory_scale
    return rate.numerator, rate.denominator


def build_variables(model: cp_model.CpModel, problem: Problem, scaling: Scaling, offload: bool,
                    upper: int | None = None, check=lambda: None, recompute: bool = True,
                    whole_shares: bool = False) -> Variables:
    """Intervals for every compute op, optional transfers where ``offload`` and a stage allows it
    (moving any amount, or the whole share with ``whole_shares``), and an optional R where the
    problem may recompute a stage.

    ``upper`` (a makespan known to be reachable) tightens the horizon.
    """
    H = trivial_horizon(problem, scaling)
    if upper is not None:
        H = min(H, upper)
    v = Variables(model, problem, scaling, H)
    for index, op in enumerate(problem.compute_ops()):
        if index % 1000 == 0:
            check()  # the time budget (raises when model building runs out of time)
        dur = scaling.duration(op.kind, op.stage, op.microbatch)
        name = f"{op.kind.value}_{op.stage}_{op.microbatch}"
        start = model.new_int_var(0, max(0, H - dur), f"s_{name}")
        end = model.new_int_var(dur, H, f"e_{name}")
        v.start[op], v.end[op] = start, end
        v.interval[op] = model.new_interval_var(start, dur, end, f"i_{name}")
    if offload and problem.offload is not None:
        for s in range(problem.num_stages):
            for j in range(problem.microbatches):
                if scaling.offload_amount.at(s, j) <= 0 or problem.max_offload(s, j) <= 0:
                    continue
                optional_transfer(model, v, s, j, model.new_bool_var(f"offload_{s}_{j}"), (0, H), (0, H),
                                  whole_shares)
    for s, j in recomputable(problem, scaling) if recompute else ():
        optional_recompute(model, v, s, j, model.new_bool_var(f"recompute_{s}_{j}"), 0, H)
    v.makespan = model.new_int_var(0, H, "makespan")
    v.keys = [(s, j) for s in range(problem.num_stages) for j in range(problem.microbatches)]
    return v


def recomputable(problem: Problem, scaling: Scaling) -> list[Key]:
    """The (stage, microbatch) whose recompute saves memory in the model."""
    if problem.recompute is None or scaling.keep is None:
        return []
    return [(s, j) for s in range(problem.num_stages) for j in range(problem.microbatches)
            if problem.recompute_saving(s, j) > 0 and scaling.keep.at(s, j) < scaling.activation.at(s, j)]


class EmptyWindow(Exception):
    """A free op has no room between its bounds (after rounding): the window has no solution."""


def build_window_variables(model: cp_model.CpModel, problem: Problem, scaling: Scaling, window: "Window",
                           check=lambda: None) -> Variables:
    """Variables of a window (:mod:`ppsolve.solvers.search.window`): an interval for each free op within
    its bounds, optional transfers for its choosable keys, ints for the fixed ops it refers to,
    and ``makespan`` for the objective (the longest path through the window)."""
    times = _WindowTimes(model, scaling, window)
    v = Variables(model, problem, scaling, times.up(window.horizon))
    v.keys = list(window.keys)
    _window_compute(v, times, window, check)
    _window_recomputes(v, times, window)
    _window_transfers(v, times, window)
    top = max(window.tails.values(), default=0.0) + max(window.high.values())
    v.makespan = model.new_int_var(0, times.up(top), "makespan")
    return v


class _WindowTimes:
    """A window's times in model units (rounded inwards within SNAP), and the variables of a free op."""

    def __init__(self, model: cp_model.CpModel, scaling: Scaling, window: "Window"):
        self.model, self.scaling, self.window = model, scaling, window

    def up(self, x: float) -> int:
        return self.scaling.time(x, up=True, tolerance=SNAP)

    def down(self, x: float) -> int:
        return self.scaling.time(x, up=False, tolerance=SNAP)

    def bounds(self, op: Op, dur: int) -> tuple[int, int]:
        """The op's earliest start and latest end; EmptyWindow when ``dur`` does not fit between them."""
        lo, hi = self.up(self.window.low[op]), self.down(self.window.high[op])
        if lo + dur > hi:
            raise EmptyWindow(str(op))
        return lo, hi

    def timed(self, op: Op, dur: int):
        """(start, end, interval) of a free op within its bounds."""
        model = self.model
        lo, hi = self.bounds(op, dur)
        name = f"{op.kind.value}_{op.stage}_{op.microbatch}"
        start = model.new_int_var(lo, hi - dur, f"s_{name}")
        end = model.new_int_var(lo + dur, hi, f"e_{name}")
        return start, end, model.new_interval_var(start, dur, end, f"i_{name}")


def _window_compute(v: Variables, times: _WindowTimes, window: "Window", check) -> None:
    """F, B and W: an interval for each free one, the times of each fixed one."""
    sc = v.scaling
    for index, sop in enumerate(window.free):
        if index % 500 == 0:
            check()
        if sop.kind.is_compute and sop.kind is not OpKind.R:
            op = sop.op
            v.start[op], v.end[op], v.interval[op] = times.timed(op, sc.duration(op.kind, op.stage, op.microbatch))
    for op, sop in window.fixed.items():
        if op.kind.is_compute and op.kind is not OpKind.R:
            v.start[op], v.end[op] = times.down(sop.start), times.up(sop.end)


def _window_recomputes(v: Variables, times: _WindowTimes, window: "Window") -> None:
    """R: optional for a choosable key (where it fits its bounds), else free or fixed as the incumbent has it."""
    model, sc = times.model, v.scaling
    free = {sop.op: sop for sop in window.free}
    can_recompute = set(recomputable(v.problem, sc)) if window.choosable else set()
    for s, j in sorted(window.choosable):
        op = Op(OpKind.R, s, j)
        if (s, j) in can_recompute and op in window.low:
            lo, hi = times.up(window.low[op]), times.down(window.high[op])
            if lo + sc.duration(OpKind.R, s, j) <= hi:
                optional_recompute(model, v, s, j, model.new_bool_var(f"recompute_{s}_{j}"), lo, hi)
    for op in [o for o in list(free) + list(window.fixed) if o.kind is OpKind.R]:
        key = (op.stage, op.microbatch)
        if key in window.choosable:
            continue
        if op in free:
            start, end, interval = times.timed(op, sc.duration(OpKind.R, op.stage, op.microbatch))
            v.recompute[key] = Recompute(True, start, end, interval)
        else:
            sop = window.fixed[op]
            v.recompute[key] = Recompute(True, times.down(sop.start), times.up(sop.end), None)


def _window_transfers(v: Variables, times: _WindowTimes, window: "Window") -> None:
    """OFFLOAD and RELOAD pairs: optional for a choosable key, else free or fixed as the incumbent has them
    (with its amount); a pair whose partner is out of the model's reach is left out."""
    model, sc, problem = times.model, v.scaling, v.problem
    up, down = times.up, times.down
    free = {sop.op: sop for sop in window.free}
    transfer_keys = {(op.stage, op.microbatch) for op in list(free) + list(window.fixed) if op.kind.is_transfer}
    for s, j in sorted(transfer_keys | set(window.choosable)):
        off, rel = Op(OpKind.OFFLOAD, s, j), Op(OpKind.RELOAD, s, j)
        if (s, j) in window.choosable:
            if off in window.low and sc.offload_amount.at(s, j) > 0:  # the window lets it offload (make_window)
                lo_off, lo_rel = up(window.low[off]), up(window.low[rel])
                optional_transfer(model, v, s, j, model.new_bool_var(f"offload_{s}_{j}"),
                                  (lo_off, max(lo_off, down(window.high[off]))),
                                  (lo_rel, max(lo_rel, down(window.high[rel]))))
            continue
        parts = []
        for op in (off, rel):
            sop = free.get(op) or window.fixed.get(op)
            if sop is None:  # its partner is out of the model's reach: it cannot matter
                parts = None
                break
            dur = max(1, up(sop.end - sop.start))
            if op in free:
                parts.append(times.timed(op, dur))
            else:
                parts.append((down(sop.start), up(sop.end), None))
        if parts is None:
            continue
        act = sc.activation.at(s, j)
        amount = min(sc.memory(sop.amount, up=False), act)  # the reload's amount (the pair's last op)
        a_r = min(amount, act - (sc.weight_hold.at(s, j) if problem.split_backward else 0))
        (os_, oe, oi), (rs, re_, ri) = parts
        v.transfers[(s, j)] = Transfer(True, amount, os_, oe, oi, rs, re_, ri, a_r, amount - a_r)
