"""The solve summary: published schedules that fit or are refused, the gap, offload, the least cap."""

from __future__ import annotations

import json

from ppsolve.advice import advise
from ppsolve.cli import main
from ppsolve.methods import RunOptions, get_method, run_method
from tests.helpers import make_problem, problem_dict


def test_best_published_fit_and_refusals_with_their_needs():
    # 2 devices, 4 microbatches, cap 2 activations: zb-h1 keeps 1F1B's 2 on device 0 and fits; gpipe holds 4.
    problem = make_problem(microbatches=4, memory_capacity=2)
    schedule = run_method("zb-h1", problem)
    advice = advise("p.json", schedule, "optimal", schedule.method.lower_bound)
    assert advice.best is not None and advice.best.makespan == schedule.makespan
    assert advice.speedup == 0.0
    refused = {r.name: r for r in advice.refused}
    gpipe = get_method("gpipe").build(problem, RunOptions(ignore_capacity=True))
    assert refused["gpipe"].need == max(gpipe.peak_memory) == 4
    assert refused["gpipe"].capacity == 2
    assert all(r.need > 2 for r in advice.refused)
    assert "refused by the cap (2): " in "\n".join(advice.lines())


def test_offload_reason_and_gap():
    problem = make_problem(microbatches=4, memory_capacity=None, offload={"bandwidth": {"d2h": 1, "h2d": 1}})
    schedule = run_method("gpipe", problem)
    advice = advise("p.json", schedule, "feasible", schedule.method.lower_bound)
    assert advice.offload.startswith("not used: memory is unbounded")
    assert advice.gap.startswith("open:")
    no_block = run_method("gpipe", make_problem(microbatches=4))
    assert advise("p.json", no_block, "feasible", 0).offload == "not possible: the problem has no offload block"


def test_an_open_gap_on_a_capped_problem_names_the_split_bound():
    capped = make_problem(devices=2, microbatches=4, memory_capacity=2)
    schedule = run_method("1f1b", capped)
    gap = advise("my p.json", schedule, "feasible", 0).gap
    assert gap.startswith("open:") and gap.endswith("ppsolve bound 'my p.json' --split 300")
    # not where it does not apply: offload (no relaxation), no cap (nothing for it to find), a closed gap
    offload = make_problem(devices=2, microbatches=4, memory_capacity=2,
                           offload={"bandwidth": {"d2h": 1, "h2d": 1}})
    assert "--split" not in advise("p.json", run_method("1f1b", offload), "feasible", 0).gap
    free = run_method("1f1b", make_problem(devices=2, microbatches=4))
    assert "--split" not in advise("p.json", free, "feasible", 0).gap
    assert "--split" not in advise("p.json", schedule, "optimal", schedule.makespan).gap


def test_least_cap_is_exact_when_it_meets_the_least_capacity():
    # One microbatch: every schedule holds one activation per stage at most, so the cap is 1 and that is the least.
    problem = make_problem(microbatches=1, memory_capacity=5)
    schedule = run_method("1f1b", problem)
    advice = advise("p.json", schedule, "optimal", schedule.method.lower_bound)
    assert advice.least_cap == 1 and advice.least_cap_command is None
    assert advice.unbounded_makespan == schedule.makespan


def test_solve_json_carries_the_advice(tmp_path, capsys):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(problem_dict(microbatches=3, memory_capacity=2)))
    assert main(["solve", str(path), "-o", str(tmp_path / "s.json"), "--time-limit", "5", "--quiet", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    advice = summary["advice"]
    assert advice["best_published"]["makespan"] >= summary["makespan"]
    assert advice["best_published"]["faster_by"] >= 0
    assert advice["gap"] and advice["offload"].startswith("not possible")


def test_offload_says_when_the_least_amount_is_proven():
    # 2 devices, 3 microbatches, capacity 1, a fast link: offload helps, and the least amount at the
    # optimal makespan is proven on a problem this small
    from ppsolve.solvers import SolveOptions, solve

    problem = make_problem(devices=2, microbatches=3, memory_capacity=1,
                           offload={"fraction": 1, "bandwidth": {"d2h": 2, "h2d": 2}})
    result = solve(problem, SolveOptions(time_limit=20, threads=2))
    assert result.schedule.offloaded > 0 and result.schedule.method.extra["least_offload"] == "optimal"
    advice = advise("p.json", result.schedule, result.status, result.lower_bound)
    assert advice.offload.endswith("no schedule at this makespan offloads less (proven)")
    unproven = run_method("greedy", problem)
    assert "proven" not in advise("p.json", unproven, "feasible", unproven.method.lower_bound).offload
