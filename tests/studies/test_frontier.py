"""ppsolve frontier: monotone in capacity, honest about raw runs, refuses without a solver."""

from __future__ import annotations

import csv
import json

import pytest

from tests.plot.helpers import FAKE_SOLVER, ONE_F_ONE_B, SERIAL, register_for_test, serial_schedule, tiny_problem  # noqa: E402

from ppsolve import methods as registry
from ppsolve.bounds import min_capacity
from ppsolve.cli import main
from ppsolve.errors import NotApplicableError
from ppsolve.commands.frontier import parse_capacities
from ppsolve.studies.frontier import (auto_capacities, compute_frontier, curve_name, lever_variants,
                              read_frontier_points)
from ppsolve.methods import Method
from ppsolve.schedule import make_schedule


def test_auto_capacities_span_least_feasible_to_unbounded():
    caps = auto_capacities(2.0, 8.0, points=4)
    assert caps == [2.0, 4.0, 6.0, 8.0, None]
    assert auto_capacities(3.0, 3.0) == [3.0, None]


def test_parse_capacities():
    assert parse_capacities("auto") is None
    assert parse_capacities("8, 2,INF,4") == [8.0, 2.0, None, 4.0]  # compute_frontier sorts them


def test_frontier_is_monotone_on_a_tiny_problem(monkeypatch):
    register_for_test(monkeypatch, FAKE_SOLVER, SERIAL, ONE_F_ONE_B)
    problem = tiny_problem(3, 4)
    frontier = compute_frontier(problem, time_limit=1, points=5)
    curve = frontier.curve("no-lever")
    caps = [p.capacity for p in curve]
    assert caps[0] == max(min_capacity(problem)) and caps[-1] is None
    assert len(caps) == 6
    best = [p.best_makespan for p in curve]
    assert all(b is not None for b in best)
    # more memory never makes the makespan worse: the raw runs of this solver, and the curve
    assert all(later <= earlier for earlier, later in zip(best, best[1:]))
    raw = [p.makespan for p in curve]
    assert all(later <= earlier for earlier, later in zip(raw, raw[1:]))
    assert best[-1] < best[0]  # memory buys speed on this problem
    for p in curve:
        assert p.valid and p.peak_memory <= (p.capacity or float("inf")) + 1e-9
    names = {p.method for p in frontier.curve("baseline")}
    assert {"serial", "1f1b-test"} <= names and "cpsat" not in names


def test_monotone_repair_keeps_raw_figures(monkeypatch):
    """A solver that does worse with more memory: the curve uses the smaller capacity's schedule."""
    base = tiny_problem(2, 3)

    def erratic(problem, options):
        cap = problem.capacity[0]
        schedule = FAKE_SOLVER.build(problem, options)
        if cap is not None and cap > 1.5:  # pretend the time limit hit with a poor schedule
            late = [op._replace(start=op.start + 10, end=op.end + 10) for op in schedule.ops]
            return make_schedule(problem, late, "cpsat", status="feasible")
        return schedule

    register_for_test(monkeypatch, Method("cpsat", "solver", "test", "any", lambda p: None, erratic))
    frontier = compute_frontier(base, capacities=[1.0, 2.0, None], time_limit=1, baselines=False)
    one, two, unbounded = frontier.curve("no-lever")
    assert two.makespan > one.makespan  # raw figure kept as returned
    assert two.best_makespan == one.makespan and two.best_from == 1.0
    assert unbounded.best_makespan <= one.makespan


def test_offload_problem_gets_both_curves(monkeypatch):
    register_for_test(monkeypatch, Method("cpsat", "solver", "test", "any", lambda p: None,
                                          lambda p, o: serial_schedule(p, offload=p.can_offload, name="cpsat")))
    problem = tiny_problem(2, 2, offload={"fraction": 0.5, "bandwidth": {"d2h": 1, "h2d": 1}})
    frontier = compute_frontier(problem, capacities=[1.0, 2.0, None], time_limit=1, baselines=False)
    assert [p.capacity for p in frontier.curve("offload")] == [1.0, 2.0, None]
    assert frontier.curve("no-lever")[0].capacity == 1.0  # least feasible without offload is 1 here


