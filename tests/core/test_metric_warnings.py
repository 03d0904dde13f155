"""``check`` warns for every metric a schedule file states that its ops contradict, and for none they confirm."""

from __future__ import annotations

import copy

import pytest

from ppsolve.baselines.common import with_recompute
from ppsolve.checker import check
from ppsolve.schedule import schedule_from_dict
from tests.helpers import make_problem, schedule_from_orders, serial_orders

LINK = {"fraction": 1, "bandwidth": {"d2h": 0.5, "h2d": 0.5}}


@pytest.fixture(scope="module")
def written() -> dict:
    """A schedule that offloads (stage 0) and recomputes (stage 1): every metric is non-trivial."""
    problem = make_problem(devices=2, microbatches=2, offload=LINK, recompute={"keep": 0.25})
    orders = [[op for op in order if not op.kind.is_transfer or op.stage == 0]
              for order in serial_orders(problem, offload=True)]
    orders = with_recompute(orders, {(1, 0), (1, 1)})
    schedule = schedule_from_orders(problem, orders)
    assert schedule.offloaded > 0 and schedule.recomputed == 2 and schedule.bubble_ratio > 0
    return schedule.to_dict()


def _warnings(data: dict) -> list[str]:
    report = check(schedule_from_dict(data))
    assert report.ok
    return report.warnings


def test_metrics_the_ops_confirm_give_no_warning(written):
    assert _warnings(written) == []


@pytest.mark.parametrize("metric, wrong", [
    ("makespan", lambda m: m + 1), ("bubble_ratio", lambda r: r / 2), ("offloaded", lambda o: o + 0.5),
    ("recomputed", lambda n: n - 1), ("peak_memory", lambda peaks: [p + 1 for p in peaks]),
])
def test_each_metric_the_ops_contradict_is_one_warning_naming_it(written, metric, wrong):
    data = copy.deepcopy(written)
    data["metrics"][metric] = wrong(data["metrics"][metric])
    warnings = _warnings(data)
    assert len(warnings) == 1 and warnings[0].startswith(f"metrics.{metric} says ")
