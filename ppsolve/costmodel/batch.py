"""``ppsolve problem --documents``: from one step's documents to the microbatches of its problem, and the summary.

The token budget of a microbatch is ``--tokens-per-microbatch``, else the file's ``tokens_per_microbatch``,
else the model's ``sequence x micro_batch_size`` (what one microbatch of the uniform problem holds).
Microbatches given in the file are taken as they are unless ``--pack`` re-forms them (from their
documents in order); a flat list of documents is packed ``sequential`` unless ``--pack balance``.
With ``balance`` the summary compares it with the loader's microbatches (the file's, or ``sequential``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

from ppsolve.costmodel.build import Layout
from ppsolve.costmodel.descriptions import Hardware, Transformer
from ppsolve.costmodel.documents import (Batch, MicrobatchTime, batch_from_data, build_documents_problem,
                                         microbatch_time)
from ppsolve.costmodel.partition import Partition, even_partition
from ppsolve.costmodel.packing import cut_in_order, imbalance, pack_balance, pack_sequential
from ppsolve.errors import InputError
from ppsolve.problem import Problem


@dataclass(frozen=True)
class Formed:
    """Microbatches formed one way (``how``), with the critical F + B + W ms of each."""

    how: str
    microbatches: tuple[tuple[int, ...], ...]
    costs: tuple[float, ...]
    cut: int = 0  # documents cut into pieces

    @property
    def imbalance(self) -> float:
        return imbalance(self.costs)


def token_budget(batch: Batch, flag: int | None, model: Transformer) -> int:
    """The token budget of a microbatch (see the module doc)."""
    if flag is not None:
        if flag < 1:
            raise InputError("tokens_per_microbatch", f"must be >= 1, got {flag}")
        return flag
    return batch.tokens_per_microbatch or model.sequence * model.micro_batch_size


def form_microbatches(batch: Batch, budget: int, pack: str | None, split: bool,
                      cost: MicrobatchTime) -> list[Formed]:
    """The loader's microbatches (the file's, or ``sequential``), then those ``pack`` forms if it re-forms them:
    the last is the problem's."""
    formed = lambda how, mbs, cut=0: Formed(how, tuple(map(tuple, mbs)),  # noqa: E731
                                           tuple(map(cost.of_documents, mbs)), cut)
    if pack is not None or batch.microbatches is None:
        _refuse_long_documents(batch, budget, split)
    if batch.microbatches is None:
        sequential = pack_sequential(batch.documents, budget, split)
        loader = formed("sequential", sequential, cut_in_order(batch.documents, sequential))
    else:
        loader = formed("as given", batch.microbatches)
    if pack == "balance":
        packed = pack_balance(batch.documents, budget, cost, len(loader.microbatches), split)
        chosen = formed("balance", packed.microbatches, packed.cut)
    elif pack == "sequential" and batch.microbatches is not None:
        sequential = pack_sequential(batch.documents, budget, split)
        chosen = formed("sequential", sequential, cut_in_order(batch.documents, sequential))
    else:
        for j, lengths in enumerate(loader.microbatches):
            if sum(lengths) > budget:
                raise InputError(f"documents[{j}]", f"holds {sum(lengths)} tokens, more than the token budget of "
                                                    f"{budget} per microbatch (`tokens_per_microbatch`)")
        return [loader]
    return [loader, chosen]


def _refuse_long_documents(batch: Batch, budget: int, split: bool) -> None:
    """A document longer than the budget, named where the file has it, unless it may be split."""
    if split:
        return
    if batch.microbatches is None:
        places = [(f"documents.documents[{i}]", n) for i, n in enumerate(batch.documents)]
    else:
        places = [(f"documents[{j}][{i}]", n) for j, mb in enumerate(batch.microbatches) for i, n in enumerate(mb)]
    for where, length in places:
        if length > budget:
            raise InputError(where, f"{length} tokens do not fit the token budget of {budget} per microbatch "
                                    "(documents are not split unless `split_documents`)")


