"""Measured against predicted: activation bytes, peaks, per-op wall times, Chrome trace.

The predicted peak is SPEC.md's memory model on the schedule's planned ops, with
each stage's activation, weight_hold and recompute keep set to the bytes measured on
that run (per microbatch where its microbatches measured different bytes: sequences
of different lengths); an offload moves the bytes it moved on that run (whole saved
storages, the largest first, within its planned share: amount / activation), or,
where none was recorded, its planned share of the measured activation. An offload whose
share is smaller than every whole saved storage moves nothing (0 bytes, as is its reload):
the table says how many did so on each rank.

A device that holds no stage runs nothing: its row shows a peak of 0 and a span of 0.

A problem profiled by this executor (``x-profile``, memory in GiB) predicts the bytes of
every (stage, microbatch) itself: ``problem.activation.at(s, j)``;
:func:`activation_comparison` sets them beside the measured ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from ppsolve.memory import peak_memory
from ppsolve.ops import OpKind
from ppsolve.problem import problem_from_dict
from ppsolve.schedule import Schedule, ScheduledOp
from ppsolve.tolerance import EPS
from ppsolve.units import MEMORY_UNIT


@dataclass
class RankFigures:
    rank: int
    measured_peak: int
    predicted_peak: float
    op_ms: dict[str, float]  # median wall time per kind, milliseconds
    span_ms: float
    planned: dict[str, float]  # median planned duration per kind (problem time units)
    planned_span: float
    max_allocated: int | None = None  # torch.cuda.max_memory_allocated (CUDA runs only)
    unmoved: int = 0  # offloads that moved no storage (their share is below any whole saved storage)


def stage_bytes(results, what: str = "activation_bytes") -> dict[int, int]:
    """Bytes one microbatch of each stage saves (or holds from B to W with
    ``what="hold_bytes"``, or keeps from F to R with ``what="keep_bytes"``: only stages
    that recompute); they must agree across microbatches."""
    out = {}
    for s, sizes in microbatch_bytes(results, what).items():
        if len(set(sizes)) != 1:
            raise ValueError(f"stage {s}: microbatches measured different byte counts {sorted(set(sizes))}")
        out[s] = sizes[0]
    return out


def microbatch_bytes(results, what: str = "activation_bytes") -> dict[int, list[int]]:
    """Per stage, the bytes each microbatch measured (``activation_bytes`` and ``hold_bytes``: all m
    in microbatch order; ``keep_bytes``: the recomputed ones, stages that recompute)."""
    return {s: list(sizes) for result in results for s, sizes in getattr(result, what).items() if sizes}


def _per_op(sizes: dict[int, list[int]], stages: int) -> list:
    """A memory field of the measured problem: one value per stage, or S lists of m where some
    stage's microbatches differ."""
    if all(len(set(sizes[s])) == 1 for s in range(stages)):
        return [float(sizes[s][0]) for s in range(stages)]
    return [[float(x) for x in sizes[s]] for s in range(stages)]


def predicted_peaks(schedule: Schedule, act_bytes: dict, hold_bytes: dict, keep_bytes: dict | None = None,
                    moved: dict[tuple[int, int], int] | None = None) -> list[float]:
    """SPEC.md's peak per device with activation, weight_hold and (stages that recompute)
    recompute keep set to the measured bytes: per stage one count, or the list of each
    microbatch's (m counts)."""
    problem = schedule.problem
    S, M = problem.num_stages, problem.microbatches
    data = problem.to_dict()
    as_lists = lambda sizes: {s: v if isinstance(v, list) else [v] * M for s, v in sizes.items()}  # noqa: E731
    acts = as_lists(act_bytes)
    data["memory"] = {"activation": _per_op(acts, S), "capacity": None,
                      "weight_hold": _per_op(as_lists(hold_bytes), S) if problem.split_backward else 0}
    if problem.recompute is not None:
        data["recompute"]["keep"] = _per_op(measured_keep(acts, as_lists(keep_bytes or {})), S)
    # memory in bytes beside the link's bandwidth in the problem's units would put the transfers' durations
    # out of any range: the peak needs the moved bytes of the ops, not the link
    data.pop("offload", None)
    measured_problem = problem_from_dict(data)
    acts = measured_problem.activation
    ops = []
    for op in schedule.ops:
        amount = op.amount
        if op.kind.is_transfer:
            planned, act = problem.activation.at(op.stage, op.microbatch), acts.at(op.stage, op.microbatch)
            share = op.amount / planned if planned > 0 else 1.0
            amount = act if share >= 1 - EPS else share * act
            amount = float((moved or {}).get((op.stage, op.microbatch), amount))
        ops.append(ScheduledOp(op.kind, op.stage, op.microbatch, op.device, op.start, op.end, amount))
    return peak_memory(measured_problem, ops)


