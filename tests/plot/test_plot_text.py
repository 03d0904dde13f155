"""Names and units are drawn as typed: ``$`` is not matplotlib's math mode, and characters no font can
take (a lone surrogate, a control character) do not stop the figure."""

from __future__ import annotations

import json

import pytest

from ppsolve.cli import main
from tests.helpers import ROOT


@pytest.mark.parametrize("name,units", [
    ("a $x^2$ b", {"time": "$ms", "memory": "$$"}),
    ("lone \ud800 surrogate\x07", {"time": "ms\x00", "memory": "Gi\x1bB"}),
])
@pytest.mark.parametrize("suffix", ["png", "svg"])
def test_a_name_or_unit_with_dollars_or_odd_characters_is_drawn(tmp_path, capsys, name, units, suffix):
    data = json.loads((ROOT / "docs/example/example-cpsat.json").read_text())
    data["problem"]["name"], data["problem"]["x-units"] = name, units
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data))
    out = tmp_path / f"g.{suffix}"
    assert main(["plot", str(path), "-o", str(out)]) == 0, capsys.readouterr().err
    assert out.stat().st_size > 1000
