"""``ppsolve problem`` with host links too slow to compute with: one line, exit 2, never ``k = inf``."""

from __future__ import annotations

import json

import pytest

from ppsolve.cli import main
from tests.helpers import ROOT

MODEL = ROOT / "models/transformers/llama-1b-like.json"


@pytest.mark.parametrize("gbps", [5e-324, 1e-300])
def test_a_vanishing_host_link_is_one_error(tmp_path, capsys, gbps):
    hardware = tmp_path / "hw.json"
    hardware.write_text(json.dumps({"gpu": "H100", "host_link_gbps": gbps}))
    code = main(["problem", str(MODEL), "--hardware", str(hardware), "--devices", "2", "--microbatches", "4",
                 "--offload", "-o", str(tmp_path / "p.json")])
    captured = capsys.readouterr()
    assert code == 2 and captured.err.count("\n") == 1 and "hardware.host_link_gbps" in captured.err
    assert "inf" not in captured.out and not (tmp_path / "p.json").exists()


def test_a_slow_host_link_keeps_its_bandwidth_in_significant_digits(tmp_path, capsys):
    hardware = tmp_path / "hw.json"
    hardware.write_text(json.dumps({"gpu": "H100", "host_link_gbps": 1e-3}))
    out = tmp_path / "p.json"
    code = main(["problem", str(MODEL), "--hardware", str(hardware), "--devices", "2", "--microbatches", "4",
                 "--offload", "-o", str(out)])
    assert code == 0, capsys.readouterr().err
    bandwidth = json.loads(out.read_text())["offload"]["bandwidth"]["d2h"]
    assert bandwidth == pytest.approx(1e-3 * 1e9 / 2 ** 30 / 1e3, rel=1e-5)  # GB/s in GiB/ms, not rounded to 0
