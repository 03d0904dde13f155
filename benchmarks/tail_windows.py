"""Tail windows against ordinary windows, each continuing the search from the same schedule.

    PYTHONPATH=. python benchmarks/tail_windows.py start.json [--seconds 256] [--seed 0]

``start.json`` is a schedule (it holds its problem), typically the result of a ``ppsolve solve`` whose
ordinary windows have nearly stopped improving it. The large-neighbourhood search
(``ppsolve.solvers.lns.improve``) then runs on it twice for ``--seconds`` each (both cores): once
with ordinary windows only (``TAIL_STALL`` = inf) and once with tail windows only (``TAIL_STALL``
= 0); a line for each gives the start's makespan, the end's and what the search did. Each run is its
own process. Tail windows apply to schedules without transfers only: on others both runs are alike.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ppsolve.bounds import makespan_lower_bound  # noqa: E402
from ppsolve.schedule import load_schedule  # noqa: E402
from ppsolve.solvers import SolveOptions, lns  # noqa: E402
from ppsolve.solvers.budget import Budget, Limit  # noqa: E402
from ppsolve.solvers.cpsat import backend  # noqa: E402
from ppsolve.solvers.progress import Progress  # noqa: E402
from ppsolve.solvers.scaling import build_scaling  # noqa: E402
from ppsolve.solvers.settings import LnsSettings, Settings  # noqa: E402


def search_from(start_path: str, seconds: float, seed: int, searcher=backend, knobs: LnsSettings = LnsSettings()):
    """(the start re-timed as the runtime would, the search's result): ``lns.improve`` continued from
    the schedule at ``start_path`` for ``seconds`` on both cores, windows searched by ``searcher``."""
    start = load_schedule(start_path)
    problem = start.problem
    start = lns.as_runtime_runs(problem, start)
    budget = Budget(3 * seconds + 60, deterministic=False)  # the search's own limit below ends it
    options = SolveOptions(time_limit=seconds, seed=seed, settings=Settings(lns=knobs))
    result = lns.improve(problem, build_scaling(problem), options, budget, Progress(budget, "cpsat"), searcher,
                         start, Limit(time.monotonic() + seconds), False, makespan_lower_bound(problem).value)
    return start, result


def continue_search(start_path: str, stall: float, seconds: float, seed: int) -> str:
    start, result = search_from(start_path, seconds, seed, knobs=LnsSettings(tail_stall=stall))
    return (f"{start.makespan:g} -> {result.best.makespan:g} ({result.windows} windows, {result.improved} better, "
            f"{result.tail_windows} tail windows, {result.tail_improved} of them better)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("start")
    parser.add_argument("--seconds", type=float, default=256.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for name, stall in (("ordinary windows", math.inf), ("tail windows", 0.0)):
        with ProcessPoolExecutor(1) as pool:  # a fresh process: the constant and the memory are its own
            line = pool.submit(continue_search, args.start, stall, args.seconds, args.seed).result()
        print(f"{Path(args.start).stem}, {name}: {line}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
