"""Which documents go into which microbatch: the data loader's order, or balanced for the pipeline.

- ``sequential`` fills microbatches in the loader's order: a document that does not fit what is left of
  the token budget starts the next microbatch.
- ``balance`` forms as many microbatches as ``sequential`` (one more at a time only where the budget
  leaves a document no room) and balances their critical cost, the cost model's F + B + W time of the
  slowest device (``documents.MicrobatchTime``: it grows with the tokens and, through the attention, with
  the squared document lengths). Longest processing time first (each document, costliest first, into
  the cheapest microbatch with room), then moves and swaps out of the costliest microbatch while they
  lower it. With one device and room to spare, LPT alone is within 4/3 - 1/(3m) of the optimum (Graham).

Documents are never split unless ``split`` allows it. A piece is a document of its own: it attends to
itself only, so a cut document's pieces do not attend to each other (what the user opts into).
``sequential`` then fills each microbatch to the budget, carrying the rest of a document over.
``balance`` cuts what balancing needs, and no more (``balance_pieces``): the target is the critical cost
of the whole batch over the microbatches' count; while the costliest document (or piece) costs more than
the target, its document is cut into the fewest equal pieces that each cost at most the target (and
hold at most the budget), the target recomputed (cutting lowers the attention, so the total). Every other
document stays whole; LPT then places the pieces, cutting one more only where no microbatch has room for
it (it fills the cheapest with room).

``imbalance`` is the costliest microbatch times their number over their total (1 is perfect balance).
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from ppsolve.costmodel.documents import MicrobatchTime, attention_pairs
from ppsolve.errors import InputError

PACKINGS = ("sequential", "balance")
IMPROVE_ROUNDS = 200  # moves or swaps out of the costliest microbatch, at most
IMPROVE_PARTNERS = 8  # the cheapest microbatches each round tries to move to or swap with
BALANCED = 1.001  # an imbalance this close to 1 needs no improving


def imbalance(costs: Sequence[float]) -> float:
    """The costliest microbatch times their number over their total."""
    total = sum(costs)
    return max(costs) * len(costs) / total if total > 0 else 1.0


def cut(documents: Sequence[int], budget: int, split: bool, where: str = "documents") -> list[int]:
    """The documents, each longer than ``budget`` cut into budget-sized pieces when ``split`` allows it."""
    out: list[int] = []
    for i, length in enumerate(documents):
        if length > budget and not split:
            raise InputError(f"{where}[{i}]", f"{length} tokens do not fit the token budget of {budget} per "
                                              "microbatch (documents are not split unless `split_documents`)")
        while length > budget:
            out.append(budget)
            length -= budget
        out.append(length)
    return out


def pack_sequential(documents: Sequence[int], budget: int, split: bool = False,
                    where: str = "documents") -> list[list[int]]:
    """Microbatches in the loader's order (see the module doc)."""
    cut(documents, budget, split, where)  # refuses a document longer than the budget
    microbatches: list[list[int]] = [[]]
    room = budget
    for length in documents:
        while length > 0:
            if length > room and (not split or room == 0):
                microbatches.append([])
                room = budget
            take = min(length, room)
            microbatches[-1].append(take)
            room -= take
            length -= take
    return microbatches


def cut_in_order(documents: Sequence[int], microbatches: Sequence[Sequence[int]]) -> int:
    """How many documents ``microbatches`` cut, when they hold ``documents``' pieces in the same order (as
    ``pack_sequential``'s do)."""
    pieces = iter(n for mb in microbatches for n in mb)
    count = 0
    for length in documents:
        taken = next(pieces)
        count += taken < length
        while taken < length:
            taken += next(pieces)
    return count


class _Bins:
    """Microbatches being filled: their lengths, tokens, causal document pairs and cost."""

    def __init__(self, count: int, cost: MicrobatchTime):
        self.cost = cost
        self.lengths: list[list[int]] = [[] for _ in range(count)]
        self.tokens = [0] * count
        self.pairs = [0] * count
        self.costs = [0.0] * count

    def cost_with(self, k: int, add: int = 0, remove: int = 0) -> float:
        return self.cost.of(self.tokens[k] + add - remove,
                            self.pairs[k] + attention_pairs([add], True) - attention_pairs([remove], True))

    def put(self, k: int, length: int) -> None:
        self.lengths[k].append(length)
        self._update(k, length, 1)

    def take(self, k: int, length: int) -> None:
        self.lengths[k].remove(length)
        self._update(k, length, -1)

    def _update(self, k: int, length: int, sign: int) -> None:
        self.tokens[k] += sign * length
        self.pairs[k] += sign * attention_pairs([length], True)
        self.costs[k] = self.cost.of(self.tokens[k], self.pairs[k])


