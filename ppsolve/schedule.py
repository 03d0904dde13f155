"""Timed schedules: every op with its device, start and end, and the file format."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable, NamedTuple

from ppsolve.errors import InputError
from ppsolve.gcpause import without_gc
from ppsolve.jsonio import read_json, write_json_atomic
from ppsolve.limits import MAX_OPS, MAX_SCHEDULE_MAGNITUDE
from ppsolve.levers import uses
from ppsolve.memory import peak_memory
from ppsolve.ops import TRANSFER_KINDS, Op, OpKind
from ppsolve.problem import Problem, problem_from_dict
from ppsolve.schemas import validate

SCHEDULE_FORMAT = "ppsolve/schedule@1"
STATUSES = ("optimal", "feasible", "heuristic")


class ScheduledOp(NamedTuple):
    """An op placed in time. ``amount`` is the memory moved by a transfer (0 for compute)."""

    kind: OpKind
    stage: int
    microbatch: int
    device: int
    start: float
    end: float
    amount: float = 0.0

    @property
    def op(self) -> Op:
        return Op(self.kind, self.stage, self.microbatch)

    @property
    def duration(self) -> float:
        return self.end - self.start

    def to_dict(self) -> dict:
        out = {"kind": self.kind.value, "stage": self.stage, "microbatch": self.microbatch,
               "device": self.device, "start": _num(self.start), "end": _num(self.end)}
        if self.kind in TRANSFER_KINDS:
            out["amount"] = _num(self.amount)
        return out

    def __str__(self) -> str:
        return f"{self.op}@{self.device}[{self.start:g},{self.end:g}]"


def _num(x: float) -> float | int:
    """Integral floats as ints in files, so integer schedules read as integers."""
    return int(x) if float(x).is_integer() and abs(x) < 2**53 else round(x, 12)


@dataclass(frozen=True)
class MethodInfo:
    """How a schedule was made: the method's name, its parameters, status, bound and time."""

    name: str
    params: dict = field(default_factory=dict)
    status: str = "heuristic"
    lower_bound: float | None = None
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        out = {"name": self.name, "params": self.params, "status": self.status,
               "lower_bound": None if self.lower_bound is None else _num(self.lower_bound),
               "seconds": round(self.seconds, 6)}
        out.update(self.extra)
        return out

    @property
    def interrupted(self) -> bool:
        """Whether Ctrl-C ended the search that made it (``method.interrupted``; absent: no)."""
        return self.extra.get("interrupted") is True

    @classmethod
    def from_dict(cls, data: dict) -> "MethodInfo":
        known = {"name", "params", "status", "lower_bound", "seconds"}
        return cls(name=data["name"], params=dict(data.get("params", {})), status=data.get("status", "heuristic"),
                   lower_bound=data.get("lower_bound"), seconds=float(data.get("seconds", 0.0)),
                   extra={k: v for k, v in data.items() if k not in known})


@dataclass(frozen=True)
class Schedule:
    """A problem, how it was scheduled, and its timed ops. Metrics are recomputed from the ops."""

    problem: Problem
    method: MethodInfo
    ops: tuple[ScheduledOp, ...]
    file_metrics: dict | None = field(default=None, compare=False)

    @cached_property
    def makespan(self) -> float:
        return max((op.end for op in self.ops), default=0.0)

    @cached_property
    def peak_memory(self) -> list[float]:
        return peak_memory(self.problem, self.ops)

    @cached_property
    def compute_time(self) -> float:
        """Time of the useful work, F, B and W: a recompute is overhead (SPEC.md's bubble ratio)."""
        return sum(op.end - op.start for op in self.ops if op.kind.is_compute and op.kind is not OpKind.R)

    @cached_property
    def bubble_ratio(self) -> float:
        if self.makespan <= 0:
            return 0.0
        return 1.0 - self.compute_time / (self.problem.devices * self.makespan)

    @cached_property
    def offloaded(self) -> float:
        return sum(op.amount for op in self.ops if op.kind is OpKind.OFFLOAD)

    @property
    def gap(self) -> float | None:
        """(makespan - lower bound) / makespan, or None without a bound."""
        lb = self.method.lower_bound
        if lb is None or self.makespan <= 0:
            return None
        return max(0.0, (self.makespan - lb) / self.makespan)

    @cached_property
    def recomputed(self) -> int:
        """How many (stage, microbatch) the schedule recomputes (its R ops)."""
        return sum(1 for op in self.ops if op.kind is OpKind.R)

    @property
    def uses_levers(self) -> bool:
        """Whether the schedule uses a memory lever anywhere (offloads or recomputes something)."""
        return bool(uses(self.ops))

    @cached_property
    def recompute_time(self) -> float:
        return sum(op.end - op.start for op in self.ops if op.kind is OpKind.R)

    def _by_stage(self, kind: OpKind) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for op in self.ops:
            if op.kind is kind:
                out.setdefault(op.stage, []).append(op.microbatch)
        return {stage: sorted(mbs) for stage, mbs in sorted(out.items())}

    def offloaded_by_stage(self) -> dict[int, list[int]]:
        """Which activations go to host: stage -> sorted microbatches offloaded."""
        return self._by_stage(OpKind.OFFLOAD)

    def recomputed_by_stage(self) -> dict[int, list[int]]:
        """Which activations are recomputed: stage -> sorted microbatches."""
        return self._by_stage(OpKind.R)

    def describe_offload(self) -> str:
        """One line: ``stage 0: microbatches 0-5, 7; stage 1: microbatches 0-2`` (or ``nothing``)."""
        return describe_by_stage(self.offloaded_by_stage())

    def describe_recompute(self) -> str:
        """:meth:`describe_offload` for the recomputed activations."""
        return describe_by_stage(self.recomputed_by_stage())

    def ops_of_device(self, device: int) -> list[ScheduledOp]:
        return sorted((op for op in self.ops if op.device == device), key=lambda o: (o.start, o.kind.is_compute))

    def metrics(self) -> dict:
        return {"makespan": _num(self.makespan), "peak_memory": [_num(p) for p in self.peak_memory],
                "bubble_ratio": round(self.bubble_ratio, 9), "offloaded": _num(self.offloaded),
                "recomputed": self.recomputed}

    def with_method(self, method: MethodInfo) -> "Schedule":
        return Schedule(self.problem, method, self.ops)

    @without_gc
    def to_dict(self) -> dict:
        # Stable: ops that start together (zero-duration ones) keep the order they were made in.
        ops = sorted(self.ops, key=lambda o: (o.device, o.start, o.kind not in TRANSFER_KINDS))
        return {"format": SCHEDULE_FORMAT, "problem": self.problem.to_dict(), "method": self.method.to_dict(),
                "ops": [op.to_dict() for op in ops], "metrics": self.metrics()}

    def save(self, path: str | Path) -> None:
        """Write the schedule file atomically."""
        write_json_atomic(path, self.to_dict())


