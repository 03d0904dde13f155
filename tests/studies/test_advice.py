"""The solve summary: published schedules that fit or are refused, the gap, offload, the least cap."""

from __future__ import annotations

import json

from ppsolve.studies.advice import advise
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


def test_offload_least_amount_is_not_claimed_on_a_grid():
    # 2 devices, 3 microbatches, capacity 1, a fast link: offload helps; CP-SAT's amounts lie on a grid,
    # so the least amount at the makespan is never claimed proven (a finer amount might do)
    from ppsolve.solvers import SolveOptions, solve

    problem = make_problem(devices=2, microbatches=3, memory_capacity=1,
                           offload={"fraction": 1, "bandwidth": {"d2h": 2, "h2d": 2}})
    result = solve(problem, SolveOptions(time_limit=20, threads=2))
    assert result.schedule.offloaded > 0 and result.schedule.method.extra["least_overhead"] == "feasible"
    advice = advise("p.json", result.schedule, result.status, result.lower_bound)
    assert advice.offload.endswith("this is the least offload found at this makespan")
    assert advice.recompute is None  # no recompute block: no recompute line
    unproven = run_method("greedy", problem)
    assert "proven" not in advise("p.json", unproven, "feasible", unproven.method.lower_bound).offload


def test_recompute_says_where_and_when_the_least_is_proven():
    # one activation fits per device: recomputing lets the pipeline fill; with no offload the least
    # recompute time at the optimal makespan is proven on a problem this small
    from ppsolve.solvers import SolveOptions, solve

    from unittest import mock

    from ppsolve.bounds import MakespanBound

    problem = make_problem(devices=2, microbatches=3, memory_capacity=1.5, time_forward=2,
                           time_backward_input=2, time_backward_weight=2, recompute={"keep": 0.25, "time": 1})
    # the solver's own proof (the analytic bound's validity with recompute is tested with the bounds)
    with mock.patch("ppsolve.solvers.phases.makespan_lower_bound", lambda p: MakespanBound(0.0, (), 0.0)):
        result = solve(problem, SolveOptions(time_limit=20, threads=2))
    assert result.schedule.recomputed > 0 and result.schedule.method.extra["least_overhead"] == "optimal"
    advice = advise("p.json", result.schedule, result.status, result.lower_bound)
    assert advice.recompute.startswith(f"{result.schedule.recomputed} of 6 activations (stage 0: ")
    assert "holds 1 whole activation of stage 0 on device 0" in advice.recompute
    assert advice.recompute.endswith("no schedule at this makespan recomputes less (proven)")
    assert any(line.startswith("recompute: ") for line in advice.lines())
