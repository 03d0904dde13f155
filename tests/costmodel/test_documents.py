"""Costs per microbatch from document lengths: hand-computed FLOPs and bytes, the uniform path as an oracle for
the token-linear parts, the packer's rates against the cost model, and the documents file's bad input."""

from __future__ import annotations

import random

import pytest

from tests.executor.helpers import ROOT

from ppsolve.costmodel import Layout, Parallelism, Partition, even_partition, hardware_of_gpu, transformer_from_dict
from ppsolve.costmodel import load_transformer
from ppsolve.costmodel.build import problem_data
from ppsolve.costmodel.documents import (attention_pairs, batch_from_data, device_times, documents_problem_data,
                                         microbatch_costs, microbatch_time)
from ppsolve.errors import InputError
from ppsolve.limits import MAX_DOCUMENTS

TINY = {"layers": 2, "hidden": 8, "heads": 2, "sequence": 64, "micro_batch_size": 4, "vocabulary": 16}
LLAMA = ROOT / "models" / "transformers" / "llama-3-8b-like.json"
H100 = hardware_of_gpu("H100")


def test_pairs_of_a_causal_document_mask_and_of_written_out_attention():
    assert attention_pairs([3, 5], flash=True) == 6 + 15  # 1+2+3 and 1+...+5 keys per query
    assert attention_pairs([3, 5], flash=False) == 64  # every pair of the 8 packed tokens


def test_tiny_microbatch_matches_hand_computed_flops_and_bytes():
    # One stage holding both blocks, the embedding and the head; h = 8, f = 32, k = h, V = 16, bf16.
    # Documents of 3 and 5 tokens: T = 8 tokens, 21 causal pairs. Per block GEMMs 24 T h^2 = 12288 FLOPs,
    # attention 4 h pairs = 672 in F and 1344 in B; the head's GEMM 2 T h V = 2048 in each of F, B and W.
    (stage,) = microbatch_costs(transformer_from_dict(TINY), Partition((2,)), Parallelism(), [3, 5])
    assert stage.forward == 2 * (12288 + 672) + 2048
    assert stage.backward_input == 2 * (12288 + 1344) + 2048
    assert stage.backward_weight == 2 * 12288 + 2048
    # Activations (Korthikanti, flash attention: no s x s tensor): 34 T h = 2176 bytes a block, the
    # embedding's dropout mask T h = 64, the head's norm and GEMM inputs 2 T h each and fp32 logits 4 T V.
    assert stage.activation == 2 * 2176 + 64 + (128 + 128 + 512)


def test_without_flash_attention_the_packed_sequence_pays_every_pair():
    # Written-out attention: T^2 = 64 pairs, and the T x T tensors kept: 5 a T^2 = 640 bytes a block.
    model = transformer_from_dict({**TINY, "flash_attention": False})
    (stage,) = microbatch_costs(model, Partition((2,)), Parallelism(), [3, 5])
    assert stage.forward == 2 * (12288 + 4 * 8 * 64) + 2048
    assert stage.activation == 2 * (2176 + 640) + 64 + (128 + 128 + 512)


@pytest.mark.parametrize("par, recompute", [(Parallelism(), "none"), (Parallelism(tensor=2, sequence=True), "decide"),
                                            (Parallelism(tensor=2, context=2), "selective")])
def test_one_document_per_microbatch_keeps_the_uniform_token_linear_parts(par, recompute):
    # Oracle: the uniform problem of the same sequence at micro-batch size 1. W, activations, holds, keeps and
    # p2p scale with tokens only: equal. F and B lose the causal half of the attention: smaller.
    model = load_transformer(LLAMA)
    from dataclasses import replace

    model = replace(model, micro_batch_size=1, recompute=recompute)
    layout, part = Layout(devices=4, microbatches=2, parallel=par), even_partition(model.layers, 4)
    uniform = problem_data(model, H100, layout, part)
    docs = documents_problem_data(model, H100, layout, part, [[model.sequence], [model.sequence]])
    assert docs["microbatches"] == 2 and docs["time"]["p2p"] == [uniform["time"]["p2p"]] * 2
    for block, key in (("time", "backward_weight"), ("memory", "activation"), ("memory", "weight_hold")):
        assert docs[block][key] == [[value] * 2 for value in uniform[block][key]]
    for key in ("forward", "backward_input"):
        assert all(row[0] < value for row, value in zip(docs["time"][key], uniform["time"][key]))
    if recompute == "decide":
        assert docs["recompute"]["keep"] == [[value] * 2 for value in uniform["recompute"]["keep"]]
    assert docs["memory"]["capacity"] == uniform["memory"]["capacity"]


