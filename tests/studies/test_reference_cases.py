"""A fixed sample of the reference implementation's cases: ppsolve at or below its makespan, within its peak.

The cases live in a folder outside the repository (``reference.csv`` and the problem files it names:
the published reference implementation's cases, see ``benchmarks/reports/refcases.py``): the one
``PPSOLVE_REFERENCE`` names, else ``shared/reference`` beside the repository. Without it the tests are
skipped, saying how to provide it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ppsolve.bounds import makespan_lower_bound
from ppsolve.problem import load_problem
from benchmarks.reports.refcases import load_cases, run_case
from tests.helpers import ROOT

REFERENCE = Path(os.environ.get("PPSOLVE_REFERENCE", ROOT.parent / "shared" / "reference"))
MISSING = (f"no reference cases at {REFERENCE}: set PPSOLVE_REFERENCE to a folder holding the reference "
           "implementation's reference.csv and its problem files")


def sample():
    if not (REFERENCE / "reference.csv").is_file():
        return []
    cases = load_cases(REFERENCE)
    return cases[::7][:60]  # every 7th case: 60 of the 414, every method represented


CASES = sample()


@pytest.mark.skipif(not CASES, reason=MISSING)
def test_sample_is_sixty_cases_of_every_method():
    assert len(CASES) == 60
    assert {c.method.split(":")[0] for c in CASES} == {"1f1b", "zb-h1", "zb-h2", "zb-v", "v-half", "v-min", "block"}


@pytest.mark.skipif(not CASES, reason=MISSING)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.case)
def test_at_or_below_the_reference_within_its_capacity(case):
    result = run_case(case)  # runs within the case's capacity and checks the schedule
    assert result.makespan is not None, result.note
    assert result.at_or_below, f"{result.makespan:g} against {case.ref_makespan:g}"


@pytest.mark.skipif(not CASES, reason=MISSING)
def test_the_lower_bound_never_exceeds_a_reference_schedule():
    # Every reference schedule is valid for its problem (capacity = its own peak): 414 makespans the
    # bound must stay at or under; the forced-idle bound meets the reference on the ZB-H1 4x8 case.
    cases = load_cases(REFERENCE)
    over = [(c.case, makespan_lower_bound(load_problem(c.problem_file)).value, c.ref_makespan) for c in cases]
    assert not [o for o in over if o[1] > o[2] + 1e-6]
    assert dict((name, bound) for name, bound, _ in over)["zb-h1-d4-m8-f1000b1000w1000-c10"] == 27120
