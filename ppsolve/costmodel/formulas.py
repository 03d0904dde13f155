"""The standard transformer cost formulas, per part of the model and one microbatch.

Notation: b micro-batch size, s sequence, h hidden, f MLP width, a heads, k the
key/value width (kv groups x head size), V vocabulary, e bytes per element.

FLOPs (a multiply-add is 2 FLOPs). A block's GEMMs cost
``G = 2bs(h(h + 2k) + h^2 + m h f)`` (QKV, attention output, the MLP's ``m`` = 2 or
3 matrices); with k = h, f = 4h, m = 2 that is 24bsh^2. Attention scores and their
product with V cost ``4bs^2h``. Following the zero-bubble paper's Table 1
(after Korthikanti et al.): F = G + 4bs^2h, B = G + 8bs^2h (the attention's
backward belongs to B), W = G. Recompute adds F to B (full) or nothing
measurable (selective: LayerNorm, GeLU and dropout).

Activation bytes kept by F (Korthikanti et al., generalised to GQA and any MLP):
LayerNorms 4sbh, attention 7sbh + 4sbk (+ 5as^2b without flash attention), MLP
3sbh + 4sbf (6sbf gated); 34sbh + 5as^2b for the classic block. Counted at 2
bytes per element and 1 per dropout mask; fp32 scales the 2-byte parts. The
zero-bubble paper holds 32sbh of the 34sbh for W: the same 32/34 share here.
Selective recompute keeps 20sbh (PipeOffload), full recompute the block input 2sbh.

Recompute as a decision (``recompute: decide``, contract version 3): every number is
that of no recompute, and each part also says what a recomputed microbatch keeps
from F to R (``keep``) and what R re-runs (``recompute`` FLOPs). Megatron's full
recompute checkpoints the transformer blocks only: a block keeps its input 2sbh and
R re-runs its forward; the embedding and the LM head are not recomputed, so their
activations stay in ``keep`` and R does not include the head's GEMM.

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
  (weight_hold > activation is not allowed); capping weight_hold at the checkpoint
  would understate it (the Llama-3-8B-like block: 0.0625 GiB kept, 1.06 GiB needed
  by W). The problem builder refuses it and points to ``decide`` (R ops) or a fused
  backward; :func:`block` records the true hold.
- selective: the recomputed LayerNorm, GeLU and dropout outputs are rebuilt in B;
  the 32/34 share of the 20sbh kept stays within the activation, as modelled.

The embedding sits on the first stage (a lookup: no FLOPs counted, a sbh dropout
mask kept) and the LM head with its loss on the last: a final LayerNorm, the
hV logits GEMM (2bshV each for F, B and W) and the fp32 logits the loss keeps (4sbV).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from ppsolve.costmodel.descriptions import Transformer

# Mixed-precision Adam: bf16 weights and gradients, fp32 master weights and two moments
# (the ZeRO paper's 16 bytes per parameter).
STATIC_BYTES_PER_PARAM = 16
HOLD_SHARE = 32 / 34  # zero-bubble paper, Table 1: M_W = 32sbh of M_B = 34sbh


@dataclass(frozen=True)
class PartCost:
    """What one part of the model costs for one microbatch (FLOPs, bytes, parameters)."""

    forward: float = 0.0
    backward_input: float = 0.0
    backward_weight: float = 0.0
    activation: float = 0.0
    weight_hold: float = 0.0
    params: float = 0.0
    keep: float = 0.0  # bytes a recomputed microbatch keeps from F to R (Megatron's full recompute)
    recompute: float = 0.0  # FLOPs of R: the forward of the recomputed blocks

    def __add__(self, other: "PartCost") -> "PartCost":
        return PartCost(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def __mul__(self, count: int) -> "PartCost":
        return PartCost(*(getattr(self, f.name) * count for f in fields(self)))


def _elements(m: Transformer, two_byte: float, one_byte: float = 0.0) -> float:
    """Bytes of ``two_byte`` elements at the model's precision plus ``one_byte`` mask bytes."""
    return two_byte * m.dtype_bytes + one_byte


def block_gemm_flops(m: Transformer) -> float:
    b, s, h, f, k = m.micro_batch_size, m.sequence, m.hidden, m.ffn, m.kv_width
    mlp_matrices = 3 if m.gated_mlp else 2
    return 2 * b * s * (h * (h + 2 * k) + h * h + mlp_matrices * h * f)