def test_cli_writes_image_and_csv(monkeypatch, tmp_path):
    register_for_test(monkeypatch, FAKE_SOLVER, SERIAL)
    src = tmp_path / "p.json"
    src.write_text(json.dumps(tiny_problem(2, 3, name="tiny").to_dict()))
    out = tmp_path / "frontier.png"
    assert main(["frontier", str(src), "--points", "3", "--time-limit", "1", "-o", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with open(tmp_path / "frontier.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    curve = [r for r in rows if r["curve"] == "no-lever"]
    assert curve[-1]["capacity"] == "unbounded" and len(curve) == 4
    baselines = {r["method"]: r for r in rows if r["curve"] == "baseline"}
    assert "serial" in baselines and "cpsat" not in baselines
    assert float(baselines["serial"]["peak_memory"]) == 1.0


def test_refuses_without_a_solver(monkeypatch, tmp_path, capsys):
    registry.all_methods()
    monkeypatch.delitem(registry._REGISTRY, "cpsat", raising=False)
    with pytest.raises(NotApplicableError, match="needs the solver method 'cpsat'"):
        compute_frontier(tiny_problem(2, 2))
    src = tmp_path / "p.json"
    src.write_text(json.dumps(tiny_problem(2, 2).to_dict()))
    assert main(["frontier", str(src), "-o", str(tmp_path / "f.png")]) == 2
    assert "cpsat" in capsys.readouterr().err
    assert not (tmp_path / "f.png").exists()


def test_capacity_below_least_feasible_is_refused(monkeypatch, tmp_path, capsys):
    register_for_test(monkeypatch, FAKE_SOLVER)
    src = tmp_path / "p.json"
    src.write_text(json.dumps(tiny_problem(2, 2).to_dict()))
    assert main(["frontier", str(src), "--capacities", "0.5,inf", "-o", str(tmp_path / "f.png")]) == 2
    assert "--capacities" in capsys.readouterr().err


def test_refuses_a_problem_the_solver_does_not_take(monkeypatch):
    register_for_test(monkeypatch, FAKE_SOLVER)  # linear placements only
    with pytest.raises(NotApplicableError, match="does not apply to this problem: needs a linear placement"):
        compute_frontier(tiny_problem(2, 2, chunks=2, placement="vshape"))


LEVERS = {"fraction": 0.5, "bandwidth": {"d2h": 1, "h2d": 1}}


def _both_levers(**extra):
    # activation 1, of which a recomputed forward keeps 0.25; R lasts 1; offload up to half
    return tiny_problem(2, 3, offload=LEVERS, **extra).replace(recompute={"keep": 0.25, "time": 1})


def test_the_curves_take_the_levers_away(monkeypatch):
    seen: dict[str, set] = {}

    def recording(problem, options):
        seen.setdefault(curve_name(problem), set()).add((problem.can_offload, problem.can_recompute))
        return serial_schedule(problem, name="cpsat")

    register_for_test(monkeypatch, Method("cpsat", "solver", "test", "any", lambda p: None, recording))
    problem = _both_levers()
    frontier = compute_frontier(problem, capacities=[1.0, 2.0, None], time_limit=1, baselines=False)
    assert frontier.curves == ["no-lever", "recompute", "offload", "offload+recompute"]
    assert seen == {"offload+recompute": {(True, True)}, "offload": {(True, False)}, "recompute": {(False, True)},
                    "no-lever": {(False, False)}}
    for name in frontier.curves:
        assert [p.capacity for p in frontier.curve(name)] == [1.0, 2.0, None]
    # a problem that can only recompute: its curve and the one without
    only = tiny_problem(2, 3).replace(recompute={"keep": 0.25})
    assert [curve_name(p) for p in lever_variants(only)] == ["recompute", "no-lever"]
    assert compute_frontier(only, capacities=[1.0], time_limit=1, baselines=False).curves == ["no-lever", "recompute"]
    assert compute_frontier(problem, capacities=[1.0], time_limit=1, baselines=False,
                            compare=False).curves == ["offload+recompute"]


def test_three_curves_with_the_solver_on_a_tiny_problem(tmp_path):
    src = tmp_path / "p.json"
    src.write_text(json.dumps(_both_levers(name="tiny").to_dict()))
    out = tmp_path / "frontier.png"
    assert main(["frontier", str(src), "--points", "2", "--time-limit", "2", "--threads", "1", "--no-baselines",
                 "-o", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    points = read_frontier_points(tmp_path / "frontier.csv")
    names = ("offload+recompute", "offload", "recompute", "no-lever")
    curves = {name: [p for p in points if p.curve == name] for name in names}
    assert {p.curve for p in points} == set(curves)
    for name, curve in curves.items():
        assert curve[-1].capacity is None and all(p.valid for p in curve), name
    by_cap = {name: {p.capacity: p for p in curve} for name, curve in curves.items()}
    compared = 0
    for cap, point in by_cap["offload+recompute"].items():
        # the solve with both levers starts from the single-lever answers at its cap: never longer
        for name in ("offload", "recompute"):
            if cap in by_cap[name]:
                assert point.makespan <= by_cap[name][cap].makespan + 1e-9, (cap, name)
                compared += 1
    assert compared >= 2


def test_both_levers_start_from_the_single_lever_answers(monkeypatch):
    # a solver that returns the shortest schedule it is given to start from, else a serial one: the
    # point with both levers is then never longer than a single-lever point at its cap
    from ppsolve.schedule import Schedule
    from ppsolve.solvers.warm_start import shortest

    given = []

    def fake(problem, options):
        given.append(len(options.also_start_from))
        if options.also_start_from:
            best = shortest(list(options.also_start_from))
            return Schedule(problem, best.method, best.ops)
        return serial_schedule(problem, name="cpsat")

    register_for_test(monkeypatch, Method("cpsat", "solver", "test", "any", lambda p: None, fake))
    frontier = compute_frontier(_both_levers(), capacities=[2.0, None], time_limit=1, baselines=False)
    both = {p.capacity: p for p in frontier.curve("offload+recompute")}
    assert max(given) == 3  # offload only, recompute only and no lever at the same cap
    for name in ("offload", "recompute", "no-lever"):
        for point in frontier.curve(name):
            if point.capacity in both:
                assert both[point.capacity].makespan <= point.makespan + 1e-9


def test_a_csv_with_the_old_curve_name_reads_as_no_lever(tmp_path):
    path = tmp_path / "old.csv"
    path.write_text("curve,method,capacity,status,makespan,best_makespan,best_from,peak_memory,lower_bound,seconds,"
                    "valid,note\nno-offload,cpsat,2,optimal,18,18,2,2,18,0.02,yes,\n")
    assert [p.curve for p in read_frontier_points(path)] == ["no-lever"]
