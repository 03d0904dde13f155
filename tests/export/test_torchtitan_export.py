"""``ppsolve export --to torchtitan``: the schedule name whose rank map is the placement (checked
against torchtitan's own mapping where it is installed), the model parts of the problem's
partition, what torchtitan cannot express, and the timed replay of PyTorch's placement of the
sends and receives against the plan (a case derived by hand where it delays the plan)."""

from __future__ import annotations

import json

import pytest

from ppsolve.cli import main
from ppsolve.errors import NotApplicableError
from ppsolve.export.torch_lowering import timing
from ppsolve.export.torch_replay import parse_rows, replay_times
from ppsolve.export.torchtitan import INSTALL, model_parts, schedule_name
from ppsolve.methods import RunOptions, run_method
from ppsolve.problem import problem_from_dict
from tests.executor.helpers import mixed_levers, pipelined_orders, problem
from tests.helpers import schedule_from_orders

TORCHTITAN = INSTALL


def _problem(devices=2, microbatches=4, chunks=1, placement="linear", forward=1, p2p=0, **extra):
    data = {"format": "ppsolve/problem@1", "devices": devices, "microbatches": microbatches, "chunks": chunks,
            "placement": placement, "backward": "split",
            "time": {"forward": forward, "backward_input": 1, "backward_weight": 1, "p2p": p2p},
            "memory": {"activation": 1, "weight_hold": 1, "capacity": None}, **extra}
    return problem_from_dict(data)


def _delayed():
    """1F1B on 2 devices, stage 0's forward 3, everything else 1, p2p 0.5. Rank 1 sends B(1,0) at 5.5,
    it arrives at 6 = F(0,1)'s end, when the plan starts I(0,0). PyTorch's lowering walks the ranks
    round-robin and puts F(0,1)'s message (sent at 6, arriving at 6.5) first in the ranks' channel, so
    B(1,0) arrives at 6.5: rank 0 starts 0.5 late, and each of the two later F(0,j) after an I waits for
    the message ahead of it the same way: 21 planned, 22 under PyTorch's placement."""
    return run_method("1f1b", _problem(forward=[3, 1], p2p=0.5), RunOptions())


@pytest.mark.parametrize("devices,chunks,placement,name", [
    (2, 1, "linear", "1F1B"), (4, 1, "linear", "1F1B"), (2, 2, "interleaved", "Interleaved1F1B"),
    (3, 3, "interleaved", "Interleaved1F1B"), (2, 2, "vshape", "ZBVZeroBubble"), (4, 2, "vshape", "ZBVZeroBubble"),
    (2, 2, [0, 1, 1, 0], "ZBVZeroBubble"), (2, 2, [0, 1, 0, 1], "Interleaved1F1B")])
def test_the_schedule_name_maps_stages_to_ranks_as_the_placement(devices, chunks, placement, name):
    prob = _problem(devices=devices, chunks=chunks, placement=placement)
    assert schedule_name(prob) == name
    pp = pytest.importorskip("torchtitan.distributed.pipeline_parallel", reason=f"torchtitan absent: {TORCHTITAN}")
    for rank in range(devices):
        mapped = pp._get_pp_rank_to_stage_indices_mapping(rank, devices, name, prob.num_stages)
        assert sorted(mapped) == sorted(prob.stages_of_device[rank])


@pytest.mark.parametrize("chunks,placement,says", [
    (4, "vshape", "V with 4 stages per rank"), (2, [0, 0, 1, 1], "neither loop style"),
    (2, [0, 1, 0, 0], "ranks run 1 to 3 stages")])
