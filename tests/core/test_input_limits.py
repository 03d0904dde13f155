"""Typos, oversized and overflowing inputs: one line naming the field or the limit, exit 2, at once."""

from __future__ import annotations

import json
import time

import pytest

from ppsolve.cli import main
from ppsolve.limits import MAX_CHUNKS, MAX_DEPTH, MAX_DEVICES, MAX_MICROBATCHES, MAX_OPS
from tests.helpers import make_problem, problem_dict, schedule_from_orders, serial_orders


def _bad(tmp_path, capsys, content, command="bound"):
    path = tmp_path / "in.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    argv = [command, str(path)] + (["-o", str(tmp_path / "out.json")] if command in ("solve", "baseline") else [])
    if command == "baseline":
        argv += ["--method", "1f1b"]
    started = time.perf_counter()
    code = main(argv)
    elapsed = time.perf_counter() - started
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err, elapsed


def _time_typo() -> dict:
    data = problem_dict()
    data["time"]["foward"] = data["time"].pop("forward")
    return data


@pytest.mark.parametrize("content,expected", [
    (_time_typo(), "problem.time.foward: unknown field (did you mean 'forward'?)"),
    (problem_dict(devcies=2), "problem.devcies: unknown field (did you mean 'devices'?)"),
    (problem_dict(zzz=2), "problem.zzz: unknown field (expected one of:"),
])
def test_unknown_field_names_the_close_match(tmp_path, capsys, content, expected):
    err, _ = _bad(tmp_path, capsys, content)
    assert expected in err


@pytest.mark.parametrize("field,limit", [("devices", MAX_DEVICES), ("microbatches", MAX_MICROBATCHES),
                                         ("chunks", MAX_CHUNKS)])
@pytest.mark.parametrize("command", ["bound", "baseline", "solve"])
def test_counts_past_the_limit_are_refused_at_once(tmp_path, capsys, field, limit, command):
    content = problem_dict(**{field: 10 ** 12}, placement="interleaved")
    err, elapsed = _bad(tmp_path, capsys, content, command)
    assert f"problem.{field}: must be <= {limit}" in err
    assert elapsed < 1.0


@pytest.mark.parametrize("command", ["bound", "baseline", "solve"])
def test_op_count_past_the_limit_is_refused_at_once(tmp_path, capsys, command):
    content = problem_dict(devices=MAX_DEVICES, microbatches=MAX_OPS // MAX_DEVICES)  # x 3 kinds > limit
    err, elapsed = _bad(tmp_path, capsys, content, command)
    assert f"ppsolve's limit is {MAX_OPS}" in err
    assert elapsed < 1.0


@pytest.mark.parametrize("text,expected", [
    (json.dumps(problem_dict(time_forward=1e308)), "problem.time.forward: must be at most 1e+12 in magnitude"),
    (json.dumps(problem_dict(offload={"bandwidth": {"d2h": 1e-300, "h2d": 1}})),
     "problem.offload.bandwidth.d2h: must be 0 or at least 1e-12 in magnitude"),
    (json.dumps(problem_dict(memory_activation=100, offload={"bandwidth": {"d2h": 1e-11, "h2d": 1}})),
     "problem.offload.bandwidth.d2h: too small: moving 100 would take 1e+13"),
    (json.dumps(problem_dict(memory_activation=[1, 10 ** 400])), "problem.memory.activation[1]: must be at most"),
    (json.dumps(problem_dict(time_p2p=1e13)), "problem.time.p2p: must be at most"),
    (json.dumps(problem_dict(devices=10 ** 3000)), "problem.devices: must be at most"),
    (json.dumps(problem_dict()).replace('"devices": 2', '"devices": ' + "9" * 5000), "number too long to read"),
    (json.dumps(problem_dict(time_forward=[float("nan"), 1])), "problem.time.forward[0]: must be a finite number"),
    (json.dumps(problem_dict(memory_capacity=float("inf"))), "problem.memory.capacity: must be a finite number"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    (json.dumps(problem_dict(**{"x-deep": json.loads("[" * 200 + "]" * 200)})),
     f"is nested deeper than {MAX_DEPTH} levels"),
])
def test_numbers_and_nesting_that_overflow_are_named(tmp_path, capsys, text, expected):
    err, _ = _bad(tmp_path, capsys, text)
    assert expected in err


def test_offload_ops_without_an_offload_block_are_refused_at_load(tmp_path, capsys):
    with_offload = make_problem(offload={"bandwidth": {"d2h": 1, "h2d": 1}})
    data = schedule_from_orders(with_offload, serial_orders(with_offload, offload=True)).to_dict()
    del data["problem"]["offload"]
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data))
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    index = next(i for i, op in enumerate(data["ops"]) if op["kind"] in ("OFFLOAD", "RELOAD"))
    assert f"schedule.ops[{index}].kind: {data['ops'][index]['kind']} needs an offload block" in err
    assert err.count("\n") == 1


def test_misspelled_option_prints_the_subcommand_usage_and_a_suggestion(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["solve", "p.json", "-o", "s.json", "--time-limt", "3"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: ppsolve solve")
    assert "did you mean '--time-limit'?" in err


def test_misspelled_command_suggests_the_close_one(capsys):
    with pytest.raises(SystemExit):
        main(["slove", "p.json"])
    assert "did you mean 'solve'?" in capsys.readouterr().err


def test_makespan_limit_needs_the_memory_objective(tmp_path, capsys):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(problem_dict()))
    assert main(["solve", str(path), "-o", str(tmp_path / "s.json"), "--makespan-limit", "10"]) == 2
    assert "--makespan-limit: applies only with --objective memory" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["solve", "baseline"])
def test_output_into_a_missing_directory_is_an_error(tmp_path, capsys, command):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(problem_dict()))
    target = tmp_path / "missing" / "s.json"
    argv = [command, str(path), "-o", str(target)] + (["--method", "1f1b"] if command == "baseline" else [])
    assert main(argv) == 2
    assert f"directory {tmp_path / 'missing'} does not exist" in capsys.readouterr().err
    assert not target.parent.exists()


def test_infeasible_capacity_on_many_devices_is_one_short_line(tmp_path, capsys):
    content = problem_dict(devices=16, microbatches=4, memory_capacity=0.1)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(content))
    assert main(["solve", str(path), "-o", str(tmp_path / "s.json"), "--quiet"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < 200
    assert "device 0 needs at least 1" in err and "15 other device(s) too" in err


@pytest.mark.parametrize("command", ["check", "plot", "export", "frontier", "run"])
def test_other_commands_refuse_a_too_large_problem_at_once(tmp_path, capsys, command):
    big = problem_dict(devices=100000)
    path = tmp_path / "in.json"
    content = big if command == "frontier" else {"format": "ppsolve/schedule@1", "problem": big, "ops": []}
    path.write_text(json.dumps(content))
    argv = {"check": [], "plot": ["-o", str(tmp_path / "g.png")], "export": ["--to", "torch", "-o", str(tmp_path / "t")],
            "frontier": ["-o", str(tmp_path / "f.png")], "run": ["--model", "models/gpt-tiny.json"]}[command]
    started = time.perf_counter()
    assert main([command, str(path), *argv]) == 2
    assert time.perf_counter() - started < 1.0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "problem.devices: must be <= 1024" in err
