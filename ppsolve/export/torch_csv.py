"""Export to ``torch.distributed.pipelining``'s ``_PipelineScheduleRuntime._load_csv``.

Two formats, one row per rank, one action per cell, global stage numbers
(``<stage>F<mb>`` forward, ``I`` input-gradient backward = our split B, ``W`` weight
gradient, ``B`` full backward = our fused B). A plan that offloads or recomputes also gets
``<out>.plan.json`` (:mod:`ppsolve.export.torch_levers`), which
``ppsolve.executor.torch_plan.attach`` reads. The formats:

- ``compute_comms`` (the default): the compute actions in planned order with the
  sends and receives ppsolve placed (:mod:`ppsolve.export.torch_comms`) and
  ``REDUCE_GRAD``; read with ``_load_csv(path, format="compute_comms")``.
- ``compute_only``: the compute actions only; PyTorch adds the sends and receives
  itself (``_load_csv(path)``, what torchtitan's ``pipeline_parallel_schedule_csv``
  loads; :mod:`ppsolve.export.torch_lowering` replays what that placement does to the
  plan's timing).
"""

from __future__ import annotations

from pathlib import Path

from ppsolve.errors import InputError
from ppsolve.export.torch_comms import compute_comms_rows, compute_order, torch_action
from ppsolve.export.torch_levers import has_extra, side_plan
from ppsolve.export.torch_replay import parse_rows, replay
from ppsolve.jsonio import write_json_atomic, write_text_atomic
from ppsolve.schedule import Schedule

FORMATS = ("compute_comms", "compute_only")


def compute_only_rows(schedule: Schedule) -> list[list[str]]:
    """Per rank, its F, I/B and W actions in planned order (R, OFFLOAD and RELOAD go to the side file)."""
    split = schedule.problem.split_backward
    return [[torch_action(op.kind, op.stage, op.microbatch, split) for op in compute_order(schedule, d)]
            for d in range(schedule.problem.devices)]


def to_torch_csv(schedule: Schedule) -> str:
    """The compute_only CSV text."""
    return "\n".join(",".join(row) for row in compute_only_rows(schedule)) + "\n"


def to_compute_comms_csv(schedule: Schedule) -> str:
    """The compute_comms CSV text, replayed under the runtime's rules before it is returned
    (a placement that could hang is a bug: DeadlockError)."""
    text = "\n".join(",".join(row) for row in compute_comms_rows(schedule)) + "\n"
    replay(parse_rows(text))
    return text


def plan_path(path: str | Path) -> Path:
    """Where the side file of the CSV ``path`` goes: ``s.csv`` -> ``s.plan.json``."""
    return Path(path).with_suffix(".plan.json")


def write(schedule: Schedule, path: str | Path, format: str = "compute_comms") -> list[Path]:
    """Write the CSV (``ppsolve export --to torch``) and, for a plan with offload or recompute,
    its side file; return the paths written."""
    if format not in FORMATS:
        raise InputError("format", f"must be one of {', '.join(FORMATS)}, got {format!r}")
    text = to_torch_csv(schedule) if format == "compute_only" else to_compute_comms_csv(schedule)
    plan = side_plan(schedule)
    written = [Path(path)]
    if has_extra(plan):
        side = plan_path(path)
        write_json_atomic(side, plan)
        written.append(side)
    write_text_atomic(path, text)
    return written
