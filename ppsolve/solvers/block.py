"""The building block: a few microbatches' ops, repeated every ``period``, solved exactly by CP-SAT.

In the steady state of a pipeline every microbatch does the same thing a fixed time after the one
before it. A *block* of q microbatches is that pattern: the start of each of their ops (offsets)
and a period P; microbatch i + q * t runs pattern microbatch i shifted by t * P. A pattern valid
for infinitely many microbatches is valid for any m (dropping microbatches only takes work and
memory away), so one small model (q microbatches' ops, whatever m is) gives a schedule for m
microbatches, warm-up and cool-down included. Measured against the solver, it does not pay at the
sizes of instances/scale, so ``solve`` does not use it (docs/solver.md, "The building block").

The model (times in the solver's integer units, ``ppsolve.solvers.scaling``): for each op o an
offset S(o) = k(o) * P + r(o) with 0 <= r(o) < P (its phase in the period).

* precedences: SPEC rules 1-5 within each microbatch, from the one dependency table;
* a device's compute ops, and the transfers of one link lane, never overlap on the circle of
  length P: each op is put on a line of length 2P at r(o) and at r(o) + P, and the copies may
  not overlap (two ops overlap on the circle iff two of their copies overlap on the line);
* memory: an activation held over [a, b) is held by n = (b - a) // P microbatches at every phase
  and by one more over a remainder of length (b - a) - n * P starting at phase a mod P. So the
  device's capacity, less sum(n * demand), bounds a cumulative of the remainders (each again at
  its phase and one period later: the profile over [P, 2P) is the circle's); redundant with it,
  and a much stronger guide to the search: memory x time per period is at most capacity x P;
* offload (when allowed): a choice per (stage, pattern microbatch): the full allowed share goes to
  host after F and comes back before B.

The objective is the least pattern length for the given P; :func:`search_blocks` halves the period
from the serial block's towards a lower bound and keeps the shortest unrolled schedule.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ortools.sat.python import cp_model

from ppsolve.bounds import critical_path
from ppsolve.dependencies import dependency_table
from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem
from ppsolve.schedule import ScheduledOp
from ppsolve.solvers.scaling import Scaling, build_scaling

_F, _B, _W, _OFF, _REL = OpKind.F, OpKind.B, OpKind.W, OpKind.OFFLOAD, OpKind.RELOAD


@dataclass(frozen=True)
class Block:
    """A pattern of ``size`` microbatches: the ``offset`` and ``end`` of each of their ops (model units;
    microbatch i of the pattern stands for every microbatch i + size * t, shifted by t * period) and
    the (stage, microbatch) it offloads."""

    size: int
    period: int
    offset: dict[Op, int]
    end: dict[Op, int]
    offloaded: tuple[tuple[int, int], ...]

    @property
    def length(self) -> int:
        """The pattern's last end."""
        return max(self.end.values())

    def makespan(self, microbatches: int) -> int:
        """The makespan of the unrolled schedule for ``microbatches`` (model units)."""
        return max(end + (microbatches - 1 - op.microbatch) // self.size * self.period
                   for op, end in self.end.items() if op.microbatch < microbatches)


def period_lower_bound(problem: Problem, scaling: Scaling, size: int = 1) -> int:
    """No block of ``size`` microbatches has a shorter period: a device's compute per microbatch, times size."""
    return size * max(sum(scaling.duration[(k, s)] for s in stages for k in problem.kinds)
                      for stages in problem.stages_of_device)


def unrolled_lower_bound(problem: Problem, size: int) -> float:
    """No block of ``size`` microbatches unrolls to a shorter makespan (user units): the last
    microbatch, m - 1, runs pattern (m - 1) mod size shifted by (m - 1) // size periods, each period
    at least size x a device's compute per microbatch, and its pattern lasts at least one microbatch's
    critical path."""
    load = max(problem.device_load(d) for d in range(problem.devices)) / problem.microbatches
    return (problem.microbatches - 1) // size * size * load + critical_path(problem)


