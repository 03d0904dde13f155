"""Schedules run from the exported files through PyTorch's ``_PipelineScheduleRuntime`` (CPU, gloo):
the compute_comms CSV, the side file's offloads and recomputes through ``torch_plan.attach``.
Each schedule: gradients equal a single-process run's, every rank ran exactly the CSV's actions
(with the side file's where the plan puts them), and every rank's measured activation peak is
the predicted one. One launch per rank count runs all of its schedules."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from ppsolve.checker import check  # noqa: E402
from ppsolve.executor.api import TOLERANCE, execute_all  # noqa: E402
from ppsolve.export.torch_csv import to_compute_comms_csv  # noqa: E402
from ppsolve.export.torch_levers import side_plan  # noqa: E402
from ppsolve.methods import RunOptions, run_method  # noqa: E402
from tests.executor.helpers import MODELS, mixed_levers, pipelined_orders, problem  # noqa: E402

TIMEOUT_S = 120.0  # per schedule: a loaded 2-core machine runs 4 ranks' imports and steps slowly


def _solve(prob, capacity: float):
    schedule = run_method("cpsat", prob.replace(capacity=capacity), RunOptions(time_limit=3, threads=1))
    assert check(schedule).ok
    return schedule


def _cases(d: int) -> dict:
    """Published schedules, PipeOffload, solver plans that offload or recompute (linear,
    interleaved, V-shape; split and fused backward), and a plan mixing both levers."""
    m = 2 * d
    cases = {
        "1f1b": run_method("1f1b", problem(d, m), RunOptions()),
        "1f1b-fused": run_method("1f1b", problem(d, m, split=False), RunOptions()),
        "interleaved-1f1b": run_method("interleaved-1f1b", problem(d, m, chunks=2, placement="interleaved"),
                                       RunOptions()),
        "zb-h1": run_method("zb-h1", problem(d, m), RunOptions()),
        "zb-v": run_method("zb-v", problem(d, m, chunks=2, placement="vshape"), RunOptions()),
        "po-h": run_method("po-h", problem(d, m, offload=True, duplex=False, bandwidth=2).replace(capacity=1),
                           RunOptions()),
        "solver-offload-linear": _solve(problem(d, m, offload=True, duplex=False), 1.5),
        "solver-offload-vshape": _solve(problem(d, m, chunks=2, placement="vshape", offload=True, duplex=False), 2.5),
        "solver-offload-interleaved-fused": _solve(problem(d, m, chunks=2, placement="interleaved", split=False,
                                                           offload=True, duplex=False), 2.5),
        "solver-recompute-linear-fused": _solve(problem(d, m, split=False, keep=0.25), 1.5),
        "solver-recompute-interleaved": _solve(problem(d, m, chunks=2, placement="interleaved", keep=0.25), 2.5),
        "solver-recompute-vshape": _solve(problem(d, m, chunks=2, placement="vshape", keep=0.25), 2.5),
    }
    prob = problem(d, m, chunks=2, placement="vshape", offload=True, keep=0.25, duplex=False)
    pairs = [(s, j) for s in range(prob.num_stages) for j in range(m)]
    cases["mixed-vshape"] = mixed_levers(prob, pipelined_orders(prob, lag=2, w_delay=1),
                                         {p for p in pairs if sum(p) % 3 == 0}, {p for p in pairs if sum(p) % 3 == 1})
    levers = {name: (s.offloaded > 0, s.recomputed > 0) for name, s in cases.items()}
    assert levers["po-h"][0] and all(levers["mixed-vshape"])
    assert all(levers[name][0] for name in cases if name.startswith("solver-offload"))
    assert all(levers[name][1] for name in cases if name.startswith("solver-recompute"))
    return cases


def _run_and_assert(cases: dict, model) -> None:
    outcomes = execute_all(list(cases.values()), model, check=True, runtime="torch", device="cpu",
                           timeout_s=TIMEOUT_S)
    for (name, schedule), outcome in zip(cases.items(), outcomes):
        c = outcome.comparison
        assert c.ok(TOLERANCE), (name, c.max_error, c.worst, c.missing)
        rows = to_compute_comms_csv(schedule).splitlines()
        extra = {r["rank"]: [e["action"] for e in r["extra"]] for r in side_plan(schedule)["ranks"]}
        for result, fig in zip(outcome.results, outcome.figures):
            ran = [a for a in result.executed if a not in extra[result.rank]]
            assert ran == rows[result.rank].split(","), (name, result.rank)
            assert [a for a in result.executed if a in extra[result.rank]] == extra[result.rank], (name, result.rank)
            assert fig.measured_peak == fig.predicted_peak > 0, (name, fig.rank, fig.measured_peak, fig.predicted_peak)


def test_two_ranks_run_every_kind_of_plan_through_pytorch():
    _run_and_assert(_cases(2), MODELS / "gpt-tiny.json")


@pytest.mark.slow
def test_four_ranks_run_every_kind_of_plan_through_pytorch(mlp8):
    _run_and_assert(_cases(4), mlp8)  # 8 stages with 2 chunks per rank
