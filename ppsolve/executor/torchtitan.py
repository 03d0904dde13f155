"""A ppsolve plan's offloads and recomputes inside the pipeline schedule torchtitan builds.

torchtitan (0.3.0) builds a ``_PipelineScheduleRuntime`` from
``parallelism.pipeline_parallel_schedule_csv`` and lowers its communication itself.
After ``pipeline_llm`` returns that schedule, one call runs the plan's side file
through the schedule's custom functions and saved-tensor hooks
(:func:`ppsolve.executor.torch_plan.attach`)::

    pp_schedule, model_parts, has_first_stage, has_last_stage = pipeline_llm(...)
    from ppsolve.executor.torchtitan import apply_plan
    apply_plan(pp_schedule, "DIR/schedule.plan.json")

``ppsolve export SCHEDULE --to torchtitan -o DIR`` writes the files and prints the
call. Where PyTorch's placement of the sends and receives would delay the plan, the
export also writes ``DIR/schedule.comms.csv`` (ppsolve's placement) and the call gets
``comms=``, which loads it over PyTorch's lowering.
"""

from __future__ import annotations

from pathlib import Path

from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

from ppsolve.executor.device import CpuDevice, CudaDevice
from ppsolve.executor.torch_plan import PlanRun, attach


def apply_plan(schedule, plan, comms: str | Path | None = None, device=None) -> PlanRun:
    """Run ``plan`` (the side file ``schedule.plan.json``: a path or its dict) in ``schedule``,
    the ``_PipelineScheduleRuntime`` torchtitan built from the exported CSV. ``comms``: the
    exported ``schedule.comms.csv``, loaded in place of PyTorch's own placement of the sends
    and receives. ``device``: a :mod:`ppsolve.executor.device` device (default: the stages'
    device). Returns the :class:`~ppsolve.executor.torch_plan.PlanRun` (its ``peak`` and
    ``activation_bytes`` describe the last step)."""
    if not isinstance(schedule, _PipelineScheduleRuntime):
        raise TypeError(f"apply_plan: expected the _PipelineScheduleRuntime torchtitan builds from "
                        f"parallelism.pipeline_parallel_schedule_csv, got {type(schedule).__name__} (set "
                        "pipeline_parallel_schedule_csv to the exported schedule.csv)")
    if comms is not None:
        schedule._load_csv(str(comms), format="compute_comms")
    return attach(schedule, plan, device or _device_of(schedule))


def _device_of(schedule):
    where = schedule._stages[0].device
    return CudaDevice(where.index or 0) if where.type == "cuda" else CpuDevice()