def test_what_torchtitan_cannot_express_is_one_line_naming_what_would(tmp_path, capsys, chunks, placement, says):
    prob = _problem(chunks=chunks, placement=placement)
    with pytest.raises(NotApplicableError, match=says):
        schedule_name(prob)
    schedule_from_orders(prob, pipelined_orders(prob, lag=1)).save(tmp_path / "s.json")
    assert main(["export", str(tmp_path / "s.json"), "--to", "torchtitan", "-o", str(tmp_path / "tt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "use" in err and not (tmp_path / "tt").exists()


def test_model_parts_follow_the_problems_partition():
    prob = _problem(devices=2, chunks=2, placement="interleaved", **{"x-partition": {"layers": [1, 3, 2, 2]}})
    assert model_parts(prob) == [["tok_embeddings", "layers.0"], ["layers.1", "layers.2", "layers.3"],
                                 ["layers.4", "layers.5"], ["layers.6", "layers.7", "norm", "lm_head"]]
    assert model_parts(_problem()) is None


def test_timed_replay_by_hand():
    rows = parse_rows("0F0,0SEND_F0,0F1,0SEND_F1\n1RECV_F0,1RECV_F1,1F0,1F1\n")
    durations = {"0F0": 3, "0F1": 3, "1F0": 1, "1F1": 1}
    ends = replay_times(rows, lambda r, a: durations.get(str(a), 0), lambda s, t, j: 0.5)
    assert ends == [6, 7.5]  # 1F0 at 3.5 (3 + 0.5), 1F1 at max(4.5, 6.5)


def test_ppsolves_placement_replays_as_planned_and_pytorchs_delays_the_hand_derived_case():
    cases = [run_method("1f1b", problem(3, 6), RunOptions()), run_method("zb-h1", problem(2, 4), RunOptions()),
             run_method("zb-v", problem(2, 4, chunks=2, placement="vshape"), RunOptions()),
             run_method("interleaved-1f1b", problem(2, 4, chunks=2, placement="interleaved"), RunOptions())]
    for schedule in cases:
        assert timing(schedule).ppsolve == schedule.makespan
    pytest.importorskip("torch", reason="PyTorch's lowering is PyTorch's own code")
    for schedule in cases:
        assert timing(schedule).pytorch == schedule.makespan  # uniform costs: its order is the plan's
    t = timing(_delayed())
    assert (t.planned, t.ppsolve, t.pytorch, t.delayed) == (21, 21, 22, True)


def test_a_plan_with_both_levers_times_its_recomputes(tmp_path):
    m = 4
    prob = problem(2, m, chunks=2, placement="vshape", offload=True, keep=0.25, duplex=False)
    pairs = [(s, j) for s in range(prob.num_stages) for j in range(m)]
    schedule = mixed_levers(prob, pipelined_orders(prob, lag=2, w_delay=1),
                            {p for p in pairs if sum(p) % 3 == 0}, {p for p in pairs if sum(p) % 3 == 1})
    assert schedule.offloaded and schedule.recomputed
    assert timing(schedule).ppsolve <= schedule.makespan


def test_export_writes_the_files_and_prints_the_configuration(tmp_path, capsys):
    path, out = tmp_path / "s.json", tmp_path / "tt"
    _delayed().save(path)
    assert main(["export", str(path), "--to", "torchtitan", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["schedule.comms.csv", "schedule.csv", "schedule.plan.json",
                                                     "torchtitan.args", "torchtitan_config.py"]
    assert {a.kind for row in parse_rows((out / "schedule.csv").read_text()) for a in row} == {"F", "I", "W"}
    assert json.loads((out / "schedule.plan.json").read_text())["format"] == "ppsolve/torch-plan@1"
    assert "planned 21" in printed and "(what torchtitan loads) 22 (+4.8%)" in printed
    assert f"comms='{(out / 'schedule.comms.csv').resolve()}'" in printed
    args = (out / "torchtitan.args").read_text().split()
    assert args[args.index("--parallelism.pipeline_parallel_schedule") + 1] == "1F1B"
    assert args[args.index("--training.local_batch_size") + 1] == "4"
    namespace: dict = {}
    exec((out / "torchtitan_config.py").read_text(), namespace)  # the fragment sets the fields

    class Config:
        class parallelism:
            pass

        class training:
            pass

    namespace["apply_ppsolve_pipeline"](Config)
    assert Config.parallelism.pipeline_parallel_schedule_csv == str((out / "schedule.csv").resolve())
    assert Config.parallelism.pipeline_parallel_degree == 2 and Config.training.local_batch_size == 4


def test_no_comms_file_where_pytorchs_placement_keeps_the_plan(tmp_path, capsys):
    pytest.importorskip("torch", reason="PyTorch's lowering is PyTorch's own code")
    path, out = tmp_path / "s.json", tmp_path / "tt"
    run_method("zb-v", problem(2, 4, chunks=2, placement="vshape"), RunOptions()).save(path)
    assert main(["export", str(path), "--to", "torchtitan", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert not (out / "schedule.comms.csv").exists() and "comms=" not in printed
    assert "ZBVZeroBubble" in printed and "(+0.0%)" in printed


def test_running_on_torchtitan_without_it_is_one_line_saying_how_to_install(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    import importlib.util

    from tests.executor.helpers import MODELS

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torchtitan" else real(name, *a))
    path = tmp_path / "s.json"
    _delayed().save(path)
    assert main(["run", str(path), "--model", str(MODELS / "gpt-tiny.json"), "--runtime", "torchtitan"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install --no-deps torchtitan==0.3.0" in err


def test_without_torch_the_export_says_pytorchs_placement_was_not_replayed(tmp_path, capsys, monkeypatch):
    import ppsolve.export.torch_lowering as lowering

    def no_torch(*args):
        raise ImportError("No module named 'torch'")

    monkeypatch.setattr(lowering, "pytorch_rows", no_torch)
    path, out = tmp_path / "s.json", tmp_path / "tt"
    _delayed().save(path)
    assert main(["export", str(path), "--to", "torchtitan", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "planned 21, replayed with ppsolve's sends and receives 21; PyTorch's own placement not replayed" in printed
    assert not (out / "schedule.comms.csv").exists()
