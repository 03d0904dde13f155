"""The standard transformer cost formulas, per part of the model and one microbatch, on one GPU.

Notation: b micro-batch size, s sequence, h hidden, f MLP width, a heads, k the
key/value width (kv groups x head size), V vocabulary, e bytes per element; t
tensor-parallel and c context-parallel ranks (``parallel.Parallelism``).

FLOPs (a multiply-add is 2 FLOPs). A block's GEMMs cost
``G = 2bs(h(h + 2k) + h^2 + m h f)`` (QKV, attention output, the MLP's ``m`` = 2 or
3 matrices); with k = h, f = 4h, m = 2 that is 24bsh^2. Attention scores and their
product with V cost ``4bs^2h``. Following the zero-bubble paper's Table 1
(after Korthikanti et al.): F = G + 4bs^2h, B = G + 8bs^2h (the attention's
backward belongs to B), W = G. Full recompute adds F to B. Every FLOP is split
over the t x c GPUs of a pipeline rank; their communication is counted apart, in
bytes each GPU sends (``forward_bytes``, ``backward_bytes``; see ``parallel``).

Activation bytes kept by F: Korthikanti et al. (2022), Table 2, generalised to GQA
and any MLP. Per block, at e = 2 and one byte per dropout mask:
- kept whole by every tensor-parallel rank (split over t only with sequence
  parallelism): the two LayerNorm inputs 4sbh, the QKV and first MLP GEMM inputs
  2sbh each, two dropout masks 2sbh: 10sbh;
- split over t: Q and K 2sb(h + k), V 2sbk, the attention output projection's input
  2sbh, the MLP's inner tensors 4sbf (6sbf gated): 24sbh for the classic block;
- the s x s attention tensors 5as^2b (split over t), only without flash attention.
So sbh(34 + 5as/h) alone, sbh(10 + 24/t + 5as/(ht)) with TP, sbh/t (34 + 5as/h)
with TP + SP. Selective recompute (Korthikanti et al.) drops the s x s tensors:
sbh(10 + 24/t), or 34sbh/t with SP (with flash attention they are never kept, so
selective equals none). Full recompute keeps the block input 2sbh (2sbh/t with SP,
which keeps it sequence-sharded). Context parallelism divides s by c throughout (the
s x s tensors become (s/c) x s). fp32 scales the 2-byte parts. The zero-bubble
paper holds 32sbh of the 34sbh for W: the same 32/34 share here.

Recompute as a decision (``recompute: decide``, contract version 3): every number is
that of no recompute, and each part also says what a recomputed microbatch keeps
from F to R (``keep``) and what R re-runs (``recompute`` FLOPs, ``recompute_bytes``).
Megatron's full recompute checkpoints the transformer blocks only: a block keeps its
input and R re-runs its forward; the embedding and the LM head are not recomputed,
so their activations stay in ``keep`` and R does not include the head's GEMM.

What W holds with recompute. W needs the inputs of its GEMMs; a recompute rebuilds
them before B, so the part held from B to W is the same as without recompute
(``weight_hold`` does not shrink). The contract's events (F allocates the
activation, B frees activation - weight_hold, W frees weight_hold, with
weight_hold <= activation) then express each mode as follows:
- decide: exact. activation and weight_hold of no recompute, keep the checkpoint;
  a recomputed F allocates keep and R the rest, so B to W holds weight_hold.
- full with a fused backward (Megatron): exact up to the one rebuild inside B. The
  activation is the checkpoint, B re-runs the forward and ends with W, and the
  rebuilt tensors live only during that B (a transient the contract has no event for).
- full with a split backward: not expressible. From F to B the stage keeps only the
  checkpoint, from B to W the whole weight_hold of no recompute, which exceeds it
  (weight_hold > activation is not allowed). The problem builder refuses it and
  points to ``decide`` (R ops) or a fused backward; :func:`block` records the true hold.
- selective: the s x s tensors are rebuilt in B; the hold share stays within the
  activation, as modelled.

The embedding sits on the first stage (a lookup: no FLOPs counted, a sbh dropout
mask kept; vocabulary-parallel: V h / t weights) and the LM head with its loss on
the last: a final norm, the hV logits GEMM (2bshV each for F, B and W, split over
t x c) and the fp32 logits the loss keeps (4sbV / (t c)).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from ppsolve.costmodel.descriptions import Transformer
from ppsolve.costmodel.parallel import Parallelism, ring_fraction

HOLD_SHARE = 32 / 34  # zero-bubble paper, Table 1: M_W = 32sbh of M_B = 34sbh
ALONE = Parallelism()


@dataclass(frozen=True)
class PartCost:
    """What one part of the model costs one GPU for one microbatch (FLOPs, bytes, parameters)."""

    forward: float = 0.0
    backward_input: float = 0.0
    backward_weight: float = 0.0
    activation: float = 0.0
    weight_hold: float = 0.0
    params: float = 0.0  # parameters this GPU holds (before any optimizer sharding)
    keep: float = 0.0  # bytes a recomputed microbatch keeps from F to R (Megatron's full recompute)
    recompute: float = 0.0  # FLOPs of R: the forward of the recomputed blocks
    forward_bytes: float = 0.0  # bytes this GPU sends to its TP/CP peers during F (and R)
    backward_bytes: float = 0.0  # ... during B

    def __add__(self, other: "PartCost") -> "PartCost":
        return PartCost(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def __mul__(self, count: int) -> "PartCost":
        return PartCost(*(getattr(self, f.name) * count for f in fields(self)))


def _elements(m: Transformer, two_byte: float, one_byte: float = 0.0) -> float:
    """Bytes of ``two_byte`` elements at the model's precision plus ``one_byte`` mask bytes."""
    return two_byte * m.dtype_bytes + one_byte


