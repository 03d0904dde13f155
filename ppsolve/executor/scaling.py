"""How far the cost model's per-microbatch scaling is from a measurement (``ppsolve profile --lengths``).

For each length T (tokens of a sequence, one document) the stages are measured with the profiler
(:func:`profiler.profile` at sequence T) and F, B, W and the activation bytes are summed over the stages.
The cost model predicts the same sums from its formulas at sequence T (the model's micro-batch size),
as the executor runs them: fp32, attention written out (every pair of the T tokens scored and masked
after, its T x T tensors kept: ``flash_attention`` off). Both are taken relative to the first length, so
the report is about the scaling, not the speed (the cost model takes that from a GPU profile):
``deviation = measured ratio / predicted ratio - 1``. On a CPU the fixed per-op overheads and the
non-GEMM work (softmax, norms, the loss) weigh more than on a GPU, and the executor keeps no dropout
masks, so the deviation there bounds what a GPU would show only loosely.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from ppsolve.costmodel.build import stage_costs
from ppsolve.costmodel.descriptions import Transformer
from ppsolve.costmodel.partition import Partition
from ppsolve.errors import InputError
from ppsolve.executor.profiler import profile
from ppsolve.executor.spec import spec_of_transformer

FIGURES = ("forward", "backward_input", "backward_weight", "activation")


@dataclass(frozen=True)
class Scaling:
    """Sums over the stages at each length: measured (ms, bytes) and predicted (FLOPs, bytes)."""

    lengths: tuple[int, ...]
    measured: dict[str, tuple[float, ...]]
    predicted: dict[str, tuple[float, ...]]

    def deviation(self, figure: str) -> tuple[float, ...]:
        """Measured over predicted ratio to the first length, less 1, at each length (0 at the first)."""
        m, p = self.measured[figure], self.predicted[figure]
        return tuple((m[k] / m[0]) / (p[k] / p[0]) - 1 for k in range(len(self.lengths)))

    def to_dict(self) -> dict:
        return {"lengths": list(self.lengths), "measured": {k: list(v) for k, v in self.measured.items()},
                "predicted": {k: list(v) for k, v in self.predicted.items()},
                "deviation": {k: [round(d, 4) for d in self.deviation(k)] for k in FIGURES}}


def check_lengths(lengths: Sequence[int]) -> tuple[int, ...]:
    """``lengths`` as a tuple, if they are two or three increasing token counts >= 1 (``64, 128, 256``)."""
    lengths = tuple(lengths)
    if not 2 <= len(lengths) <= 3 or list(lengths) != sorted(set(lengths)) or lengths[0] < 1:
        raise InputError("lengths", f"must be two or three increasing token counts >= 1, got {list(lengths)}")
    return lengths


def predicted(model: Transformer, partition: Partition, lengths: Sequence[int]) -> dict[str, tuple[float, ...]]:
    """The cost model's FLOPs of F, B, W and activation bytes, summed over the stages, at each length."""
    out: dict[str, list[float]] = {k: [] for k in FIGURES}
    for length in lengths:
        costs = stage_costs(replace(model, sequence=length, dtype="fp32", flash_attention=False), partition)
        for k in FIGURES:
            out[k].append(sum(getattr(c, k) for c in costs))
    return {k: tuple(v) for k, v in out.items()}


def measure_scaling(model: Transformer, lengths: Sequence[int], partition: Partition, repeats: int = 3,
                    device: str = "cpu") -> Scaling:
    """Measure the stages of ``partition`` at each length (a split backward, one device per stage)."""
    lengths = check_lengths(lengths)
    measured: dict[str, list[float]] = {k: [] for k in FIGURES}
    for length in lengths:
        spec = spec_of_transformer(replace(model, sequence=length))
        problem = profile(spec, partition.num_stages, 1, "linear", 1, repeats=repeats, device=device,
                          partition=partition)
        bytes_ = problem.annotations["x-profile"]["activation_bytes"]
        measured["activation"].append(float(sum(bytes_)))
        for k in FIGURES[:3]:
            measured[k].append(sum(getattr(problem, k)))
    return Scaling(tuple(lengths), {k: tuple(v) for k, v in measured.items()}, predicted(model, partition, lengths))


def render_scaling(scaling: Scaling) -> str:
    """One row per length: measured and predicted ratios to the first length and their deviation."""
    first = scaling.lengths[0]
    lines = [f"scaling with tokens per microbatch (one document; ratios to {first} tokens, measured / cost model; "
             "deviation = measured / predicted - 1):"]
    for k, length in enumerate(scaling.lengths[1:], start=1):
        cells = []
        for figure in FIGURES:
            m, p = scaling.measured[figure], scaling.predicted[figure]
            cells.append(f"{figure} {m[k] / m[0]:.2f}/{p[k] / p[0]:.2f} ({scaling.deviation(figure)[k]:+.0%})")
        lines.append(f"  {length:>6} tokens: " + ", ".join(cells))
    worst = max(abs(d) for figure in FIGURES for d in scaling.deviation(figure))
    lines.append(f"  largest deviation {worst:.0%}")
    return "\n".join(lines)
