"""instances/papers: the zero-bubble paper's Table 5 bubble rates from its profiled timings.

The paper's bubble rate is 1 - m (T_F + T_B + T_W) / makespan, the makespan timed from
its per-stage T_F, T_B, T_W and T_comm; its 1F1B runs B and W as one backward (our
fused backward), the ZB schedules split them. Only rates within 0.005 count as reproduced.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from ppsolve.checker import check
from ppsolve.methods import run_method
from ppsolve.problem import load_problem, problem_from_dict

PAPERS = Path(__file__).resolve().parent.parent / "instances" / "papers"
TOLERANCE = 0.005
# ZB-H1/H2 follow the reference implementation once branch `baselines` is in (its zb_auto module is
# the sign); before that they are 1F1B-like here and no ZB rate can be reproduced.
FAITHFUL_ZB = importlib.util.find_spec("ppsolve.baselines.zb_auto") is not None
BEFORE_FAITHFUL = pytest.mark.xfail(not FAITHFUL_ZB, strict=True, reason="ZB baselines not yet faithful")
NOT_REPRODUCED = pytest.mark.xfail(strict=True, reason="not reproduced (1.5B ZB-H1 0.1397 "
                                   "vs 0.1585, 28.3B ZB-H2 0.1100 vs 0.0641); see BENCHMARKS.md")


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
    pytest.param("zb-1.5b-p8-m24.json", "zb-h1", marks=NOT_REPRODUCED),
    pytest.param("zb-1.5b-p8-m24.json", "zb-h2", marks=BEFORE_FAITHFUL),
    pytest.param("zb-28.3b-p32-m96.json", "zb-h1", marks=BEFORE_FAITHFUL),
    pytest.param("zb-28.3b-p32-m96.json", "zb-h2", marks=NOT_REPRODUCED),
])
def test_zero_bubble_rates(name, method):
    assert _bubble(name, method) == pytest.approx(_published(name, method), abs=TOLERANCE)


def test_paper_instances_record_their_sources():
    for path in sorted(PAPERS.glob("*.json")):
        data = json.loads(path.read_text())
        problem = load_problem(path)
        assert data.get("x-sources"), path.name
        assert problem.num_stages == len(data["x-partition"]["layers"])