def block_gemm_flops(m: Transformer) -> float:
    """FLOPs of one block's GEMMs for the whole micro-batch (before any split)."""
    b, s, h, f, k = m.micro_batch_size, m.sequence, m.hidden, m.ffn, m.kv_width
    mlp_matrices = 3 if m.gated_mlp else 2
    return 2 * b * s * (h * (h + 2 * k) + h * h + mlp_matrices * h * f)


def _sp(par: Parallelism) -> int:
    """The divisor of what every TP rank keeps whole: t with sequence parallelism, else 1."""
    return par.tensor if par.sequence else 1


def block_checkpoint(m: Transformer, par: Parallelism = ALONE) -> float:
    """Bytes full recompute keeps of one block: its input, 2sbh (sequence-sharded with SP)."""
    return _elements(m, m.sequence / par.context * m.micro_batch_size * m.hidden) / _sp(par)


def _scores(m: Transformer, par: Parallelism) -> float:
    """Bytes of the s x s attention tensors (softmax output, dropout output and mask): 5as^2b / t."""
    if m.flash_attention:
        return 0.0
    a, s, b = m.heads, m.sequence, m.micro_batch_size
    rows = s / par.context
    return _elements(m, 2 * a * rows * s * b, one_byte=a * rows * s * b) / par.tensor


def block_activation(m: Transformer, par: Parallelism = ALONE) -> float:
    """Bytes one block keeps from F to B for one microbatch on one GPU (Korthikanti et al., Table 2)."""
    if m.recompute == "full":
        return block_checkpoint(m, par)
    b, s, h, f, k = m.micro_batch_size, m.sequence / par.context, m.hidden, m.ffn, m.kv_width
    whole = _elements(m, 4 * s * b * h, one_byte=2 * s * b * h)  # 2 norm inputs, QKV and MLP inputs; 2 masks
    mlp_inner = (3 if m.gated_mlp else 2) * s * b * f
    split = _elements(m, s * b * (h + k) + s * b * k + s * b * h + mlp_inner)  # Q, K; V; proj input; MLP
    scores = 0.0 if m.recompute == "selective" else _scores(m, par)
    return whole / _sp(par) + split / par.tensor + scores


def block_params(m: Transformer) -> tuple[float, float]:
    """(parameters split over the TP ranks, parameters every TP rank holds) of one block."""
    h, f, k = m.hidden, m.ffn, m.kv_width
    matrices = h * (h + 2 * k) + h * h + (3 if m.gated_mlp else 2) * h * f
    biases = (h + 2 * k) + h + (2 if m.gated_mlp else 1) * f + h if m.bias else 0
    return matrices + biases, 2 * m.norm_params


