"""The cost model's recompute: ``--recompute decide`` writes a recompute block, the fixed modes
stay, and what W holds from B to W does not shrink with recompute."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tests.executor.helpers import ROOT
from tests.helpers import serial_orders

from ppsolve.baselines.common import with_recompute
from ppsolve.cli import main
from ppsolve.costmodel import Layout, build_problem, hardware_of_gpu, load_transformer, parse_partition
from ppsolve.costmodel import formulas
from ppsolve.errors import InputError
from ppsolve.memory import memory_curves
from ppsolve.ops import OpKind
from ppsolve.problem import load_problem
from ppsolve.simulator import simulate

LLAMA8B = ROOT / "models" / "transformers" / "llama-3-8b-like.json"
GIB = 2**30
LAYOUT = "Et*4|t*4|t*4|t*4|t*4|t*4|t*5|t*3L"


def _write(tmp_path, recompute: str | None, *extra: str):
    out = tmp_path / f"{recompute}.json"
    args = ["problem", str(LLAMA8B), "--gpu", "H100", "--devices", "8", "--microbatches", "32", "--offload",
            "--capacity", "20", "--partition", LAYOUT, "-o", str(out), *extra]
    assert main(args + (["--recompute", recompute] if recompute else [])) == 0
    return load_problem(out)


def test_decide_writes_keep_and_time_of_full_recompute_and_the_costs_of_none(tmp_path, capsys):
    decide, none = _write(tmp_path, "decide"), _write(tmp_path, None)
    assert "recompute keep GiB" in capsys.readouterr().out
    b, s, h, f, k, V = 1, 8192, 4096, 14336, 8 * 128, 128256
    block_input = 2 * s * b * h  # bf16: the 2sbh full recompute keeps per block
    head = 2 * (2 * s * b * h) + 4 * s * b * V  # LayerNorm and GEMM inputs, fp32 logits: not recomputed
    embedding = s * b * h  # the dropout mask: not recomputed
    layers = [4, 4, 4, 4, 4, 4, 5, 3]
    keep = [n * block_input + (embedding if i == 0 else 0) + (head if i == 7 else 0) for i, n in enumerate(layers)]
    assert decide.recompute.keep == tuple(round(x / GIB, 3) for x in keep)
    assert decide.recompute.keep[1] == 4 * block_input / GIB == 0.25
    block_forward = 2 * b * s * (h * (h + 2 * k) + h * h + 3 * h * f) + 4 * b * s * s * h
    tflops = hardware_of_gpu("H100").gpu.tflops
    assert decide.recompute.time == tuple(round(n * block_forward / (tflops * 1e12) * 1e3, 2) for n in layers)
    # R re-runs the blocks only: the last stage's R is shorter than its forward (the LM head is not recomputed)
    assert decide.recompute.time[:7] == decide.forward[:7] and decide.recompute.time[7] < decide.forward[7]
    # every other figure is that of no recompute (B without the recompute add-on)
    for field in ("forward", "backward_input", "backward_weight", "activation", "weight_hold", "capacity"):
        assert getattr(decide, field) == getattr(none, field), field
    assert none.recompute is None
    assert decide.annotations["x-costmodel"]["model"]["recompute"] == "decide"
    assert "recompute" in decide.annotations["x-costmodel"]["sources"]


def test_the_models_field_and_the_option_agree(tmp_path):
    model = json.loads(LLAMA8B.read_text())
    path = tmp_path / "m.json"
    path.write_text(json.dumps({**model, "recompute": "decide"}))
    out = tmp_path / "p.json"
    assert main(["problem", str(path), "--gpu", "H100", "--devices", "8", "--microbatches", "32", "--offload",
                 "--capacity", "20", "--partition", LAYOUT, "-o", str(out)]) == 0
    assert load_problem(out).to_dict()["recompute"] == _write(tmp_path, "decide").to_dict()["recompute"]


@pytest.mark.parametrize("mode, backward, per_block", [
    ("none", "split", None), ("selective", "split", None), ("selective", "fused", None), ("full", "fused", 2)])
def test_fixed_modes_write_no_recompute_block(tmp_path, mode, backward, per_block):
    p = _write(tmp_path, mode, "--backward", backward)
    assert p.recompute is None and "recompute" not in p.to_dict()
    model = replace(load_transformer(LLAMA8B), recompute=mode)
    assert p.activation[1] == round(4 * formulas.block_activation(model) / GIB, 3)
    if mode == "selective":  # Korthikanti's selective recompute drops only the s x s tensors: none with flash
        assert formulas.block_activation(model) == formulas.block_activation(replace(model, recompute="none"))
    if per_block is not None:  # Korthikanti: 2sbh full
        assert formulas.block_activation(model) == per_block * 8192 * 4096
    if mode == "full":  # B re-runs the forward of the blocks
        none = _write(tmp_path, "none", "--backward", "fused")
        assert p.backward_input[1] == round(none.backward_input[1] + none.forward[1], 2)


def test_full_recompute_keeps_the_hold_of_no_recompute_for_w():
    model = load_transformer(LLAMA8B)
    full, none = formulas.block(replace(model, recompute="full")), formulas.block(model)
    # W needs its GEMM inputs, which the recompute rebuilds: the hold from B to W does not shrink ...
    assert full.weight_hold == none.weight_hold
    # ... and exceeds what full recompute keeps from F to B, which a problem file cannot say
    assert full.weight_hold > full.activation == full.keep == 2 * 8192 * 4096
    assert none.keep == full.keep and none.recompute == none.forward


def test_full_recompute_with_a_split_backward_is_refused(tmp_path, capsys):
    model = replace(load_transformer(LLAMA8B), recompute="full")
    with pytest.raises(InputError, match="^recompute: .*weight_hold > activation.*`recompute` decide"):
        build_problem(model, hardware_of_gpu("H100"), Layout(devices=8, microbatches=32),
                      parse_partition(LAYOUT, 32, 8))
    out = tmp_path / "p.json"
    assert main(["problem", str(LLAMA8B), "--gpu", "H100", "--devices", "8", "--microbatches", "8",
                 "--recompute", "full", "-o", str(out)]) == 2
    assert "error: --recompute: " in capsys.readouterr().err and not out.exists()


def test_decide_holds_the_checkpoint_to_r_and_the_hold_of_none_from_b_to_w():
    """The contract's memory events on a decide problem, one recomputed microbatch on its own."""
    model = replace(load_transformer(LLAMA8B), recompute="decide", layers=4)
    p = build_problem(model, hardware_of_gpu("H100"), Layout(devices=2, microbatches=1, capacity=None),
                      parse_partition("2,2", 4, 2))
    ops = simulate(p, with_recompute(serial_orders(p), {(0, 0)}))
    on0 = {o.kind: o for o in ops if o.device == 0}
    level = dict(memory_curves(p, ops)[0])
    assert level[on0[OpKind.F].start] == p.recompute.keep[0]
    assert level[on0[OpKind.R].start] == pytest.approx(p.activation[0])
    assert level[on0[OpKind.B].end] == pytest.approx(p.weight_hold[0])
    assert p.weight_hold[0] > p.recompute.keep[0]
    assert level[on0[OpKind.W].end] == pytest.approx(0.0)


def test_bundled_realistic_problems_are_what_the_script_writes(capsys):
    from benchmarks.makers import realistic as script

    assert script.main(["--check"]) == 0, capsys.readouterr().out
    bundled = sorted((ROOT / "instances" / "realistic").glob("*-decide.json"))
    assert len(bundled) == len(script.CASES) * len(script.BUDGETS) == 12
    for path in bundled:
        p = load_problem(path)
        assert p.recompute is not None and p.can_offload and p.can_recompute, path.name
        cap = int(path.name.split("-cap")[1].split("-")[0])
        assert p.capacity == (cap,) * p.devices
    assert (ROOT / "instances" / "realistic" / "llama8b-like-8x32-cap20-decide.json") in bundled