def describe_by_stage(by_stage: dict[int, list[int]]) -> str:
    """``{0: [0, 1, 2, 5]}`` -> ``stage 0: microbatches 0-2, 5`` (``nothing`` when empty)."""
    parts = [f"stage {stage}: microbatches {_ranges(mbs)}" for stage, mbs in by_stage.items()]
    return "; ".join(parts) if parts else "nothing"


def _ranges(values: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2, 5"``."""
    runs: list[list[int]] = []
    for v in values:
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


@without_gc
def schedule_from_dict(data: Any, where: str = "schedule") -> Schedule:
    """Validate a schedule file's content; InputError names the bad field."""
    if isinstance(data, dict) and isinstance(data.get("ops"), list) and len(data["ops"]) > 2 * MAX_OPS:
        raise InputError(f"{where}.ops", f"has {len(data['ops'])} ops; ppsolve's limit is {2 * MAX_OPS}")
    validate(data, "schedule", where, MAX_SCHEDULE_MAGNITUDE, 0.0)  # its problem: by problem_from_dict
    problem = problem_from_dict(data["problem"], f"{where}.problem")
    ops = []
    for index, raw in enumerate(data["ops"]):
        at = f"{where}.ops[{index}]"
        if raw["stage"] >= problem.num_stages:
            raise InputError(f"{at}.stage", f"must be in 0..{problem.num_stages - 1}, got {raw['stage']}")
        if raw["microbatch"] >= problem.microbatches:
            raise InputError(f"{at}.microbatch", f"must be in 0..{problem.microbatches - 1}, got {raw['microbatch']}")
        if raw["device"] >= problem.devices:
            raise InputError(f"{at}.device", f"must be in 0..{problem.devices - 1}, got {raw['device']}")
        kind = OpKind(raw["kind"])
        if kind.is_transfer and "amount" not in raw:
            raise InputError(f"{at}.amount", f"is required on a {kind.value}")
        if kind.is_compute and "amount" in raw:
            raise InputError(f"{at}.amount", f"is only for OFFLOAD and RELOAD, not {kind.value}")
        if kind.is_transfer and problem.offload is None:
            raise InputError(f"{at}.kind", f"{kind.value} needs an offload block in {where}.problem, which has none")
        if kind is OpKind.R and problem.recompute is None:
            raise InputError(f"{at}.kind", f"R needs a recompute block in {where}.problem, which has none")
        ops.append(ScheduledOp(kind, int(raw["stage"]), int(raw["microbatch"]), int(raw["device"]),
                               float(raw["start"]), float(raw["end"]), float(raw.get("amount", 0.0))))
    method = MethodInfo.from_dict(data.get("method", {"name": "unknown"}))
    return Schedule(problem, method, tuple(ops), file_metrics=data.get("metrics"))


def load_schedule(path: str | Path) -> Schedule:
    """Read and validate a schedule file."""
    return schedule_from_dict(read_json(path, "schedule"))


def make_schedule(problem: Problem, ops: Iterable[ScheduledOp], name: str, *, params: dict | None = None,
                  status: str = "heuristic", lower_bound: float | None = None, seconds: float = 0.0,
                  **extra: Any) -> Schedule:
    """Convenience constructor used by baselines and solvers."""
    return Schedule(problem, MethodInfo(name, params or {}, status, lower_bound, seconds, extra), tuple(ops))