def block_checkpoint(m: Transformer) -> float:
    """Bytes full recompute keeps of one block: its input, 2sbh."""
    return _elements(m, m.sequence * m.micro_batch_size * m.hidden)


def block_activation(m: Transformer) -> float:
    """Bytes one block keeps from F to B for one microbatch."""
    b, s, h, f, k, a = m.micro_batch_size, m.sequence, m.hidden, m.ffn, m.kv_width, m.heads
    if m.recompute == "full":
        return block_checkpoint(m)
    if m.recompute == "selective":
        return _elements(m, 10 * s * b * h)  # 20sbh bytes at 2 bytes per element
    layernorms = _elements(m, 2 * s * b * h)
    attention = _elements(m, 3 * s * b * h + 2 * s * b * k, one_byte=s * b * h)
    if not m.flash_attention:
        attention += _elements(m, 2 * a * s * s * b, one_byte=a * s * s * b)  # softmax out, dropout out + mask
    mlp_inner = (3 if m.gated_mlp else 2) * s * b * f
    mlp = _elements(m, s * b * h + mlp_inner, one_byte=s * b * h)
    return layernorms + attention + mlp


def block(m: Transformer) -> PartCost:
    """One transformer block. With full recompute, ``weight_hold`` is what W needs (the hold of no
    recompute), which exceeds the activation: only a fused backward can use it (see the module doc)."""
    b, s, h, f, k = m.micro_batch_size, m.sequence, m.hidden, m.ffn, m.kv_width
    gemm = block_gemm_flops(m)
    attention = 4 * b * s * s * h
    forward = gemm + attention
    backward_input = gemm + 2 * attention + (forward if m.recompute == "full" else 0.0)
    act = block_activation(m)
    params = h * (h + 2 * k) + h * h + (3 if m.gated_mlp else 2) * h * f + 4 * h
    return PartCost(forward, backward_input, gemm, act, _block_hold(m), params,
                    keep=block_checkpoint(m), recompute=forward)


def _block_hold(m: Transformer) -> float:
    """Bytes of one block held from B to W: the 32/34 share of what it keeps without its s^2
    attention tensors; with full recompute, that of no recompute (W needs its GEMM inputs)."""
    if m.recompute == "full":
        return _block_hold(replace(m, recompute="none"))
    act = block_activation(m)
    s, b = m.sequence, m.micro_batch_size
    linear_part = act - (0.0 if m.flash_attention or m.recompute == "selective" else
                         _elements(m, 2 * m.heads * s * s * b, one_byte=m.heads * s * s * b))
    return min(act, HOLD_SHARE * linear_part)


def embedding(m: Transformer) -> PartCost:
    """The token embedding (first stage)."""
    b, s, h = m.micro_batch_size, m.sequence, m.hidden
    return PartCost(activation=s * b * h, params=m.vocabulary * h, keep=s * b * h)


def head(m: Transformer) -> PartCost:
    """Final LayerNorm, the LM head GEMM and the loss (last stage)."""
    b, s, h, v = m.micro_batch_size, m.sequence, m.hidden, m.vocabulary
    gemm = 2 * b * s * h * v
    head_input = _elements(m, 2 * s * b * h)  # LayerNorm input and the GEMM input
    logits = 4 * s * b * v
    kept = head_input + logits  # not recomputed: all of it stays in keep
    return PartCost(gemm, gemm, gemm, kept, _elements(m, s * b * h), h * v + 2 * h, keep=kept)


def boundary_bytes(m: Transformer) -> float:
    """Bytes sent from one stage to the next per microbatch (the hidden states)."""
    return _elements(m, m.sequence * m.micro_batch_size * m.hidden)


def offload_k(m: Transformer, tflops: float, host_link_gbps: float) -> float:
    """PipeOffload's k for one block: the round trip of its activation to host memory
    over its F + B + W time. Full offload can be free when k <= 1."""
    part = block(m)
    round_trip = 2 * part.activation / (host_link_gbps * 1e9)
    compute = (part.forward + part.backward_input + part.backward_weight) / (tflops * 1e12)
    return round_trip / compute
