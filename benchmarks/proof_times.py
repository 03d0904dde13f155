"""Seconds to a proof of optimality on one problem, per seed and thread count (issue 12).

    PYTHONPATH=. python benchmarks/proof_times.py [PROBLEM] [--seeds 0-4] [--threads 1,0]
        [--warm-start auto,none] [--time-limit 10] [--without-idle] [--without-precedences]

PROBLEM defaults to the reference's ZB-H1 case at 4 x 8 with p2p latency. ``--threads 0`` is
all cores. ``--without-idle`` leaves the forced-idle bound out of the solver's cut, and
``--without-precedences`` the cap's precedences out of the CP-SAT model (both: the model and cut
as they were before), to compare in one run. Prints a Markdown table: wall and CPU seconds of the
whole ``solve`` (warm start, model building and search), its status, makespan and bound.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import ppsolve.bounds as bounds  # noqa: E402
import ppsolve.solvers.cpsat.constraints as constraints  # noqa: E402
from ppsolve.problem import load_problem  # noqa: E402
from ppsolve.solvers import SolveOptions, solve  # noqa: E402

ZB_H1 = Path(__file__).resolve().parents[2] / "shared" / "reference" / "problems" / \
    "zb-h1-d4-m8-f1000b1000w1000-c10.problem.json"


def seeds(text: str) -> list[int]:
    if "-" in text:
        low, high = text.split("-")
        return list(range(int(low), int(high) + 1))
    return [int(x) for x in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("problem", nargs="?", default=str(ZB_H1))
    parser.add_argument("--seeds", default="0-4")
    parser.add_argument("--threads", default="1,0", help="comma-separated; 0 = all cores")
    parser.add_argument("--warm-start", default="auto,none", help="comma-separated warm-start settings")
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--without-idle", action="store_true", help="the solver's cut without the forced-idle bound")
    parser.add_argument("--without-precedences", action="store_true", help="the CP-SAT model without the cap's precedences")
    args = parser.parse_args()
    problem = load_problem(args.problem)
    off = mock.patch.object(bounds, "idle_bound", lambda *a: 0.0) if args.without_idle else mock.MagicMock()
    off2 = (mock.patch.object(constraints, "memory_precedences", lambda *a: None) if args.without_precedences
            else mock.MagicMock())
    print(f"problem: {Path(args.problem).name}; time limit {args.time_limit:g} s"
          + ("; cut without the forced-idle bound" if args.without_idle else "")
          + ("; model without the cap's precedences" if args.without_precedences else ""))
    print("| threads | warm start | seed | status | makespan | bound | wall s | CPU s |")
    print("|---|---|---|---|---|---|---|---|")
    with off, off2:
        for threads in (int(t) for t in args.threads.split(",")):
            for warm in args.warm_start.split(","):
                for seed in seeds(args.seeds):
                    wall, cpu = time.monotonic(), time.process_time()
                    r = solve(problem, SolveOptions(time_limit=args.time_limit, threads=threads or None, seed=seed,
                                                    warm_start=warm))
                    wall, cpu = time.monotonic() - wall, time.process_time() - cpu
                    print(f"| {threads or 'all'} | {warm} | {seed} | {r.status} | {r.schedule.makespan:g} | "
                          f"{r.lower_bound:g} | {wall:.1f} | {cpu:.1f} |", flush=True)


if __name__ == "__main__":
    main()
