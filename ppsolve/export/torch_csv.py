"""Export to ``torch.distributed.pipelining``: the compute_only CSV that
``_PipelineScheduleRuntime._load_csv(path, format="compute_only")`` reads.

One row per rank, one action per cell, in the order the rank runs them (planned
start): ``<stage>F<mb>`` forward, ``<stage>I<mb>`` input-gradient backward (our
split B), ``<stage>W<mb>`` weight gradient, ``<stage>B<mb>`` full backward (our
fused B). Stage numbers are global. PyTorch lowers it, adding the sends and
receives itself. Its runtime has no offload action, so a schedule that offloads
is refused.
"""

from __future__ import annotations

from pathlib import Path

from ppsolve.errors import NotApplicableError
from ppsolve.jsonio import write_text_atomic
from ppsolve.ops import OpKind
from ppsolve.schedule import Schedule


def torch_action(kind: OpKind, stage: int, microbatch: int, split: bool) -> str:
    letter = {OpKind.F: "F", OpKind.B: "I" if split else "B", OpKind.W: "W"}[kind]
    return f"{stage}{letter}{microbatch}"


def to_torch_csv(schedule: Schedule) -> str:
    """The CSV text; NotApplicableError for a schedule with OFFLOAD/RELOAD or R ops."""
    transfers = sum(1 for op in schedule.ops if op.kind.is_transfer)
    if transfers:
        raise NotApplicableError(
            f"cannot export to torch: the schedule has {transfers} OFFLOAD/RELOAD ops and PyTorch's "
            "pipelining runtime has no offload action (use `ppsolve run --runtime ppsolve`, or a schedule "
            "without offload)")
    if schedule.recomputed:
        raise NotApplicableError(
            f"cannot export to torch: the schedule has {schedule.recomputed} R (recompute) ops and PyTorch's "
            "pipelining runtime has no recompute action (use `ppsolve run --runtime ppsolve`, or a schedule "
            "without recompute)")
    split = schedule.problem.split_backward
    rows = []
    for device in range(schedule.problem.devices):
        ops = [op for op in schedule.ops_of_device(device) if op.kind.is_compute]
        rows.append(",".join(torch_action(op.kind, op.stage, op.microbatch, split) for op in ops))
    return "\n".join(rows) + "\n"


def write(schedule: Schedule, path: str | Path) -> None:
    """Write the compute_only CSV (``ppsolve export --to torch``)."""
    write_text_atomic(path, to_torch_csv(schedule))
