"""The split bound (``ppsolve.solvers.cpsat.split_bound``): above the per-device figures where the middle
devices' collisions matter, never above a proven optimum, and refused where it is no relaxation."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings

from ppsolve.bounds import makespan_lower_bound
from ppsolve.methods import get_method, run_and_check
from ppsolve.problem import load_problem, problem_from_dict
from ppsolve.solvers.cpsat.split_bound import best_chain, least_time, split_bound, why_not
from tests.helpers import make_problem
from tests.solvers.cases import proven_optimum
from tests.bounds.test_bound_validity import spaced_problems
from tests.helpers import ROOT

# The 4 x 8 analogue of instances/scale/lin-d8-m32-split-uneven-cap1_2: a light first stage, a heavy
# last one, p2p, the cap at half of 1F1B's peak. The whole model proves its optimum, 472.4.
LINEAR_4X8 = {
    "format": "ppsolve/problem@1", "devices": 4, "microbatches": 8, "placement": "linear", "backward": "split",
    "time": {"forward": [7, 10, 10, 16], "backward_input": [8.4, 12, 12, 19.2], "backward_weight": [5.6, 8, 8, 12.8],
             "p2p": 0.5},
    "memory": {"activation": [1, 1, 1, 1.5], "weight_hold": [0.25, 0.25, 0.25, 0.375], "capacity": 2}}


@pytest.mark.slow  # two proofs of 25-90 s: bound to the machine's speed
def test_split_rises_above_the_per_device_bound_and_stays_under_the_optimum():
    problem = problem_from_dict(LINEAR_4X8)
    split = split_bound(problem, 90, threads=1)  # proven in about 25 s; the rest is slack for a loaded machine
    best = split.best
    assert best is not None and best.proven
    # the last F(0) of 3 microbatches starts no sooner than 103.2; the other 6 take at least 361.4
    assert (best.heads, best.entries, best.rest_size, best.rest) == ((3,), (pytest.approx(103.2),), 6,
                                                                    pytest.approx(361.4))
    assert best.value == pytest.approx(464.6) and best.value > makespan_lower_bound(problem).value + 13
    # under the optimum: under any schedule the checker accepts (the independent model does not prove this
    # problem's optimum, 472.4, within 600 s)
    witness = run_and_check(get_method("greedy"), problem)
    assert witness.valid and best.value <= witness.schedule.makespan
    # the chain is the best of what was proven: no single split of the proven sizes is above it
    for n, (a, _) in split.entries.items():
        for k, (rest, _) in split.rests.items():
            if n + k - 1 == problem.microbatches:
                assert a + rest <= best.value + 1e-9


def test_chain_adds_groups_of_microbatches_that_share_their_boundary():
    """Recursion on given sizes (the figures CP-SAT proves for the 8 x 32 scale problem in about 60 s):
    two groups of 14 (26 gaps between F(0) starts) and the last 6 beat one group and the analytic rest."""
    problem = load_problem(ROOT / "instances/scale/lin-d8-m32-split-uneven-cap1_2.json")
    entries = {5: (195.2, True), 14: (637.4, True)}
    best = best_chain(problem, entries, {6: (434.4, True)})
    assert (best.heads, best.rest_size) == ((14, 14), 6) and best.proven
    assert best.value == pytest.approx(2 * 637.4 + 434.4)
    assert best.value > makespan_lower_bound(problem).value + 40
    assert best.describe() == "2 x A(14) + OPT(6) = 2 x 637.4 + 434.4"
    # an unproven side (a CP-SAT bound) still counts, and the chain says so
    unproven = best_chain(problem, entries, {6: (434.4, False)})
    assert unproven.value == pytest.approx(best.value) and not unproven.proven
    # without the rest's CP-SAT figure, the chain ends on the analytic bound of the rest
    alone = best_chain(problem, entries, {})
    assert alone.value >= makespan_lower_bound(problem).value and alone.value < best.value
    # no group at all: the analytic bound of the whole, said as such
    nothing = best_chain(problem, {}, {})
    assert nothing.heads == () and nothing.value == pytest.approx(makespan_lower_bound(problem).value)
    assert nothing.describe() == f"OPT(32) >= {nothing.value:g} (no chain above it)"


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spaced_problems(offload=False, most=4))  # 5 V-shaped microbatches took the independent model > 30 s
def test_split_never_exceeds_a_proven_optimum(problem):
    split = split_bound(problem, 5, threads=1)
    best = proven_optimum(problem, time_limit=60)
    assert best is not None, "the independent model proved no optimum in time"
    if split.best is not None:
        assert split.best.value <= best + 1e-9


def test_split_is_refused_where_the_model_is_no_relaxation():
    offload = {"fraction": 1, "bandwidth": {"d2h": 1, "h2d": 1}}
    assert "offload" in why_not(make_problem(devices=2, microbatches=4, memory_capacity=2, offload=offload))
    assert "fewer than 3" in why_not(make_problem(devices=2, microbatches=2))
    assert why_not(make_problem(devices=2, microbatches=4, memory_capacity=2)) is None
    refused = split_bound(make_problem(devices=2, microbatches=4, memory_capacity=2, offload=offload), 5)
    assert refused.best is None and "offload" in refused.reason


def test_bound_command_prints_the_split(tmp_path, cli):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(LINEAR_4X8))
    printed = cli("bound", path, "--split", 90, "--threads", 1)
    assert printed.code == 0
    out = printed.out
    assert out.startswith("makespan >= 464.6  (split into smaller problems, proven by CP-SAT)")
    assert "464.6 = A(3) + OPT(6) = 103.2 + 361.4 (A(n): the least start of the last F(0) with n microbatches" in out
    printed = cli("bound", path, "--split", 90, "--threads", 1, "--json")
    assert printed.code == 0
    out, err = printed.out, printed.err
    data = json.loads(out)
    # each smaller problem is reported on stderr as it is done, so a long --split is not silent
    assert "  split: A(2) = 7  (" in err and "  split: OPT(6) = 361.4  (" in err
    assert data["split"]["interrupted"] is False
    assert data["makespan_lower_bound"] == pytest.approx(464.6) and data["binding"] == "split"
    assert data["split"]["chain"] == {"heads": [3], "entries": [pytest.approx(103.2)], "rest_microbatches": 6,
                                      "rest": pytest.approx(361.4), "proven": True}
    assert data["split"]["entries"][0] == {"microbatches": 2, "bound": pytest.approx(7.0), "proven": True}
    assert data["split"]["reason"] is None
    refused = cli("bound", path, "--split", 0)
    assert refused.code == 2 and "split: must be > 0 seconds" in refused.err


@pytest.mark.slow
def test_the_smaller_sizes_cuts_keep_the_optimum():
    """With every smaller size's proven bound as a cut (``_known_cuts``), the whole 4 x 8 model still
    reaches the optimum the plain model proves: the cuts remove no optimal schedule."""
    problem = problem_from_dict(LINEAR_4X8)
    entries = {n: least_time(problem, n, True, 30, 1, {}, {}) for n in range(2, 8)}
    rests: dict = {}
    for k in range(1, 8):
        rests[k] = least_time(problem, k, False, 30, 1, entries, rests)
    assert all(proven for _, proven in [*entries.values(), *rests.values()])
    assert least_time(problem, 8, False, 60, 1, entries, rests) == (pytest.approx(472.4), True)
    # and they are in the model: claim OPT(7) were the whole optimum, and 8 microbatches take longer
    # by the first F(0) (7) at least
    inflated = {**rests, 7: (472.4, True)}
    assert least_time(problem, 8, False, 60, 1, entries, inflated)[0] >= 472.4 + 7 - 1e-9


def test_ctrl_c_keeps_the_sizes_done_before_it():
    """Ctrl-C between two sizes (here raised by the report of A(4), as a user's would arrive) ends the
    search with the chain of what was done, said as interrupted."""
    problem = problem_from_dict(LINEAR_4X8)
    done = []

    def report(name, size, bound, proven):
        done.append((name, size))
        if (name, size) == ("A", 4):
            raise KeyboardInterrupt

    split = split_bound(problem, 90, threads=1, report=report)
    assert split.interrupted and done == [("A", 2), ("A", 3), ("A", 4)]
    assert set(split.entries) == {2, 3, 4} and split.rests == {}
    assert split.best is not None and split.best.value >= makespan_lower_bound(problem).value
    assert split.best.value <= 472.4  # the optimum: still a bound