def measured_keep(acts: dict[int, list[int]], keep_bytes: dict[int, list[int]]) -> dict[int, list[int]]:
    """The recompute block's keep per (stage, microbatch): the measured checkpoint bytes where the
    stage recomputes (0 elsewhere: no event uses it). The memory model needs keep <= activation."""
    keep = {s: keep_bytes.get(s, [0] * len(row)) for s, row in acts.items()}
    for s, row in keep.items():
        for j, (kept, act) in enumerate(zip(row, acts[s])):
            if kept > act:
                raise ValueError(f"stage {s} microbatch {j}: a recomputed forward kept {kept:.0f} bytes, more than "
                                 f"the {act:.0f} bytes of its activation (the stage's forward does not save its input)")
    return keep


def keep_by_microbatch(schedule: Schedule, results) -> dict[int, int | list[int]]:
    """What each recomputed forward kept: per stage that recomputes one count when its microbatches
    agree, else m counts (0 where the microbatch is not recomputed)."""
    out: dict[int, int | list[int]] = {}
    recomputed = schedule.recomputed_by_stage()
    for s, sizes in microbatch_bytes(results, "keep_bytes").items():
        by_j = dict(zip(recomputed[s], sizes))  # the runtimes list them in microbatch order
        out[s] = sizes[0] if len(set(sizes)) == 1 else [by_j.get(j, 0) for j in range(schedule.problem.microbatches)]
    return out


@dataclass
class ActivationComparison:
    """Each (stage, microbatch)'s activation bytes: measured on the run, predicted by the problem."""

    measured: dict[tuple[int, int], int]
    predicted: dict[tuple[int, int], int]

    @property
    def differing(self) -> list[tuple[int, int]]:
        return [key for key in sorted(self.predicted) if self.measured.get(key) != self.predicted[key]]

    def render(self) -> str:
        keys = sorted(self.predicted)
        sizes = sorted({self.predicted[k] for k in keys})
        head = (f"activation bytes per microbatch, measured against the problem's: {len(keys) - len(self.differing)} "
                f"of {len(keys)} (stage, microbatch) equal ({len(sizes)} distinct sizes, {sizes[0]} to {sizes[-1]} B)")
        return "\n".join([head] + [f"  stage {s} microbatch {j}: measured {self.measured.get((s, j))} B, predicted "
                                    f"{self.predicted[(s, j)]} B" for s, j in self.differing[:5]])


def activation_comparison(schedule: Schedule, results) -> ActivationComparison | None:
    """The measured bytes of every (stage, microbatch) beside ``problem.activation.at(s, j)`` in bytes,
    for a problem this executor profiled (``x-profile``, memory in GiB); None for others (their
    memory is not this executor's bytes)."""
    from ppsolve.executor.profiler import GIB

    problem = schedule.problem
    if "x-profile" not in problem.annotations or problem.units[1] != MEMORY_UNIT:
        return None
    measured = {(s, j): size for s, sizes in microbatch_bytes(results).items() for j, size in enumerate(sizes)}
    predicted = {(s, j): round(problem.activation.at(s, j) * GIB)
                 for s in range(problem.num_stages) for j in range(problem.microbatches)}
    return ActivationComparison(measured, predicted)


