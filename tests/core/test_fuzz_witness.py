"""Valid odd problems with a witness schedule (``benchmarks.reports.fuzz_witness``, written apart from
ppsolve and its tests): ``check`` accepts every witness and agrees with its metrics (the contract's own
reading, zero-length ops and dust offloads included); ``bound`` never exceeds its makespan."""

from __future__ import annotations

import json
import random


from benchmarks.reports.fuzz_witness import odd_problem, witness
from ppsolve.bounds import makespan_lower_bound
from ppsolve.checker import check
from ppsolve.schedule import schedule_from_dict

SEEDS = range(150)


def _witnesses():
    for seed in SEEDS:
        rng = random.Random(seed)
        yield seed, witness(rng, odd_problem(rng), rng.choice([0, 0, 0.5]))


def test_the_generator_makes_odd_cases():
    odd = {"zero-length op": 0, "dust offload": 0, "recompute": 0}
    for _, data in _witnesses():
        odd["zero-length op"] += any(op["start"] == op["end"] for op in data["ops"])
        odd["dust offload"] += any(op.get("amount", 1) < 1e-2 for op in data["ops"])
        odd["recompute"] += any(op["kind"] == "R" for op in data["ops"])
    assert min(odd.values()) >= 10, odd


def test_check_accepts_every_witness_and_agrees_with_its_metrics():
    wrong = []
    for seed, data in _witnesses():
        report = check(schedule_from_dict(json.loads(json.dumps(data))))
        if not report.ok or report.warnings:
            wrong.append((seed, [v.render() for v in report.violations[:1]], report.warnings[:1]))
    assert not wrong, wrong


def test_no_bound_above_a_witness():
    for seed, data in _witnesses():
        schedule = schedule_from_dict(json.loads(json.dumps(data)))
        bound = makespan_lower_bound(schedule.problem).value
        assert bound <= data["metrics"]["makespan"] * (1 + 1e-9) + 1e-9, (seed, bound, data["problem"])
