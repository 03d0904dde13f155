"""Packing documents into microbatches, judged against brute-force optima on tiny batches."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest

from ppsolve.costmodel.documents import MicrobatchTime
from ppsolve.costmodel.packing import Packed, cut_in_order, imbalance, pack_balance, pack_sequential
from ppsolve.errors import InputError

# One device, 1 ms a token and 0.01 ms a causal pair: a microbatch's cost is the sum of its documents'.
ONE_DEVICE = MicrobatchTime((1.0,), (0.01,), True)


def doc_cost(length: int) -> float:
    return length + 0.01 * length * (length + 1) / 2


def test_sequential_keeps_the_loader_order_and_the_budget():
    assert pack_sequential([3, 4, 2, 6, 1], 7) == [[3, 4], [2], [6, 1]]
    assert pack_sequential([3, 4, 2, 6, 1], 7, split=True) == [[3, 4], [2, 5], [1, 1]]
    assert pack_sequential([9, 2], 4, split=True) == [[4], [4], [1, 2]]


def test_a_document_longer_than_the_budget_is_refused_unless_split():
    with pytest.raises(InputError) as err:
        pack_sequential([3, 9], 8)
    assert err.value.field == "documents[1]" and "`split_documents`" in err.value.message
    with pytest.raises(InputError):
        pack_balance([3, 9], 8, ONE_DEVICE, 2)
    packed = pack_balance([3, 9], 8, ONE_DEVICE, 2, split=True).microbatches
    assert sum(map(sum, packed)) == 12 and max(map(sum, packed)) <= 8


def _optimum(docs: list[int], bins: int, budget: int) -> float | None:
    """The least costliest microbatch over every assignment of ``docs`` to ``bins`` microbatches (None: none fits)."""
    best = None
    for assignment in itertools.product(range(bins), repeat=len(docs)):
        tokens, costs = [0] * bins, [0.0] * bins
        for length, k in zip(docs, assignment):
            tokens[k] += length
            costs[k] += doc_cost(length)
        if max(tokens) <= budget and (best is None or max(costs) < best):
            best = max(costs)
    return best


@pytest.mark.parametrize("seed", range(40))
def test_balance_is_within_grahams_bound_of_the_brute_force_optimum(seed):
    rng = random.Random(seed)
    docs = [rng.randint(1, 60) for _ in range(rng.randint(2, 7))]
    bins = rng.randint(2, 3)
    packed = pack_balance(docs, 10**6, ONE_DEVICE, bins).microbatches  # room to spare: LPT's guarantee holds
    assert Counter(x for mb in packed for x in mb) == Counter(docs) and len(packed) <= bins
    worst = max(sum(map(doc_cost, mb)) for mb in packed)
    assert worst <= (4 / 3 - 1 / (3 * bins)) * _optimum(docs, bins, 10**6) + 1e-9


@pytest.mark.parametrize("seed", range(40))
def test_balance_keeps_the_budget_and_every_document(seed):
    rng = random.Random(100 + seed)
    budget = 64
    docs = [rng.randint(1, budget) for _ in range(rng.randint(2, 7))]
    loader = pack_sequential(docs, budget)
    packed = pack_balance(docs, budget, ONE_DEVICE, len(loader)).microbatches
    assert Counter(x for mb in packed for x in mb) == Counter(docs)
    assert max(map(sum, packed)) <= budget and len(packed) >= len(loader)  # never fewer than asked
    optimum = _optimum(docs, len(packed), budget)
    assert optimum is not None and max(sum(map(doc_cost, mb)) for mb in packed) <= 1.5 * optimum + 1e-9


def test_balance_spreads_the_quadratic_cost_not_the_tokens():
    # Budget 1100: one 600-token document costs 600 + 1803 = 2403, a 150-token one 150 + 113.25 = 263.25.
    # The loader packs [600, 150 x 3] (3192.75) and [150 x 5]; the best of two microbatches within the
    # budget is [600, 150] (2666.25) and [150 x 7] (1842.75, 1050 tokens): 600 alone would leave 1200.
    docs = [600] + [150] * 8
    loader = pack_sequential(docs, 1100)
    packed = pack_balance(docs, 1100, ONE_DEVICE, len(loader)).microbatches
    assert loader == [[600, 150, 150, 150], [150] * 5]
    assert sorted(packed) == [[150] * 7, [600, 150]]
    assert imbalance([sum(map(doc_cost, mb)) for mb in packed]) == pytest.approx(2666.25 * 2 / 4509)


def test_balance_opens_a_microbatch_only_when_the_budget_forces_it():
    # 3 x 6 tokens into 2 microbatches of 10: no way without a third.
    assert len(pack_balance([6, 6, 6], 10, ONE_DEVICE, 2).microbatches) == 3


def _costs(microbatches) -> list[float]:
    return [sum(map(doc_cost, mb)) for mb in microbatches]


def test_split_cuts_a_dominant_document_to_balance_and_only_it():
    # Budget 1000, one 600-token document (cost 2403) and 40 of 50 (63.75 each): 3 microbatches in the
    # loader's order. Whole, the 600 alone sets the costliest microbatch: 2403 x 3 / 4953 = 1.455, the floor.
    docs = [600] + [50] * 40
    count = len(pack_sequential(docs, 1000))
    whole = pack_balance(docs, 1000, ONE_DEVICE, count)
    floor = doc_cost(600) * count / sum(map(doc_cost, docs))
    assert count == 3 and whole.cut == 0 and imbalance(_costs(whole.microbatches)) == pytest.approx(floor)
    split = pack_balance(docs, 1000, ONE_DEVICE, count, split=True)
    assert split.cut == 1 and len(split.microbatches) == count
    assert imbalance(_costs(split.microbatches)) <= 1.05
    pieces = Counter(n for mb in split.microbatches for n in mb)
    assert pieces[50] == 40  # the others stay whole
    del pieces[50]
    assert sum(n * k for n, k in pieces.items()) == 600 and max(pieces) - min(pieces) <= 1  # equal pieces
    assert max(map(sum, split.microbatches)) <= 1000


def test_split_cuts_nothing_when_whole_documents_balance():
    # Costs 401 (200 tokens) and 150.5 (100): 2106 over 3 microbatches is 702 each, above any document,
    # and [200, 100, 100] three times is perfectly balanced.
    docs = [200, 200, 200, 100, 100, 100, 100, 100, 100]
    split = pack_balance(docs, 1000, ONE_DEVICE, 3, split=True)
    assert split == pack_balance(docs, 1000, ONE_DEVICE, 3) and split.cut == 0


def test_split_balances_full_microbatches_too():
    # Every microbatch must be full (3 x 400 tokens): whole, [300, 100] costs 902 against [100 x 4]'s 602
    # (imbalance 1.285); the 300 in three pieces of 100 makes all three [100 x 4].
    docs = [300] + [100] * 9
    whole = pack_balance(docs, 400, ONE_DEVICE, 3)
    assert imbalance(_costs(whole.microbatches)) == pytest.approx(902 * 3 / 2106)
    split = pack_balance(docs, 400, ONE_DEVICE, 3, split=True)
    assert split == Packed([[100] * 4] * 3, cut=1)


@pytest.mark.parametrize("seed", range(30))
def test_split_keeps_the_tokens_and_the_budget(seed):
    rng = random.Random(300 + seed)
    budget = 64
    docs = [rng.randint(1, 3 * budget) for _ in range(rng.randint(1, 12))]
    loader = pack_sequential(docs, budget, split=True)
    packed = pack_balance(docs, budget, ONE_DEVICE, len(loader), split=True)
    assert sum(map(sum, packed.microbatches)) == sum(docs) and max(map(sum, packed.microbatches)) <= budget
    assert len(packed.microbatches) >= len(loader) and all(n > 0 for mb in packed.microbatches for n in mb)
    assert packed.cut >= sum(n > budget for n in docs)  # a document over the budget is always cut


def test_cut_in_order_counts_the_documents_sequential_cuts():
    docs = [3, 4, 2, 6, 1]
    assert cut_in_order(docs, pack_sequential(docs, 7, split=True)) == 1  # [[3, 4], [2, 5], [1, 1]]
    assert cut_in_order([9, 2], pack_sequential([9, 2], 4, split=True)) == 1
    assert cut_in_order(docs, pack_sequential(docs, 7)) == 0


def test_imbalance():
    assert imbalance([2.0, 2.0]) == 1.0 and imbalance([3.0, 1.0]) == 1.5
