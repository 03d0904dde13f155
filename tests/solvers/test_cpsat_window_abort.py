"""A window model on which CP-SAT aborts the whole process when a full-problem worker runs level 2.

``data/cpsat_window_abort.pb.txt.gz`` is the first-step model (CP-SAT's text format) of one window of
the 13B-like problem at 11 GiB (``instances/realistic/llama13b-like-8x32-cap11-decide.json``), written
by the search of ``ppsolve solve ... --time-limit 300 --threads 1 --seed 2`` (about four minutes in).
OR-Tools 9.15 stops the process there with ``Check failed: threshold > 0`` (in its LP constraint
manager) whenever a full-problem worker runs ``linearization_level`` 2: one worker with it (every
seed), three or four workers with it (in most runs: the threads race), and from 8 workers on with
CP-SAT's defaults (its "max_lp" worker). The searches run in a child process, so that an abort fails
the test instead of ending pytest; each worker count searches three times, as runs with several
workers differ.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

MODEL = Path(__file__).parent / "data" / "cpsat_window_abort.pb.txt.gz"

SEARCH = """
import gzip, sys
from ortools.sat.python import cp_model
from ppsolve.solvers.cpsat.backend import set_window_parameters

model = cp_model.CpModel()
model.proto.parse_text_format(gzip.open(sys.argv[1], "rt").read())
workers = int(sys.argv[2])
for _ in range(3):
    solver = cp_model.CpSolver()
    params = solver.parameters
    params.num_workers, params.random_seed = workers, 2
    params.max_deterministic_time, params.max_time_in_seconds = 0.15, 20.0  # the window's limits in that solve
    set_window_parameters(params, workers)
    print(solver.status_name(solver.solve(model)), int(solver.objective_value))
"""


@pytest.mark.parametrize("workers", [1, 2, 3, 8])
def test_the_window_parameters_do_not_abort_cpsat(workers):
    proc = subprocess.run([sys.executable, "-c", SEARCH, str(MODEL), str(workers)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-500:]
    # the window's least longest path (model units), below its hint from the incumbent (4172190792)
    assert proc.stdout.split("\n")[:3] == ["OPTIMAL 4160133285"] * 3
