"""Inputs that once gave a traceback or a wrong answer get a clean one: ``problem --gpu ''``;
``export`` of an invalid schedule (missing F, R after its B, R ops only) answers as ``check`` does
(exit 1, one line) and writes nothing; ``export --to torch`` of a valid schedule with a zero-length
forward; the greedy baseline and solve's warm start on a V-shape with a stage of zero activation."""

from __future__ import annotations

import json

import pytest

from ppsolve.baselines.common import with_recompute
from ppsolve.checker import check
from ppsolve.cli import main
from ppsolve.export.torch_replay import parse_rows, replay
from tests.helpers import ROOT, make_problem, one_f_one_b_orders, schedule_from_orders, serial_orders

LLAMA = ROOT / "models" / "transformers" / "llama-1b-like.json"


@pytest.mark.parametrize("args, message", [
    (["--gpu", ""], "--gpu: unknown GPU ''"),
    (["--hardware", ""], "--hardware: no file given"),
])
def test_problem_with_an_empty_gpu_or_hardware_is_one_line(tmp_path, capsys, args, message):
    out = tmp_path / "p.json"
    assert main(["problem", str(LLAMA), "--devices", "2", "--microbatches", "2", "-o", str(out), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not out.exists()


def _valid_with_recompute():
    problem = make_problem(devices=2, microbatches=2, recompute={"keep": 0.5})
    return schedule_from_orders(problem, with_recompute(one_f_one_b_orders(problem), {(0, 0)}))


def _without_f(data: dict) -> dict:
    data["ops"] = [op for op in data["ops"] if (op["kind"], op["stage"], op["microbatch"]) != ("F", 1, 1)]
    return data


def _r_after_its_b(data: dict) -> dict:
    r = next(op for op in data["ops"] if op["kind"] == "R")
    end = max(op["end"] for op in data["ops"])
    r["start"], r["end"] = end, end + (r["end"] - r["start"])
    return data


def _r_only(data: dict) -> dict:
    data["ops"] = [op for op in data["ops"] if op["kind"] == "R"]
    return data


@pytest.mark.parametrize("damage", [_without_f, _r_after_its_b, _r_only])
@pytest.mark.parametrize("to", ["torch", "chrome-trace"])
def test_export_refuses_an_invalid_schedule_as_check_does(tmp_path, capsys, damage, to):
    path, out = tmp_path / "s.json", tmp_path / "out"
    path.write_text(json.dumps(damage(_valid_with_recompute().to_dict())))
    assert main(["check", str(path)]) == 1
    capsys.readouterr()
    assert main(["export", str(path), "--to", to, "-o", str(out)]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    assert "INVALID, not exported" in captured.err and "ppsolve check" in captured.err
    assert not out.exists() and not out.with_suffix(".plan.json").exists()


def test_export_to_torch_accepts_a_zero_length_forward(tmp_path, capsys):
    # stages 0..3 on devices 1, 0, 1, 0; stage 1's F lasts 0, so F(1,j) ends when F(0,j) does: the
    # channel between the two ranks must still carry F(0,j)'s message before F(1,j)'s
    problem = make_problem(devices=2, microbatches=2, chunks=2, placement=[1, 0, 1, 0],
                           time={"forward": [1, 0, 1, 1], "backward_input": 1, "backward_weight": 1})
    schedule = schedule_from_orders(problem, serial_orders(problem))
    assert check(schedule).ok
    path, out = tmp_path / "s.json", tmp_path / "s.csv"
    schedule.save(path)
    assert main(["export", str(path), "--to", "torch", "-o", str(out)]) == 0
    rows = out.read_text().splitlines()
    assert rows[1].index("0SEND_F0") < rows[1].index("2RECV_F0")  # rank 1: stage 0's send, then stage 2's receive
    assert rows[0].index("1RECV_F0") < rows[0].index("1SEND_F0")
    replay(parse_rows(out.read_text()))


def test_greedy_and_the_warm_start_on_a_vshape_with_a_zero_activation(tmp_path, capsys):
    problem = make_problem(devices=2, microbatches=4, chunks=2, placement="vshape",
                           memory={"activation": [1, 0, 1, 1], "weight_hold": 0, "capacity": 2},
                           offload={"bandwidth": {"d2h": 1, "h2d": 1}})
    path = tmp_path / "p.json"
    path.write_text(json.dumps(problem.to_dict()))
    assert main(["baseline", str(path), "--method", "greedy", "-o", str(tmp_path / "g.json")]) == 0
    assert main(["check", str(tmp_path / "g.json")]) == 0
    assert main(["solve", str(path), "-o", str(tmp_path / "s.json"), "--time-limit", "2", "--threads", "1",
                 "--quiet"]) == 0
    assert main(["check", str(tmp_path / "s.json")]) == 0
