"""Plans through torchtitan's own pipeline builder on 2 gloo ranks (CPU): torchtitan 0.3.0 cuts the
model and maps stages to ranks from the exported schedule name (``_pipeline_module_split``), builds
the schedule from the compute-only CSV (``_build_pipeline_schedule``: PyTorch places the sends and
receives) and ``ppsolve.executor.torchtitan.apply_plan`` runs the side plan's offloads and
recomputes. Each plan: loss and gradients equal a single-process run's, every rank ran the CSV's
compute actions with the side plan's where the plan puts them (and, where PyTorch lowers the CSV, the
lowering the export replays), and every rank's measured activation peak is the predicted one. One launch
runs all of them."""

from __future__ import annotations

import pytest

from tests.export.test_torchtitan_export import TORCHTITAN, _delayed

pytest.importorskip("torch")
pytest.importorskip("torchtitan.distributed.pipeline_parallel", reason=f"torchtitan absent: {TORCHTITAN}")

from ppsolve.executor.api import TOLERANCE, execute_all  # noqa: E402
from ppsolve.export.torch_lowering import timing  # noqa: E402
from ppsolve.export.torchtitan import schedule_name  # noqa: E402
from ppsolve.methods import RunOptions, run_method  # noqa: E402
from tests.executor.helpers import MODELS, mixed_levers, pipelined_orders, problem  # noqa: E402

TIMEOUT_S = 120.0


def _both_levers(placement: str):
    """A plan that offloads some activations and recomputes others (4 stages on 2 ranks)."""
    m = 4
    prob = problem(2, m, chunks=2, placement=placement, offload=True, keep=0.25, duplex=False)
    pairs = [(s, j) for s in range(prob.num_stages) for j in range(m)]
    return mixed_levers(prob, pipelined_orders(prob, lag=2, w_delay=1), {p for p in pairs if sum(p) % 3 == 0},
                        {p for p in pairs if sum(p) % 3 == 1})


def _run_and_assert(cases: dict) -> None:
    outcomes = execute_all(list(cases.values()), MODELS / "gpt-tiny.json", check=True, runtime="torchtitan",
                           device="cpu", timeout_s=TIMEOUT_S)
    for name, outcome in zip(cases, outcomes):
        c = outcome.comparison
        assert c.ok(TOLERANCE), (name, c.max_error, c.worst, c.missing)
        for fig in outcome.figures:
            assert fig.measured_peak == fig.predicted_peak > 0, (name, fig.rank, fig.measured_peak,
                                                                 fig.predicted_peak)


def test_a_v_plan_with_both_levers_and_one_pytorch_would_delay():
    cases = {"levers-vshape": _both_levers("vshape"),
             "delayed-by-pytorch": _delayed()}  # run with ppsolve's placement (comms=), as the export says
    assert [schedule_name(s.problem) for s in cases.values()] == ["ZBVZeroBubble", "1F1B"]
    assert cases["levers-vshape"].offloaded > 0 and cases["levers-vshape"].recomputed > 0
    assert timing(cases["delayed-by-pytorch"]).delayed and not timing(cases["levers-vshape"]).delayed
    _run_and_assert(cases)


@pytest.mark.slow
def test_loop_and_v_plans_with_and_without_levers():
    cases = {
        "1f1b": run_method("1f1b", problem(2, 4), RunOptions()),
        "1f1b-fused": run_method("1f1b", problem(2, 4, split=False), RunOptions()),
        "interleaved-1f1b": run_method("interleaved-1f1b", problem(2, 4, chunks=2, placement="interleaved"),
                                       RunOptions()),
        "zb-v": run_method("zb-v", problem(2, 4, chunks=2, placement="vshape"), RunOptions()),
        "levers-interleaved": _both_levers("interleaved"),
    }
    assert [schedule_name(s.problem) for s in cases.values()] == [
        "1F1B", "1F1B", "Interleaved1F1B", "ZBVZeroBubble", "Interleaved1F1B"]
    assert not any(timing(s).delayed for s in cases.values())  # PyTorch's own placement runs them
    _run_and_assert(cases)
