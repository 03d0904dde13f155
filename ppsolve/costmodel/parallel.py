"""Tensor, sequence, context and data parallelism around one pipeline stage.

A pipeline rank is a group of ``t x c`` GPUs (tensor-parallel ``t``, context-parallel
``c``) replicated ``D`` times (data parallel). What that changes, per GPU:

- Compute: every GEMM and attention FLOP of a block, the LM head included (vocabulary
  parallel), is split over ``t x c`` GPUs.
- Communication per block, on the GPU's intra-node link (``nvlink_gbps`` per
  direction), not overlapped with compute (an upper bound on its cost):
  TP (Megatron): two all-reduces of the block's ``(s/c) b h`` activations in F and
  two in B (or, with sequence parallelism, an all-gather and a reduce-scatter in
  their place: the same bytes); a ring all-reduce moves ``2 (t - 1) / t`` of the
  tensor through each GPU. CP (ring attention): F gathers the other ranks' keys and
  values, ``(c - 1) / c`` of ``2 s b k / t`` elements; B gathers them again and
  reduce-scatters their gradients (twice F's bytes).
- Activations: Korthikanti et al. (2022), Table 2 (see ``formulas.block_activation``);
  context parallelism divides the sequence each GPU holds by ``c``.
- Static memory: weights, gradients and optimizer states of the stage's parameters
  (the matrices split over ``t``; norms replicated), at the bytes per parameter of
  Megatron's mixed precision (its distributed-optimizer guide): bf16 weights with
  fp32 gradients 2 + 4 + 12 = 18 bytes; fp16 weights and gradients 2 + 2 + 16 = 20;
  fp32 4 + 4 + 8 = 16. Optimizer sharding over the ``D x c`` data-parallel ranks
  (Megatron shards over data and context parallel ranks together): ``optimizer``
  (ZeRO-1, Megatron's distributed optimizer: 6 + 12/D for bf16), ``gradients``
  (ZeRO-2: gradients too), ``full`` (ZeRO-3 / FSDP: weights too).
"""

from __future__ import annotations

from dataclasses import dataclass

from ppsolve.errors import InputError

FIELD = "layout.parallel"  # where a Parallelism sits, for the fields its errors name

SHARDINGS = ("none", "optimizer", "gradients", "full")

# (weight, gradient, optimizer-state) bytes per parameter in mixed precision, by model dtype.
STATE_BYTES = {"bf16": (2, 4, 12), "fp16": (2, 2, 16), "fp32": (4, 4, 8)}


@dataclass(frozen=True)
class Parallelism:
    """``t`` tensor-parallel (with or without sequence parallelism), ``c`` context-parallel and
    ``d`` data-parallel ranks around each pipeline rank, and how the optimizer is sharded."""

    tensor: int = 1
    sequence: bool = False
    context: int = 1
    data: int = 1
    sharding: str = "none"

    def __post_init__(self):
        for name in ("tensor", "context", "data"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"{FIELD}.{name}", f"must be an integer >= 1, got {value!r}")
        if self.sharding not in SHARDINGS:
            raise InputError(f"{FIELD}.sharding", f"must be one of {', '.join(SHARDINGS)}, got {self.sharding!r}")
        if self.sequence and self.tensor == 1:
            raise InputError(f"{FIELD}.sequence", f"needs `{FIELD}.tensor` > 1 (it splits the sequence over the "
                                                  "tensor-parallel ranks)")

    @property
    def shards(self) -> int:
        """Ranks the sharded states are spread over: data x context parallel."""
        return self.data * self.context

    @property
    def gpus_per_stage_rank(self) -> int:
        return self.tensor * self.context

    def check_fits(self, model) -> None:
        """InputError unless these ranks can split ``model`` (a ``descriptions.Transformer``): tensor
        parallelism splits the heads, key/value groups, hidden size and MLP width; context parallelism cuts
        the sequence into ``2c`` chunks (the formulas split the attention's FLOPs evenly over the ``c`` ranks:
        Megatron's load-balanced split of a causal mask, two chunks per rank); sequence parallelism splits
        each context-parallel rank's ``s / c`` tokens over the ``t`` ranks."""
        t, c = self.tensor, self.context
        for size in ("heads", "kv_groups", "hidden", "ffn"):
            if getattr(model, size) % t:
                raise InputError(f"{FIELD}.tensor", f"{t} does not divide the model's {size} "
                                                    f"({getattr(model, size)})")
        if c > 1 and model.sequence % (2 * c):
            raise InputError(f"{FIELD}.context", f"{c} needs a sequence divisible by 2 x {c} = {2 * c} (two "
                                                 f"chunks per rank balance the causal mask), got {model.sequence}")
        if self.sequence and (model.sequence // c) % t:
            raise InputError(f"{FIELD}.sequence", f"splits the {model.sequence // c} tokens of each "
                                                  f"context-parallel rank over `{FIELD}.tensor` {t}: "
                                                  f"{model.sequence // c} is not divisible by {t}")

    def bytes_per_param(self, dtype: str) -> tuple[float, float, float]:
        """(weights, gradients, optimizer states) bytes per parameter on one GPU."""
        weight, grad, state = STATE_BYTES[dtype]
        n = self.shards
        sharded = SHARDINGS.index(self.sharding)  # 0 none, 1 optimizer, 2 + gradients, 3 + weights
        return (weight / n if sharded >= 3 else weight, grad / n if sharded >= 2 else grad,
                state / n if sharded >= 1 else state)

    def describe(self) -> str:
        parts = [f"TP {self.tensor}" + (" + SP" if self.sequence else ""), f"CP {self.context}",
                 f"DP {self.data}", f"optimizer sharding {self.sharding}"]
        return ", ".join(parts)

    def to_dict(self) -> dict:
        return {"tensor": self.tensor, "sequence": self.sequence, "context": self.context, "data": self.data,
                "optimizer_sharding": self.sharding}


def ring_fraction(ranks: int) -> float:
    """Share of a tensor a ring all-reduce sends through each GPU: 2 (n - 1) / n."""
    return 2 * (ranks - 1) / ranks
