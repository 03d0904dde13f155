"""Layers of the bundled models, their cut into stages, the data and the loss.

Every part is built in one global order from the model's seed, so every rank and
the single-process reference hold identical weights. Parameter names are global
(``parts.block3.fc1.weight``) whichever stage holds them. A stage never saves its
own output for backward (blocks end with a residual add), so a tensor handed to
the next stage belongs to that stage's saved activations only.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as nnf
from torch import nn

from ppsolve.executor.spec import ModelSpec


class Embedding(nn.Module):
    def __init__(self, vocab: int, hidden: int, seq_len: int):
        super().__init__()
        self.tokens = nn.Embedding(vocab, hidden)
        self.position = nn.Parameter(torch.randn(seq_len, hidden) * 0.02)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.tokens(ids) + self.position


class Block(nn.Module):
    """Pre-norm transformer block with causal self-attention (written out, no fused kernels)."""

    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, 4 * hidden)
        self.fc2 = nn.Linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, hidden = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(hidden, dim=-1)
        shape = (batch, seq, self.heads, hidden // self.heads)
        q, k, v = (t.reshape(shape).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(hidden // self.heads)
        mask = torch.ones(seq, seq, dtype=torch.bool, device=x.device).triu(1)
        attn = scores.masked_fill(mask, float("-inf")).softmax(dim=-1) @ v
        x = x + self.proj(attn.transpose(1, 2).reshape(batch, seq, hidden))
        return x + self.fc2(nnf.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class Head(nn.Module):
    def __init__(self, hidden: int, out: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.out = nn.Linear(hidden, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(x))


class Residual(nn.Module):
    """One MLP-stack layer: x + fc2(tanh(fc1(x)))."""

    def __init__(self, width: int):
        super().__init__()
        self.fc1 = nn.Linear(width, width)
        self.fc2 = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.tanh(self.fc1(x)))


class StageModule(nn.Module):
    """The parts one stage runs, in order, keyed by their global names."""

    def __init__(self, parts: dict[str, nn.Module]):
        super().__init__()
        self.parts = nn.ModuleDict(parts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for part in self.parts.values():
            x = part(x)
        return x


def build_parts(spec: ModelSpec) -> dict[str, nn.Module]:
    """Every part of the model, in chain order, initialised from the model's seed."""
    torch.manual_seed(spec.seed)
    d = spec.dims
    parts: dict[str, nn.Module] = {}
    if spec.kind == "gpt":
        parts["embed"] = Embedding(d["vocab"], d["hidden"], d["seq_len"])
        for i in range(d["layers"]):
            parts[f"block{i}"] = Block(d["hidden"], d["heads"])
        parts["head"] = Head(d["hidden"], d["vocab"])
    else:
        parts["embed"] = nn.Linear(d["width"], d["width"])
        for i in range(d["layers"]):
            parts[f"block{i}"] = Residual(d["width"])
        parts["head"] = nn.Linear(d["width"], d["width"])
    return parts


def build_stages(spec: ModelSpec, stages: int, keep: set[int] | None = None,
                 blocks: list[range] | None = None) -> dict[int, StageModule]:
    """Stage modules (only those in ``keep`` when given): the blocks of each stage as
    ``blocks`` says (default: spread evenly), embedding on stage 0, head on the last stage."""
    layers = blocks if blocks is not None else spec.layers_of_stages(stages)
    parts = build_parts(spec)
    out = {}
    for s, blocks in enumerate(layers):
        if keep is not None and s not in keep:
            continue
        names = (["embed"] if s == 0 else []) + [f"block{i}" for i in blocks] + (["head"] if s == stages - 1 else [])
        out[s] = StageModule({name: parts[name] for name in names})
    return out


def build_full(spec: ModelSpec) -> StageModule:
    """The whole model as one module (same parameter names as the stages)."""
    return StageModule(build_parts(spec))


def microbatch(spec: ModelSpec, index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Input and target of microbatch ``index``: fixed by the model's seed and the index."""
    gen = torch.Generator().manual_seed(spec.seed * 1_000_003 + index + 1)
    b, d = spec.micro_batch_size, spec.dims
    if spec.kind == "gpt":
        shape = (b, d["seq_len"])
        return (torch.randint(d["vocab"], shape, generator=gen), torch.randint(d["vocab"], shape, generator=gen))
    return torch.randn(b, d["width"], generator=gen), torch.randn(b, d["width"], generator=gen)


def boundary_shape(spec: ModelSpec) -> tuple[int, ...]:
    """Shape of the tensor passed between two stages (and of its gradient)."""
    if spec.kind == "gpt":
        return (spec.micro_batch_size, spec.dims["seq_len"], spec.dims["hidden"])
    return (spec.micro_batch_size, spec.dims["width"])


def loss_fn(spec: ModelSpec):
    """The per-microbatch loss (a mean over its samples); one iteration's loss is the mean over microbatches."""
    if spec.kind == "gpt":
        vocab = spec.dims["vocab"]
        return lambda out, target: nnf.cross_entropy(out.reshape(-1, vocab), target.reshape(-1))
    return nnf.mse_loss
