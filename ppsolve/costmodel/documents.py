"""Per-microbatch costs from document lengths: a version-4 problem file (S lists of m).

A microbatch of documents is one packed sequence of ``T = sum L`` tokens (micro-batch size 1).
Everything but the attention scores scales with T: the GEMMs, norms, TP/CP messages, the p2p
message and the activations (Korthikanti et al., with flash attention no s x s tensor) are the
formulas of ``formulas`` at sequence T. The attention scores scale with the (query, key) pairs
the attention computes, ``pairs``:

- flash attention (a causal, document-masked kernel such as varlen flash attention): the pairs the
  mask keeps, ``sum L (L + 1) / 2`` over the documents, so 4 h pairs FLOPs in F and 8 h pairs in B;
- without flash attention: the written-out attention scores every pair of the packed sequence and
  masks after, ``T^2`` pairs, and keeps its T x T tensors (as the uniform path does).

W holds no attention term (it has no weights). The uniform path (no documents) counts every score
of its sequence, ``b s^2`` pairs, as the zero-bubble paper's 4bs^2h does.

Static memory (weights, gradients, optimizer states) and so the activation capacity are those of
the model description, whatever the microbatch holds.

The documents file is either a JSON list of microbatches, each a list of document lengths in
tokens (microbatches as the data loader formed them), or an object ``{"documents": [lengths...],
"tokens_per_microbatch": N}`` of documents in the loader's order, for ``packing`` to form them (fields
starting with ``x-`` are annotations, kept out of the way).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from ppsolve.costmodel import formulas
from ppsolve.costmodel.build import (GIB, MEMORY_DIGITS, TIME_DIGITS, Layout, check_layout, p2p_ms, problem_data,
                                     stage_costs, stage_ms)
from ppsolve.costmodel.descriptions import Hardware, Transformer
from ppsolve.costmodel.parallel import Parallelism
from ppsolve.costmodel.partition import Partition
from ppsolve.errors import InputError
from ppsolve.jsonio import read_json
from ppsolve.limits import check_documents
from ppsolve.problem import Problem, expand_placement, problem_from_dict

WHERE = "documents"
BATCH_KEYS = ("documents", "tokens_per_microbatch")


@dataclass(frozen=True)
class Batch:
    """One training step's documents: as microbatches (``microbatches``) or as a flat list in the data loader's
    order (``microbatches`` None), and the token budget of a microbatch when the file gives one."""

    documents: tuple[int, ...]
    microbatches: tuple[tuple[int, ...], ...] | None = None
    tokens_per_microbatch: int | None = None


def batch_from_data(data: Any, where: str = WHERE) -> Batch:
    """Validate a documents file's content; InputError names the bad field."""
    if isinstance(data, list):
        _nonempty(data, where, "microbatches")
        check_documents(sum(len(mb) if isinstance(mb, list) else 1 for mb in data), where)
        microbatches = tuple(_lengths(mb, f"{where}[{j}]") for j, mb in enumerate(data))
        return Batch(tuple(length for mb in microbatches for length in mb), microbatches)
    if not isinstance(data, dict):
        raise InputError(where, "must be a list of microbatches (lists of document lengths) or an object "
                                f"with {' and '.join(BATCH_KEYS)}")
    unknown = sorted(k for k in set(data) - set(BATCH_KEYS) if not str(k).startswith("x-"))
    if unknown:
        raise InputError(f"{where}.{unknown[0]}", f"unknown field; known: {', '.join(BATCH_KEYS)}")
    if "documents" not in data:
        raise InputError(f"{where}.documents", "missing: the document lengths in the data loader's order")
    budget = data.get("tokens_per_microbatch")
    if budget is not None:
        budget = _positive_int(budget, f"{where}.tokens_per_microbatch")
    if isinstance(data["documents"], list):
        check_documents(len(data["documents"]), f"{where}.documents")
    return Batch(_lengths(data["documents"], f"{where}.documents"), None, budget)


def read_batch(path: str | Path) -> Batch:
    return batch_from_data(read_json(path, "documents"))


def _nonempty(value: Any, where: str, what: str) -> None:
    if not isinstance(value, list):
        raise InputError(where, f"must be a list of {what}, got {type(value).__name__}")
    if not value:
        raise InputError(where, f"an empty batch: no {what}")


def _positive_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(where, f"must be a whole number of tokens >= 1, got {value!r}")
    return value


def _lengths(value: Any, where: str) -> tuple[int, ...]:
    _nonempty(value, where, "document lengths")
    return tuple(_positive_int(length, f"{where}[{i}]") for i, length in enumerate(value))