def test_problem_dict_is_stage_by_microbatch():
    model = load_transformer(LLAMA)
    layout = Layout(devices=2, chunks=2, placement="vshape", microbatches=1, capacity=None)
    part = even_partition(model.layers, 4)
    mbs = [[8192], [1024] * 8, [4000, 4000, 192]]
    data = documents_problem_data(model, H100, layout, part, mbs)
    assert data["microbatches"] == 3 and len(data["time"]["p2p"]) == 3
    for grid in (data["time"]["forward"], data["time"]["backward_input"], data["memory"]["activation"]):
        assert len(grid) == 4 and all(len(row) == 3 for row in grid)
    f = data["time"]["forward"][1]
    assert f[0] > f[2] > f[1]  # same tokens: one long document > three > eight short ones
    assert data["x-costmodel"]["documents"]["tokens"] == [8192] * 3
    fused = documents_problem_data(model, H100, Layout(devices=2, microbatches=1, backward="fused", capacity=None),
                                   even_partition(model.layers, 2), mbs)
    assert fused["memory"]["weight_hold"] == [0, 0]


@pytest.mark.parametrize("flash", [True, False])
def test_packer_rates_agree_with_the_cost_model(flash):
    model = transformer_from_dict({**TINY, "layers": 6, "hidden": 64, "heads": 4, "flash_attention": flash,
                                   "vocabulary": 5000})
    layout = Layout(devices=3, microbatches=1, parallel=Parallelism(tensor=2, context=2))
    part = Partition((1, 3, 2))
    rate = microbatch_time(model, H100, layout, part)
    rng = random.Random(5)
    for _ in range(20):
        lengths = [rng.randint(1, 3000) for _ in range(rng.randint(1, 6))]
        direct = max(device_times(model, H100, layout, part, sum(lengths), attention_pairs(lengths, flash)))
        assert rate.of_documents(lengths) == pytest.approx(direct, rel=1e-9)


@pytest.mark.parametrize("data, field", [
    ([], "documents"),
    ([[5], []], "documents[1]"),
    ([[5, 0]], "documents[0][1]"),
    ([[-3]], "documents[0][0]"),
    ([[2.5]], "documents[0][0]"),
    ({"documents": []}, "documents.documents"),
    ({"documents": [4, 0]}, "documents.documents[1]"),
    ({"documents": [4], "tokens_per_microbatch": 0}, "documents.tokens_per_microbatch"),
    ({"documents": [4], "budget": 8}, "documents.budget"),
    ({"tokens_per_microbatch": 8}, "documents.documents"),
    ("nope", "documents"),
    ({"documents": [1] * (MAX_DOCUMENTS + 1)}, "documents.documents"),
    ([[1, 1]] * (MAX_DOCUMENTS // 2 + 1), "documents"),
])
def test_bad_documents_name_the_field(data, field):
    with pytest.raises(InputError) as err:
        batch_from_data(data)
    assert err.value.field == field


def test_documents_file_forms():
    given = batch_from_data([[3, 4], [5]])
    assert given.microbatches == ((3, 4), (5,)) and given.documents == (3, 4, 5)
    flat = batch_from_data({"documents": [3, 4, 5], "tokens_per_microbatch": 8})
    assert flat.microbatches is None and flat.tokens_per_microbatch == 8


def test_1f1b_step_on_one_device_is_all_its_work():
    from ppsolve.costmodel.batch import step_1f1b
    from ppsolve.costmodel.documents import build_documents_problem

    model = transformer_from_dict({**TINY, "hidden": 256, "heads": 4, "sequence": 4096})
    layout = Layout(devices=1, microbatches=1, capacity=None)
    problem = build_documents_problem(model, H100, layout, Partition((2,)), [[4096], [1000, 3000], [64] * 8])
    data = problem.to_dict()
    work = sum(sum(data["time"][k][0]) for k in ("forward", "backward_input", "backward_weight"))
    assert step_1f1b(problem) == pytest.approx(work)
    vshape = build_documents_problem(model, H100, Layout(devices=1, chunks=2, placement="vshape", microbatches=1,
                                                         capacity=None), Partition((1, 1)), [[8]])
    assert step_1f1b(vshape).startswith("n/a (needs linear placement")
