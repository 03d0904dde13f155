"""The decision variables of the CP-SAT model: one interval per op, offload choices, makespan."""

from __future__ import annotations

from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem
from ppsolve.solvers.scaling import Scaling, trivial_horizon

Key = tuple[int, int]  # (stage, microbatch)


@dataclass
class Transfer:
    """The optional OFFLOAD and RELOAD of one (stage, microbatch), present iff ``chosen``."""

    chosen: cp_model.IntVar
    amount: int
    off_start: cp_model.IntVar
    off_end: cp_model.IntVar
    off: cp_model.IntervalVar
    rel_start: cp_model.IntVar
    rel_end: cp_model.IntVar
    rel: cp_model.IntervalVar


@dataclass
class Variables:
    """Every variable, keyed by op; times are in the model's integer units (see scaling)."""

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
    return v
