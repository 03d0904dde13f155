"""The progress of a solve: a live line on a terminal, one line per phase change otherwise, user units."""

from __future__ import annotations

import io
import time

from ppsolve.solvers import SolveOptions, solve
from ppsolve.solvers.budget import Budget
from ppsolve.solvers.progress import Progress
from tests.helpers import make_problem


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_live_line_refreshes_every_second_on_a_terminal():
    stream = _Terminal()
    progress = Progress(Budget(10, False), "cpsat", quiet=False, stream=stream)
    progress.phase("makespan", "makespan", lambda x: x / 4, incumbent=100)
    progress.update(incumbent=360, bound=320)  # model units: time scale 4
    time.sleep(2.2)
    progress.end_phase()
    text = stream.getvalue()
    # rich redraws the line in place (cursor moves); the elapsed figure changes at every refresh
    elapsed = {part.split("s elapsed")[0].split()[-1] for part in text.split("cpsat makespan")[1:]}
    assert len(elapsed) >= 3, elapsed
    assert "makespan 90" in text and "bound 80" in text and "gap 11.11%" in text
    assert "left" in text


def test_one_line_per_phase_change_otherwise():
    stream = io.StringIO()
    progress = Progress(Budget(10, False), "milp", quiet=False, stream=stream)
    progress.phase("makespan", "makespan", float, incumbent=100)
    for value in (99, 98, 97):
        progress.update(incumbent=value)
    progress.phase("least offload", "offloaded", lambda x: x / 2, incumbent=12, at="(at makespan 97)", gap=False)
    progress.update(incumbent=16, bound=0)
    progress.end_phase()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 4  # start and end of each phase
    assert "makespan 100" in lines[0] and "makespan 97" in lines[1]
    assert lines[3].endswith("offloaded 8 (at makespan 97)")  # no gap, no "bound 0"
    assert "gap" not in lines[2] + lines[3] and "bound" not in lines[3]


def test_memory_objective_progress_in_user_units():
    # activations of 0.25: the model counts memory in quarters; the line must not
    problem = make_problem(devices=3, microbatches=4, memory_activation=0.25, memory_weight_hold=0)
    stream = io.StringIO()
    result = solve(problem, SolveOptions(objective="memory", time_limit=10, threads=2, quiet=False, stream=stream))
    assert result.schedule.peak_memory == [0.25, 0.25, 0.25]
    lines = [line for line in stream.getvalue().splitlines() if "least memory" in line]
    assert lines and lines[-1].split("peak ")[1].startswith("0.25") and "bound 0.25" in lines[-1]
