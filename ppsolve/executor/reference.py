"""The single-process reference: the whole model, the same data (each microbatch at its
real tokens, unpadded), every microbatch forward and backward; loss = mean of the microbatch
losses. It runs on the device kind of the run (CUDA: cuda:0 with TF32 off); gradients come
back on the CPU. ``documents_reference``: the same for a step of packed documents, each
document run alone (the check of ``training``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from ppsolve.executor import models
from ppsolve.executor.device import make_device
from ppsolve.executor.spec import ModelSpec
from ppsolve.executor.tokens import Lengths


@dataclass
class Reference:
    loss: float
    grads: dict[str, torch.Tensor]


def reference_run(spec: ModelSpec, microbatches: int, device: str = "cpu", lengths: Lengths | None = None) -> Reference:
    """``lengths``: each microbatch runs at its real tokens, never padded (padding must not change
    a gradient)."""
    dev = make_device(device)
    unpadded = None if lengths is None else Lengths(lengths.tokens)
    model = dev.place(models.build_full(spec))
    loss_fn = models.loss_fn(spec)
    total = 0.0
    for j in range(microbatches):
        x, target = (dev.place(t) for t in models.microbatch(spec, j, unpadded))
        loss = loss_fn(model(x), target)
        total += float(loss.detach())
        (loss / microbatches).backward()
    grads = {name: p.grad.detach().cpu().clone() for name, p in model.named_parameters() if p.grad is not None}
    return Reference(total / microbatches, grads)


def documents_reference(model: torch.nn.Module, documents: Sequence[Sequence[torch.Tensor]]) -> Reference:
    """Loss and gradients of a step of packed documents (``training.StepBatch.documents``: per microbatch, its
    documents as L + 1 token ids) in one process, each document run alone as a sequence of its own: no
    packing, no document mask. A microbatch's loss is the mean over its documents' tokens, the step's the
    mean over microbatches (as the pipeline's). ``model``: the whole model (``models.build_full``), whose
    gradients are set to this step's."""
    model.zero_grad(set_to_none=True)
    total = 0.0
    for microbatch in documents:
        tokens = sum(len(d) - 1 for d in microbatch)
        loss = sum(_token_losses(model, d) for d in microbatch) / tokens
        (loss / len(documents)).backward()
        total += float(loss.detach())
    grads = {name: p.grad.detach().cpu().clone() for name, p in model.named_parameters() if p.grad is not None}
    return Reference(total / len(documents), grads)


def _token_losses(model: torch.nn.Module, document: torch.Tensor) -> torch.Tensor:
    """The summed cross-entropy of a document's next-token predictions."""
    logits = model(document[None, :-1])
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), document[1:], reduction="sum")


@dataclass
class Comparison:
    loss: float
    reference_loss: float
    max_error: float
    worst: str
    tensors: int
    missing: list[str]

    def ok(self, tolerance: float) -> bool:
        return not self.missing and self.max_error <= tolerance and abs(self.loss - self.reference_loss) <= tolerance


def compare(reference: Reference, loss: float, grads: dict[str, torch.Tensor]) -> Comparison:
    """Largest absolute difference over the loss and every parameter gradient."""
    worst, max_error = "loss", abs(loss - reference.loss)
    missing = sorted(set(reference.grads) - set(grads)) + sorted(set(grads) - set(reference.grads))
    for name, ref in reference.grads.items():
        if name in grads:
            err = float((grads[name] - ref).abs().max())
            if err > max_error:
                worst, max_error = name, err
    return Comparison(loss, reference.loss, max_error, worst, len(reference.grads), missing)
