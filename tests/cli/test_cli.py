"""The foundation's CLI: schema, bound, check, and the bundled instances."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from ppsolve.cli import main
from ppsolve.problem import load_problem
from ppsolve.schemas import load_schema
from tests.helpers import make_problem, one_f_one_b_orders, schedule_from_orders
from tests.helpers import ROOT

INSTANCES = sorted((ROOT / "instances").glob("*.json"))


def test_schema_command_prints_valid_json_schemas(capsys):
    for which in ("problem", "schedule"):
        assert main(["schema", which]) == 0
        schema = json.loads(capsys.readouterr().out)
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema == load_schema(which)


def test_instances_are_valid_and_varied():
    assert len(INSTANCES) >= 12
    problems = [load_problem(p) for p in INSTANCES]
    assert {p.placement_name for p in problems} >= {"linear", "interleaved", "vshape"}
    assert {p.backward_mode for p in problems} == {"split", "fused"}
    assert any(p.can_offload and p.offload.links_given for p in problems)
    assert any(p.can_offload and not p.offload.links_given for p in problems)
    assert any(p.p2p > 0 for p in problems) and any(len(set(p.forward)) > 1 for p in problems)
    assert any(all(c is None for c in p.capacity) for p in problems)
    schema = load_schema("problem")
    for path in INSTANCES:
        jsonschema.validate(json.loads(path.read_text()), schema)


def test_bound_json(capsys):
    assert main(["bound", str(INSTANCES[0]), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["makespan_lower_bound"] > 0 and data["feasible"] in (True, False)
    assert len(data["min_capacity"]["no_offload"]) == load_problem(INSTANCES[0]).devices
    figures = [data[key] for key in ("device_bounds", "memory_bounds", "idle_bounds", "admission_bounds",
                                     "sequence_bounds")]
    assert data["makespan_lower_bound"] == pytest.approx(max(max(f) for f in figures + [[data["critical_path"]]]))


def _write_schedule(tmp_path, schedule) -> Path:
    path = tmp_path / "s.json"
    schedule.save(path)
    return path


def test_check_exit_codes_and_json(tmp_path, capsys):
    problem = make_problem(devices=3, microbatches=4)
    good = _write_schedule(tmp_path, schedule_from_orders(problem, one_f_one_b_orders(problem)))
    assert main(["check", str(good)]) == 0
    assert "valid and executable" in capsys.readouterr().out
    assert main(["check", str(good), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) >= {"valid", "executable", "violations", "makespan", "peak_memory", "bubble_ratio",
                           "offloaded", "retimed"}
    assert report["valid"] and report["executable"] and report["retimed"]["makespan"] == report["makespan"]

    data = json.loads(good.read_text())
    data["ops"][3]["start"] -= 0.5
    data["ops"][3]["end"] -= 0.5
    good.write_text(json.dumps(data))
    assert main(["check", str(good)]) == 1
    out = capsys.readouterr().out
    assert "INVALID" in out and "[R" in out
    assert main(["check", str(good), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["valid"] is False


def test_console_entry_point_runs_as_a_module(tmp_path):
    result = subprocess.run([sys.executable, "-m", "ppsolve", "bound", str(tmp_path / "missing.json")],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.strip() == f"ppsolve bound: error: problem: file not found: {tmp_path / 'missing.json'}"


def test_saved_schedule_round_trips(tmp_path):
    from ppsolve.schedule import load_schedule
    problem = make_problem(devices=2, microbatches=2, **{"x-team": "a"})
    schedule = schedule_from_orders(problem, one_f_one_b_orders(problem))
    loaded = load_schedule(_write_schedule(tmp_path, schedule))
    assert sorted(loaded.ops) == sorted(schedule.ops)
    assert loaded.problem == schedule.problem and loaded.makespan == schedule.makespan


@pytest.mark.parametrize("path", INSTANCES, ids=[p.stem for p in INSTANCES])
def test_bound_runs_on_every_instance(path, capsys):
    assert main(["bound", str(path)]) == 0
    assert "makespan >=" in capsys.readouterr().out


def test_atomic_write_leaves_no_partial_file_and_keeps_normal_permissions(tmp_path):
    import os
    import stat

    from ppsolve.jsonio import write_text_atomic

    target = tmp_path / "out.json"
    write_text_atomic(target, "old")

    class Boom(Exception):
        pass

    import ppsolve.jsonio as jsonio
    original = jsonio.os.fsync
    jsonio.os.fsync = lambda fd: (_ for _ in ()).throw(Boom())
    try:
        with pytest.raises(Boom):
            write_text_atomic(target, "new")
    finally:
        jsonio.os.fsync = original
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask


def test_offload_is_described_per_stage():
    from tests.helpers import serial_orders
    problem = make_problem(devices=2, microbatches=4, offload={"bandwidth": {"d2h": 1, "h2d": 1}})
    orders = serial_orders(problem, offload=True)
    keep = {(0, 0), (0, 1), (0, 3), (1, 2)}
    orders = [[op for op in order if op.kind.is_compute or (op.stage, op.microbatch) in keep] for order in orders]
    schedule = schedule_from_orders(problem, orders)
    assert schedule.offloaded_by_stage() == {0: [0, 1, 3], 1: [2]}
    assert schedule.describe_offload() == "stage 0: microbatches 0-1, 3; stage 1: microbatches 2"


@pytest.mark.parametrize("argv", [
    ["export", "{s}", "--to", "chrome-trace", "-o", "{bad}"],
    ["plot", "{s}", "-o", "{bad}.png"],
    ["solve", "{p}", "-o", "{bad}", "--time-limit", "2", "--quiet"],
])
def test_unwritable_output_is_one_line(tmp_path, capsys, argv):
    problem = make_problem(devices=2, microbatches=2)
    schedule_path = _write_schedule(tmp_path, schedule_from_orders(problem, one_f_one_b_orders(problem)))
    problem_path = tmp_path / "p.json"
    problem_path.write_text(json.dumps(problem.to_dict()))
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    args = [a.format(s=schedule_path, p=problem_path, bad=blocker / "out.json") for a in argv]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot write" in err and "Traceback" not in err
