"""Where in the schedule the search's windows pay: by the position of their centre.

    PYTHONPATH=. python benchmarks/window_positions.py start.json [--seconds 150] [--seed 0] [--draws N]

``start.json`` is a schedule (it holds its problem), typically the result of a ``ppsolve solve``. The
large-neighbourhood search (``ppsolve.solvers.lns.improve``, ordinary windows only, both cores)
continues from it for ``--seconds``; ``--draws`` sets ``lns.IDLE_DRAWS`` (1: every pick as drawn).
Each window is counted in the tenth of the incumbent's makespan where its range is centred: how
many there were, how many shortened the longest path through them, how many only ended their ops
earlier, and how many were proven.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ppsolve.solvers import lns  # noqa: E402
from ppsolve.solvers.api import Status  # noqa: E402
from ppsolve.solvers.cpsat import backend  # noqa: E402
from ppsolve.solvers.settings import LnsSettings  # noqa: E402
from tail_windows import search_from  # noqa: E402  (this folder is on the path when run as a script)

TENTHS = 10


class _Traced:
    """The CP-SAT backend, recording each window's outcome by where its range is centred (``where``:
    a window's id to its centre as a share of the incumbent's makespan, filled as windows are built)."""

    def __init__(self):
        self.where: dict[int, float] = {}
        self.rows = [[0, 0, 0, 0] for _ in range(TENTHS)]  # windows, shorter path, earlier ends only, proven

    def run_phase(self, task):
        answer = backend.run_phase(task)
        window = task.window
        row = self.rows[min(TENTHS - 1, int(self.where.get(id(window), 0.0) * TENTHS))]
        row[0] += 1
        row[3] += answer.status is Status.OPTIMAL
        if answer.status.solved and answer.solutions:
            path, flow = window.measure(answer.solutions[-1])
            shorter = path < window.current - 1e-9
            row[1] += shorter
            row[2] += not shorter and flow < window.flow - 1e-9
        return answer


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("start")
    parser.add_argument("--seconds", type=float, default=150.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--draws", type=int, default=LnsSettings().idle_draws)
    args = parser.parse_args(argv)
    traced = _Traced()
    make_window = lns.make_window

    def located(inc, devices, t0, t1, offload, orders):
        window = make_window(inc, devices, t0, t1, offload, orders)
        if window is not None:
            traced.where[id(window)] = (t0 + t1) / 2 / inc.makespan
        return window

    lns.make_window = located
    start, result = search_from(args.start, args.seconds, args.seed, traced,
                                LnsSettings(tail_stall=math.inf, idle_draws=args.draws))
    print(f"{Path(args.start).stem}, draws {args.draws}: {start.makespan:g} -> {result.best.makespan:g} "
          f"({result.windows} windows, {result.improved} better)")
    print("| centre (share of the makespan) | windows | shorter path | earlier ends only | proven |")
    print("|---|---|---|---|---|")
    for i, (n, shorter, flow, proven) in enumerate(traced.rows):
        print(f"| {i / TENTHS:.1f}-{(i + 1) / TENTHS:.1f} | {n} | {shorter} | {flow} | {proven} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
