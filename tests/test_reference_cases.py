"""A fixed sample of the reference implementation's cases: ppsolve at or below its makespan, within its peak.

The cases live in ``shared/reference`` beside the repository (``../shared/reference``
from the repository root); the test is skipped, saying so, when that folder is absent.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ppsolve.refcases import load_cases, run_case

REFERENCE = Path(__file__).resolve().parents[1].parent / "shared" / "reference"


def sample():
    if not (REFERENCE / "reference.csv").is_file():
        return []
    cases = load_cases(REFERENCE)
    return cases[::7][:60]  # every 7th case: 60 of the 414, every method represented


CASES = sample()


@pytest.mark.skipif(not CASES, reason=f"reference cases not found at {REFERENCE}")
def test_sample_is_sixty_cases_of_every_method():
    assert len(CASES) == 60
    assert {c.method.split(":")[0] for c in CASES} == {"1f1b", "zb-h1", "zb-h2", "zb-v", "v-half", "v-min", "block"}


@pytest.mark.skipif(not CASES, reason=f"reference cases not found at {REFERENCE}")
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.case)
def test_at_or_below_the_reference_within_its_capacity(case):
    result = run_case(case)  # runs within the case's capacity and checks the schedule
    assert result.makespan is not None, result.note
    assert result.at_or_below, f"{result.makespan:g} against {case.ref_makespan:g}"
