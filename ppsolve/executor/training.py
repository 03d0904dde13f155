"""A plan per training step: one rank's part of a training loop whose schedule changes every step.

:class:`PipelineRank` holds this rank's stage modules (a model description cut as the problem's
partition says; they live across steps, for the optimizer) and runs one step of any schedule of that
pipeline handed over in memory (``ppsolve.solve``'s; :func:`share_schedule` gives every rank rank 0's):
through ppsolve's runtime (:func:`ppsolve.executor.runtime.walk`) or PyTorch's
(:func:`ppsolve.executor.torch_runtime.pipeline`, fed export's compute_comms CSV as text and its side
plan as a dict: no file). The gradients are left in the modules' ``.grad``, averaged over the
microbatches as the loss is.

:class:`StepBatch` is one step's data: microbatches of packed documents at one token budget, each token
attending causally within its own document and placed from its document's start (the model's
``documents`` argument); the padding after the documents is left out of the loss.
:func:`ppsolve.executor.reference.documents_reference` computes the same loss and gradients in one
process with each document run alone, and :func:`compare_step` holds a rank's step against it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from ppsolve.checker import check
from ppsolve.errors import InputError
from ppsolve.executor import models
from ppsolve.executor.comm import Channels
from ppsolve.executor.device import CpuDevice, Device
from ppsolve.executor.reference import Comparison, Reference, compare
from ppsolve.executor.runtime import RankResult, parameter_grads, walk
from ppsolve.executor.spec import ModelSpec
from ppsolve.problem import Problem
from ppsolve.schedule import Schedule, schedule_from_dict

RUNTIMES = ("ppsolve", "torch")
PADDING = -1  # the document index of the padding after a microbatch's documents


@dataclass(frozen=True)
class StepBatch:
    """One step's microbatches: ``documents[j]`` holds microbatch j's documents, each a 1-D tensor of
    token ids, L + 1 of them for a document of L tokens (token i is trained to predict token i + 1);
    packed one after another, padded to ``budget`` tokens."""

    documents: tuple[tuple[torch.Tensor, ...], ...]
    budget: int

    def __post_init__(self):
        if not self.documents:
            raise InputError("batch.documents", "an empty batch: no microbatches")
        for j, microbatch in enumerate(self.documents):
            if not microbatch:
                raise InputError(f"batch.documents[{j}]", "an empty microbatch: no documents")
            for i, document in enumerate(microbatch):
                if document.dim() != 1 or len(document) < 2:
                    raise InputError(f"batch.documents[{j}][{i}]", "must be a 1-D tensor of at least 2 token ids "
                                                                   f"(a document and its next token), got shape "
                                                                   f"{tuple(document.shape)}")
            if sum(self.lengths[j]) > self.budget:
                raise InputError(f"batch.documents[{j}]", f"holds {sum(self.lengths[j])} tokens, more than the "
                                                          f"token budget of {self.budget}")

    @property
    def microbatches(self) -> int:
        return len(self.documents)

    @property
    def lengths(self) -> list[list[int]]:
        """Each microbatch's document lengths in tokens (what ``problem_for_batch`` reads)."""
        return [[len(d) - 1 for d in microbatch] for microbatch in self.documents]

    def tensors(self, j: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Microbatch j's input ids, targets and document index per token, each of shape (1, budget)."""
        inputs = torch.zeros(1, self.budget, dtype=torch.long)
        targets = torch.full((1, self.budget), models.PAD_TARGET, dtype=torch.long)
        documents = torch.full((1, self.budget), PADDING, dtype=torch.long)
        at = 0
        for i, document in enumerate(self.documents[j]):
            n = len(document) - 1
            inputs[0, at:at + n], targets[0, at:at + n], documents[0, at:at + n] = document[:-1], document[1:], i
            at += n
        return inputs, targets, documents


class PipelineRank:
    """This rank's stages of ``spec`` for the pipeline of ``problem`` (any step's: its stages, placement
    and partition; the microbatches change from step to step)."""

    def __init__(self, spec: ModelSpec, problem: Problem, rank: int, *, device: Device | None = None,
                 timeout_s: float = 120.0):
        self.spec, self.rank, self.timeout_s = spec, rank, timeout_s
        self.device = device or CpuDevice()
        self.shape = _pipeline_of(spec, problem)
        built = models.build_stages(spec, problem.num_stages, keep=set(problem.stages_of_device[rank]),
                                    blocks=self.shape[2])
        self.modules = {s: self.device.place(m) for s, m in built.items()}
        self.loss_fn = models.loss_fn(spec)

    def parameters(self) -> list[torch.nn.Parameter]:
        return [p for module in self.modules.values() for p in module.parameters()]

    def step(self, schedule: Schedule, batch: StepBatch, runtime: str = "ppsolve") -> RankResult:
        """Forward and backward of ``batch`` as ``schedule`` orders them (every rank calls it with the same
        schedule and batch); the gradients add to the modules' ``.grad``. The result holds the microbatch
        losses (on the rank of the last stage) and the activation bytes measured on this rank."""
        self._refuse(schedule, batch, runtime)
        problem, dev = schedule.problem, self.device
        S, M = problem.num_stages, problem.microbatches
        tensors = [batch.tensors(j) for j in range(M)]
        if runtime == "ppsolve":
            data = {j: (x, target) for j, (x, target, _) in enumerate(tensors)}
            contexts = {j: {"documents": documents} for j, (_, _, documents) in enumerate(tensors)}
            shapes = [models.boundary_shape(self.spec.with_micro_batch_size(1), batch.budget)] * M
            channels = Channels(schedule, self.rank, dev.device, self.timeout_s) if dev.backend == "nccl" else None
            return walk(schedule, self.rank, self.modules, self.loss_fn, data, shapes, dev,
                        timeout_s=self.timeout_s, channels=channels, contexts=contexts)
        from ppsolve.executor.torch_runtime import measured, pipeline
        from ppsolve.export.torch_csv import to_compute_comms_csv
        from ppsolve.export.torch_levers import side_plan

        if not self.modules:
            return RankResult(self.rank, device=dev.kind)
        pipe = pipeline(self.modules, S, M, self.loss_fn, to_compute_comms_csv(schedule), side_plan(schedule), dev,
                        self.rank)
        whole = [dev.place(torch.cat([t[k] for t in tensors])) for k in range(3)]
        pipe.step(whole[0], whole[1], documents=whole[2])
        return measured(RankResult(self.rank, device=dev.kind), pipe.plan, pipe.plan.log, None)

    def _refuse(self, schedule: Schedule, batch: StepBatch, runtime: str) -> None:
        if runtime not in RUNTIMES:
            raise InputError("runtime", f"must be one of {', '.join(RUNTIMES)}, got {runtime!r}")
        if _pipeline_of(self.spec, schedule.problem) != self.shape:
            raise InputError("schedule", "is for another pipeline (stages, placement or partition) than this rank's")
        if batch.microbatches != schedule.problem.microbatches:
            raise InputError("batch", f"has {batch.microbatches} microbatches, the schedule "
                                      f"{schedule.problem.microbatches}")
        if self.spec.kind != "transformer" or batch.budget > self.spec.dims["sequence"]:
            raise InputError("batch.budget", f"must be at most the model's sequence, got {batch.budget}")
        report = check(schedule)
        if not report.valid:
            raise InputError("schedule", "is not valid: " + report.violations[0].message)


def _pipeline_of(spec: ModelSpec, problem: Problem) -> tuple:
    stages = problem.num_stages
    return stages, tuple(problem.placement), spec.blocks_of_stages(stages, problem.annotations)


def share_schedule(schedule: Schedule | None, src: int = 0) -> Schedule:
    """Rank ``src``'s schedule on every rank (the others pass None), over the process group: every rank
    runs one plan, whatever a solve of its own would have found in its time limit."""
    box = [schedule.to_dict() if dist.get_rank() == src else None]
    dist.broadcast_object_list(box, src=src)
    return schedule if dist.get_rank() == src else schedule_from_dict(box[0])


def compare_step(reference: Reference, result: RankResult, modules: dict) -> Comparison:
    """This rank's parameter gradients (and, on the rank of the last stage, the step's loss: the mean
    of the microbatch losses) against ``reference``'s (the whole model's, in one process)."""
    mine = {name for module in modules.values() for name, _ in module.named_parameters()}
    loss = sum(result.losses.values()) / len(result.losses) if result.losses else reference.loss
    return compare(Reference(reference.loss, {n: g for n, g in reference.grads.items() if n in mine}), loss,
                   parameter_grads(modules))
