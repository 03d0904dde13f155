"""The same schedule through torchtitan's own pipeline builder, from ``export --to torchtitan``'s files.

Each rank builds the whole model as one module named as torchtitan's decoders are
(``tok_embeddings``, ``layers.<i>``, ``lm_head``), lets torchtitan 0.3.0 cut it and map
stages to ranks from the schedule name (``_pipeline_module_split``), builds the
schedule from the compute-only CSV with ``_build_pipeline_schedule`` (PyTorch lowers
the communication), and runs the side plan with
:func:`ppsolve.executor.torchtitan.apply_plan`, as the export tells a user to:
with ``comms=`` ppsolve's placement where PyTorch's would delay the plan. Every step,
the compute and side-file actions the rank ran must be the CSV's row with the side
file's actions where the plan puts them, and where PyTorch's lowering runs, it must be the one
:func:`ppsolve.export.torch_lowering.pytorch_rows` gives the replay.

torchtitan does not scale gradients by the microbatch count (its loss does); they are
divided by it here to compare with the reference run (a mean over microbatches), and
the parameter names are mapped back to the reference's.
"""

from __future__ import annotations

import os
import tempfile

import torch
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torchtitan.config import ParallelismConfig
from torchtitan.distributed.pipeline_parallel import _build_pipeline_schedule, _pipeline_module_split

from ppsolve.executor import models
from ppsolve.executor.device import CpuDevice, Device
from ppsolve.executor.runtime import Job, RankResult
from ppsolve.executor.tokens import microbatch_lengths
from ppsolve.executor.torch_runtime import expected_log, measured
from ppsolve.executor.torchtitan import apply_plan
from ppsolve.export.torch_csv import compute_only_rows, to_compute_comms_csv
from ppsolve.export.torch_lowering import pytorch_rows, timing
from ppsolve.export.torchtitan import module_fqns, schedule_name


class TitanModel(nn.Module):
    """The model with torchtitan's module names; a part torchtitan's split removed is skipped."""

    def __init__(self, parts: dict[str, nn.Module]):
        super().__init__()
        self.tok_embeddings = parts["embed"]
        self.layers = nn.ModuleDict({name[len("block"):]: m for name, m in parts.items() if name.startswith("block")})
        self.lm_head = parts["head"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tok_embeddings is not None:
            x = self.tok_embeddings(x)
        for layer in self.layers.values():
            x = layer(x)
        return self.lm_head(x) if self.lm_head is not None else x


def reference_name(name: str) -> str:
    """A TitanModel parameter's name in the reference model (``parts.embed``, ``parts.block<i>``, ``parts.head``)."""
    head, rest = name.split(".", 1)
    if head == "layers":
        index, rest = rest.split(".", 1)
        return f"parts.block{index}.{rest}"
    return f"parts.{ {'tok_embeddings': 'embed', 'lm_head': 'head'}[head] }.{rest}"


def run_rank_torchtitan(job: Job, rank: int, device: Device | None = None) -> RankResult:
    dev = device or CpuDevice()
    schedule, spec = job.load()
    problem = schedule.problem
    S, M, b = problem.num_stages, problem.microbatches, spec.micro_batch_size
    name = schedule_name(problem)
    mesh = init_device_mesh(dev.device.type, (problem.devices,), mesh_dim_names=("pp",))
    fqns = module_fqns(spec.blocks_of_stages(S, problem.annotations))
    stages, chunks = _pipeline_module_split(TitanModel(models.build_parts(spec)), mesh, name, dev.device, fqns)
    for stage, chunk in zip(stages, chunks):
        stage.submod = dev.place(chunk)
    loss = models.loss_fn(spec)
    with tempfile.TemporaryDirectory() as folder:
        csv = os.path.join(folder, "schedule.csv")
        with open(csv, "w") as handle:
            handle.write(job.csv_text)
        comms = None
        if timing(schedule).delayed:  # what the export tells the user: ppsolve's placement instead
            comms = os.path.join(folder, "schedule.comms.csv")
            with open(comms, "w") as handle:
                handle.write(to_compute_comms_csv(schedule))
        parallelism = ParallelismConfig(pipeline_parallel_degree=problem.devices, pipeline_parallel_schedule=name,
                                        pipeline_parallel_schedule_csv=csv, pipeline_parallel_microbatch_size=b)
        pp_schedule = _build_pipeline_schedule(parallelism=parallelism, local_batch_size=M * b, stages=stages,
                                               loss_fn=lambda out, target: (loss(out, target), None))
        if comms is None:  # the replay's view of PyTorch's lowering is the one this schedule runs
            lowered = [str(a) for a in pp_schedule.pipeline_order_with_comms[rank]]
            if lowered != pytorch_rows(compute_only_rows(schedule), problem.placement, M)[rank]:
                raise RuntimeError(f"rank {rank}: PyTorch lowered the CSV to {lowered}, not what "
                                   "ppsolve.export.torch_lowering.pytorch_rows replays")
        plan = apply_plan(pp_schedule, job.torch_plan, comms=comms, device=dev)
    plan.log = log = []
    expected = expected_log(job.csv_text.splitlines()[rank].split(","), job.torch_plan, rank)
    batches = [models.microbatch(spec, j, microbatch_lengths(problem, spec)) for j in range(M)]  # padded: one shape
    inputs = dev.place(torch.cat([x for x, _ in batches]))
    targets = dev.place(torch.cat([t for _, t in batches]))
    has_first, has_last = any(s.is_first for s in stages), any(s.is_last for s in stages)
    for _ in range(job.steps):
        for chunk in chunks:
            chunk.zero_grad(set_to_none=True)
        log.clear()
        pp_schedule.step(*((inputs,) if has_first else ()), **({"target": targets, "losses": []} if has_last else {}))
        if log != expected:
            at = next((i for i, (x, y) in enumerate(zip(log, expected)) if x != y), min(len(log), len(expected)))
            raise RuntimeError(f"rank {rank} ran {log[at] if at < len(log) else 'nothing'} at action {at}, the "
                               f"exported files say {expected[at] if at < len(expected) else 'nothing'}")
    dev.synchronize()
    grads = None
    if job.check:
        grads = {reference_name(n): p.grad.detach().cpu() / M
                 for chunk in chunks for n, p in chunk.named_parameters() if p.grad is not None}
    return measured(RankResult(rank, device=dev.kind), plan, log, grads)
