"""The bounds' work grows with the number of ops, never with a ratio of input numbers (a capacity of 1e12
beside activations of 1 once ran for minutes and ate gigabytes); where a bound would need that work, it
takes its choices in blocks, which only lowers it: still a valid bound."""

from __future__ import annotations

import json

import pytest

from ppsolve.bounds import admission, analytic, makespan_lower_bound, sequence
from ppsolve.bounds.chains import heads_and_tails, one_microbatch
from ppsolve.bounds.idle import Group, most_work
from ppsolve.cli import main
from tests.helpers import make_problem, problem_dict


def _problem(capacity: float | None, microbatches: int = 48, chunks: int = 1):
    uneven = {"time_forward": [1, 2] * chunks, "time_backward_input": [2, 1] * chunks,
              "time_backward_weight": [1, 1] * chunks}
    return make_problem(devices=2, microbatches=microbatches, memory_capacity=capacity, memory_weight_hold=0.5,
                        time_p2p=0.5, chunks=chunks, placement="linear" if chunks == 1 else "interleaved", **uneven)


def test_a_huge_capacity_beside_the_activation_keeps_the_sequence_bound_small():
    problem = _problem(1e12, microbatches=200)
    passes = sequence.Passes(problem, *one_microbatch(problem))
    assert not passes.cap_rules  # the cap holds every microbatch at once: it never delays a forward
    unbounded = _problem(None, microbatches=200)
    assert makespan_lower_bound(problem).value == makespan_lower_bound(unbounded).value


@pytest.mark.parametrize("capacity", [3, 17.5, 40])
def test_the_sequence_bound_in_blocks_is_at_most_the_exact_one(monkeypatch, capacity):
    problem = _problem(capacity)
    order, duration, deps = one_microbatch(problem)
    exact = sequence.sequence_bounds(problem, order, duration, deps)
    monkeypatch.setattr(sequence, "MAX_CAP_RULES", 4)
    passes = sequence.Passes(problem, order, duration, deps)
    assert all(len(rules) <= 4 for rules in passes.cap_rules.values())
    blocked = sequence.sequence_bounds(problem, order, duration, deps)
    assert all(b <= e + 1e-9 for b, e in zip(blocked, exact))
    assert all(b >= load - 1e-9 for b, load in zip(blocked, makespan_lower_bound(problem).device_bounds))


@pytest.mark.parametrize("capacity", [2.5, 9, 30])
def test_the_admission_starts_in_blocks_are_at_most_the_exact_ones(monkeypatch, capacity):
    problem = _problem(capacity)
    heads, _ = heads_and_tails(problem)
    exact = admission.admission_starts(problem, heads)
    monkeypatch.setattr(admission, "MAX_BLOCKS", 3)
    blocked = admission.admission_starts(problem, heads)
    assert exact is not None and blocked is not None
    assert all(b <= e + 1e-9 for b, e in zip(blocked, exact))
    assert blocked[-1] >= problem.forward[0] * (problem.microbatches - 1) - 1e-9  # still spaced by F(0)


@pytest.mark.parametrize("capacity", [4, 12])
def test_the_idle_bound_in_blocks_is_at_most_the_exact_one(monkeypatch, capacity):
    problem = _problem(capacity, chunks=2)
    exact = makespan_lower_bound(problem).idle_bounds
    monkeypatch.setattr(analytic, "MAX_IDLE_TIMES", 3)
    blocked = makespan_lower_bound(problem).idle_bounds
    assert all(b <= e + 1e-9 for b, e in zip(blocked, exact))


def test_most_work_of_one_group_is_exact_and_does_not_loop_over_the_count():
    assert most_work([Group(10 ** 15, ((2.0, 3.0),))], 7.0) == 9.0  # three items of weight 2 fit
    assert most_work([Group(10 ** 15, ((0.0, 1.0),))], 0.0) == 10 ** 15
    # two items and a count beyond the exact enumeration: the linear relaxation, an upper bound
    big = most_work([Group(10 ** 12, ((1.0, 1.0), (2.0, 3.0)))], 10.0)
    assert big >= 15.0  # the integer optimum: five of the second item


def test_bound_with_a_capacity_below_one_activation_exits_3_with_one_line(tmp_path, capsys):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(problem_dict(memory_capacity=0.5)))
    assert main(["bound", str(path)]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs at least 1" in err and "capacity is 0.5" in err
    assert main(["bound", str(path), "--json"]) == 3