def attention_pairs(lengths: Sequence[int], flash: bool) -> int:
    """The (query, key) pairs attention computes for one packed microbatch (see the module doc)."""
    if flash:
        return sum(length * (length + 1) // 2 for length in lengths)
    return sum(lengths) ** 2


def microbatch_model(model: Transformer, tokens: int) -> Transformer:
    """``model`` for one packed microbatch of ``tokens`` tokens: sequence T, micro-batch size 1."""
    return replace(model, sequence=tokens, micro_batch_size=1)


def microbatch_costs(model: Transformer, partition: Partition, par: Parallelism,
                     lengths: Sequence[int]) -> list[formulas.PartCost]:
    """Per-stage costs on one GPU of the microbatch that packs documents of ``lengths`` tokens."""
    return stage_costs(microbatch_model(model, sum(lengths)), partition, par,
                       attention_pairs(lengths, model.flash_attention))


@dataclass(frozen=True)
class MicrobatchTime:
    """Unrounded milliseconds of F + B + W a packed microbatch costs each device: ``per_token[d] * T +
    per_pair[d] * pairs`` (every formula is linear in T and pairs at micro-batch size 1)."""

    per_token: tuple[float, ...]
    per_pair: tuple[float, ...]
    flash: bool
    _rates: tuple[tuple[float, float], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        rates = set(zip(self.per_token, self.per_pair))  # a device no faster in both rates than another one
        object.__setattr__(self, "_rates", tuple(r for r in rates if not any(
            o != r and o[0] >= r[0] and o[1] >= r[1] for o in rates)))

    def of(self, tokens: int, document_pairs: int) -> float:
        """The critical (slowest device's) F + B + W time of a microbatch of ``tokens`` tokens whose documents
        keep ``document_pairs`` pairs under the causal mask (``attention_pairs`` with flash attention)."""
        pairs = document_pairs if self.flash else tokens * tokens
        return max(a * tokens + c * pairs for a, c in self._rates)

    def of_documents(self, lengths: Sequence[int]) -> float:
        return self.of(sum(lengths), attention_pairs(lengths, True))


def device_times(model: Transformer, hardware: Hardware, layout: Layout, partition: Partition,
                 tokens: int, pairs: float) -> list[float]:
    """Unrounded F + B + W milliseconds of one microbatch on each device, straight from the cost model."""
    costs = stage_costs(microbatch_model(model, tokens), partition, layout.parallel, pairs)
    placement = expand_placement(layout.placement, layout.devices, layout.chunks, "layout.placement")
    times = [0.0] * layout.devices
    for s, c in enumerate(costs):
        times[placement[s]] += (stage_ms(c.forward, c.forward_bytes, hardware)
                                + stage_ms(c.backward_input, c.backward_bytes, hardware)
                                + stage_ms(c.backward_weight, 0.0, hardware))
    return times


def microbatch_time(model: Transformer, hardware: Hardware, layout: Layout, partition: Partition) -> MicrobatchTime:
    """The per-token and per-pair rates of every device, read off the cost model at T = 1."""
    tokens_only = device_times(model, hardware, layout, partition, 1, 0)
    with_pair = device_times(model, hardware, layout, partition, 1, 1)
    return MicrobatchTime(tuple(tokens_only), tuple(p - t for p, t in zip(with_pair, tokens_only)),
                          model.flash_attention)


def documents_problem_data(model: Transformer, hardware: Hardware, layout: Layout, partition: Partition,
                           microbatches: Sequence[Sequence[int]]) -> dict:
    """The version-4 problem file's content (not yet validated): every time, activation, hold, recompute figure
    and p2p latency per (stage, microbatch) of the packed ``microbatches``; the rest as ``build.problem_data``."""
    m, par = len(microbatches), layout.parallel
    data = problem_data(model, hardware, replace(layout, microbatches=m), partition)
    per = [microbatch_costs(model, partition, par, lengths) for lengths in microbatches]  # per[j][s]
    t = lambda flops, nbytes=0.0: round(stage_ms(flops, nbytes, hardware), TIME_DIGITS)  # noqa: E731
    g = lambda nbytes: round(nbytes / GIB, MEMORY_DIGITS)  # noqa: E731
    grid = lambda figure: [[figure(per[j][s]) for j in range(m)] for s in range(partition.num_stages)]  # noqa: E731
    tokens = [sum(lengths) for lengths in microbatches]
    data["time"].update(forward=grid(lambda c: t(c.forward, c.forward_bytes)),
                        backward_input=grid(lambda c: t(c.backward_input, c.backward_bytes)),
                        backward_weight=grid(lambda c: t(c.backward_weight)),
                        p2p=[round(p2p_ms(microbatch_model(model, n), hardware, par), TIME_DIGITS) for n in tokens])
    data["memory"]["activation"] = grid(lambda c: g(c.activation))
    if layout.backward == "split":
        data["memory"]["weight_hold"] = grid(lambda c: g(c.weight_hold))
    if "recompute" in data:
        data["recompute"] = {"keep": grid(lambda c: g(c.keep)), "time": grid(lambda c: t(c.recompute, c.forward_bytes))}
    data["name"] += f", {sum(map(len, microbatches))} documents, {sum(tokens)} tokens"
    notes = data["x-costmodel"]
    notes["documents"] = {"microbatches": [list(lengths) for lengths in microbatches], "tokens": tokens,
                          "attention_pairs": [attention_pairs(lengths, model.flash_attention)
                                              for lengths in microbatches]}
    notes["sources"]["time.attention"] = (
        "per microbatch, one packed sequence of T tokens (micro-batch size 1): the token-linear parts at sequence T; "
        "attention 4h FLOPs per (query, key) pair in F, 8h in B, none in W, over "
        + ("the pairs a causal document mask keeps, sum L(L+1)/2 (flash attention)" if model.flash_attention else
           "all T^2 pairs of the packed sequence (written-out attention, masked after)"))
    return data


def build_documents_problem(model: Transformer, hardware: Hardware, layout: Layout, partition: Partition,
                            microbatches: Sequence[Sequence[int]]) -> Problem:
    """The validated version-4 problem of the packed ``microbatches`` (``layout.microbatches`` is not read)."""
    check_layout(model, layout)
    return problem_from_dict(documents_problem_data(model, hardware, layout, partition, microbatches))
