"""Real baseline schedules run on real processes give the single-process gradients."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from ppsolve.methods import RunOptions, run_method  # noqa: E402
from tests.executor.helpers import MODELS, problem, run_schedule_and_compare  # noqa: E402

GPT = MODELS / "gpt-tiny.json"
MLP = MODELS / "mlp-tiny.json"



@pytest.mark.parametrize("method,ranks,chunks,placement,model", [
    ("1f1b", 4, 1, "linear", MLP),
    ("zb-h1", 2, 1, "linear", GPT),
    ("zb-h1", 4, 1, "linear", MLP),
    ("interleaved-1f1b", 2, 2, "interleaved", GPT),
    ("zb-v", 2, 2, "vshape", GPT),
])
@pytest.mark.slow
def test_baseline_schedule_runs_and_matches_the_reference(method, ranks, chunks, placement, model):
    prob = problem(ranks, 2 * ranks, chunks=chunks, placement=placement)
    schedule = run_method(method, prob, RunOptions())
    outcome = run_schedule_and_compare(schedule, model)
    for fig in outcome.figures:
        assert fig.measured_peak == fig.predicted_peak


@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.slow
def test_solver_schedule_with_offload_runs_and_matches_the_reference(ranks, mlp8):
    # V-shape at a cap of 2.5 activations: 1F1B-like orders need more, so the solver offloads.
    prob = problem(ranks, 2 * ranks, chunks=2, placement="vshape", offload=True).replace(capacity=2.5)
    schedule = run_method("cpsat", prob, RunOptions(time_limit=2))
    assert schedule.offloaded > 0
    model = GPT if ranks == 2 else mlp8
    run_schedule_and_compare(schedule, model)
