"""Numbers too small or too large to compute with, odd strings and odd options: one line and exit 2 at
load, or handled; what ppsolve accepts it can write, and what it writes its own ``check`` reads back."""

from __future__ import annotations

import json

import pytest

from ppsolve.checker import check
from ppsolve.cli import main
from ppsolve.limits import MAX_MAGNITUDE, MAX_SCHEDULE_MAGNITUDE, MAX_TIME_RANGE, MIN_MAGNITUDE
from ppsolve.schedule import load_schedule
from tests.helpers import ROOT, problem_dict


def _write(tmp_path, data, name="p.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def _one_error(capsys, code: int, expected_code: int = 2) -> str:
    err = capsys.readouterr().err
    assert code == expected_code, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("tiny", [5e-324, 1e-300, 1e-13])
@pytest.mark.parametrize("where", ["time_forward", "memory_activation", "time_p2p"])
def test_a_tiny_number_beside_huge_ones_is_refused_at_load(tmp_path, capsys, tiny, where):
    data = problem_dict(time_backward_input=1e3, memory_capacity=1e12, **{where: tiny})
    path = _write(tmp_path, data)
    for command in (["bound", str(path)], ["baseline", str(path), "-m", "1f1b", "-o", str(tmp_path / "s.json")]):
        err = _one_error(capsys, main(command))
        assert f"problem.{where.replace('_', '.', 1)}: must be 0 or at least {MIN_MAGNITUDE:g}" in err


def test_durations_spanning_more_than_the_time_range_are_refused(tmp_path, capsys):
    """A reload of 1e-12 beside forwards of 1e12 vanished in float sums and deadlocked the runtime."""
    data = problem_dict(time_forward=[MIN_MAGNITUDE, MAX_MAGNITUDE], memory_capacity=MAX_MAGNITUDE,
                        offload={"bandwidth": {"d2h": 1, "h2d": MAX_MAGNITUDE}})
    err = _one_error(capsys, main(["baseline", str(_write(tmp_path, data)), "-m", "po-h",
                                   "-o", str(tmp_path / "s.json")]))
    assert f"beyond ppsolve's limit of {MAX_TIME_RANGE:g} between the shortest and the longest" in err
    assert "time.forward[1]" in err


def test_numbers_at_the_limits_together_give_schedules_that_pass_check(tmp_path, capsys):
    longest = MAX_MAGNITUDE / 10
    shortest = longest / MAX_TIME_RANGE
    data = problem_dict(devices=2, microbatches=3, time_forward=[shortest, longest],
                        time_backward_input=[shortest, longest], time_backward_weight=[shortest, 1e3],
                        memory_activation=[1, MIN_MAGNITUDE], memory_capacity=MAX_MAGNITUDE,
                        offload={"bandwidth": {"d2h": 1 / shortest, "h2d": 1 / shortest}, "fraction": [1, 0]})
    path = _write(tmp_path, data)
    assert main(["bound", str(path)]) == 0
    for method in ("1f1b", "zb-h1", "greedy", "po-h", "po-f"):
        out = tmp_path / f"{method}.json"
        assert main(["baseline", str(path), "-m", method, "-o", str(out)]) == 0, capsys.readouterr().err
        assert main(["check", str(out)]) == 0
    capsys.readouterr()


def test_times_beyond_the_problem_limit_in_a_written_schedule_are_read_back(tmp_path, capsys):
    """Every op at the problem limit: the makespan passes it, and the file ppsolve writes is one it reads."""
    path = _write(tmp_path, problem_dict(devices=4, microbatches=8, time_forward=MAX_MAGNITUDE,
                                         time_backward_input=MAX_MAGNITUDE, time_backward_weight=MAX_MAGNITUDE,
                                         time_p2p=MAX_MAGNITUDE))
    out = tmp_path / "s.json"
    assert main(["baseline", str(path), "-m", "gpipe", "-o", str(out)]) == 0
    assert main(["check", str(out)]) == 0
    schedule = load_schedule(out)
    assert MAX_MAGNITUDE < schedule.makespan <= MAX_SCHEDULE_MAGNITUDE and check(schedule).ok
    solved = tmp_path / "solved.json"
    assert main(["solve", str(path), "-o", str(solved), "--time-limit", "3", "--quiet"]) == 0
    assert main(["check", str(solved)]) == 0
    capsys.readouterr()


def test_a_schedule_time_beyond_the_schedule_limit_is_one_error(tmp_path, capsys):
    data = json.loads((ROOT / "docs/example/example-cpsat.json").read_text())
    data["ops"][0]["end"] = 10 * MAX_SCHEDULE_MAGNITUDE
    err = _one_error(capsys, main(["check", str(_write(tmp_path, data, "s.json"))]))
    assert "schedule.ops[0].end: must be at most 1e+18" in err


@pytest.mark.parametrize("objective", ["makespan", "memory"])
def test_a_placement_that_leaves_a_device_without_a_stage_is_scheduled(tmp_path, capsys, objective):
    path = _write(tmp_path, problem_dict(devices=3, placement=[2, 2, 1]))
    out = tmp_path / "s.json"
    assert main(["solve", str(path), "-o", str(out), "--time-limit", "3", "--quiet", "--objective", objective]) == 0
    schedule = load_schedule(out)
    assert check(schedule).ok and not [op for op in schedule.ops if op.device == 0]
    capsys.readouterr()


def test_a_solve_with_every_time_zero_writes_its_advice(tmp_path, capsys):
    path = _write(tmp_path, problem_dict(time_forward=0, time_backward_input=0, time_backward_weight=0))
    out = tmp_path / "s.json"
    assert main(["solve", str(path), "-o", str(out), "--time-limit", "3", "--quiet", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["makespan"] == 0 and summary["advice"]["best_published"]["faster_by"] == 0
    assert main(["solve", str(path), "-o", str(out), "--time-limit", "3", "--quiet"]) == 0
    assert "as fast as" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["problem.time.fo\nrward", "x\rbad\x1b[31m"])
def test_an_unknown_field_with_control_characters_is_one_line(tmp_path, capsys, name):
    data = problem_dict()
    data["time"][name.split(".")[-1]] = 1
    err = _one_error(capsys, main(["bound", str(_write(tmp_path, data))]))
    assert "unknown field" in err and "\\n" in err or "\\r" in err


def test_a_path_with_a_newline_is_one_line(tmp_path, capsys):
    err = _one_error(capsys, main(["bound", str(tmp_path / "no\nsuch.json")]))
    assert "no\\nsuch.json" in err


@pytest.mark.parametrize("unit", ["1e308", "inf", "nan", "0", "1e-300"])
def test_a_trace_unit_out_of_range_is_one_error(tmp_path, capsys, unit):
    schedule = ROOT / "docs/example/example-cpsat.json"
    err = _one_error(capsys, main(["export", str(schedule), "--to", "chrome-trace", "--unit-us", unit,
                                   "-o", str(tmp_path / "t.json")]))
    assert "--unit-us: must be between" in err


@pytest.mark.parametrize("limit", ["-5", "0", "1e308x", "1e308", "inf", "nanx", "abc"])
def test_a_bad_makespan_limit_exits_2_before_any_work(tmp_path, capsys, limit):
    err = _one_error(capsys, main(["solve", str(ROOT / "instances/example.json"), "-o", str(tmp_path / "s.json"),
                                   "--objective", "memory", "--makespan-limit", limit, "--quiet"]))
    assert "makespan-limit: must be" in err
    assert not (tmp_path / "s.json").exists()


def test_a_huge_makespan_limit_within_range_constrains_nothing(tmp_path, capsys):
    out = tmp_path / "s.json"
    assert main(["solve", str(ROOT / "instances/example.json"), "-o", str(out), "--objective", "memory",
                 "--makespan-limit", "1e18x", "--time-limit", "3", "--quiet"]) == 0
    assert check(load_schedule(out)).ok
    capsys.readouterr()


@pytest.mark.parametrize("argv", [
    ["solve", "instances/example.json", "-o", "{tmp}/s.json", "--time-limit", "1e308"],
    ["solve", "instances/example.json", "-o", "{tmp}/s.json", "--time-limit", "nan"],
    ["bench", "instances/example.json", "--time-limit", "1e10", "--out", "{tmp}/bench"],
    ["frontier", "instances/example.json", "--time-limit", "inf", "-o", "{tmp}/f.png"],
    ["bound", "instances/example.json", "--split", "1e308"],
])
def test_a_time_limit_ppsolve_could_not_write_back_is_one_error(tmp_path, capsys, argv):
    """A solve's time limit goes into its file (method.params): 1e308 made a schedule check refused."""
    argv = [str(ROOT / a) if a.startswith("instances/") else a.replace("{tmp}", str(tmp_path)) for a in argv]
    err = _one_error(capsys, main(argv))
    assert "must be > 0 seconds and at most 1e+09" in err


def test_ignore_capacity_below_one_activation_writes_a_finite_bound(tmp_path, capsys):
    """No schedule fits such a cap, so its bound is infinite: the file takes the bound without the cap."""
    path = _write(tmp_path, problem_dict(devices=1, microbatches=2, memory_capacity=0.5))
    out = tmp_path / "s.json"
    assert main(["baseline", str(path), "-m", "1f1b", "-o", str(out), "--ignore-capacity"]) == 0
    method = json.loads(out.read_text())["method"]
    assert method["lower_bound"] == 6  # two microbatches of F, B, W of 1 each on one device
    assert {v.rule for v in check(load_schedule(out)).violations} <= {"memory", "retime"}
    capsys.readouterr()
