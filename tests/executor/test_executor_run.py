"""Running schedules for real (CPU, gloo): gradients equal the single-process run,
and the measured activation peak equals the predicted one."""

from __future__ import annotations

import json
import time

import pytest

torch = pytest.importorskip("torch")

from tests.executor.helpers import MODELS, add_offload, make, pipelined_orders, problem, run_schedule_and_compare  # noqa: E402

from ppsolve.checker import check  # noqa: E402

GPT = MODELS / "gpt-tiny.json"
MLP = MODELS / "mlp-tiny.json"


def _assert_peaks_match(outcome):
    for fig in outcome.figures:
        assert fig.measured_peak == fig.predicted_peak, (fig.rank, fig.measured_peak, fig.predicted_peak)
        assert fig.measured_peak > 0



def test_1f1b_two_ranks_split_gradients_and_peak():
    prob = problem(2, 4)
    schedule = make(prob, pipelined_orders(prob, lag=1), "1f1b-order")
    outcome = run_schedule_and_compare(schedule, GPT)
    _assert_peaks_match(outcome)
    # 1F1B: device 0 holds two microbatches of stage 0 at its peak (W right after B)
    assert outcome.figures[0].measured_peak == 2 * outcome.results[0].activation_bytes[0][0]


@pytest.mark.slow
def test_1f1b_four_ranks_fused_mlp():
    prob = problem(4, 4, split=False)
    schedule = make(prob, pipelined_orders(prob, lag=3), "1f1b-fused")
    outcome = run_schedule_and_compare(schedule, MLP)
    _assert_peaks_match(outcome)


@pytest.mark.slow
def test_zb_h1_like_four_ranks_delayed_w():
    prob = problem(4, 6)
    schedule = make(prob, pipelined_orders(prob, lag=3, w_delay=2), "delayed-w")
    assert check(schedule).ok
    _assert_peaks_match(run_schedule_and_compare(schedule, GPT))


def test_interleaved_two_ranks():
    prob = problem(2, 4, chunks=2, placement="interleaved")
    schedule = make(prob, pipelined_orders(prob, lag=2, w_delay=1), "interleaved-order")
    _assert_peaks_match(run_schedule_and_compare(schedule, GPT))


@pytest.mark.slow
def test_vshape_four_ranks_eight_stages(mlp8):
    prob = problem(4, 4, chunks=2, placement="vshape")
    schedule = make(prob, pipelined_orders(prob, lag=2, w_delay=1), "v-order")
    _assert_peaks_match(run_schedule_and_compare(schedule, mlp8))


@pytest.mark.slow
def test_offload_lowers_the_peak_and_matches_prediction():
    # Stage 0's F is twice stage 1's, so device 1 idles between forwards and each
    # planned OFFLOAD ends before the next allocation: the plan's timing and the
    # synchronous CPU copies agree, and the byte accounting is exact.
    plain = problem(2, 4, offload=True, f=[2, 1])
    orders = pipelined_orders(plain, lag=4)
    without = run_schedule_and_compare(make(plain, orders, "gpipe-order"), GPT)
    offloaded = make(plain, add_offload(plain, orders, {(1, 0), (1, 1), (1, 2)}), "gpipe-offload")
    assert check(offloaded).ok
    with_offload = run_schedule_and_compare(offloaded, GPT)
    _assert_peaks_match(without)
    _assert_peaks_match(with_offload)
    assert with_offload.figures[1].measured_peak < without.figures[1].measured_peak
    moved = [r.moved for r in with_offload.results[1].records if r.kind == "OFFLOAD"]
    assert moved == [with_offload.results[1].activation_bytes[1][0]] * 3


@pytest.mark.slow
def test_torch_runtime_split_backward_vshape():
    prob = problem(2, 4, chunks=2, placement="vshape")
    schedule = make(prob, pipelined_orders(prob, lag=1, w_delay=1), "v-order")
    outcome = run_schedule_and_compare(schedule, GPT, runtime="torch")
    _assert_peaks_match(outcome)  # the adapter's hooks count what ppsolve's runtime counts


def test_failing_rank_stops_the_run_with_its_error():
    from ppsolve.executor.api import execute
    from ppsolve.executor.launch import ExecutionError

    prob = problem(2, 4)
    schedule = make(prob, pipelined_orders(prob, lag=1), "1f1b-order")
    began = time.monotonic()
    with pytest.raises(ExecutionError, match=r"rank 1 failed: RuntimeError: injected failure at action 3"):
        execute(schedule, GPT, fail_at=(1, 3), timeout_s=30)
    assert time.monotonic() - began < 60


def test_profile_then_run_end_to_end(tmp_path):
    from ppsolve.cli import main
    from ppsolve.problem import load_problem

    out = tmp_path / "problem.json"
    assert main(["profile", "--model", str(MLP), "--devices", "2", "--microbatches", "3", "--repeats", "1",
                 "--offload", "-o", str(out)]) == 0
    prob = load_problem(out)
    assert prob.devices == 2 and prob.can_offload and all(t > 0 for t in prob.forward)
    profiled = json.loads(out.read_text())["x-profile"]["activation_bytes"]
    schedule = make(prob, pipelined_orders(prob, lag=1, w_delay=1), "1f1b-order")
    outcome = run_schedule_and_compare(schedule, MLP)
    measured = [outcome.results[s].activation_bytes[s][0] for s in range(2)]
    assert measured == profiled
    _assert_peaks_match(outcome)


@pytest.mark.slow
def test_uneven_partition_profiled_and_run_from_the_problem_file(tmp_path, capsys):
    # 4 blocks on 3 stages cannot be split evenly: the partition recorded by profile is what runs.
    from ppsolve.cli import main

    prob, sched = tmp_path / "p.json", tmp_path / "s.json"
    assert main(["profile", "--model", str(GPT), "--devices", "3", "--microbatches", "3", "--repeats", "1",
                 "--device", "cpu", "--partition", "Et*1|t*2|t*1L", "-o", str(prob)]) == 0
    data = json.loads(prob.read_text())
    assert data["x-partition"]["layers"] == [1, 2, 1]
    assert main(["baseline", str(prob), "--method", "1f1b", "-o", str(sched)]) == 0
    capsys.readouterr()
    assert main(["run", str(sched), "--model", str(GPT), "--check", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert ": OK" in out
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert len(rows) == 3 and all(r[1] == r[2] for r in rows)  # measured peak == predicted, every rank


def test_run_excludes_a_warm_up_step_and_refuses_another_model(tmp_path, capsys):
    from ppsolve.cli import main
    from ppsolve.errors import InputError
    from ppsolve.executor.api import prepare
    from ppsolve.problem import problem_from_dict

    prob = problem(2, 2)
    data = prob.to_dict()
    data["x-profile"] = {"model": {"name": "some-other-model"}}
    profiled = problem_from_dict(data)
    with pytest.raises(InputError, match="profiled on model 'some-other-model'"):
        prepare(make(profiled, pipelined_orders(profiled, lag=1), "x"), GPT, None, "ppsolve")
    path = tmp_path / "s.json"
    make(prob, pipelined_orders(prob, lag=1), "1f1b-order").save(path)
    assert main(["run", str(path), "--model", str(GPT)]) == 0
    out = capsys.readouterr().out
    assert "2 step(s)" in out and "warm-up step (excluded from the figures above): span" in out
