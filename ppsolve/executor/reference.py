"""The single-process reference: the whole model, the same data, every microbatch
forward and backward; loss = mean of the microbatch losses."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ppsolve.executor import models
from ppsolve.executor.spec import ModelSpec


@dataclass
class Reference:
    loss: float
    grads: dict[str, torch.Tensor]


def reference_run(spec: ModelSpec, microbatches: int) -> Reference:
    model = models.build_full(spec)
    loss_fn = models.loss_fn(spec)
    total = 0.0
    for j in range(microbatches):
        x, target = models.microbatch(spec, j)
        loss = loss_fn(model(x), target)
        total += float(loss.detach())
        (loss / microbatches).backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}
    return Reference(total / microbatches, grads)


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
