"""Fixtures shared by every test area.

The default run (``python -m pytest``) leaves out the tests marked ``slow`` (see ``pyproject.toml``);
``python -m pytest -m slow`` runs them, and ``.ci/run`` runs both.

Property tests draw the same examples on every run (hypothesis's ``derandomize``): a run's time and its
verdict do not depend on luck, and a failure seen once is seen again. ``HYPOTHESIS_PROFILE=explore``
draws fresh examples instead (and keeps the failing ones in ``.hypothesis/``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest
from hypothesis import settings

from ppsolve.cli import main
from ppsolve.problem import Problem, load_problem
from tests.helpers import ROOT

settings.register_profile("repeatable", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


@dataclass(frozen=True)
class CliResult:
    """What one in-process ``ppsolve`` command returned and printed."""

    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys):
    """Run ``ppsolve ARGS...`` in this process: ``cli("bound", path)`` -> CliResult."""
    def run(*argv) -> CliResult:
        capsys.readouterr()
        code = main([str(a) for a in argv])
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)
    return run


@pytest.fixture(scope="session")
def example_problem() -> Problem:
    """instances/example.json, the README's example."""
    return load_problem(ROOT / "instances" / "example.json")