@dataclass(frozen=True)
class Packed:
    """Microbatches (lists of document lengths) and how many documents were cut to form them."""

    microbatches: list[list[int]]
    cut: int = 0


def pack_balance(documents: Sequence[int], budget: int, cost: MicrobatchTime, count: int,
                 split: bool = False, where: str = "documents") -> Packed:
    """At least ``count`` microbatches of at most ``budget`` tokens with balanced critical cost (module doc)."""
    if not split:
        cut(documents, budget, split, where)  # refuses a document longer than the budget
    count = max(1, min(count, sum(-(-length // budget) for length in documents)))  # no more than pieces
    while True:
        pieces = balance_pieces(documents, budget, cost, count) if split else list(enumerate(documents))
        pieces.sort(key=lambda piece: (-cost.of_documents([piece[1]]), -piece[1]))
        placed = _lpt(pieces, budget, cost, count, split)
        if placed is not None:
            break
        count += 1
    bins, spread = placed
    _improve(bins, budget)
    whole = Counter(i for i, _ in pieces)
    cut_documents = {i for i, n in whole.items() if n > 1} | spread
    return Packed([sorted(lengths, reverse=True) for lengths in bins.lengths if lengths], len(cut_documents))


def balance_pieces(documents: Sequence[int], budget: int, cost: MicrobatchTime, count: int) -> list[tuple[int, int]]:
    """(document index, length) of each piece ``balance`` places when documents may be split (module doc)."""
    parts = [-(-length // budget) for length in documents]  # pieces per document: none over the budget
    longest = lambda i: -(-documents[i] // parts[i])  # noqa: E731  (the longest of equal pieces)
    while True:
        pieces = [(i, n) for i, length in enumerate(documents) for n in _equal(length, parts[i])]
        target = cost.of(sum(n for _, n in pieces), attention_pairs([n for _, n in pieces], True)) / count
        worst = max(range(len(documents)), key=lambda i: cost.of_documents([longest(i)]))
        if cost.of_documents([longest(worst)]) <= target or longest(worst) == 1:
            return pieces
        while longest(worst) > 1 and cost.of_documents([longest(worst)]) > target:
            parts[worst] += 1


def _equal(length: int, parts: int) -> list[int]:
    """``length`` tokens in ``parts`` pieces that differ by at most one token."""
    size, rest = divmod(length, parts)
    return [size + 1] * rest + [size] * (parts - rest)


def _lpt(pieces: list[tuple[int, int]], budget: int, cost: MicrobatchTime, count: int,
         split: bool) -> tuple[_Bins, set[int]] | None:
    """Each (document, length) piece into the cheapest microbatch with room, and the documents spread over
    several where none had room; None when one has no room (and may not be split)."""
    bins = _Bins(count, cost)
    spread: set[int] = set()
    heap = [(0.0, k) for k in range(count)]
    for document, length in pieces:
        skipped = []
        while heap and bins.tokens[heap[0][1]] + length > budget:
            skipped.append(heapq.heappop(heap))
        if heap:
            k = heapq.heappop(heap)[1]
            bins.put(k, length)
            heapq.heappush(heap, (bins.costs[k], k))
        elif split:  # fill the cheapest microbatches with room, the rest carried on
            spread.add(document)
            for _, k in sorted(skipped):
                take = min(length, budget - bins.tokens[k])
                if take > 0:
                    bins.put(k, take)
                    length -= take
            skipped = [(bins.costs[k], k) for _, k in skipped]
            if length > 0:
                return None
        else:
            return None
        for item in skipped:
            heapq.heappush(heap, item)
    return bins, spread


def _improve(bins: _Bins, budget: int) -> None:
    """Moves, then swaps, out of the costliest microbatch into the cheapest few, while they lower it."""
    for _ in range(IMPROVE_ROUNDS):
        worst = max(range(len(bins.costs)), key=bins.costs.__getitem__)
        top = bins.costs[worst]
        if imbalance(bins.costs) <= BALANCED:
            return
        partners = sorted((k for k in range(len(bins.costs)) if k != worst), key=bins.costs.__getitem__)
        best = None  # (new max of the two, length out of worst, partner, length back into worst)
        for k in partners[:IMPROVE_PARTNERS]:
            for a in set(bins.lengths[worst]):
                for b in [0, *set(bins.lengths[k])]:
                    if b >= a or bins.tokens[k] + a - b > budget:
                        continue  # b >= a cannot lower the costliest; the partner must keep to the budget
                    new = max(bins.cost_with(worst, add=b, remove=a), bins.cost_with(k, add=a, remove=b))
                    if new < top and (best is None or new < best[0]):
                        best = (new, a, k, b)
        if best is None:
            return
        _, a, k, b = best
        bins.take(worst, a)
        bins.put(k, a)
        if b:
            bins.take(k, b)
            bins.put(worst, b)