class _Model:
    """The CP-SAT model of one block of ``size`` microbatches at ``period`` within ``horizon``."""

    def __init__(self, problem: Problem, scaling: Scaling, size: int, period: int, horizon: int, offload: bool):
        self.problem, self.scaling, self.period, self.horizon = problem, scaling, period, horizon
        self.model = cp_model.CpModel()
        m, S = self.model, problem.num_stages
        self.size = size
        offloadable = [s for s in range(S) if offload and scaling.offload_amount[s] > 0]
        self.start: dict[Op, cp_model.IntVar] = {}
        self.end: dict[Op, cp_model.LinearExpr] = {}
        self.present: dict[Op, cp_model.IntVar] = {}
        self.chosen = {(s, i): m.new_bool_var(f"x{s}_{i}") for s in offloadable for i in range(size)}
        self.length = m.new_int_var(0, horizon, "L")
        lanes: dict[tuple[str, int], list] = {}
        for i in range(size):
            for s in range(S):
                device = problem.placement[s]
                kinds = list(problem.kinds) + ([_OFF, _REL] if (s, i) in self.chosen else [])
                for kind in kinds:
                    op = Op(kind, s, i)
                    dur = scaling.duration[(kind, s)]
                    start = m.new_int_var(0, horizon - dur, str(op))
                    self.start[op], self.end[op] = start, start + dur
                    present = self.chosen.get((s, i)) if kind.is_transfer else None
                    if present is not None:
                        self.present[op] = present
                    m.add(self.length >= start + dur).only_enforce_if(present if present is not None else [])
                    lane = ("compute", device) if kind.is_compute else ("link", problem.lane(device, kind))
                    lanes.setdefault(lane, []).extend(self._circle(start, dur, present, str(op)))
        for intervals in lanes.values():
            m.add_no_overlap(intervals)
        # the pattern's microbatches enter in order, the first at time 0 (shifts and relabelling are symmetries)
        m.add(self.start[Op(_F, 0, 0)] == 0)
        for i in range(1, size):
            m.add(self.start[Op(_F, 0, i)] >= self.start[Op(_F, 0, i - 1)])
        self._precedences()
        self._memory()
        m.minimize(self.length)

    def _phase(self, start, name: str):
        """r with start = k * P + r, 0 <= r < P."""
        m, P = self.model, self.period
        k = m.new_int_var(0, self.horizon // P + 1, f"k_{name}")
        r = m.new_int_var(0, P - 1, f"r_{name}")
        m.add(start == k * P + r)
        return r

    def _circle(self, start, dur: int, present, name: str) -> list:
        """Two copies of an op of length ``dur`` on the line [0, 3P): at its phase and one period later."""
        m, P = self.model, self.period
        r = self._phase(start, name)
        if present is None:
            return [m.new_fixed_size_interval_var(r, dur, f"c0_{name}"),
                    m.new_fixed_size_interval_var(r + P, dur, f"c1_{name}")]
        return [m.new_optional_fixed_size_interval_var(r, dur, present, f"c0_{name}"),
                m.new_optional_fixed_size_interval_var(r + P, dur, present, f"c1_{name}")]

    def _precedences(self) -> None:
        """Rules 1-5 within each microbatch (a transfer's only when it is chosen)."""
        m, table = self.model, dependency_table(self.problem)
        for op, start in self.start.items():
            for dep in table[(op.kind, op.stage)]:
                earlier = dep.op(op.microbatch)
                if earlier not in self.end:
                    continue
                lag = self.scaling.time(dep.lag)
                conditions = [x for x in (self.present.get(op), self.present.get(earlier)) if x is not None]
                m.add(start >= self.end[earlier] + lag).only_enforce_if(conditions)

    def _memory(self) -> None:
        """Each device's holdings on the circle within its capacity (module docstring)."""
        p, sc, m, P, horizon = self.problem, self.scaling, self.model, self.period, self.horizon
        for device, stages in enumerate(p.stages_of_device):
            cap = sc.capacity[device]
            if cap is None:
                continue
            whole, parts, demands, area = [], [], [], []
            for s in stages:
                for i in range(self.size):
                    segments = self._segments(s, i)
                    for index, (lo, hi, demand) in enumerate(segments):
                        if demand <= 0:
                            continue
                        name = f"{s}_{i}_{index}"
                        n = m.new_int_var(0, horizon // P + 1, f"n{name}")
                        rest = m.new_int_var(0, P - 1, f"rest{name}")
                        m.add(hi - lo == n * P + rest)
                        r = self._phase(lo, f"m{name}")
                        until = m.new_int_var(0, 2 * P, f"until{name}")
                        parts += [m.new_interval_var(r, rest, until, f"h0_{name}"),
                                  m.new_interval_var(r + P, rest, until + P, f"h1_{name}")]
                        demands += [demand, demand]
                        whole.append((n, demand))
                        area.append(demand * (hi - lo))
            if not parts:
                continue
            base = m.new_int_var(0, cap, f"base{device}")
            m.add(base == sum(n * q for n, q in whole))
            m.add_cumulative(parts, demands, cap - base)
            m.add(sum(area) <= cap * P)  # redundant: the average holding over the circle is within the cap

    def _segments(self, s: int, i: int) -> list:
        """What (stage s, microbatch i) holds: (from, to, demand) in model units."""
        p, sc, m, horizon = self.problem, self.scaling, self.model, self.horizon
        a, h = sc.activation[s], sc.weight_hold[s] if p.split_backward else 0
        f_start, b_end = self.start[Op(_F, s, i)], self.end[Op(_B, s, i)]
        segments = []
        chosen = self.chosen.get((s, i))
        if chosen is not None:
            # the offloaded share: F.start to OFFLOAD.end and RELOAD.start to B.end if chosen, else
            # F.start to B.end (its second segment then empty)
            x = sc.offload_amount[s]
            first_end = m.new_int_var(0, horizon, f"held_until{s}_{i}")
            m.add(first_end == self.end[Op(_OFF, s, i)]).only_enforce_if(chosen)
            m.add(first_end == b_end).only_enforce_if(~chosen)
            second_start = m.new_int_var(0, horizon, f"held_from{s}_{i}")
            m.add(second_start == self.start[Op(_REL, s, i)]).only_enforce_if(chosen)
            m.add(second_start == b_end).only_enforce_if(~chosen)
            segments += [(f_start, first_end, x), (second_start, b_end, x)]
            a -= x
        segments.append((f_start, b_end, a))  # the share that stays on the device until B ends
        if h:
            segments.append((b_end, self.end[Op(_W, s, i)], h))  # then the weight hold until W ends
        return segments


def solve_block(problem: Problem, scaling: Scaling, size: int, period: int, seconds: float, offload: bool = True,
                horizon: int | None = None, threads: int = 0, seed: int = 0,
                hint: Block | None = None) -> tuple[Block | None, bool]:
    """The shortest block of ``size`` microbatches at ``period`` found in ``seconds``: (block or None,
    proven: optimal or proven infeasible). ``hint``: a block (of the same size) to start from."""
    if horizon is None:
        horizon = _horizon(problem, scaling, size, period)
    model = _Model(problem, scaling, size, period, horizon, offload)
    if hint is not None:
        for op, start in model.start.items():
            if op in hint.offset and hint.offset[op] <= horizon - scaling.duration[(op.kind, op.stage)]:
                model.model.add_hint(start, hint.offset[op])
        for (s, i), x in model.chosen.items():
            model.model.add_hint(x, (s, i) in hint.offloaded)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.05, seconds)
    solver.parameters.num_workers = threads
    solver.parameters.random_seed = seed
    solver.parameters.catch_sigint_signal = False
    code = solver.solve(model.model)
    proven = code in (cp_model.OPTIMAL, cp_model.INFEASIBLE)
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, proven
    offloaded = tuple(key for key, x in model.chosen.items() if solver.boolean_value(x))
    offset = {op: solver.value(start) for op, start in model.start.items()
              if not op.kind.is_transfer or (op.stage, op.microbatch) in offloaded}
    end = {op: x + scaling.duration[(op.kind, op.stage)] for op, x in offset.items()}
    return Block(size, period, offset, end, offloaded), proven


def _horizon(problem: Problem, scaling: Scaling, size: int, period: int) -> int:
    """A pattern length no sensible block needs more than: every op of a microbatch one after
    another, plus a few periods of waiting."""
    serial = sum(d for d in scaling.duration.values()) + 2 * sum(scaling.latency)
    return serial + (4 + size) * period + problem.num_stages


def unroll(problem: Problem, scaling: Scaling, block: Block) -> list[ScheduledOp]:
    """The block's ops for every microbatch of ``problem`` (user units; transfers move the full share)."""
    ops = []
    for op, offset in block.offset.items():
        kind, s = op.kind, op.stage
        amount = problem.max_offload(s) if kind.is_transfer else 0.0
        for j in range(op.microbatch, problem.microbatches, block.size):
            t = scaling.to_time(offset + j // block.size * block.period)
            ops.append(ScheduledOp(kind, s, j, problem.placement[s], t, t + problem.duration(kind, s, amount), amount))
    return ops


def _fits(problem: Problem, scaling: Scaling) -> bool:
    """Whether the serial block keeps the caps: a device holds every activation of its stages at once."""
    return all(cap is None or sum(scaling.activation[s] for s in stages) <= cap
               for cap, stages in zip(scaling.capacity, problem.stages_of_device))


@dataclass
class BlockSearch:
    """What :func:`search_blocks` tried: (size, period, makespan in model units or None, proven) per try."""

    tries: list[tuple[int, int, int | None, bool]]
    best: Block | None


def serial_block(problem: Problem, scaling: Scaling, size: int) -> Block:
    """A block that always exists: each microbatch's ops one after another (F down, B back up,
    each W right after its B), the next microbatch once the last one has ended; no offload."""
    S, table = problem.num_stages, dependency_table(problem, problem.kinds)
    chain = [(_F, s) for s in range(S)] + [(k, s) for s in reversed(range(S)) for k in problem.kinds if k is not _F]
    offset, end, t = {}, {}, 0
    for i in range(size):
        for kind, s in chain:
            op = Op(kind, s, i)
            for dep in table[(kind, s)]:
                if dep.op(i) in end:
                    t = max(t, end[dep.op(i)] + scaling.time(dep.lag))
            offset[op] = t
            t = end[op] = t + scaling.duration[(kind, s)]
    return Block(size, t, offset, end, ())

def search_blocks(problem: Problem, seconds: float, offload: bool = True, threads: int = 8, seed: int = 0,
                  scaling: Scaling | None = None, sizes=(1, 2), per_try: float | None = None) -> BlockSearch:
    """Blocks of each size within ``seconds``: the one whose unrolled makespan is least (the serial
    block, when it keeps the caps, at the worst).

    For each size, from the serial block (which always exists) down: the period is halved towards the
    lower bound (``period_lower_bound``) while blocks are found, each try starting from the last block
    found (a heuristic: a shorter period leaves less room, but the phases of a block at P need not
    fit at P + 1, so the least period is not certain).
    """
    scaling = scaling or build_scaling(problem)
    deadline = time.monotonic() + seconds
    m = problem.microbatches
    sizes = [q for q in sizes if q <= m]
    tries: list[tuple[int, int, int | None, bool]] = []
    best: Block | None = None

    def attempt(size: int, period: int, hint: Block, until: float) -> Block | None:
        nonlocal best
        left = until - time.monotonic()
        block, proven = solve_block(problem, scaling, size, period, min(per_try or left / 3, left), offload,
                                    threads=threads, seed=seed, hint=hint)
        tries.append((size, period, None if block is None else block.makespan(m), proven))
        if block is not None and (best is None or block.makespan(m) < best.makespan(m)):
            best = block
        return block

    for index, size in enumerate(sizes):
        until = time.monotonic() + (deadline - time.monotonic()) / (len(sizes) - index)
        found = serial_block(problem, scaling, size)
        if _fits(problem, scaling) and (best is None or found.makespan(m) < best.makespan(m)):
            best = found
        low = period_lower_bound(problem, scaling, size) - 1  # the longest period known to have no block
        high = found.period
        while high - low > 1 and time.monotonic() < until - 0.05:
            middle = (high + low) // 2
            block = attempt(size, middle, found, until)
            if block is not None:
                found, high = block, middle
            else:
                low = middle
    return BlockSearch(tries, best)

