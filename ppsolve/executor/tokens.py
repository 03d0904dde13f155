"""Microbatches of different sequence lengths: what a problem file says about its tokens.

Two annotations (user fields of SPEC.md, ``x-``), written by ``ppsolve profile
--microbatch-tokens`` or by whoever built the problem from document lengths:

- ``x-microbatch-tokens``: a list of m token counts, the real tokens of each
  microbatch (its sequence length, at most the model's ``sequence``). ppsolve's
  runtime runs microbatch j at that length; its costs (S lists of m) are those of
  its length.
- ``x-token-budget``: one token count, the fixed shape every microbatch is padded to
  (PyTorch's pipelining stages need one shape, torchtitan #431). Padding comes after
  the real tokens and is left out of the loss (causal attention: no real token sees
  it), so the gradients are those of the real tokens. The problem's times are those of
  the real tokens (what a kernel that skips the padding costs) and its memory that of
  the padded shape (what the fixed shape allocates): activation is then the same for
  every microbatch. ``--runtime torch`` needs it; both runtimes pad when it is there.
"""

from __future__ import annotations

from dataclasses import dataclass

from ppsolve.errors import InputError

TOKENS = "x-microbatch-tokens"
BUDGET = "x-token-budget"


@dataclass(frozen=True)
class Lengths:
    """The real tokens of each microbatch, and the padded length (None: not padded)."""

    tokens: tuple[int, ...]
    budget: int | None = None

    def shape_length(self, j: int) -> int:
        """The sequence length microbatch j runs at."""
        return self.budget if self.budget is not None else self.tokens[j]


def lengths_of(annotations: dict, microbatches: int, sequence: int | None,
               names: tuple[str, str] = (f"problem.{TOKENS}", f"problem.{BUDGET}")) -> Lengths | None:
    """The problem's token annotations, validated against its microbatches and the model's
    ``sequence`` (None: a model without sequences, which cannot take them); None when absent.
    ``names``: what an error calls the two fields."""
    raw, budget = annotations.get(TOKENS), annotations.get(BUDGET)
    if raw is None and budget is None:
        return None
    if raw is None:
        raise InputError(names[1], f"needs {names[0]} (the real tokens of each microbatch)")
    if sequence is None:
        raise InputError(names[0], "needs a transformer model (one with a sequence length)")
    if not isinstance(raw, list) or len(raw) != microbatches:
        raise InputError(names[0], f"must be a list of {microbatches} token counts (one per microbatch)")
    if budget is not None:
        budget = _count(budget, sequence, names[1])
    limit = budget if budget is not None else sequence
    tokens = tuple(_count(t, limit, f"{names[0]}[{j}]") for j, t in enumerate(raw))
    return Lengths(tokens, budget)


def _count(value, limit: int, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
        raise InputError(where, f"must be an integer token count in [1, {limit}], got {value!r}")
    return value


def microbatch_lengths(problem, spec) -> Lengths | None:
    """The problem's token annotations for the model ``spec`` (an ``executor.spec.ModelSpec``)."""
    sequence = spec.dims["sequence"] if spec.kind == "transformer" else None
    return lengths_of(problem.annotations, problem.microbatches, sequence)
