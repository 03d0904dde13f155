"""``ppsolve profile --lengths``: the cost model's per-microbatch scaling beside a measurement."""

from __future__ import annotations

import json

import pytest

from tests.executor.helpers import MODELS

from ppsolve.costmodel import Partition, transformer_from_dict
from ppsolve.errors import InputError

GPT = MODELS / "gpt-tiny.json"
TINY = {"layers": 2, "hidden": 8, "heads": 2, "sequence": 64, "micro_batch_size": 1, "vocabulary": 16}


def test_predicted_sums_are_the_formulas_as_the_executor_runs_them():
    from ppsolve.executor.scaling import predicted

    # fp32, written-out attention: per block F = 24 T h^2 + 4 T^2 h, W = 24 T h^2; the head 2 T h V each.
    out = predicted(transformer_from_dict(TINY), Partition((1, 1)), [4, 8])
    assert out["forward"] == tuple(2 * (24 * t * 64 + 4 * t * t * 8) + 2 * t * 8 * 16 for t in (4, 8))
    assert out["backward_weight"] == tuple(2 * 24 * t * 64 + 2 * t * 8 * 16 for t in (4, 8))


def test_deviation_is_measured_over_predicted_ratio():
    from ppsolve.executor.scaling import Scaling

    s = Scaling((10, 20), {k: (1.0, 3.0) for k in ("forward", "backward_input", "backward_weight", "activation")},
                {k: (5.0, 10.0) for k in ("forward", "backward_input", "backward_weight", "activation")})
    assert s.deviation("forward") == (0.0, pytest.approx(0.5))


@pytest.mark.parametrize("text", ["64", "64,32", "64,128,256,512", "64,x", "0,64", "64,64"])
def test_bad_lengths_name_the_field_and_on_the_command_line_the_flag(text, tmp_path, capsys):
    from ppsolve.cli import main
    from ppsolve.executor.scaling import check_lengths

    if text.replace(",", "").isdigit():
        with pytest.raises(InputError) as err:
            check_lengths(int(n) for n in text.split(","))
        assert err.value.field == "lengths"
    assert main(["profile", "--model", str(GPT), "--devices", "2", "--microbatches", "2", "--lengths", text,
                 "-o", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "error: --lengths: must be" in err[0]


def test_profile_reports_and_records_the_scaling(tmp_path, capsys):
    pytest.importorskip("torch")
    from ppsolve.cli import main

    out = tmp_path / "p.json"
    assert main(["profile", "--model", str(GPT), "--devices", "2", "--microbatches", "2", "--repeats", "1",
                 "--device", "cpu", "--lengths", "8,32", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "scaling with tokens per microbatch" in text and "largest deviation" in text
    scaling = json.loads(out.read_text())["x-scaling"]
    assert scaling["lengths"] == [8, 32]
    measured = scaling["measured"]["activation"]
    assert measured[1] > 4 * measured[0]  # 4x the tokens, and the T x T attention tensors on top
    assert main(["profile", "--model", str(GPT), "--devices", "2", "--microbatches", "2", "--lengths", "32,8",
                 "-o", str(out)]) == 2
