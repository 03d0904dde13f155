"""``torch_plan.attach`` in one process (a one-rank gloo group, one stage): an offload really frees
the saved storages until its reload, a recomputed forward holds only its input until its R, and
the gradients are those of plain autograd."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.distributed.pipelining import PipelineStage  # noqa: E402
from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime  # noqa: E402

from ppsolve.executor.torch_plan import attach  # noqa: E402
from ppsolve.export.torch_csv import plan_path, write  # noqa: E402
from tests.executor.helpers import mixed_levers, pipelined_orders, problem  # noqa: E402


@pytest.fixture
def one_rank(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 8))


def test_offload_frees_and_recompute_keeps_only_the_input(one_rank, tmp_path):
    prob = problem(1, 3, offload=True, keep=0.25, duplex=False)
    schedule = mixed_levers(prob, pipelined_orders(prob, lag=2), {(0, 1)}, {(0, 0), (0, 2)})
    csv = tmp_path / "s.csv"
    write(schedule, csv)
    model = _model()
    runtime = _PipelineScheduleRuntime([PipelineStage(model, 0, 1, torch.device("cpu"))], n_microbatches=3,
                                       loss_fn=nn.functional.mse_loss)
    runtime._load_csv(str(csv), "compute_comms")
    plan = attach(runtime, plan_path(csv))
    seen = {}
    reload, recompute = plan.reload, plan.recompute

    def spy_reload(s, j):  # the offloaded storages hold no bytes until the reload
        seen[("reload", j)] = [st.nbytes() for st in plan.saved[(s, j)].storages]
        return reload(s, j)

    def spy_recompute(s, j, ctx):  # before R: only the input is counted, every other saved tensor is a slot
        seen["keep"] = plan.saved[(s, j)].keep
        return recompute(s, j, ctx)

    plan.reload, plan.recompute = spy_reload, spy_recompute
    x, y = torch.randn(6, 8), torch.randn(6, 8)
    losses = []
    runtime.step(x, target=y, losses=losses)
    assert seen[("reload", 0)] and all(n == 0 for n in seen[("reload", 0)])
    assert all(n == 0 for n in seen[("reload", 2)])
    assert seen["keep"] == 2 * 8 * 4  # the microbatch's input: 2 samples x 8 floats
    act = plan.activation_bytes[0]
    assert act[0] == act[1] == act[2] > seen["keep"]
    assert plan.executed == [str(a) for a in _expected(schedule)]
    reference = _model()
    nn.functional.mse_loss(reference(x), y).backward()
    for mine, ref in zip(model.parameters(), reference.parameters()):
        assert torch.allclose(mine.grad, ref.grad, atol=1e-6)
    assert torch.stack(losses).mean().item() == pytest.approx(nn.functional.mse_loss(reference(x), y).item())


def _expected(schedule):
    """The plan's actions in issue order, as the adapter labels them."""
    from ppsolve.export.torch_levers import label
    from ppsolve.simulator import issue_order
    return [label(op, True) for op in issue_order(schedule.problem, schedule.ops_of_device(0))]
