"""Every kind of bad input gets one clear line naming the field, exit code 2, no traceback."""

from __future__ import annotations

import json

import pytest

from ppsolve.cli import main
from tests.helpers import make_problem, problem_dict, schedule_from_orders, serial_orders

BAD_PROBLEMS = [
    # (file content, expected message fragment)
    ("not json", "is not valid JSON"),
    ("", "is empty"),
    ("[1, 2]", "problem: must be a JSON object, got a list"),
    (problem_dict(format="ppsolve/problem@2"), 'problem.format: must be "ppsolve/problem@1"'),
    ({k: v for k, v in problem_dict().items() if k != "devices"}, "problem.devices: is required"),
    (problem_dict(devices="4"), "problem.devices: must be integer, got a string"),
    (problem_dict(devices=0), "problem.devices: must be >= 1, got 0"),
    (problem_dict(microbatches=-2), "problem.microbatches: must be >= 1, got -2"),
    (problem_dict(chunks=0), "problem.chunks: must be >= 1, got 0"),
    (problem_dict(time_forward=[1, -1]), "problem.time.forward[1]: must be >= 0, got -1"),
    (problem_dict(time_backward_input=-3), "problem.time.backward_input: must be >= 0, got -3"),
    (problem_dict(time_forward=[1, 2, 3]), "problem.time.forward: must have 2 entries (one per stage), got 3"),
    (problem_dict(memory_activation=[1]), "problem.memory.activation: must have 2 entries"),
    (problem_dict(memory_capacity=[1, 2, 3]), "problem.memory.capacity: must have 2 entries (one per device)"),
    (problem_dict(memory_weight_hold=2), "problem.memory.weight_hold: must be <= activation (1) of stage 0, got 2"),
    (problem_dict(memory_weight_hold=[0, 5]), "problem.memory.weight_hold[1]: must be <= activation"),
    (problem_dict(placement="zigzag"), 'problem.placement: must be one of "linear", "interleaved", "vshape"'),
    (problem_dict(chunks=3, placement="vshape"), "problem.placement: 'vshape' needs an even number of chunks"),
    (problem_dict(chunks=2), "problem.placement: 'linear' needs chunks = 1"),
    (problem_dict(placement=[0]), "problem.placement: must list 2 devices"),
    (problem_dict(placement=[0, 5]), "problem.placement[1]: device must be in 0..1, got 5"),
    (problem_dict(offload={"fraction": 1.5, "bandwidth": {"d2h": 1, "h2d": 1}}),
     "problem.offload.fraction: must be <= 1, got 1.5"),
    (problem_dict(offload={"fraction": [0.5, -0.1], "bandwidth": {"d2h": 1, "h2d": 1}}),
     "problem.offload.fraction[1]: must be >= 0, got -0.1"),
    (problem_dict(offload={"bandwidth": {"d2h": 0, "h2d": 1}}), "problem.offload.bandwidth.d2h: must be > 0, got 0"),
    (problem_dict(offload={"bandwidth": {"d2h": 1, "h2d": 1}, "links": [[0, 7]]}),
     "problem.offload.links[0][1]: unknown device 7"),
    (problem_dict(memory_capacity=-1), "problem.memory.capacity: must be >= 0, got -1"),
    (problem_dict(backward="both"), 'problem.backward: must be one of "split", "fused", got "both"'),
    (problem_dict(devcies=2), "problem.devcies: unknown field"),
    (problem_dict(time_fwd=1), "problem.time.fwd: unknown field"),
]


def _run(tmp_path, capsys, content, argv_prefix=("bound",)):
    path = tmp_path / "in.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    code = main([*argv_prefix, str(path)])
    captured = capsys.readouterr()
    return code, captured.err


@pytest.mark.parametrize("content,expected", BAD_PROBLEMS, ids=[e[1][:40] for e in BAD_PROBLEMS])
def test_bad_problem_is_one_clear_line(tmp_path, capsys, content, expected):
    code, err = _run(tmp_path, capsys, content)
    assert code == 2
    assert expected in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_nan_is_rejected(tmp_path, capsys):
    text = json.dumps(problem_dict()).replace('"forward": 1', '"forward": NaN')
    code, err = _run(tmp_path, capsys, text)
    assert code == 2 and "problem.time.forward: must be a finite number, got nan" in err


def test_annotations_under_x_prefix_are_kept():
    p = make_problem(**{"x-owner": "team a"})
    assert p.annotations == {"x-owner": "team a"}
    assert p.to_dict()["x-owner"] == "team a"


def _schedule_dict():
    problem = make_problem()
    return schedule_from_orders(problem, serial_orders(problem)).to_dict()


@pytest.mark.parametrize("mutate,expected", [
    (lambda s: s["ops"][0].update(kind="X"), 'schedule.ops[0].kind: must be one of "F", "B", "W"'),
    (lambda s: s["ops"][0].update(stage=9), "schedule.ops[0].stage: must be in 0..1, got 9"),
    (lambda s: s["ops"][0].update(microbatch=3), "schedule.ops[0].microbatch: must be in 0..2, got 3"),
    (lambda s: s.pop("problem"), "schedule.problem: is required"),
    (lambda s: s["problem"]["time"].update(forward=-1), "schedule.problem.time.forward: must be >= 0"),
    (lambda s: s.update(format="ppsolve/problem@1"), 'schedule.format: must be "ppsolve/schedule@1"'),
    (lambda s: s["ops"][0].pop("start"), "schedule.ops[0].start: is required"),
])
def test_bad_schedule_is_one_clear_line(tmp_path, capsys, mutate, expected):
    data = _schedule_dict()
    mutate(data)
    code, err = _run(tmp_path, capsys, data, ("check",))
    assert code == 2
    assert expected in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_validation_leaves_the_file_as_it_is():
    # the schemas' defaults (backward, chunks, duplex, ...) are for readers, never written into the input
    import copy

    from ppsolve.problem import problem_from_dict
    from tests.helpers import problem_dict

    data = problem_dict(offload={"bandwidth": {"d2h": 1, "h2d": 1}}, recompute={"keep": 0.5})
    before = copy.deepcopy(data)
    problem = problem_from_dict(data)
    assert data == before and problem.to_dict() == before
