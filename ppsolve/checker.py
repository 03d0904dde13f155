"""Judging a schedule: every rule of SPEC.md, recomputed from the schedule alone.

:func:`check` returns a :class:`CheckReport` with every violation (the rule, the op
and the numbers) and the runtime re-timing beside the planned figures.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import cached_property
from operator import itemgetter
from typing import Iterable

from ppsolve.dependencies import RULES as DEPENDENCY_RULES, dependency_table
from ppsolve.errors import PpsolveError
from ppsolve.memory import memory_events, peak_memory
from ppsolve.metric_warnings import metric_warnings
from ppsolve.gcpause import without_gc
from ppsolve.ops import COMPUTE_KINDS, TRANSFER_KINDS, Op, OpKind
from ppsolve.schedule import Schedule, ScheduledOp
from ppsolve.simulator import retime
from ppsolve.tolerance import exceeds, slack

_F, _B, _W, _R, _OFF, _REL = OpKind.F, OpKind.B, OpKind.W, OpKind.R, OpKind.OFFLOAD, OpKind.RELOAD

RULES = {
    "complete": "every F, B (and W when split) once; OFFLOAD and RELOAD in pairs; at most one R per (s,j)",
    "device": "an op runs on the device that holds its stage; a transfer uses that device's link",
    "duration": "rule 8: every op lasts exactly its duration",
    "start": "rule 8: nothing starts before time 0",
    "amount": "0 < amount <= fraction * activation, the same amount offloaded and reloaded",
    **DEPENDENCY_RULES,
    "R6": "rule 6: compute ops of one device never overlap",
    "R7": "rule 7: transfers of one link lane never overlap",
    "R10": "rule 10: a recomputed activation is not also offloaded",
    "memory": "peak memory of a device within its capacity (releases before allocations)",
    "retime": "the runtime re-timing is no later and no higher than planned (otherwise a bug in ppsolve)",
}

_START_END = itemgetter(4, 5)  # a ScheduledOp's (start, end)
MAX_GRIDS = 50  # violations drawn with the ops around them; later ones are listed without

# How a violated dependency is described, by rule and the kind of the op that waits.
_WHAT = {("R1", _F): "its input", ("R2", _B): "the loss turns around", ("R3", _B): "its output gradient",
         ("R4", _W): "its input gradient", ("R5", _OFF): "the activation it moves",
         ("R5", _REL): "its offload", ("R5", _B): "its reloaded activation",
         ("R9", _R): "the forward it recomputes", ("R9", _B): "its recomputed activation"}


@dataclass(frozen=True, slots=True)
class Violation:
    rule: str
    message: str
    op: str | None = None
    device: int | None = None
    time: float | None = None
    grid: str | None = None

    def to_dict(self) -> dict:
        out = {"rule": self.rule, "message": self.message}
        for key in ("op", "device", "time"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out

    def render(self) -> str:
        text = f"[{self.rule}] {self.message}"
        return f"{text}\n{self.grid}" if self.grid else text


@dataclass
class CheckReport:
    """Planned and re-timed figures, and every violation found."""

    violations: list[Violation]
    makespan: float
    peak_memory: list[float]
    bubble_ratio: float
    offloaded: float
    recomputed: int = 0
    retimed_makespan: float | None = None
    retimed_peak_memory: list[float] | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        """The ops are complete and obey every rule as planned."""
        return not any(v.rule != "retime" for v in self.violations)

    @property
    def executable(self) -> bool:
        """A runtime following SPEC.md's execution rules stays on plan and within capacity."""
        return self.retimed_makespan is not None and not any(v.rule == "retime" for v in self.violations)

    @property
    def ok(self) -> bool:
        return self.valid and self.executable

    def to_dict(self) -> dict:
        return {"valid": self.valid, "executable": self.executable,
                "violations": [v.to_dict() for v in self.violations],
                "makespan": self.makespan, "peak_memory": self.peak_memory,
                "bubble_ratio": self.bubble_ratio, "offloaded": self.offloaded, "recomputed": self.recomputed,
                "retimed": {"makespan": self.retimed_makespan, "peak_memory": self.retimed_peak_memory},
                "warnings": self.warnings}