def figures(schedule: Schedule, results) -> list[RankFigures]:
    moved = {(rec.stage, rec.microbatch): rec.moved for result in results for rec in result.records
             if rec.kind == OpKind.OFFLOAD.value}
    predicted = predicted_peaks(schedule, microbatch_bytes(results), microbatch_bytes(results, "hold_bytes"),
                                keep_by_microbatch(schedule, results), moved)
    out = []
    for result in results:
        by_kind: dict[str, list[float]] = {}
        for rec in result.records:
            by_kind.setdefault(rec.kind, []).append((rec.end - rec.start) * 1e3)
        span = max((r.end for r in result.records), default=0.0) * 1e3
        planned: dict[str, list[float]] = {}
        mine = [op for op in schedule.ops if op.device == result.rank]
        for op in mine:
            planned.setdefault(op.kind.value, []).append(op.end - op.start)
        unmoved = sum(1 for rec in result.records if rec.kind == OpKind.OFFLOAD.value and rec.moved == 0)
        out.append(RankFigures(result.rank, result.peak, predicted[result.rank],
                               {k: median(v) for k, v in by_kind.items()}, span,
                               {k: median(v) for k, v in planned.items()}, max((op.end for op in mine), default=0.0),
                               result.max_allocated, unmoved))
    return out


def render(figs: list[RankFigures]) -> str:
    """Per rank: peaks in bytes, then measured / planned median time of each op kind and the
    rank's span (measured ms / planned, in the problem's time unit); on CUDA also the
    rank's ``torch.cuda.max_memory_allocated`` (everything: weights, gradients, buffers)."""
    kinds = [k.value for k in OpKind if any(k.value in f.op_ms for f in figs)]
    cols = [f"{k} ms meas/plan" for k in kinds] + ["span meas/plan"]
    cuda = any(f.max_allocated is not None for f in figs)
    if cuda:
        cols.append("cuda max alloc (B)")
    lines = ["rank  peak measured (B)  peak predicted (B)  " + "  ".join(f"{c:>17}" for c in cols)]
    for f in figs:
        cells = [f"{f.op_ms.get(k, 0.0):.3f}/{f.planned.get(k, 0.0):.3f}" for k in kinds]
        cells.append(f"{f.span_ms:.2f}/{f.planned_span:.2f}")
        if cuda:
            cells.append("-" if f.max_allocated is None else str(f.max_allocated))
        mark = "" if f.measured_peak == f.predicted_peak else "  (peak differs)"
        lines.append(f"{f.rank:4d}  {f.measured_peak:17d}  {f.predicted_peak:18.0f}  "
                     + "  ".join(f"{c:>17}" for c in cells) + mark)
    unmoved = ", ".join(f"rank {f.rank}: {f.unmoved}" for f in figs if f.unmoved)
    if unmoved:
        lines.append(f"offloads that moved 0 bytes, their reloads too ({unmoved}): the planned share is smaller "
                     "than any whole saved storage, and the executor moves whole storages")
    return "\n".join(lines)


def chrome_trace(schedule: Schedule, results) -> dict:
    """Measured ops as a Chrome trace: one process per rank, compute and transfer threads,
    a counter of the activation bytes held, and the planned ops as processes
    "planned device d" (pid 1000 + d) to compare with."""
    events = []
    for result in results:
        pid = result.rank
        events.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"rank {pid}"}})
        for tid, name in ((0, "compute"), (1, "host link")):
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
        for rec in result.records:
            tid = 1 if rec.kind in (OpKind.OFFLOAD.value, OpKind.RELOAD.value) else 0
            args = {"stage": rec.stage, "microbatch": rec.microbatch, "held_bytes": rec.held}
            if rec.moved:
                args["moved_bytes"] = rec.moved
            if rec.waited:
                args["waited_ms"] = rec.waited * 1e3
            events.append({"name": rec.op, "cat": rec.kind, "ph": "X", "pid": pid, "tid": tid,
                           "ts": rec.start * 1e6, "dur": max(rec.end - rec.start, 0.0) * 1e6, "args": args})
            events.append({"name": "activation bytes", "ph": "C", "pid": pid, "ts": rec.end * 1e6,
                           "args": {"held": rec.held}})
    for op in schedule.ops:  # the plan beside it, its time unit read as ms
        pid = 1000 + op.device
        tid = 1 if op.kind.is_transfer else 0
        events.append({"name": str(op.op), "cat": op.kind.value, "ph": "X", "pid": pid, "tid": tid,
                       "ts": op.start * 1e3, "dur": (op.end - op.start) * 1e3,
                       "args": {"stage": op.stage, "microbatch": op.microbatch}})
    for device in range(schedule.problem.devices):
        events.append({"name": "process_name", "ph": "M", "pid": 1000 + device,
                       "args": {"name": f"planned device {device}"}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"method": schedule.method.name, "source": "ppsolve run (measured)"}}
