"""``ppsolve.Planner``: plans in background threads or processes, each the schedule ``ppsolve.solve`` gives."""

from __future__ import annotations

import io

import pytest

import ppsolve
from ppsolve.checker import check
from ppsolve.costmodel import Layout, hardware_of_gpu, load_transformer, problem_for_batch
from ppsolve.errors import InputError
from ppsolve.problem import load_problem
from tests.api.test_solve_api import LARGE, QUICK_WITH_TIME
from tests.helpers import ROOT, make_problem, one_f_one_b_orders

LLAMA = ROOT / "models" / "transformers" / "llama-3-8b-like.json"


def test_plans_in_a_thread_what_solve_plans():
    problems = [make_problem(devices=2, microbatches=m) for m in (2, 3, 4)]
    with ppsolve.Planner(time_limit=5, threads=1) as planner:
        futures = [planner.submit(p) for p in problems]
        planned = [f.result(timeout=60) for f in futures]
    for problem, schedule in zip(problems, planned):
        assert check(schedule).ok and schedule.problem == problem
        assert schedule.makespan == ppsolve.solve(problem, time_limit=5, threads=1).makespan


def test_plans_while_the_caller_works():
    """The per-step loop: the next plan runs in the background while this thread goes on."""
    problem = load_problem(LARGE)
    with ppsolve.Planner(time_limit=5, threads=1, settings=QUICK_WITH_TIME) as planner:
        future = planner.submit(problem)
        assert not future.done()  # submit does not wait for the plan (which takes a good part of a second)
        step = ppsolve.simulate(problem, one_f_one_b_orders(problem))  # this thread's own work meanwhile
        schedule = future.result(timeout=60)
    assert max(op.end for op in step) >= schedule.makespan
    assert check(schedule).ok and schedule.method.name == "quick"


def test_submit_overrides_the_defaults_and_errors_come_back_in_the_future():
    with ppsolve.Planner(time_limit=5, objective="memory") as planner:
        bad = planner.submit(make_problem(), objective="fastest")
        with pytest.raises(InputError, match="objective"):
            bad.result(timeout=60)


def test_plans_in_a_process():
    problem = load_problem(LARGE)
    with ppsolve.Planner(processes=True, time_limit=5, threads=1, settings=QUICK_WITH_TIME) as planner:
        schedule = planner.submit(problem).result(timeout=120)
    assert check(schedule).ok
    assert sorted(schedule.ops) == sorted(ppsolve.solve(problem, time_limit=5, threads=1,
                                                        settings=QUICK_WITH_TIME).ops)


def test_bad_planner_options():
    with pytest.raises(InputError, match="workers"):
        ppsolve.Planner(0)
    with pytest.raises(InputError, match="progress"):
        ppsolve.Planner(processes=True, progress=io.StringIO())


def test_closed_planner_refuses_new_plans():
    planner = ppsolve.Planner()
    planner.close()
    with pytest.raises(RuntimeError):
        planner.submit(make_problem())


def test_the_per_step_loop_of_the_readme():
    """Each step's documents -> its problem -> a plan made while the step before runs; every plan checked."""
    model, gpu = load_transformer(LLAMA), hardware_of_gpu("H100")
    batches = [[4000, 300, 3000, 900, 5000], [8000, 100, 100, 2000], [2000, 2000, 2000, 2000, 500, 7000]]
    plan = lambda batch: problem_for_batch(model, gpu, Layout(devices=8, microbatches=1), batch,  # noqa: E731
                                           pack="balance")
    planned = []
    with ppsolve.Planner(time_limit=0.5, threads=1) as planner:
        future = planner.submit(plan(batches[0]))
        for k, batch in enumerate(batches):
            schedule = future.result(timeout=60)
            if k + 1 < len(batches):
                future = planner.submit(plan(batches[k + 1]))
            planned.append((plan(batch), schedule))
    for problem, schedule in planned:
        assert check(schedule).ok and schedule.problem == problem and problem.per_microbatch
