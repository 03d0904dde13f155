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
``sequential`` then fills each microbatch to the budget, carrying the rest of a document over (so
``balance`` gets that, the fewest, count of microbatches: nearly full ones).
``balance`` cuts what balancing needs, and no more:

1. The target is the critical cost of the whole batch over the microbatches' count. While the costliest
   document (or piece) costs more than the target, its document is cut into the fewest equal pieces that
   each cost at most the target (and hold at most the budget), the target recomputed (cutting lowers the
   attention, so the total). Every other document stays whole.
2. LPT and the improving place the pieces; a piece that no microbatch has room for fills the cheapest
   ones with room, the rest carried on (one more document cut).
3. While the imbalance is above ``SPLIT_GOAL`` (the budget can leave whole pieces unbalanced when the
   microbatches must be nearly full), the document of the longest piece in the costliest microbatch is
   cut into one more equal piece and the pieces placed again, ``SPLIT_ROUNDS`` times at most; the best
   packing found is kept.

A document whose cost is below the target is therefore cut only where the budget forces it (2) or the
imbalance stays above ``SPLIT_GOAL`` (3); ``Packed.cut`` counts the documents cut.

``imbalance`` is the costliest microbatch times their number over their total (1 is perfect balance).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Sequence

from ppsolve.costmodel.documents import MicrobatchTime, attention_pairs
from ppsolve.errors import InputError

PACKINGS = ("sequential", "balance")
IMPROVE_ROUNDS = 200  # moves or swaps out of the costliest microbatch, at most
IMPROVE_PARTNERS = 8  # the cheapest microbatches each round tries to move to or swap with
BALANCED = 1.001  # an imbalance this close to 1 needs no improving
SPLIT_GOAL = 1.01  # with split allowed, an imbalance above this cuts one more piece and packs again
SPLIT_ROUNDS = 32  # such extra cuts, at most


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
    """Microbatches being filled: their pieces (document, length), tokens, causal document pairs and cost."""

    def __init__(self, count: int, cost: MicrobatchTime):
        self.cost = cost
        self.pieces: list[list[tuple[int, int]]] = [[] for _ in range(count)]
        self.tokens = [0] * count
        self.pairs = [0] * count
        self.costs = [0.0] * count

    def lengths(self, k: int) -> set[int]:
        return {length for _, length in self.pieces[k]}

    def cost_with(self, k: int, add: int = 0, remove: int = 0) -> float:
        return self.cost.of(self.tokens[k] + add - remove,
                            self.pairs[k] + attention_pairs([add], True) - attention_pairs([remove], True))

    def put(self, k: int, document: int, length: int) -> None:
        self.pieces[k].append((document, length))
        self._update(k, length, 1)

    def take(self, k: int, length: int) -> int:
        """Takes a piece of ``length`` out of microbatch ``k``: its document."""
        piece = next(piece for piece in self.pieces[k] if piece[1] == length)
        self.pieces[k].remove(piece)
        self._update(k, length, -1)
        return piece[0]

    def _update(self, k: int, length: int, sign: int) -> None:
        self.tokens[k] += sign * length
        self.pairs[k] += sign * attention_pairs([length], True)
        self.costs[k] = self.cost.of(self.tokens[k], self.pairs[k])

    def microbatches(self) -> list[list[int]]:
        return [sorted((length for _, length in pieces), reverse=True) for pieces in self.pieces if pieces]


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
    parts = [-(-length // budget) for length in documents]  # pieces per document: none over the budget
    count = max(1, min(count, sum(parts)))
    best: tuple[float, Packed] | None = None
    for _ in range(SPLIT_ROUNDS + 1 if split else 1):
        if split:
            _cut_to_target(documents, parts, cost, count)
        pieces = [(i, n) for i, length in enumerate(documents) for n in _equal(length, parts[i])]
        pieces.sort(key=lambda piece: (-cost.of_documents([piece[1]]), -piece[1]))
        placed = _lpt(pieces, budget, cost, count, split)
        while placed is None:
            count += 1
            placed = _lpt(pieces, budget, cost, count, split)
        bins, spread = placed
        _improve(bins, budget)
        packed = Packed(bins.microbatches(), len({i for i, n in enumerate(parts) if n > 1} | spread))
        score = imbalance([cost.of_documents(mb) for mb in packed.microbatches])
        if best is None or score < best[0]:
            best = (score, packed)
        if score <= SPLIT_GOAL:
            break
        worst = max(range(count), key=bins.costs.__getitem__)  # cut its longest piece's document once more
        document, length = max(bins.pieces[worst], key=lambda piece: piece[1])
        if length == 1:
            break
        parts[document] += 1
    return best[1]


def _cut_to_target(documents: Sequence[int], parts: list[int], cost: MicrobatchTime, count: int) -> None:
    """More ``parts`` where a piece costs more than the batch's critical cost over ``count`` (module doc)."""
    longest = lambda i: -(-documents[i] // parts[i])  # noqa: E731  (the longest of equal pieces)
    while True:
        pieces = [n for i, length in enumerate(documents) for n in _equal(length, parts[i])]
        target = cost.of(sum(pieces), attention_pairs(pieces, True)) / count
        worst = max(range(len(documents)), key=lambda i: cost.of_documents([longest(i)]))
        if cost.of_documents([longest(worst)]) <= target or longest(worst) == 1:
            return
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
            bins.put(k, document, length)
            heapq.heappush(heap, (bins.costs[k], k))
        elif split:  # fill the cheapest microbatches with room, the rest carried on
            spread.add(document)
            for _, k in sorted(skipped):
                take = min(length, budget - bins.tokens[k])
                if take > 0:
                    bins.put(k, document, take)
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
            for a in bins.lengths(worst):
                for b in [0, *bins.lengths(k)]:
                    if b >= a or bins.tokens[k] + a - b > budget:
                        continue  # b >= a cannot lower the costliest; the partner must keep to the budget
                    new = max(bins.cost_with(worst, add=b, remove=a), bins.cost_with(k, add=a, remove=b))
                    if new < top and (best is None or new < best[0]):
                        best = (new, a, k, b)
        if best is None:
            return
        _, a, k, b = best
        bins.put(k, bins.take(worst, a), a)
        if b:
            bins.put(worst, bins.take(k, b), b)
