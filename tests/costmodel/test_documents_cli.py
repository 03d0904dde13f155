"""``ppsolve problem --documents``: version-4 problems from document lengths, packing, and bad input."""

from __future__ import annotations

import json

import pytest

from tests.executor.helpers import ROOT

from ppsolve.cli import main
from ppsolve.errors import InputError
from ppsolve.limits import MAX_DOCUMENTS
from ppsolve.problem import problem_from_dict

LLAMA = ROOT / "models" / "transformers" / "llama-3-8b-like.json"
STEP = ROOT / "models" / "documents" / "llama-8k-step.json"
COMMON = [str(LLAMA), "--gpu", "H100", "--devices", "4"]



def _loads_per_microbatch() -> bool:
    """Whether this branch's loader takes S lists of m (contract version 4)."""
    try:
        problem_from_dict({"format": "ppsolve/problem@1", "devices": 1, "microbatches": 2,
                           "time": {"forward": [[1, 2]], "backward_input": 1, "backward_weight": 1},
                           "memory": {"activation": 1, "capacity": None}})
    except InputError:
        return False
    return True


# The problems these write give values per (stage, microbatch): they load once contract version 4's loader does.
needs_v4 = pytest.mark.skipif(not _loads_per_microbatch(), reason="the loader reads no S lists of m yet")


def _write(tmp_path, data) -> str:
    path = tmp_path / "docs.json"
    path.write_text(json.dumps(data))
    return str(path)


@needs_v4
def test_microbatches_as_given_make_a_per_microbatch_problem(tmp_path, capsys):
    out = tmp_path / "p.json"
    docs = _write(tmp_path, [[8192], [4096, 4096], [1024] * 8])
    assert main(["problem", *COMMON, "--documents", docs, "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["microbatches"] == 3 and len(data["time"]["p2p"]) == 3
    forward = data["time"]["forward"]
    assert len(forward) == 4 and all(row[0] > row[1] > row[2] for row in forward)  # same tokens, shorter documents
    assert "as given:" in capsys.readouterr().out


@needs_v4
def test_balance_lowers_the_imbalance_of_the_loader_order(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert main(["problem", *COMMON, "--documents", str(STEP), "--pack", "balance", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    lines = {line.split(":")[0].strip(): line for line in text.splitlines() if "imbalance" in line}
    before = float(lines["sequential"].split("imbalance ")[1].split()[0])
    after = float(lines["balance"].split("imbalance ")[1].split()[0])
    assert after < 1.05 < before
    data = json.loads(out.read_text())
    packed = data["x-costmodel"]["documents"]["microbatches"]
    assert sorted(x for mb in packed for x in mb) == sorted(json.loads(STEP.read_text())["documents"])
    assert max(map(sum, packed)) <= 8192


def test_uniform_path_is_untouched_by_the_new_flags(tmp_path):
    # Without --documents the problem is the uniform one: per-stage lists, one p2p number.
    out = tmp_path / "p.json"
    assert main(["problem", *COMMON, "--microbatches", "4", "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    assert isinstance(data["time"]["p2p"], float) and not isinstance(data["time"]["forward"][0], list)


@pytest.mark.parametrize("docs, extra, field", [
    ([[9000]], [], "documents[0]"),  # over the model's 8192 tokens a microbatch
    ({"documents": [100, 9000]}, [], "documents.documents[1]"),  # a document longer than the budget, not split
    ([[100], [100, 9000]], ["--pack", "balance"], "documents[1][1]"),
    ([[100, 0]], [], "documents[0][1]"),
    ({"documents": [100, -4]}, [], "documents.documents[1]"),
    ([], [], "--documents"),  # the whole file: named by the flag that gave it
    ([[100], []], [], "documents[1]"),
    ({"documents": [1] * (MAX_DOCUMENTS + 1)}, [], "documents.documents"),
    ([[100]], ["--microbatches", "4"], "--microbatches"),
    ([[100]], ["--tokens-per-microbatch", "0"], "--tokens-per-microbatch"),
    ([[100]], ["--partition", "auto"], "--partition"),
])
def test_bad_documents_one_line_exit_2(tmp_path, capsys, docs, extra, field):
    path = _write(tmp_path, docs)
    assert main(["problem", *COMMON, "--documents", path, *extra, "-o", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"error: {field}:" in err[0]


def test_packing_flags_need_documents(tmp_path, capsys):
    assert main(["problem", *COMMON, "--microbatches", "4", "--pack", "balance", "-o", str(tmp_path / "p.json")]) == 2
    assert "--pack: needs --documents" in capsys.readouterr().err
    assert main(["problem", *COMMON, "-o", str(tmp_path / "p.json")]) == 2
    assert "--microbatches: required" in capsys.readouterr().err


@needs_v4
def test_split_documents_lets_a_long_one_through(tmp_path, capsys):
    path = _write(tmp_path, {"documents": [100, 9000], "tokens_per_microbatch": 8192})
    out = tmp_path / "p.json"
    assert main(["problem", *COMMON, "--documents", path, "--split-documents", "-o", str(out)]) == 0
    assert json.loads(out.read_text())["x-costmodel"]["documents"]["microbatches"] == [[100, 8092], [908]]


@needs_v4
@pytest.mark.parametrize("extra", [["--recompute", "decide", "--offload"],
                                   ["--backward", "fused", "--tensor-parallel", "2", "--sequence-parallel",
                                    "--context-parallel", "2"],
                                   ["--chunks", "2", "--placement", "vshape", "--capacity", "none"]])
def test_every_parallel_option_gets_per_microbatch_figures(tmp_path, capsys, extra):
    out = tmp_path / "p.json"
    docs = _write(tmp_path, [[8192], [2048] * 4])
    assert main(["problem", *COMMON, "--documents", docs, *extra, "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    stages = 4 * (2 if "--chunks" in extra else 1)
    for grid in (data["time"]["forward"], data["time"]["backward_input"], data["memory"]["activation"]):
        assert len(grid) == stages and all(len(row) == 2 for row in grid)
    if "decide" in extra:
        assert all(len(row) == 2 for row in data["recompute"]["keep"])
    assert "per stage, least to most" in capsys.readouterr().out


@needs_v4
def test_balance_with_split_documents_cuts_the_dominant_document_and_says_so(tmp_path, capsys):
    # One 8000-token document among 64 of 500 (40 000 tokens, 5 microbatches of 8192 in the loader's order):
    # whole, its attention alone outweighs a fifth of the batch.
    path = _write(tmp_path, {"documents": [8000] + [500] * 64, "tokens_per_microbatch": 8192})
    figures = {}
    for flags in ([], ["--split-documents"]):
        out = tmp_path / "p.json"
        assert main(["problem", *COMMON, "--documents", path, "--pack", "balance", *flags, "-o", str(out)]) == 0
        printed = capsys.readouterr().out
        assert "documents: 65, token budget 8192" in printed  # documents, not pieces
        line = printed.split("balance:")[1].splitlines()[0]
        figures[bool(flags)] = float(line.split("imbalance ")[1].split()[0]), line
        lengths = json.loads(out.read_text())["x-costmodel"]["documents"]["microbatches"]
        assert sum(map(sum, lengths)) == 8000 + 500 * 64 and max(map(sum, lengths)) <= 8192
    assert figures[False][0] > 1.05 and "documents cut" not in figures[False][1]
    assert figures[True][0] <= 1.05 and "documents cut 1" in figures[True][1]
