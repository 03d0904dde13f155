"""One model description for problem, profile and run; units named in every file; plausibility warnings."""

from __future__ import annotations

import json

import pytest

from tests.helpers import ROOT

from ppsolve.cli import main
from ppsolve.costmodel.descriptions import load_transformer, shrink, transformer_from_dict
from ppsolve.costmodel.partition import Partition, scale_partition
from ppsolve.errors import InputError
from ppsolve.problem import load_problem, problem_from_dict
from ppsolve.units import plausibility_warnings

MODELS = ROOT / "models"
LLAMA8B = MODELS / "transformers" / "llama-3-8b-like.json"
LLAMA70B = MODELS / "transformers" / "llama-3-70b-like.json"


def _problem(forward, backward, capacity=None, activation=1.0):
    return problem_from_dict({"format": "ppsolve/problem@1", "devices": 2, "microbatches": 2,
                              "time": {"forward": forward, "backward_input": backward, "backward_weight": backward},
                              "memory": {"activation": activation, "capacity": capacity}})


def test_warnings_catch_figures_in_the_wrong_unit():
    assert plausibility_warnings(_problem(1.0, 2.0, capacity=10)) == []
    [line] = plausibility_warnings(_problem(1.0, 2.0, capacity=8.6e10))
    assert line.startswith("memory.capacity: 8.6e+10 is more than 10000 times the largest activation")
    [line] = plausibility_warnings(_problem([0.012, 0.011], 15.0))  # forward in seconds, backward in ms
    assert line == ("time: the forwards (0.023 in all) and the backwards (60) differ 2609 times: are all times in "
                    "one unit (problem's time unit)?")
    [line] = plausibility_warnings(_problem([12.0, 0.011], [15.0, 0.02]))  # one stage in seconds
    assert line.startswith("time: stage 0's F + B + W (42) is 824 times stage 1's (0.051)")
    # a first stage whose B is nearly free (its input is token ids) is no reason to warn
    assert plausibility_warnings(_problem(4.0, [0.004, 5.0])) == []
    [line] = plausibility_warnings(_problem(1.0, 2.0, capacity=90), gpu_memory=80)
    assert "above the GPU's memory (80" in line


