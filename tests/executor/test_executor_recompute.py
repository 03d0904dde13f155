"""Recompute run for real (contract version 3): F of a recomputed (s,j) keeps only its input,
R reruns the forward from it with autograd and F's random state, B and W use that graph.
Stage-level checks run in this process; the schedules that mix keeping, offloading and
recomputing run on 2 and 4 gloo ranks with the gradient check and measured peak = predicted."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from tests.executor.helpers import (MODELS, make, mixed_levers, pipelined_orders, problem,  # noqa: E402
                                    run_schedule_and_compare)

from ppsolve.checker import check  # noqa: E402
from ppsolve.executor import models  # noqa: E402
from ppsolve.executor.report import predicted_peaks, stage_bytes  # noqa: E402
from ppsolve.executor.spec import load_model_spec  # noqa: E402
from ppsolve.executor.stage import SavedBytes, Stage  # noqa: E402

GPT = MODELS / "gpt-tiny.json"
MLP = MODELS / "mlp-tiny.json"
TIMEOUT_S = 300.0  # every wait of a rank; a run past it names the ranks still running


def _stage(module, index: int, num_stages: int, spec=None, loss_fn=None) -> Stage:
    params = [p for p in module.parameters()]
    return Stage(index, num_stages, module, loss_fn or models.loss_fn(spec), 1, SavedBytes(params))


def _input(spec, index: int) -> tuple[torch.Tensor, torch.Tensor]:
    x, target = models.microbatch(spec, 0)
    return (x if index == 0 else torch.randn(models.boundary_shape(spec))), target


def _backward(stage: Stage, split: bool, grad) -> tuple[torch.Tensor | None, list[torch.Tensor]]:
    if split:
        grad_in = stage.backward_input(0, grad)
        stage.backward_weight(0)
    else:
        grad_in = stage.backward_full(0, grad)
    grads = [p.grad.clone() for p in stage.params]
    for p in stage.params:
        p.grad = None
    return grad_in, grads


@pytest.mark.parametrize("model, index, split", [("gpt", 1, True), ("gpt", 0, True), ("gpt", 3, True),
                                                 ("mlp", 0, False), ("mlp", 2, False)])
def test_recompute_rebuilds_what_a_kept_forward_saves(model, index, split):
    spec = load_model_spec(MODELS / f"{model}-tiny.json")
    module = models.build_stages(spec, 4)[index]
    x, target = _input(spec, index)
    target = target if index == 3 else None
    kept = _stage(module, index, 4, spec)
    out = kept.forward(0, x, target)
    grad = None if out is None else torch.randn_like(out)
    want_in, want = _backward(kept, split, grad)

    stage = _stage(module, index, 4, spec)
    sent = stage.forward(0, x, target, recompute=True)
    assert (sent is None and out is None) or torch.equal(sent, out)
    assert index < 3 or stage.losses[0] == kept.losses[0]
    keep = x.untyped_storage().nbytes()
    assert stage.keep_of[0] == keep == stage.ledger.held  # only the checkpoint is counted until R
    assert keep < kept.bytes_of[0] and not stage.pending
    stage.recompute(0)
    assert stage.ledger.held == stage.bytes_of[0] == kept.bytes_of[0]  # the activation of a kept forward
    got_in, got = _backward(stage, split, grad)
    assert stage.hold_of.get(0) == kept.hold_of.get(0) and stage.ledger.held == 0
    assert (got_in is None) == (want_in is None) and (got_in is None or torch.equal(got_in, want_in))
    assert all(torch.equal(a, b) for a, b in zip(got, want))


class Dropped(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.lin = torch.nn.Linear(16, 16)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(torch.tanh(self.lin(x))) + x


def test_recompute_replays_the_random_state_of_its_forward():
    module, x = Dropped(), torch.randn(4, 16)
    grad = torch.randn(4, 16)
    loss_fn = torch.nn.functional.mse_loss
    torch.manual_seed(11)
    kept = _stage(module, 1, 3, loss_fn=loss_fn)
    out = kept.forward(0, x, None)
    after_f = torch.rand(8)  # what the generator gives next, with nothing in between
    _, want = _backward(kept, True, grad)

    torch.manual_seed(11)
    stage = _stage(module, 1, 3, loss_fn=loss_fn)
    assert torch.equal(stage.forward(0, x, None, recompute=True), out)
    torch.manual_seed(99)  # other work draws in between
    stage.recompute(0)
    _, got = _backward(stage, True, grad)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    torch.manual_seed(11)
    stage.forward(0, x, None, recompute=True)
    stage.recompute(0)  # R does not shift what the generator gives afterwards
    assert torch.equal(torch.rand(8), after_f)
    assert not torch.equal(module(x), module(x))  # the dropout is live: without the replay R would differ


def test_recompute_out_of_order_names_the_op():
    spec = load_model_spec(GPT)
    module = models.build_stages(spec, 4)[1]
    x, _ = _input(spec, 1)
    stage = _stage(module, 1, 4, spec)
    with pytest.raises(RuntimeError, match=r"R\(1,0\) without its forward: F\(1,0\) did not keep a checkpoint"):
        stage.recompute(0)
    stage.forward(0, x, None, recompute=True)
    for call, op in ((lambda: stage.backward_input(0, None), "B"), (lambda: stage.backward_full(0, None), "B"),
                     (lambda: stage.backward_weight(0), "W")):
        with pytest.raises(RuntimeError, match=rf"{op}\(1,0\) of a recomputed microbatch before its R\(1,0\)"):
            call()
    with pytest.raises(RuntimeError, match=r"OFFLOAD\(1,0\) of a recomputed microbatch \(rule 10\)"):
        stage.offload(0, 1.0)
    stage.recompute(0)
    with pytest.raises(RuntimeError, match=r"R\(1,0\) without its forward: F\(1,0\) already ran"):
        stage.recompute(0)


def _assert_levers_measured(outcome, schedule, plain):
    """Gradients passed (run_schedule_and_compare); every rank's measured peak is the predicted
    one; each recomputed forward kept exactly its input; recompute and offload lowered the peak
    of a device below what keeping every activation of the same order would hold."""
    for fig in outcome.figures:
        assert fig.measured_peak == fig.predicted_peak > 0, (fig.rank, fig.measured_peak, fig.predicted_peak)
    problem = schedule.problem
    spec = outcome.spec
    keep = stage_bytes(outcome.results, "keep_bytes")
    for s, microbatches in schedule.recomputed_by_stage().items():
        x = models.microbatch(spec, 0)[0] if s == 0 else torch.empty(models.boundary_shape(spec))
        assert keep[s] == x.untyped_storage().nbytes()
        rank = outcome.results[problem.placement[s]]
        assert len(rank.keep_bytes[s]) == len(microbatches)
        assert sorted(r.microbatch for r in rank.records if r.kind == "R" and r.stage == s) == microbatches
    kept_all = predicted_peaks(plain, stage_bytes(outcome.results), stage_bytes(outcome.results, "hold_bytes"))
    assert any(fig.measured_peak < kept_all[fig.rank] for fig in outcome.figures)


@pytest.mark.slow
def test_four_ranks_fused_mlp_keep_offload_recompute():
    prob = problem(4, 4, split=False, offload=True, keep=0.25)
    orders = pipelined_orders(prob, lag=3)
    pairs = [(s, j) for s in range(3) for j in range(4)]
    recomputed = {(s, j) for s, j in pairs if (s + j) % 2 == 0} | {(3, 1)}
    offloaded = {(s, j) for s, j in pairs if (s + j) % 3 == 1} - recomputed
    schedule = mixed_levers(prob, orders, recomputed, offloaded)
    assert check(schedule).ok
    outcome = run_schedule_and_compare(schedule, MLP, device="cpu", timeout_s=TIMEOUT_S)
    _assert_levers_measured(outcome, schedule, make(prob, orders, "plain"))


def test_two_ranks_vshape_ordered_comm_recomputes_local_handoffs():
    # stages 1 and 2 share rank 1 (their activation is handed over in place), stage 3 holds
    # the loss; the NCCL protocol (ordered channels) on gloo; a half-duplex link, so a reload
    # never starts while an offload's bytes are still on the device (the CPU copies are
    # synchronous: a planned overlap of the two would be measured lower than predicted)
    prob = problem(2, 4, chunks=2, placement="vshape", offload=True, keep=0.25, duplex=False)
    orders = pipelined_orders(prob, lag=2, w_delay=1)
    recomputed = {(s, j) for s in (1, 2, 3) for j in range(4) if (s + j) % 2 == 0}
    offloaded = {(s, j) for s in (0, 1, 2) for j in range(4) if (s + j) % 2 == 1}
    schedule = mixed_levers(prob, orders, recomputed, offloaded)
    assert check(schedule).ok
    outcome = run_schedule_and_compare(schedule, GPT, device="cpu", comm="ordered", timeout_s=TIMEOUT_S)
    _assert_levers_measured(outcome, schedule, make(prob, orders, "plain"))


def test_profile_recompute_then_run_a_recomputing_schedule(tmp_path, capsys):
    from ppsolve.cli import main
    from ppsolve.problem import load_problem

    out, sched = tmp_path / "p.json", tmp_path / "s.json"
    assert main(["profile", "--model", str(GPT), "--devices", "2", "--microbatches", "3", "--repeats", "1",
                 "--device", "cpu", "--recompute", "-o", str(out)]) == 0
    assert "recompute keep GiB:" in capsys.readouterr().out
    prob = load_problem(out)
    profiled = json.loads(out.read_text())["x-profile"]
    spec = load_model_spec(GPT)
    inputs = [models.microbatch(spec, 0)[0].untyped_storage().nbytes(),
              torch.empty(models.boundary_shape(spec)).untyped_storage().nbytes()]
    assert profiled["keep_bytes"] == inputs
    assert [round(k * 2**30) for k in prob.recompute.keep] == inputs and all(t > 0 for t in prob.recompute.time)
    orders = pipelined_orders(prob, lag=1)
    from ppsolve.baselines.common import with_recompute
    make(prob, with_recompute(orders, {(0, 0), (0, 1), (1, 2)}), "1f1b-recompute").save(sched)
    assert main(["run", str(sched), "--model", str(GPT), "--check", "--device", "cpu", "--steps", "1",
                 "--timeout", str(TIMEOUT_S)]) == 0
    text = capsys.readouterr().out
    assert ": OK" in text
    rows = [line.split() for line in text.splitlines() if line.strip()[:1].isdigit()]
    assert len(rows) == 2 and all(r[1] == r[2] for r in rows)  # measured peak == predicted, every rank
    assert f"kept until its R: stage 0 {inputs[0]} B, stage 1 {inputs[1]} B" in text
