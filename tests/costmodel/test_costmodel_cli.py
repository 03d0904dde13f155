"""``ppsolve problem``: from a model description and a GPU name to a verified schedule."""

from __future__ import annotations

import json

import pytest

from tests.executor.helpers import ROOT

from ppsolve.checker import check
from ppsolve.cli import main
from ppsolve.problem import load_problem
from ppsolve.schedule import load_schedule

LLAMA = ROOT / "models" / "transformers" / "llama-1b-like.json"


def test_two_commands_give_a_verified_schedule(tmp_path, capsys):
    problem, schedule = tmp_path / "p.json", tmp_path / "s.json"
    assert main(["problem", str(LLAMA), "--gpu", "H100", "--devices", "4", "--microbatches", "8",
                 "-o", str(problem)]) == 0
    out = capsys.readouterr().out
    assert "partition Et*4|t*4|t*4|t*4L" in out
    for gpu in ("A100", "H100", "H200", "GH200"):
        assert f"  {gpu} " in out and "k = " in out
    assert main(["solve", str(problem), "-o", str(schedule), "--time-limit", "10", "--threads", "1",
                 "--quiet"]) == 0
    assert check(load_schedule(schedule)).valid
    assert load_problem(problem).annotations["x-partition"]["layers"] == [4, 4, 4, 4]


def test_auto_partition_beats_the_even_one(tmp_path, capsys):
    # The LM head of a 128k vocabulary costs about 3.4 blocks: auto moves blocks off the last stage.
    auto, even = tmp_path / "auto.json", tmp_path / "even.json"
    common = [str(LLAMA), "--gpu", "H100", "--devices", "4", "--microbatches", "8"]
    assert main(["problem", *common, "--partition", "auto", "--time-limit", "5", "--threads", "1", "--top", "2",
                 "-o", str(auto)]) == 0
    out = capsys.readouterr().out
    assert "<- chosen" in out
    layers = load_problem(auto).annotations["x-partition"]["layers"]
    assert sum(layers) == 16 and layers[-1] < 4
    assert main(["problem", *common, "-o", str(even)]) == 0
    spans = {}
    for name, path in (("auto", auto), ("even", even)):
        assert main(["solve", str(path), "-o", str(tmp_path / f"{name}-s.json"), "--time-limit", "5",
                     "--threads", "1", "--quiet"]) == 0
        spans[name] = load_schedule(tmp_path / f"{name}-s.json").makespan
    assert spans["auto"] < 0.9 * spans["even"]


def test_explicit_layout_hardware_file_and_offload(tmp_path, capsys):
    hardware = tmp_path / "hw.json"
    hardware.write_text(json.dumps({"gpu": "A100", "host_link_gbps": 12.5, "p2p": "infiniband"}))
    out = tmp_path / "p.json"
    assert main(["problem", str(LLAMA), "--hardware", str(hardware), "--devices", "2", "--chunks", "2",
                 "--placement", "vshape", "--microbatches", "4", "--offload", "--capacity", "none",
                 "--partition", "Et*5|t*4|t*4|t*3L", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "A100 (yours)" in text
    problem = load_problem(out)
    assert problem.annotations["x-partition"]["layers"] == [5, 4, 4, 3]
    assert problem.offload.d2h == pytest.approx(12.5e9 / 2**30 / 1e3, rel=1e-4)
    assert problem.capacity == (None, None)
    assert "the hardware description" in problem.annotations["x-costmodel"]["sources"]["offload.bandwidth"]


@pytest.mark.parametrize("args, message", [
    (["--gpu", "V100"], "--gpu: unknown GPU 'V100'"),
    (["--gpu", "H100", "--partition", "5,5,5"], "--partition: must have 4 stages"),
    (["--gpu", "H100", "--capacity", "lots"], "--capacity: must be hbm, none or a number"),
    (["--gpu", "H100", "--devices", "0"], "--devices: must be >= 1"),
])
def test_bad_input_is_one_line_naming_the_field(tmp_path, capsys, args, message):
    argv = ["problem", str(LLAMA), "--devices", "4", "--microbatches", "8", "-o", str(tmp_path / "p.json"), *args]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "p.json").exists()


def test_bad_model_file_names_the_field(tmp_path, capsys):
    model = tmp_path / "m.json"
    model.write_text(json.dumps({**json.loads(LLAMA.read_text()), "layers": -1}))
    assert main(["problem", str(model), "--gpu", "A100", "--devices", "2", "--microbatches", "2",
                 "-o", str(tmp_path / "p.json")]) == 2
    assert "model.layers: must be >= 1" in capsys.readouterr().err


def test_schema_command_prints_the_costmodel_schemas(capsys):
    for which in ("transformer", "hardware", "gpus"):
        assert main(["schema", which]) == 0
        assert json.loads(capsys.readouterr().out)["title"].startswith("ppsolve")
