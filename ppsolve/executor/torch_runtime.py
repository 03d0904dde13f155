"""The same schedule through PyTorch's own pipeline runtime, to prove the CSV export.

Each rank wraps its stage modules in ``PipelineStage`` (global stage numbers),
builds a ``_PipelineScheduleRuntime`` with the model's loss (``scale_grads=True``:
gradients are averaged over microbatches, as in the reference), loads the
exported compute_only CSV and runs one ``step``. PyTorch adds the sends and
receives itself. Known quirks of that runtime (torch 2.13): stage 0's I is a
no-op and its W runs the whole backward; the last stage's losses are indexed in
the order its forwards ran.
"""

from __future__ import annotations

import os
import tempfile

import torch
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

from ppsolve.executor import models
from ppsolve.executor.device import CpuDevice, Device
from ppsolve.executor.runtime import Job, RankResult, parameter_grads


def run_rank_torch(job: Job, rank: int, device: Device | None = None) -> RankResult:
    dev = device or CpuDevice()
    schedule, spec = job.load()
    problem = schedule.problem
    S, M = problem.num_stages, problem.microbatches
    mine = sorted(problem.stages_of_device[rank])
    built = models.build_stages(spec, S, keep=set(mine), blocks=spec.blocks_of_stages(S, problem.annotations))
    modules = {s: dev.place(m) for s, m in built.items()}
    stages = [PipelineStage(modules[s], s, S, dev.device) for s in mine]
    runtime = _PipelineScheduleRuntime(stages, n_microbatches=M, loss_fn=models.loss_fn(spec), scale_grads=True)
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as handle:
        handle.write(job.csv_text)
        path = handle.name
    try:
        runtime._load_csv(path, format="compute_only")
    finally:
        os.unlink(path)
    batches = [models.microbatch(spec, j) for j in range(M)]
    inputs = dev.place(torch.cat([x for x, _ in batches]))
    targets = dev.place(torch.cat([t for _, t in batches]))
    result = RankResult(rank, device=dev.kind)
    for _ in range(job.steps):
        for module in modules.values():
            module.zero_grad(set_to_none=True)
        losses: list = []
        has_first, has_last = 0 in mine, S - 1 in mine
        args = (inputs,) if has_first else ()
        kwargs = {"target": targets, "losses": losses} if has_last else {}
        runtime.step(*args, **kwargs)
        result.losses = {j: float(loss.detach()) for j, loss in enumerate(losses)}
    if job.check:
        result.grads = parameter_grads(modules)
    return result
