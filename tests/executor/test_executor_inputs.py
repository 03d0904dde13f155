"""Refusals before any process starts, model files, and the torch CSV export."""

from __future__ import annotations

import json

import pytest

from tests.executor.helpers import MODELS, add_offload, make, pipelined_orders, problem

from ppsolve.errors import InputError
from ppsolve.executor.spec import load_model_spec, model_from_dict
from ppsolve.export.torch_csv import to_torch_csv


def test_model_files_load_and_split_evenly():
    spec = load_model_spec(MODELS / "gpt-tiny.json")
    assert [list(r) for r in spec.layers_of_stages(2)] == [[0, 1], [2, 3]]
    with pytest.raises(InputError, match="cannot be spread evenly over 3 stages"):
        spec.layers_of_stages(3)
    with pytest.raises(InputError, match="cannot be cut into 8 stages"):
        spec.layers_of_stages(8)


@pytest.mark.parametrize("change, field", [({"kind": "rnn"}, "model.kind"), ({"hidden": 0}, "model.hidden"),
                                           ({"heads": 3}, "model.heads"), ({"hiden": 3}, "model.hiden"),
                                           ({"layers": "4"}, "model.layers")])
def test_bad_model_fields_are_named(change, field):
    data = json.loads((MODELS / "gpt-tiny.json").read_text())
    data.update(change)
    with pytest.raises(InputError) as info:
        model_from_dict(data)
    assert info.value.field == field


def test_torch_csv_rows_and_actions():
    prob = problem(2, 3, chunks=2, placement="vshape")
    schedule = make(prob, pipelined_orders(prob, lag=1), "v")
    rows = to_torch_csv(schedule).splitlines()
    assert len(rows) == 2
    cells = [row.split(",") for row in rows]
    assert all(len(c) == 2 * 3 * 3 for c in cells)  # 2 stages x 3 microbatches x (F, I, W) per rank
    assert cells[0][0] == "0F0" and "3I0" in cells[0] and "1W2" in cells[1]
    fused = problem(2, 2, split=False)
    assert to_torch_csv(make(fused, pipelined_orders(fused, lag=0), "f")).splitlines()[1] == "1F0,1B0,1F1,1B1"


def test_torch_csv_is_accepted_by_torch_validation():
    torch = pytest.importorskip("torch")  # noqa: F841
    from torch.distributed.pipelining.schedules import _Action, _validate_schedule

    prob = problem(4, 4, chunks=2, placement="interleaved")
    schedule = make(prob, pipelined_orders(prob, lag=3, w_delay=1), "i")
    actions = {rank: [_Action.from_str(cell) for cell in row.split(",")]
               for rank, row in enumerate(to_torch_csv(schedule).splitlines())}
    mapping = _validate_schedule(actions, 4, 8, 4)
    assert mapping == {s: s % 4 for s in range(8)}


def test_compute_only_csv_of_an_offload_schedule_keeps_the_compute_actions():
    prob = problem(2, 2, offload=True)
    orders = add_offload(prob, pipelined_orders(prob, lag=1), {(0, 0)})
    rows = to_torch_csv(make(prob, orders, "off")).splitlines()
    assert rows == to_torch_csv(make(prob, pipelined_orders(prob, lag=1), "plain")).splitlines()


def test_refused_before_start(tmp_path):
    pytest.importorskip("torch")
    from ppsolve.executor.api import prepare

    prob = problem(2, 2)
    schedule = make(prob, pipelined_orders(prob, lag=1), "x")
    data = json.loads((MODELS / "gpt-tiny.json").read_text())
    data["layers"] = 3
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps(data))
    with pytest.raises(InputError, match="3 layers cannot be spread evenly over 2 stages"):
        prepare(schedule, odd, None, "ppsolve")
    with pytest.raises(InputError, match="schedule is for 2 devices but 4 ranks"):
        prepare(schedule, MODELS / "gpt-tiny.json", 4, "ppsolve")


def test_cli_refuses_with_one_line(tmp_path, capsys):
    pytest.importorskip("torch")
    from ppsolve.cli import main

    prob = problem(2, 2, offload=True)
    path = tmp_path / "s.json"
    make(prob, add_offload(prob, pipelined_orders(prob, lag=1), {(0, 0)}), "off").save(path)
    assert main(["run", str(path), "--model", str(MODELS / "missing.json"), "--runtime", "torch"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing.json" in err[0]
    assert main(["run", str(path), "--model", str(MODELS / "missing.json")]) == 2


def test_recorded_partition_decides_the_stages_and_must_fit_the_model():
    spec = load_model_spec(MODELS / "gpt-tiny.json")
    assert [list(r) for r in spec.blocks_of_stages(3, {"x-partition": {"layers": [1, 2, 1]}})] == [[0], [1, 2], [3]]
    assert [list(r) for r in spec.blocks_of_stages(2, {})] == [[0, 1], [2, 3]]
    with pytest.raises(InputError) as info:
        spec.blocks_of_stages(3, {"x-partition": {"layers": [2, 2, 2]}})
    assert info.value.field == "problem.x-partition.layers"
