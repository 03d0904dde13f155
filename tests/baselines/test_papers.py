"""instances/papers: the zero-bubble paper's Table 5 bubble rates from its profiled timings.

The paper's bubble rate is 1 - m (T_F + T_B + T_W) / makespan, the makespan timed from
its per-stage T_F, T_B, T_W and T_comm; its 1F1B runs B and W as one backward (our
fused backward), the ZB schedules split them. Only rates within 0.005 count as reproduced.
"""

from __future__ import annotations

import json

import pytest

from ppsolve.checker import check
from ppsolve.methods import run_method
from ppsolve.problem import load_problem, problem_from_dict
from tests.helpers import ROOT

PAPERS = ROOT / "instances" / "papers"
TOLERANCE = 0.005
# The 28.3B ZB-H2 rate is the closed form (p-1)(F+B-2W) + comm, valid only for B >= 2W; here B < 2W
# and CP-SAT proves bubble 0.1100 is the least any schedule reaches (BENCHMARKS.md, cost model section).
NOT_REACHABLE = pytest.mark.xfail(strict=True, reason="28.3B ZB-H2: published 0.0641 is below the proven "
                                  "optimum 0.1100 for these timings; see BENCHMARKS.md")


def _published(name: str, method: str) -> float:
    return json.loads((PAPERS / name).read_text())["x-published"]["bubble_rate"][method]


def _bubble(name: str, method: str) -> float:
    problem = load_problem(PAPERS / name)
    if method == "1f1b":
        data = problem.to_dict()
        data["backward"] = "fused"
        problem = problem_from_dict(data)
    schedule = run_method(method, problem)
    assert check(schedule).valid
    m = problem.microbatches
    work = m * (problem.forward[0] + problem.backward_input[0] + problem.backward_weight[0])
    assert schedule.bubble_ratio == pytest.approx(1 - work / schedule.makespan)
    return schedule.bubble_ratio


@pytest.mark.parametrize("name", ["zb-1.5b-p8-m24.json", "zb-28.3b-p32-m96.json"])
def test_1f1b_bubble_rate_is_reproduced(name):
    assert _bubble(name, "1f1b") == pytest.approx(_published(name, "1f1b"), abs=TOLERANCE)


@pytest.mark.parametrize("name, method", [
    ("zb-1.5b-p8-m24.json", "zb-h1-handcrafted"),
    ("zb-1.5b-p8-m24.json", "zb-h2"),
    ("zb-28.3b-p32-m96.json", "zb-h1-handcrafted"),
    ("zb-28.3b-p32-m96.json", "zb-h1"),
    pytest.param("zb-28.3b-p32-m96.json", "zb-h2", marks=NOT_REACHABLE),
])
def test_zero_bubble_rates(name, method):
    published = _published(name, method.removesuffix("-handcrafted"))
    assert _bubble(name, method) == pytest.approx(published, abs=TOLERANCE)


def test_heuristic_zb_h1_is_never_slower_than_the_handcrafted_one():
    for name in ("zb-1.5b-p8-m24.json", "zb-28.3b-p32-m96.json"):
        problem = load_problem(PAPERS / name)
        assert run_method("zb-h1", problem).makespan <= run_method("zb-h1-handcrafted", problem).makespan


def test_paper_instances_record_their_sources():
    for path in sorted(PAPERS.glob("*.json")):
        data = json.loads(path.read_text())
        problem = load_problem(path)
        assert data.get("x-sources"), path.name
        assert problem.num_stages == len(data["x-partition"]["layers"])
