"""The scale suite (issue 12's grid): generated deterministically, committed as generated."""

from __future__ import annotations

from fractions import Fraction

from benchmarks.makers import scale
from ppsolve.bounds import capacity_shortfalls
from ppsolve.problem import load_problem
from tests.helpers import ROOT

SCALE = ROOT / "instances" / "scale"


def test_committed_scale_suite_is_what_the_script_writes(tmp_path):
    assert scale.main(["--out", str(tmp_path)]) == 0
    fresh = {p.name: p.read_text() for p in tmp_path.glob("*.json")}
    committed = {p.name: p.read_text() for p in SCALE.glob("*.json")}
    assert fresh == committed


def test_scale_suite_covers_the_grid():
    problems = [load_problem(p) for p in sorted(SCALE.glob("*.json"))]
    assert not any(capacity_shortfalls(p) for p in problems)
    grid = {(p.devices, p.microbatches // p.devices, p.chunks) for p in problems}
    assert grid == {(d, k, v) for d in (8, 16, 32) for k in (2, 4, 8) for v in (1, 2)}
    notes = [p.annotations["x-suite"] for p in problems]
    assert {Fraction(n["cap_over_M"].replace("_", "/")) for n in notes} == {Fraction(1, 2), Fraction(3, 4), 1}
    assert {n.get("k") for n in notes} == {None, 0.5, 1.5}
    assert all(n.get("k_basis") == "FB" for n in notes if n.get("k") is not None)
    offload = [p for p in problems if p.offload is not None]
    assert {max(len(link) for link in p.offload.links) for p in offload} == {1, 2}
    assert all(p.p2p > 0 and p.forward[0] < p.forward[1] < p.forward[-1] for p in problems)
    assert sum("core" in n["tags"] for n in notes) == 12
