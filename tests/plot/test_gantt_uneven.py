"""A placement that gives devices different numbers of stages draws (chunk shades stay colours)."""

from __future__ import annotations

from ppsolve.plot.gantt import plot_schedule
from ppsolve.problem import problem_from_dict
from ppsolve.schedule import make_schedule
from ppsolve.simulator import simulate
from ppsolve.solvers.warm_start.plans import serial_orders


def test_devices_with_different_numbers_of_stages(tmp_path):
    problem = problem_from_dict({"format": "ppsolve/problem@1", "devices": 2, "microbatches": 2, "chunks": 2,
                                 "placement": [0, 0, 0, 1], "time": {"forward": 1, "backward_input": 1,
                                                                     "backward_weight": 1},
                                 "memory": {"activation": 1}})
    schedule = make_schedule(problem, simulate(problem, serial_orders(problem)), "serial")
    plot_schedule(schedule, tmp_path / "g.png")
    assert (tmp_path / "g.png").stat().st_size > 0
