"""The benchmark suite: generated deterministically, committed as generated, covering the paper shapes."""

from __future__ import annotations

import json

from benchmarks.makers import suite
from ppsolve.bounds import capacity_shortfalls
from ppsolve.problem import load_problem
from tests.helpers import ROOT

SUITE = ROOT / "instances" / "suite"


def test_committed_suite_is_what_the_script_writes(tmp_path):
    assert suite.main(["--out", str(tmp_path)]) == 0
    fresh = {p.name: p.read_text() for p in tmp_path.glob("*.json")}
    committed = {p.name: p.read_text() for p in SUITE.glob("*.json")}
    assert fresh == committed


def test_suite_covers_the_paper_shapes():
    problems = [load_problem(p) for p in sorted(SUITE.glob("*.json"))]
    assert len(problems) >= 18
    assert not any(capacity_shortfalls(p) for p in problems)
    assert {p.devices for p in problems} >= {4, 8, 16}
    assert {p.microbatches // p.devices for p in problems} >= {1, 2, 4}
    assert {(p.placement_name, p.chunks) for p in problems} >= {("linear", 1), ("interleaved", 2), ("vshape", 2)}
    assert {p.backward_mode for p in problems} == {"split", "fused"}
    notes = [p.annotations["x-suite"] for p in problems]
    assert {n["cap_over_M"] for n in notes} >= {"1_3", "1_2", "1", "2"}
    assert {n["k"] for n in notes if "k" in n} >= {0.25, 0.5, 1.0, 2.0}
    assert any(n["uneven"] for n in notes)
    assert any(p.offload is not None and any(len(link) > 1 for link in p.offload.links) for p in problems)
    for p, note in zip(problems, notes):
        if "k" in note:  # the link speed gives the stated k on the heaviest stage
            s = max(range(p.num_stages), key=lambda s: p.activation[s])
            work = p.forward[s] + p.backward_input[s] + p.backward_weight[s]
            k = (p.activation[s] / p.offload.d2h + p.activation[s] / p.offload.h2d) / work
            assert abs(k - note["k"]) < 1e-3 * note["k"]


def test_problem_files_are_plain_problem_format():
    for path in SUITE.glob("*.json"):
        data = json.loads(path.read_text())
        assert data["format"] == "ppsolve/problem@1" and data["name"] == path.stem
