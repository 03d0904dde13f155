"""``ppsolve.costmodel.problem_for_batch``: the problem ``ppsolve problem --documents`` writes, as one call."""

from __future__ import annotations

import json

import pytest

from ppsolve.cli import main
from ppsolve.costmodel import Layout, even_partition, hardware_of_gpu, load_transformer, problem_for_batch
from ppsolve.errors import InputError
from ppsolve.problem import load_problem
from tests.costmodel.test_documents_cli import needs_v4
from tests.helpers import ROOT

LLAMA = ROOT / "models" / "transformers" / "llama-3-8b-like.json"
STEP = ROOT / "models" / "documents" / "llama-8k-step.json"


@needs_v4
@pytest.mark.parametrize("pack", [None, "balance"])
def test_the_command_writes_the_same_problem(tmp_path, pack):
    out = tmp_path / "p.json"
    assert main(["problem", str(LLAMA), "--gpu", "H100", "--devices", "4", "--documents", str(STEP), "-o", str(out)]
                + (["--pack", pack] if pack else [])) == 0
    documents = json.loads(STEP.read_text())["documents"]
    problem = problem_for_batch(load_transformer(LLAMA), hardware_of_gpu("H100"), Layout(devices=4, microbatches=1),
                                documents, pack=pack)
    assert problem.to_dict() == load_problem(out).to_dict()


@needs_v4
def test_microbatches_as_given():
    model, hardware = load_transformer(LLAMA), hardware_of_gpu("H100")
    layout = Layout(devices=2, microbatches=1)
    problem = problem_for_batch(model, hardware, layout, [[1000, 3000], [8000], [100, 100, 100]],
                                partition=even_partition(model.layers, 2))
    assert problem.microbatches == 3 and problem.per_microbatch
    assert problem.forward.at(0, 1) > problem.forward.at(0, 0) > problem.forward.at(0, 2)


@pytest.mark.parametrize("documents, field", [([], "documents"), ([[]], "documents[0]"), ([[5, 0]], "documents[0][1]"),
                                              ([7, -1], "documents.documents[1]"), ([[9000]], "documents[0]")])
def test_bad_documents_name_the_field(documents, field):
    with pytest.raises(InputError) as error:
        problem_for_batch(load_transformer(LLAMA), hardware_of_gpu("H100"), Layout(devices=2, microbatches=1),
                          documents)
    assert str(error.value).startswith(field + ":")


def test_bad_pack():
    with pytest.raises(InputError, match="pack"):
        problem_for_batch(load_transformer(LLAMA), hardware_of_gpu("H100"), Layout(devices=2, microbatches=1),
                          [100], pack="tight")


@needs_v4
def test_the_partition_search_ranks_per_microbatch_problems():
    # documents of different lengths: the stage with the most work is found over all microbatches
    from itertools import product

    from ppsolve.bounds import makespan_lower_bound
    from ppsolve.costmodel import Partition, transformer_from_dict
    from ppsolve.costmodel.documents import build_documents_problem
    from ppsolve.costmodel.search import rank_partitions

    model = transformer_from_dict({**json.loads(LLAMA.read_text()), "layers": 8})
    hw, layout = hardware_of_gpu("H100"), Layout(devices=3, microbatches=1, capacity=None)
    batch = [[8192], [4096, 2048, 2048], [512] * 16, [6000, 100]]
    make = lambda p: build_documents_problem(model, hw, layout, p, batch)  # noqa: E731
    assert make(even_partition(8, 3)).per_microbatch
    ranked, _ = rank_partitions(make, even_partition(8, 3))
    every = [Partition(c) for c in product(range(9), repeat=3) if sum(c) == 8 and c[1]]
    assert ranked[0].bound == pytest.approx(min(makespan_lower_bound(make(p)).value for p in every))
