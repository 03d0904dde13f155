"""Tensor, sequence, context and data parallelism in the cost model, against the published formulas.

Korthikanti et al. (2022), "Reducing Activation Recomputation in Large Transformer Models",
Table 2 (activation bytes per transformer layer) on the configurations of their Table 3, and
Megatron's bytes per parameter (its distributed-optimizer guide: 18 bytes for bf16 weights with
fp32 gradients, 6 + 12/d with the distributed optimizer; fp16 20 and 4 + 16/d; fp32 16 and 8 + 8/d).
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tests.helpers import ROOT

from ppsolve.cli import main
from ppsolve.costmodel import Layout, build_problem, even_partition, hardware_of_gpu, load_transformer
from ppsolve.costmodel import formulas
from ppsolve.costmodel.build import GIB, stage_costs
from ppsolve.costmodel.descriptions import transformer_from_dict
from ppsolve.costmodel.parallel import Parallelism
from ppsolve.errors import InputError
from ppsolve.problem import load_problem

MODELS = ROOT / "models" / "transformers"
LLAMA70B = MODELS / "llama-3-70b-like.json"
GPT3 = MODELS / "gpt-3-175b-like.json"

# Korthikanti et al., Table 3: heads a, hidden h, layers L, micro-batch b; s = 2048, V = 51200, t = 8.
TABLE3 = {"22B": (64, 6144, 48, 4), "175B": (96, 12288, 96, 1), "530B": (128, 20480, 105, 1),
          "1T": (160, 25600, 128, 1)}


def _paper_model(size: str, recompute: str = "none"):
    a, h, layers, b = TABLE3[size]
    return transformer_from_dict({"layers": layers, "hidden": h, "heads": a, "sequence": 2048,
                                  "micro_batch_size": b, "vocabulary": 51200, "flash_attention": False,
                                  "recompute": recompute})


@pytest.mark.parametrize("size", sorted(TABLE3))
def test_korthikanti_table2_activation_per_layer(size):
    a, h, _, b = TABLE3[size]
    s, t = 2048, 8
    sbh = s * b * h
    act = lambda recompute, **par: formulas.block_activation(_paper_model(size, recompute),  # noqa: E731
                                                              Parallelism(**par))
    # Every row of Table 2, in integer bytes (5as/h and 24/t are exact for these sizes).
    assert act("none") == sbh * 34 + 5 * a * s * s * b  # sbh(34 + 5as/h)
    assert act("none", tensor=t) == sbh * 10 + sbh * 24 // t + 5 * a * s * s * b // t  # sbh(10 + 24/t + 5as/(ht))
    assert act("none", tensor=t, sequence=True) == (sbh * 34 + 5 * a * s * s * b) // t  # sbh/t (34 + 5as/h)
    assert act("selective", tensor=t) == sbh * 10 + sbh * 24 // t  # sbh(10 + 24/t)
    assert act("selective", tensor=t, sequence=True) == sbh * 34 // t  # sbh(34/t)
    assert act("full") == act("full", tensor=t) == 2 * sbh  # 2sbh


def test_context_parallelism_divides_the_sequence():
    model = _paper_model("175B")
    alone, cp = formulas.block(model), formulas.block(model, Parallelism(context=4))
    s, b, h, a = 2048, 1, 12288, 96
    assert cp.activation == 34 * s * b * h / 4 + 5 * a * s * s * b / 4  # (s/c) rows of the s x s tensors
    assert cp.forward == alone.forward / 4 and cp.backward_weight == alone.backward_weight / 4
    # ring attention: (c - 1)/c of the keys and values (2sbk elements, 2 bytes) in F, twice that in B
    assert cp.forward_bytes == 3 / 4 * 2 * s * b * h * 2 and cp.backward_bytes == 2 * cp.forward_bytes


def test_tensor_parallelism_splits_flops_and_adds_two_all_reduces_per_pass():
    model = load_transformer(LLAMA70B)
    alone, tp = formulas.block(model), formulas.block(model, Parallelism(tensor=8, sequence=True))
    assert tp.forward == alone.forward / 8 and tp.backward_input == alone.backward_input / 8
    assert alone.forward_bytes == alone.backward_bytes == 0
    s, b, h = 8192, 1, 8192
    assert tp.forward_bytes == tp.backward_bytes == 2 * (2 * 7 / 8) * s * b * h * 2  # ring all-reduce, bf16
    split, whole = formulas.block_params(model)
    assert tp.params == split / 8 + whole  # matrices split, norms on every rank


def test_parameter_counts_match_the_published_models():
    # Hugging Face parameter counts of Meta-Llama-3-70B and Llama-2-13b-hf (untied head, RMSNorm, no bias).
    for path, published in ((LLAMA70B, 70_553_706_496), (MODELS / "llama-2-13b-like.json", 13_015_864_320)):
        model = load_transformer(path)
        costs = stage_costs(model, even_partition(model.layers, 1))
        assert sum(c.params for c in costs) == published, path.name
    # Narayanan et al. (2021): 12h^2 + 13h per GPT layer (weights, biases and two LayerNorms).
    gpt3 = load_transformer(GPT3)
    assert sum(formulas.block_params(gpt3)) == 12 * 12288**2 + 13 * 12288


@pytest.mark.parametrize("dtype, plain, distributed", [("bf16", 18, (6, 12)), ("fp16", 20, (4, 16)),
                                                        ("fp32", 16, (8, 8))])
def test_megatron_bytes_per_parameter(dtype, plain, distributed):
    for d in (1, 8, 64):
        assert sum(Parallelism(data=d).bytes_per_param(dtype)) == plain
        fixed, sharded = distributed
        assert sum(Parallelism(data=d, sharding="optimizer").bytes_per_param(dtype)) == fixed + sharded / d


@pytest.mark.parametrize("path, tensor, stages, data", [(GPT3, 8, 8, 8), (GPT3, 8, 16, 4), (LLAMA70B, 8, 8, 16),
                                                         (LLAMA70B, 4, 8, 64)])
def test_static_memory_per_stage_is_params_times_megatron_bytes(path, tensor, stages, data):
    model = load_transformer(path)
    part = even_partition(model.layers, stages)
    for sharding, per_param in (("none", 18), ("optimizer", 6 + 12 / data)):
        par = Parallelism(tensor=tensor, sequence=True, data=data, sharding=sharding)
        layout = Layout(devices=stages, microbatches=stages, capacity=None, parallel=par)
        p = build_problem(model, hardware_of_gpu("H200"), layout, part)
        memory = p.annotations["x-costmodel"]["memory"]
        for s, cost in enumerate(stage_costs(model, part, par)):
            assert memory["devices"][s]["static"] == round(cost.params * per_param / GIB, 3)
            assert memory["stages"][s]["params"] == round(cost.params)


def test_zero_levels_shard_more_of_the_state():
    per = [sum(Parallelism(data=8, sharding=z).bytes_per_param("bf16")) for z in
           ("none", "optimizer", "gradients", "full")]
    assert per == [18, 2 + 4 + 12 / 8, 2 + 16 / 8, 18 / 8]
    assert sum(Parallelism(data=4, context=2, sharding="optimizer").bytes_per_param("bf16")) == 6 + 12 / 8


def test_capacity_is_memory_less_static_and_reserve():
    model = load_transformer(LLAMA70B)
    par = Parallelism(tensor=8, sequence=True, data=16, sharding="optimizer")
    p = build_problem(model, hardware_of_gpu("H100"), Layout(devices=8, microbatches=16, parallel=par,
                                                             reserve=5.0), even_partition(80, 8))
    memory = p.annotations["x-costmodel"]["memory"]
    for d, cap in enumerate(p.capacity):
        assert cap == pytest.approx(80 - memory["devices"][d]["static"] - 5.0, abs=1e-3)
    share = build_problem(model, hardware_of_gpu("H100"), Layout(devices=8, microbatches=16, parallel=par),
                          even_partition(80, 8))
    assert share.capacity[0] == pytest.approx(p.capacity[0] + 5.0 - 8.0, abs=1e-3)  # default: 10% of 80 GiB


def test_static_memory_that_does_not_fit_is_one_line_naming_the_stage(tmp_path, capsys):
    argv = ["problem", str(LLAMA70B), "--gpu", "H100", "--devices", "8", "--microbatches", "16",
            "-o", str(tmp_path / "p.json")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "--capacity: stage 0 (device 0): static memory" in err and "does not fit in the H100's 80 GiB" in err
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("capacity", ["none", "40"])
def test_static_memory_above_the_gpu_is_an_error_with_any_capacity(tmp_path, capsys, capacity):
    argv = ["problem", str(LLAMA70B), "--gpu", "H100", "--devices", "1", "--microbatches", "4",
            "--capacity", capacity, "-o", str(tmp_path / "p.json")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "left GiB" not in err
    assert "--capacity: stage 0 (device 0): static memory" in err and "does not fit in the H100's 80 GiB" in err
    assert f"--capacity {capacity} cannot make it fit" in err
    assert not (tmp_path / "p.json").exists()


def test_parallel_ranks_that_divide_the_model_are_accepted():
    model = load_transformer(MODELS / "llama-3-8b-like.json")
    for par in (Parallelism(tensor=8, sequence=True, context=4), Parallelism(context=4096)):
        par.check_fits(model)


def test_problem_prints_the_breakdown_and_records_the_parallelism(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert main(["problem", str(LLAMA70B), "--gpu", "H100", "--devices", "8", "--tensor-parallel", "8",
                 "--sequence-parallel", "--data-parallel", "16", "--optimizer-sharding", "optimizer",
                 "--microbatches", "16", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    for row in ("weights GiB", "gradients GiB", "optimizer GiB", "static GiB", "reserve GiB", "left GiB"):
        assert row in text
    assert "TP 8 + SP, CP 1, DP 16, optimizer sharding optimizer" in text
    data = json.loads(out.read_text())
    assert data["x-units"]["time"] == "ms" and data["x-units"]["memory"] == "GiB"
    assert data["x-costmodel"]["parallel"] == {"tensor": 8, "sequence": True, "context": 1, "data": 16,
                                               "optimizer_sharding": "optimizer"}
    p = load_problem(out)
    # the per-GPU figures: the same layers cost one eighth of the FLOPs plus the all-reduces
    model = load_transformer(LLAMA70B)
    block = formulas.block(model, Parallelism(tensor=8, sequence=True))
    f = 10 * (block.forward / 440e12 + block.forward_bytes / 450e9) * 1e3
    assert p.forward[1] == pytest.approx(f, abs=0.01)


@pytest.mark.parametrize("args, message", [
    (["--tensor-parallel", "0"], "--tensor-parallel: must be an integer >= 1"),
    (["--sequence-parallel"], "--sequence-parallel: needs --tensor-parallel > 1"),
    (["--reserve", "lots"], "--reserve: must be GiB or a share"),
    (["--gpu", "B300"], "--gpu: unknown GPU 'B300'"),
    (["--gpu", "B300"], "in a hardware file (--hardware; its schema: ppsolve schema hardware)"),
    (["--tensor-parallel", "3"], "--tensor-parallel: 3 does not divide the model's heads (32)"),
    (["--tensor-parallel", "16"], "--tensor-parallel: 16 does not divide the model's kv_groups (8)"),
    (["--context-parallel", "3"], "--context-parallel: 3 needs a sequence divisible by 2 x 3 = 6"),
    (["--context-parallel", "8192"], "got 8192"),
    (["--tensor-parallel", "8", "--sequence-parallel", "--context-parallel", "2048"],
     "--sequence-parallel: splits the 4 tokens of each context-parallel rank over --tensor-parallel 8"),
])
def test_bad_parallel_options_are_one_line(tmp_path, capsys, args, message):
    argv = ["problem", str(MODELS / "llama-3-8b-like.json"), "--devices", "4", "--microbatches", "8",
            "-o", str(tmp_path / "p.json"), *args]
    if "--gpu" not in args:
        argv += ["--gpu", "H100"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_unknown_gpu_error_shows_the_schema_command(capsys):
    assert main(["problem", str(LLAMA70B), "--gpu", "V100", "--devices", "8", "--microbatches", "8",
                 "-o", "p.json"]) == 2
    assert "ppsolve schema hardware" in capsys.readouterr().err


def test_a_gpu_of_ones_own_needs_every_figure(tmp_path):
    from ppsolve.costmodel import hardware_from_dict

    figures = {"tflops": 50, "hbm_gib": 32, "host_link_gbps": 12, "shared_pcie_switch": False, "nvlink_gbps": 150,
               "infiniband_gbps": 12.5}
    assert hardware_from_dict({"gpu": "V100", **figures}).gpu.hbm_gib == 32
    with pytest.raises(InputError, match="missing: infiniband_gbps"):
        hardware_from_dict({"gpu": "V100", **{k: v for k, v in figures.items() if k != "infiniband_gbps"}})


def test_recompute_decide_keeps_the_checkpoint_of_the_chosen_parallelism():
    model = replace(load_transformer(LLAMA70B), recompute="decide")
    par = Parallelism(tensor=8, sequence=True)
    block = formulas.block(model, par)
    assert block.keep == 2 * 8192 * 8192 / 8  # 2sbh/t: the input stays sequence-sharded
    assert block.activation == formulas.block(replace(model, recompute="none"), par).activation
    full = formulas.block(replace(model, recompute="full"), par)
    assert full.activation == block.keep and full.backward_bytes == block.backward_bytes + block.forward_bytes


@pytest.mark.parametrize("figures, field", [
    ({"p2p_latency_ms": 1e11}, "hardware.p2p_latency_ms: out of range for the problem it makes ("),
    ({"nvlink_gbps": 1e-9}, "hardware.nvlink_gbps: out of range"),
    ({"tflops": 1e-9}, "hardware.tflops: out of range"),
])
def test_a_generated_figure_out_of_range_names_the_hardware_figure_behind_it(tmp_path, capsys, figures, field):
    hardware = tmp_path / "hw.json"
    hardware.write_text(json.dumps({"gpu": "H100", **figures}))
    argv = ["problem", str(MODELS / "llama-3-8b-like.json"), "--hardware", str(hardware), "--devices", "4",
            "--microbatches", "8", "-o", str(tmp_path / "p.json")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"error: {field}" in err