def problem_for_batch(model: Transformer, hardware: Hardware, layout: Layout,
                      documents: Sequence[int] | Sequence[Sequence[int]], *, partition: Partition | None = None,
                      pack: str | None = None, tokens_per_microbatch: int | None = None,
                      split_documents: bool = False) -> Problem:
    """One training step's problem from its documents (what ``ppsolve problem --documents`` writes).

    ``documents``: the step's microbatches as the data loader formed them (lists of document lengths in
    tokens), or a flat list of document lengths in the loader's order, which ``pack`` forms into
    microbatches: ``sequential`` (the default for a flat list: fill each to the token budget) or
    ``balance`` (the same count, balanced critical cost); ``pack`` re-forms given microbatches too.
    The token budget is ``tokens_per_microbatch``, else the model's ``sequence x micro_batch_size``.
    ``partition``: layers per stage (default even); ``layout.microbatches`` is not read. Bad input raises
    InputError naming ``documents[j][i]`` (or ``documents.documents[i]``) as the command does.
    """
    if pack not in (None, "sequential", "balance"):
        raise InputError("pack", f"must be sequential or balance, got {pack!r}")
    flat = all(isinstance(length, int) and not isinstance(length, bool) for length in documents)
    data = {"documents": list(documents)} if flat and documents else [list(mb) for mb in documents]
    batch = batch_from_data(data)
    partition = partition or even_partition(model.layers, layout.stages, "partition")
    budget = token_budget(batch, tokens_per_microbatch, model)
    cost = microbatch_time(model, hardware, layout, partition)
    formed = form_microbatches(batch, budget, pack, split_documents, cost)
    microbatches = formed[-1].microbatches
    return build_documents_problem(model, hardware, replace(layout, microbatches=len(microbatches)), partition,
                                   microbatches)


def step_1f1b(problem: Problem) -> float | str:
    """The planned step time of 1F1B on ``problem``: its orders timed by the simulator (memory not capped),
    or why there is none."""
    from ppsolve.baselines.families.onef1b import onef1b_orders
    from ppsolve.methods import get_method
    from ppsolve.simulator import simulate

    reason = get_method("1f1b").why_not(problem)
    if reason is not None:
        return f"n/a ({reason})"
    return max(op.end for op in simulate(problem, onef1b_orders(problem)))


def render_formed(formed: Sequence[Formed], documents: int, budget: int,
                  plan: Callable[[Formed], float | str]) -> str:
    """One line per way of forming the microbatches: count, imbalance, critical cost range, documents cut,
    1F1B step time."""
    lines = [f"documents: {documents}, token budget {budget} per microbatch; critical cost = F + B + W ms of the "
             "slowest device"]
    for f in formed:
        step = plan(f)
        lines.append(f"  {f.how + ':':<11} {len(f.microbatches):>5} microbatches, imbalance {f.imbalance:.3f} "
                     f"(critical ms {min(f.costs):.2f} to {max(f.costs):.2f}, tokens {min(map(sum, f.microbatches))} "
                     f"to {max(map(sum, f.microbatches))}{f', documents cut {f.cut}' if f.cut else ''}), 1F1B step "
                     + (step if isinstance(step, str) else f"{step:.2f} ms"))
    return "\n".join(lines)


def render_microbatch_stages(data: dict) -> str:
    """Per stage, the least and the most of each per-microbatch figure of a problem file's content."""
    rows = [("forward ms", data["time"]["forward"]), ("backward_input ms", data["time"]["backward_input"]),
            ("backward_weight ms", data["time"]["backward_weight"]),
            ("activation GiB", data["memory"]["activation"])]
    if data.get("backward", "split") == "split":
        rows.append(("weight_hold GiB", data["memory"]["weight_hold"]))
    spread = lambda values: (min(values), max(values)) if isinstance(values, list) else (values, values)  # noqa: E731
    lines = ["  per stage, least to most over the microbatches:"]
    for label, grid in rows:
        lines.append(f"  {label:<20}" + " ".join("{:>8.3f}-{:<8.3f}".format(*spread(row)) for row in grid))
    lines.append("  p2p ms {:g} to {:g}".format(*spread(data["time"]["p2p"])))
    return "\n".join(lines)
