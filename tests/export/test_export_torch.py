"""``ppsolve export --to torch``: the compute_only CSV, and a clean refusal for offload."""

from __future__ import annotations

from ppsolve.cli import main
from tests.helpers import make_problem, one_f_one_b_orders, schedule_from_orders, serial_orders


def test_export_to_torch_csv(tmp_path, capsys):
    problem = make_problem(devices=2, microbatches=2)
    path = tmp_path / "s.json"
    schedule_from_orders(problem, one_f_one_b_orders(problem)).save(path)
    out = tmp_path / "s.csv"
    assert main(["export", str(path), "--to", "torch", "-o", str(out)]) == 0
    rows = out.read_text().splitlines()
    # Rank 0: warm-up F(0,0), then F(0,1), I/W of mb 0, I/W of mb 1; rank 1 alternates.
    assert rows == ["0F0,0F1,0I0,0W0,0I1,0W1", "1F0,1I0,1W0,1F1,1I1,1W1"]


def test_export_to_torch_refuses_offload(tmp_path, capsys):
    problem = make_problem(devices=2, microbatches=2, offload={"bandwidth": {"d2h": 1, "h2d": 1}})
    path = tmp_path / "s.json"
    schedule_from_orders(problem, serial_orders(problem, offload=True)).save(path)
    out = tmp_path / "s.csv"
    assert main(["export", str(path), "--to", "torch", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "no offload action" in err and err.count("\n") == 1
    assert not out.exists()
