"""Layers of the models, their cut into stages, the data and the loss.

A transformer description builds GPT-style blocks (LayerNorm, learned positions,
biases, a GeLU MLP) or Llama-style ones (RMSNorm, rotary positions, a gated SiLU
MLP, grouped-query attention), as its fields say; attention is written out (no
fused kernels).

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
from ppsolve.executor.tokens import Lengths

PAD_TARGET = -100  # the target of a padding token: no loss


def _norm(kind: str, hidden: int) -> nn.Module:
    return nn.LayerNorm(hidden) if kind == "layernorm" else nn.RMSNorm(hidden, eps=1e-5)


class Embedding(nn.Module):
    """Token embedding, plus learned positions when the model has them."""

    def __init__(self, vocab: int, hidden: int, seq_len: int, learned_positions: bool = True):
        super().__init__()
        self.tokens = nn.Embedding(vocab, hidden)
        self.position = nn.Parameter(torch.randn(seq_len, hidden) * 0.02) if learned_positions else None

    def forward(self, ids: torch.Tensor, documents: torch.Tensor | None = None) -> torch.Tensor:
        x = self.tokens(ids)
        if self.position is None:
            return x
        return x + (self.position[:ids.shape[-1]] if documents is None else self.position[positions(documents)])


def positions(documents: torch.Tensor) -> torch.Tensor:
    """Each token's position in its own document (``documents``: a document index per token, shape (b, seq))."""
    index = torch.arange(documents.shape[-1], device=documents.device).expand_as(documents)
    starts = torch.ones_like(documents, dtype=torch.bool)
    starts[..., 1:] = documents[..., 1:] != documents[..., :-1]
    return index - torch.where(starts, index, 0).cummax(dim=-1).values


def attention_mask(seq: int, documents: torch.Tensor | None, device) -> torch.Tensor:
    """True where a query may not see a key: a later token, or (``documents``) another document's."""
    causal = torch.ones(seq, seq, dtype=torch.bool, device=device).triu(1)
    if documents is None:
        return causal
    return (causal | (documents[:, :, None] != documents[:, None, :]))[:, None]


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding (the half-split form of GPT-NeoX and Llama)."""
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-second, first), dim=-1) * sin


class Block(nn.Module):
    """Pre-norm transformer block with causal self-attention: GQA when ``kv_groups`` < ``heads``, rotary
    positions, a gated MLP, RMSNorm and biases as the description says."""

    def __init__(self, hidden: int, heads: int, kv_groups: int | None = None, ffn: int | None = None,
                 gated: bool = False, norm: str = "layernorm", rotary: bool = False, bias: bool = True):
        super().__init__()
        self.heads, self.groups = heads, kv_groups or heads
        self.head_dim = hidden // heads
        kv = self.groups * self.head_dim
        ffn = ffn or 4 * hidden
        self.gated = gated
        self.ln1 = _norm(norm, hidden)
        self.qkv = nn.Linear(hidden, hidden + 2 * kv, bias=bias)
        self.proj = nn.Linear(hidden, hidden, bias=bias)
        self.ln2 = _norm(norm, hidden)
        self.fc1 = nn.Linear(hidden, (2 if gated else 1) * ffn, bias=bias)
        self.fc2 = nn.Linear(ffn, hidden, bias=bias)
        self.rotary = rotary

    def forward(self, x: torch.Tensor, documents: torch.Tensor | None = None) -> torch.Tensor:
        """``documents`` (packed documents, a document index per token): attention and positions per document."""
        batch, seq, hidden = x.shape
        kv = self.groups * self.head_dim
        q, k, v = self.qkv(self.ln1(x)).split((hidden, kv, kv), dim=-1)
        q = q.reshape(batch, seq, self.heads, self.head_dim).transpose(1, 2)
        k, v = (t.reshape(batch, seq, self.groups, self.head_dim).transpose(1, 2) for t in (k, v))
        if self.rotary:  # angles made per call: each microbatch's saved tensors are its own
            inv = 1.0 / (10000 ** (torch.arange(0, self.head_dim, 2, device=x.device) / self.head_dim))
            if documents is None:
                angles = torch.outer(torch.arange(seq, device=x.device, dtype=inv.dtype), inv).repeat(1, 2)
            else:  # (batch, 1, seq, head_dim): each token at its position in its document
                angles = (positions(documents)[:, None, :, None].to(inv.dtype) * inv).repeat(1, 1, 1, 2)
            cos, sin = angles.cos(), angles.sin()
            q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        if self.groups != self.heads:
            k, v = (t.repeat_interleave(self.heads // self.groups, dim=1) for t in (k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        attn = scores.masked_fill(attention_mask(seq, documents, x.device), float("-inf")).softmax(dim=-1) @ v
        x = x + self.proj(attn.transpose(1, 2).reshape(batch, seq, hidden))
        inner = self.fc1(self.ln2(x))
        if self.gated:
            gate, up = inner.chunk(2, dim=-1)
            inner = nnf.silu(gate) * up
        else:
            inner = nnf.gelu(inner, approximate="tanh")
        return x + self.fc2(inner)


class Head(nn.Module):
    def __init__(self, hidden: int, out: int, norm: str = "layernorm", bias: bool = True):
        super().__init__()
        self.norm = _norm(norm, hidden)
        self.out = nn.Linear(hidden, out, bias=bias)

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
    """The parts one stage runs, in order, keyed by their global names; ``documents`` (a document index per
    token) reaches the parts that read it: the embedding's positions and the blocks' attention."""

    def __init__(self, parts: dict[str, nn.Module]):
        super().__init__()
        self.parts = nn.ModuleDict(parts)

    def forward(self, x: torch.Tensor, documents: torch.Tensor | None = None) -> torch.Tensor:
        for part in self.parts.values():
            x = part(x, documents) if documents is not None and isinstance(part, (Embedding, Block)) else part(x)
        return x


def build_parts(spec: ModelSpec) -> dict[str, nn.Module]:
    """Every part of the model, in chain order, initialised from the model's seed."""
    torch.manual_seed(spec.seed)
    d = spec.dims
    parts: dict[str, nn.Module] = {}
    if spec.kind == "transformer":
        parts["embed"] = Embedding(d["vocabulary"], d["hidden"], d["sequence"], d["position"] == "learned")
        for i in range(d["layers"]):
            parts[f"block{i}"] = Block(d["hidden"], d["heads"], d["kv_groups"], d["ffn"], d["gated_mlp"], d["norm"],
                                       d["position"] == "rotary", d["bias"])
        parts["head"] = Head(d["hidden"], d["vocabulary"], d["norm"], d["bias"])
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