def test_problem_warns_on_a_capacity_in_bytes(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert main(["problem", str(LLAMA8B), "--gpu", "H100", "--devices", "4", "--microbatches", "8",
                 "--capacity", "8.6e10", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning: memory.capacity: 8.6e+10 is more than 10000 times" in err
    assert "warning: memory.capacity: 8.6e+10 GiB is above the GPU's memory (80 GiB)" in err
    assert out.exists()  # a warning, not an error


def test_solve_warns_and_names_its_units(tmp_path, capsys):
    path = tmp_path / "p.json"
    data = _problem([0.012, 0.011], 15.0).to_dict()
    path.write_text(json.dumps({**data, "x-units": {"time": "ms", "memory": "GiB"}}))
    assert main(["solve", str(path), "-o", str(tmp_path / "s.json"), "--time-limit", "5", "--threads", "1",
                 "--quiet"]) == 0
    captured = capsys.readouterr()
    assert "warning: time: " in captured.err and "are all times in one unit (ms)?" in captured.err
    assert "(ms)" in captured.out and "GiB" in captured.out


def test_cost_model_files_name_their_units(tmp_path):
    out = tmp_path / "p.json"
    assert main(["problem", str(LLAMA8B), "--gpu", "H100", "--devices", "4", "--microbatches", "8",
                 "-o", str(out)]) == 0
    assert load_problem(out).units == ("ms", "GiB")


def test_old_format_gpt_is_folded_in_and_its_mlp_refused(tmp_path, capsys):
    old = {"format": "ppsolve/model@1", "name": "old", "kind": "gpt", "vocab": 64, "hidden": 32, "heads": 2,
           "layers": 4, "seq_len": 8}
    model = transformer_from_dict(old)
    assert (model.vocabulary, model.sequence, model.norm, model.position, model.bias) == (64, 8, "layernorm",
                                                                                           "learned", True)
    argv = ["problem", str(MODELS / "mlp-tiny.json"), "--gpu", "H100", "--devices", "2", "--microbatches", "2",
            "-o", str(tmp_path / "p.json")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "model.kind:" in err and "ppsolve/transformer@1" in err


def test_executor_reads_the_transformer_description():
    from ppsolve.executor.spec import load_model_spec

    spec = load_model_spec(LLAMA70B)
    assert spec.kind == "transformer" and spec.dims["kv_groups"] == 8 and spec.dims["norm"] == "rmsnorm"
    assert load_model_spec(MODELS / "gpt-tiny.json").dims["position"] == "learned"


def test_shrink_keeps_the_layer_types_and_the_gqa_ratio():
    small = shrink(load_transformer(LLAMA70B), "hidden=64,layers=8,sequence=16,vocabulary=256")
    assert (small.hidden, small.layers, small.sequence, small.vocabulary) == (64, 8, 16, 256)
    assert small.heads // small.kv_groups == 8 and small.hidden % small.heads == 0
    assert small.ffn == round(28672 * 64 / 8192) and small.gated_mlp and small.norm == "rmsnorm"
    for text, field in (("width=3", "shrink"), ("hidden=0", "shrink.hidden"), ("hidden=60,heads=7",
                                                                                 "shrink.heads")):
        with pytest.raises(InputError) as info:
            shrink(load_transformer(LLAMA70B), text)
        assert info.value.field == field


def test_partition_scaled_to_a_shrunk_depth():
    assert scale_partition(Partition((11, 10, 10, 10, 10, 10, 10, 9)), 8).layers == (1,) * 8
    assert scale_partition(Partition((0, 6, 6, 2)), 7).layers == (0, 3, 3, 1)
    assert sum(scale_partition(Partition((11, 10, 10, 9)), 20).layers) == 20
    with pytest.raises(InputError, match="^shrink.layers: must be >= 3"):
        scale_partition(Partition((0, 6, 6, 2)), 2)


def test_profile_measures_a_shrunk_llama_in_gib(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "p.json"
    assert main(["profile", "--model", str(LLAMA70B), "--shrink", "hidden=32,layers=2,sequence=8,vocabulary=64",
                 "--devices", "2", "--microbatches", "2", "--repeats", "1", "--device", "cpu", "-o", str(out)]) == 0
    assert "activation GiB:" in capsys.readouterr().out
    problem = load_problem(out)
    assert problem.units == ("ms", "GiB")
    profiled = problem.annotations["x-profile"]
    assert [round(a * 2**30) for a in problem.activation] == profiled["activation_bytes"]
    assert profiled["model"]["name"] == "llama-3-70b-like shrunk"


def test_run_checks_a_shrunk_llama_schedule_from_the_cost_model(tmp_path, capsys):
    # The cost model's schedule of the 70B-like model on 2 devices, its partition 45/35 scaled to 4 blocks
    # (2/2), run on a model of the same layer types; gradients match a single-process run.
    pytest.importorskip("torch")
    problem, schedule = tmp_path / "p.json", tmp_path / "s.json"
    assert main(["problem", str(LLAMA70B), "--gpu", "H200", "--devices", "2", "--microbatches", "4",
                 "--tensor-parallel", "8", "--sequence-parallel", "--data-parallel", "8", "--optimizer-sharding",
                 "optimizer", "--partition", "45,35", "-o", str(problem)]) == 0
    assert main(["baseline", str(problem), "--method", "1f1b", "-o", str(schedule)]) == 0
    capsys.readouterr()
    assert main(["run", str(schedule), "--model", str(LLAMA70B), "--shrink",
                 "hidden=32,layers=4,sequence=8,vocabulary=64", "--check", "--device", "cpu", "--steps", "1"]) == 0
    out = capsys.readouterr().out
    assert "llama-3-70b-like shrunk" in out and "check:" in out and ": OK" in out
    assert main(["run", str(schedule), "--model", str(LLAMA70B), "--device", "cpu"]) == 2  # 70e9 parameters
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--model:" in err and "--shrink" in err


@pytest.mark.parametrize("path", [LLAMA70B, MODELS / "transformers" / "gpt-3-175b-like.json"])
def test_executor_layers_have_the_cost_models_parameter_counts(path):
    # The layers the executor builds (Llama: RMSNorm, rotary, GQA, SwiGLU, no bias; GPT: LayerNorm,
    # learned positions, biases) hold exactly the parameters the cost model charges memory for.
    pytest.importorskip("torch")
    from ppsolve.costmodel import formulas
    from ppsolve.costmodel.build import stage_costs
    from ppsolve.executor import models
    from ppsolve.executor.spec import spec_of_transformer

    model = shrink(load_transformer(path), "hidden=64,layers=2,sequence=16,vocabulary=96")
    parts = models.build_parts(spec_of_transformer(model))
    count = lambda name: sum(p.numel() for p in parts[name].parameters())  # noqa: E731
    assert count("block0") == sum(formulas.block_params(model))
    first, last = stage_costs(model, Partition((1, 1)))
    assert count("embed") + count("block0") == first.params
    assert count("head") + count("block1") == last.params
    out = parts["head"](parts["block1"](parts["block0"](parts["embed"](models.microbatch(
        spec_of_transformer(model), 0)[0]))))
    assert tuple(out.shape) == (model.micro_batch_size, 16, 96)