class _Checker:
    def __init__(self, schedule: Schedule):
        self.schedule = schedule
        self.problem = schedule.problem
        self.eps = slack(schedule.makespan)
        self.violations: list[Violation] = []
        self.by_op: dict[tuple, ScheduledOp] = {}  # (kind, stage, microbatch), equal to its Op -> first listing

    def add(self, rule: str, message: str, op: ScheduledOp | None = None, time: float | None = None,
            grid_ops: Iterable[ScheduledOp] = ()) -> None:
        grid = None
        if len(self.violations) < MAX_GRIDS:
            grid_ops = list(grid_ops)
            grid = self._grid(grid_ops, time) if grid_ops else None
        self.violations.append(Violation(rule, message, str(op.op) if op else None,
                                         op.device if op else None, time, grid))

    # ----- rules -----
    def completeness(self) -> bool:
        p = self.problem
        ops = self.schedule.ops
        keys = [op[:3] for op in ops]  # (kind, stage, microbatch): equal to, and hashed as, its Op
        counts = Counter(keys)
        self.by_op = dict(zip(reversed(keys), reversed(ops)))  # the first listing of each op
        if len(counts) < len(keys):
            for key, count in counts.items():
                if count > 1:
                    self.add("complete", f"{Op(*key)} appears {count} times", self.by_op[key])
        compute_ops = p.compute_ops()
        missing = [op for op in compute_ops if op not in counts]
        for op in missing[:10]:
            self.add("complete", f"{op} is missing")
        if len(missing) > 10:
            self.add("complete", f"... and {len(missing) - 10} more compute ops are missing")
        expected = set(compute_ops)
        for key in counts:
            kind, stage, microbatch = key
            if kind is _R:
                if p.recompute is None:
                    self.add("complete", f"{Op(*key)}: the problem has no recompute block", self.by_op[key])
                elif (_OFF, stage, microbatch) in counts or (_REL, stage, microbatch) in counts:
                    self.add("R10", f"{Op(*key)}: (stage {stage}, microbatch {microbatch}) is recomputed "
                                    f"and also offloaded", self.by_op[key])
            elif kind in COMPUTE_KINDS:
                if key not in expected:
                    self.add("complete", f"{Op(*key)} is not an op of this problem (fused backward has no W)",
                             self.by_op[key])
            else:
                partner = _REL if kind is _OFF else _OFF
                if (partner, stage, microbatch) not in counts:
                    self.add("complete", f"{Op(*key)} has no matching {partner.value}", self.by_op[key])
                if p.offload is None:
                    self.add("complete", f"{Op(*key)}: the problem has no offload link", self.by_op[key])
        return not self.violations

    def placement_and_durations(self) -> None:
        p = self.problem
        for op in self.schedule.ops:
            home = p.placement[op.stage]
            if op.device != home:
                self.add("device", f"{op.op} is on device {op.device}, but stage {op.stage} is on device {home}", op)
            if op.start < -self.eps:
                self.add("start", f"{op.op} starts at {op.start:g} < 0", op)
            if op.kind in TRANSFER_KINDS:
                limit = p.max_offload(op.stage, op.microbatch)
                if not 0 < op.amount <= limit + self.eps:
                    self.add("amount", f"{op.op} moves {op.amount:g}; allowed is (0, {limit:g}] "
                                       f"(fraction x activation of stage {op.stage})", op)
                if op.kind is _REL:
                    off = self.by_op.get(Op(_OFF, op.stage, op.microbatch))
                    if off is not None and abs(off.amount - op.amount) > self.eps:
                        self.add("amount", f"{op.op} reloads {op.amount:g} but OFFLOAD moved {off.amount:g}", op)
            expected = p.duration(op.kind, op.stage, op.microbatch, amount=op.amount)
            if abs(op.duration - expected) > self.eps:
                self.add("duration", f"{op.op} lasts {op.duration:g}, its duration is {expected:g}", op)

    def _after(self, rule: str, later: ScheduledOp, earlier: ScheduledOp | None, lag: float, what: str) -> None:
        if earlier is None:
            return
        if later.start + self.eps < earlier.end + lag:
            lag_text = f" + latency {lag:g}" if lag else ""
            self.add(rule, f"{later.op} starts at {later.start:g}, before {earlier.op} ends at {earlier.end:g}"
                           f"{lag_text} ({what})", later, later.start, [later, earlier])

    def dependencies(self) -> None:
        """Rules 1-5 and 9 from the one dependency table; an optional dependency only when its op exists."""
        table = dependency_table(self.problem)
        get = self.by_op.get
        for op in self.schedule.ops:
            for dep in table[(op.kind, op.stage)]:
                earlier = get(dep.op(op.microbatch))
                if earlier is None:
                    continue  # a missing op is reported by completeness
                self._after(dep.rule, op, earlier, dep.lag_of(self.problem, op.microbatch), _WHAT[dep.rule, op.kind])

    def overlaps(self) -> None:
        p = self.problem
        lanes: dict[tuple, list[ScheduledOp]] = defaultdict(list)
        for op in self.schedule.ops:
            if op.kind.is_compute:
                lanes[("compute", op.device)].append(op)
            elif p.offload is not None:
                lanes[("link", p.lane(op.device, op.kind))].append(op)
        for (kind, key), ops in lanes.items():
            ops.sort(key=_START_END)
            for a, b in zip(ops, ops[1:]):
                if b.start + self.eps < a.end:
                    if kind == "compute":
                        self.add("R6", f"{b.op} starts at {b.start:g} while {a.op} runs until {a.end:g} "
                                       f"on device {b.device}", b, b.start, [a, b])
                    else:
                        link = key // 2
                        self.add("R7", f"{b.op} (device {b.device}) starts at {b.start:g} while {a.op} "
                                       f"(device {a.device}) uses lane {self._lane_name(key)} of link {link} "
                                       f"until {a.end:g}", b, b.start, [a, b])

    def _lane_name(self, lane: int) -> str:
        if not self.problem.offload.duplex:
            return "both directions"
        return "h2d" if lane % 2 else "d2h"

    def memory(self) -> None:
        events = memory_events(self.problem, self.schedule.ops)
        for device, cap in enumerate(self.problem.capacity):
            if cap is None:
                continue
            level = 0.0
            for time, delta in events[device]:
                level += delta
                if exceeds(level, cap):
                    self.add("memory", f"device {device} holds {level:g} at time {time:g}, capacity is {cap:g}",
                             time=time)
                    break

    def retiming(self, report: CheckReport) -> None:
        """Re-time as the runtime would. For a valid schedule contract v2 guarantees no later end and no
        higher peak; a difference is a bug in ppsolve, reported as such."""
        try:
            retimed = retime(self.problem, self.schedule.ops)
        except PpsolveError as exc:
            self.add("retime", f"a runtime cannot execute the device lists: {exc}")
            return
        report.retimed_makespan = max((o.end for o in retimed), default=0.0)
        report.retimed_peak_memory = peak_memory(self.problem, retimed)
        blame = " (a bug in ppsolve: please report it with this schedule)" if self.clean() else ""
        if report.retimed_makespan > report.makespan + self.eps:
            late = max(retimed, key=lambda o: o.end)
            self.add("retime", f"re-timed makespan {report.retimed_makespan:g} is later than planned "
                               f"{report.makespan:g} (last op {late.op} on device {late.device}){blame}")
        for device, (peak, planned) in enumerate(zip(report.retimed_peak_memory, report.peak_memory)):
            if peak > planned + self.eps:
                self.add("retime", f"re-timed peak memory of device {device} is {peak:g}, higher than the "
                                   f"planned {planned:g}{blame}")

    def clean(self) -> bool:
        """No rule is broken as planned (so the re-timing must match the plan)."""
        return not any(v.rule != "retime" for v in self.violations)

    # ----- rendering -----
    @cached_property
    def _rows(self) -> tuple[dict[int, list[ScheduledOp]], dict[tuple[int, Op], int]]:
        """Each device's compute ops by start, and the first position of each op in its row (built once:
        a schedule with many violations draws many grids)."""
        rows: dict[int, list[ScheduledOp]] = defaultdict(list)
        for o in sorted((o for o in self.schedule.ops if o.kind.is_compute), key=lambda o: o.start):
            rows[o.device].append(o)
        first: dict[tuple[int, Op], int] = {}
        for device, row in rows.items():
            for i, o in enumerate(row):
                first.setdefault((device, o.op), i)
        return rows, first

    def _grid(self, ops: list[ScheduledOp], time: float | None, width: int = 3) -> str | None:
        """A few ops around the spot on each device involved, the culprits marked (for the first
        ``MAX_GRIDS`` violations; the rest are listed without)."""
        if len(self.violations) >= MAX_GRIDS:
            return None
        rows, first = self._rows
        marked = {o.op for o in ops}
        lines = []
        for device in sorted({o.device for o in ops}):
            row = rows.get(device, [])
            anchor = min((first[device, op] for op in marked if (device, op) in first), default=0)
            cells = []
            for o in row[max(0, anchor - width): anchor + width + 1]:
                cell = f"{o.op} {o.start:g}-{o.end:g}"
                cells.append(f">{cell}<" if o.op in marked else cell)
            transfers = [o for o in ops if o.device == device and o.kind.is_transfer]
            cells += [f">{o.op} {o.start:g}-{o.end:g}<" for o in transfers]
            lines.append(f"    device {device}: " + " | ".join(cells))
        return "\n".join(lines)


@without_gc
def check(schedule: Schedule) -> CheckReport:
    """Check ``schedule`` against every rule of SPEC.md and re-time it."""
    checker = _Checker(schedule)
    report = CheckReport([], schedule.makespan, schedule.peak_memory, schedule.bubble_ratio, schedule.offloaded,
                         schedule.recomputed)
    complete = checker.completeness()
    checker.placement_and_durations()
    checker.dependencies()
    checker.overlaps()
    checker.memory()
    if complete and not any(v.rule == "device" for v in checker.violations):
        checker.retiming(report)
    report.violations = checker.violations
    report.warnings = metric_warnings(schedule)
    return report