def microbatch(spec: ModelSpec, index: int, lengths: Lengths | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Input and target of microbatch ``index``: fixed by the model's seed and the index. With
    ``lengths`` (a transformer), its first ``lengths.tokens[index]`` tokens of each sequence, padded
    to the budget when there is one (input token 0, target ``PAD_TARGET``: left out of the loss)."""
    gen = torch.Generator().manual_seed(spec.seed * 1_000_003 + index + 1)
    b, d = spec.micro_batch_size, spec.dims
    if spec.kind != "transformer":
        return torch.randn(b, d["width"], generator=gen), torch.randn(b, d["width"], generator=gen)
    shape = (b, d["sequence"])
    x, target = (torch.randint(d["vocabulary"], shape, generator=gen),
                 torch.randint(d["vocabulary"], shape, generator=gen))
    if lengths is None:
        return x, target
    real, length = lengths.tokens[index], lengths.shape_length(index)
    x, target = x[:, :length].clone(), target[:, :length].clone()
    x[:, real:], target[:, real:] = 0, PAD_TARGET
    return x, target


def boundary_shape(spec: ModelSpec, length: int | None = None) -> tuple[int, ...]:
    """Shape of the tensor passed between two stages (and of its gradient); ``length``: the
    microbatch's sequence length (default the model's)."""
    if spec.kind == "transformer":
        return (spec.micro_batch_size, length or spec.dims["sequence"], spec.dims["hidden"])
    return (spec.micro_batch_size, spec.dims["width"])


def loss_fn(spec: ModelSpec):
    """The per-microbatch loss (a mean over its samples, padding left out); one iteration's loss is the
    mean over microbatches."""
    if spec.kind == "transformer":
        vocab = spec.dims["vocabulary"]
        return lambda out, target: nnf.cross_entropy(out.reshape(-1, vocab), target.reshape(-1),
                                                     ignore_index=PAD_TARGET)
    return nnf.mse_loss
