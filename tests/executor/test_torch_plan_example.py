"""The training loop of docs/pytorch-runtime.md, run as written on 2 CPU ranks (gloo) with a plan that
offloads and recomputes: its losses over three SGD steps equal one process training the same model."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")

from ppsolve.cli import main  # noqa: E402
from tests.executor.helpers import mixed_levers, pipelined_orders, problem  # noqa: E402
from tests.helpers import ROOT  # noqa: E402

TIMEOUT_S = 180.0  # two ranks importing torch on a loaded 2-core machine


def _example() -> str:
    text = (ROOT / "docs" / "pytorch-runtime.md").read_text()
    blocks = re.findall(r"```python\n(# train\.py.*?)```", text, re.S)
    assert len(blocks) == 1
    return blocks[0]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _reference_losses(stages: int, microbatches: int, steps: int) -> list[float]:
    """The example's model, data and optimizer in one process."""
    from torch import nn
    torch.manual_seed(0)
    layers = [nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 16)) for _ in range(stages)]
    x, y = torch.randn(4 * microbatches, 16), torch.randn(4 * microbatches, 16)
    model = nn.Sequential(*layers)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    out = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        out.append(loss.item())
    return out


def test_the_documented_training_loop_runs_a_plan_with_offload_and_recompute(tmp_path, capsys):
    prob = problem(2, 4, offload=True, keep=0.25, duplex=False)
    pairs = [(s, j) for s in range(2) for j in range(4)]
    schedule = mixed_levers(prob, pipelined_orders(prob, lag=1), {(0, 0), (1, 2), (0, 3)}, {(0, 1), (0, 2), (1, 1)})
    assert schedule.recomputed and schedule.offloaded and len(pairs) == 8
    schedule.save(tmp_path / "s.json")
    assert main(["export", str(tmp_path / "s.json"), "--to", "torch", "-o", str(tmp_path / "s.csv")]) == 0
    assert "s.plan.json" in capsys.readouterr().out
    (tmp_path / "train.py").write_text(_example())
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE="2",
               PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, "train.py", "s.csv", "4"], cwd=tmp_path,
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    deadline = time.monotonic() + TIMEOUT_S
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(0.2)
    hung = [r for r, p in enumerate(procs) if p.poll() is None]
    for p in procs:
        if p.poll() is None:
            p.kill()
    outputs = [p.communicate()[0] for p in procs]
    assert not hung, f"rank(s) {hung} still running after {TIMEOUT_S:.0f} s:\n" + "\n".join(outputs)
    assert [p.returncode for p in procs] == [0, 0], "\n".join(outputs)
    losses = [float(v) for v in re.findall(r"step \d loss ([0-9.]+)", outputs[1])]
    expected = _reference_losses(2, 4, 3)
    assert losses == pytest.approx(expected, rel=1e-5, abs=1e-7)
    for rank, out in enumerate(outputs):
        peak = re.search(rf"rank {rank}: activation peak (\d+) bytes", out)
        assert peak and int(peak.group(1)) > 0