def _block_bytes(m: Transformer, par: Parallelism) -> tuple[float, float]:
    """(F, B) bytes one GPU sends to its peers per block: TP's all-reduces (or SP's all-gathers and
    reduce-scatters, the same bytes) and CP's key/value exchange (see ``parallel``)."""
    t, c = par.tensor, par.context
    hidden_states = _elements(m, m.sequence / c * m.micro_batch_size * m.hidden)
    tp = 2 * ring_fraction(t) * hidden_states
    cp = (c - 1) / c * _elements(m, 2 * m.sequence * m.micro_batch_size * m.kv_width) / t
    return tp + cp, tp + 2 * cp


def block(m: Transformer, par: Parallelism = ALONE, pairs: float | None = None) -> PartCost:
    """One transformer block on one GPU. With full recompute, ``weight_hold`` is what W needs (the hold of
    no recompute), which exceeds the activation: only a fused backward can use it (see the module doc).
    ``pairs``: the (query, key) pairs attention computes for the whole micro-batch, default b s^2 (every
    score of the sequence); ``documents`` passes those of a causal document mask."""
    b, s, h = m.micro_batch_size, m.sequence, m.hidden
    gpus = par.gpus_per_stage_rank
    gemm = block_gemm_flops(m) / gpus
    attention = (4 * b * s * s * h if pairs is None else 4 * pairs * h) / gpus
    forward = gemm + attention
    fwd_bytes, bwd_bytes = _block_bytes(m, par)
    full = m.recompute == "full"
    backward_input = gemm + 2 * attention + (forward if full else 0.0)
    split, whole = block_params(m)
    return PartCost(forward, backward_input, gemm, block_activation(m, par), _block_hold(m, par),
                    split / par.tensor + whole, keep=block_checkpoint(m, par), recompute=forward,
                    forward_bytes=fwd_bytes, backward_bytes=bwd_bytes + (fwd_bytes if full else 0.0))


def _block_hold(m: Transformer, par: Parallelism) -> float:
    """Bytes of one block held from B to W: the 32/34 share of what it keeps without its s^2
    attention tensors; with full recompute, that of no recompute (W needs its GEMM inputs)."""
    if m.recompute == "full":
        return _block_hold(replace(m, recompute="none"), par)
    act = block_activation(m, par)
    linear_part = act - (0.0 if m.recompute == "selective" else _scores(m, par))
    return min(act, HOLD_SHARE * linear_part)


def embedding(m: Transformer, par: Parallelism = ALONE) -> PartCost:
    """The token embedding (first stage): vocabulary-parallel weights, learned positions if any."""
    b, s, h = m.micro_batch_size, m.sequence / par.context, m.hidden
    mask = s * b * h / _sp(par)
    positions = m.sequence * h if m.position == "learned" else 0
    return PartCost(activation=mask, params=m.vocabulary * h / par.tensor + positions, keep=mask)


def head(m: Transformer, par: Parallelism = ALONE) -> PartCost:
    """Final norm, the LM head GEMM (vocabulary-parallel) and the loss (last stage)."""
    b, s, h, v = m.micro_batch_size, m.sequence, m.hidden, m.vocabulary
    gemm = 2 * b * s * h * v / par.gpus_per_stage_rank
    rows = s / par.context
    norm_input = _elements(m, rows * b * h) / _sp(par)
    gemm_input = _elements(m, rows * b * h)
    logits = 4 * rows * b * v / par.tensor
    kept = norm_input + gemm_input + logits  # not recomputed: all of it stays in keep
    params = (h + (1 if m.bias else 0)) * v / par.tensor + m.norm_params  # the logits' bias with biases
    return PartCost(gemm, gemm, gemm, kept, gemm_input, params, keep=kept)


def boundary_bytes(m: Transformer, par: Parallelism = ALONE) -> float:
    """Bytes one GPU sends to the next stage per microbatch (its share of the hidden states)."""
    return _elements(m, m.sequence / par.context * m.micro_batch_size * m.hidden) / _sp(par)


def offload_k(m: Transformer, tflops: float, host_link_gbps: float) -> float:
    """PipeOffload's k for one block: the round trip of its activation to host memory
    over its F + B + W time. Full offload can be free when k <= 1."""
    part = block(m)
    round_trip = 2 * part.activation / (host_link_gbps * 1e9)
    compute = (part.forward + part.backward_input + part.backward_weight) / (tflops * 1e12)
    return round_trip / compute
