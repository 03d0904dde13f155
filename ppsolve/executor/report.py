"""Measured against predicted: activation peaks, per-op wall times, Chrome trace.

The predicted peak is SPEC.md's memory model on the schedule's planned ops, with
each stage's activation, weight_hold and recompute keep set to the bytes measured on
that run; an offload moves the bytes it moved on that run (whole saved storages, the
largest first, within its planned share: amount / activation), or, where none was
recorded, its planned share of the measured activation. An offload whose share is smaller
than every whole saved storage moves nothing (0 bytes, as is its reload): the table says
how many did so on each rank.

A device that holds no stage runs nothing: its row shows a peak of 0 and a span of 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from ppsolve.memory import peak_memory
from ppsolve.ops import OpKind
from ppsolve.problem import problem_from_dict
from ppsolve.schedule import Schedule, ScheduledOp
from ppsolve.tolerance import EPS


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
    for result in results:
        for s, sizes in getattr(result, what).items():
            if not sizes:  # keep_bytes of a stage that recomputes nothing
                continue
            if len(set(sizes)) != 1:
                raise ValueError(f"stage {s}: microbatches measured different byte counts {sorted(set(sizes))}")
            out[s] = sizes[0]
    return out


def predicted_peaks(schedule: Schedule, act_bytes: dict[int, int], hold_bytes: dict[int, int],
                    keep_bytes: dict[int, int] | None = None,
                    moved: dict[tuple[int, int], int] | None = None) -> list[float]:
    """SPEC.md's peak per device with activation, weight_hold and (stages that recompute)
    recompute keep set to the measured bytes."""
    problem = schedule.problem
    data = problem.to_dict()
    acts = [float(act_bytes[s]) for s in range(problem.num_stages)]
    holds = [float(hold_bytes[s]) for s in range(problem.num_stages)] if problem.split_backward else 0
    data["memory"] = {"activation": acts, "weight_hold": holds, "capacity": None}
    if problem.recompute is not None:
        data["recompute"]["keep"] = measured_keep(acts, keep_bytes or {})
    measured_problem = problem_from_dict(data)
    ops = []
    for op in schedule.ops:
        amount = op.amount
        if op.kind.is_transfer:
            share = op.amount / problem.activation[op.stage] if problem.activation[op.stage] > 0 else 1.0
            amount = acts[op.stage] if share >= 1 - EPS else share * acts[op.stage]
            amount = float((moved or {}).get((op.stage, op.microbatch), amount))
        ops.append(ScheduledOp(op.kind, op.stage, op.microbatch, op.device, op.start, op.end, amount))
    return peak_memory(measured_problem, ops)


def measured_keep(acts: list[float], keep_bytes: dict[int, int]) -> list[float]:
    """The recompute block's keep per stage: the measured checkpoint bytes where the stage
    recomputes (0 elsewhere: no event uses it). The memory model needs keep <= activation."""
    keep = [float(keep_bytes.get(s, 0)) for s in range(len(acts))]
    for s, (kept, act) in enumerate(zip(keep, acts)):
        if kept > act:
            raise ValueError(f"stage {s}: a recomputed forward kept {kept:.0f} bytes, more than the {act:.0f} "
                             "bytes of its activation (the stage's forward does not save its input)")
    return keep


def figures(schedule: Schedule, results) -> list[RankFigures]:
    moved = {(rec.stage, rec.microbatch): rec.moved for result in results for rec in result.records
             if rec.kind == OpKind.OFFLOAD.value}
    predicted = predicted_peaks(schedule, stage_bytes(results), stage_bytes(results, "hold_bytes"),
                                stage_bytes(results, "keep_bytes"), moved)
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
