"""Lower bounds with and without the forced-idle bound, and the solver's gap with each (issue 12).

    PYTHONPATH=. python benchmarks/bound_gaps.py FILE... [--solve SECONDS] [--threads 1] [--po-case]

For each problem: the bound without the forced-idle part (head + load + tail, memory cap, critical
path: what the solver's cut was before), the forced-idle bound from the memory knapsacks alone,
and with the host-link recurrences. With ``--solve`` each problem is solved twice in one run, with
the old and the new bound as the solver's cut: makespan, bound and gap. ``--po-case`` adds issue
12's PipeOffload-kind problem (4 devices, 8 microbatches, 2 chunks interleaved, half-duplex links
shared by device pairs, round trip 1.5 x a stage's F + B, cap 5 chunk activations, F = B = W =
1000, p2p 10).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import ppsolve.bounds as bounds  # noqa: E402
from ppsolve.problem import Problem, load_problem, problem_from_dict  # noqa: E402
from ppsolve.solvers import SolveOptions, solve  # noqa: E402


def po_case() -> Problem:
    return problem_from_dict({
        "format": "ppsolve/problem@1", "name": "po-kind-4x8-v2-pairs-halfduplex-k1.5-cap5",
        "devices": 4, "microbatches": 8, "chunks": 2, "placement": "interleaved",
        "time": {"forward": 1000, "backward_input": 1000, "backward_weight": 1000, "p2p": 10},
        "memory": {"activation": 1, "capacity": 5},
        "offload": {"bandwidth": {"d2h": 1 / 1500, "h2d": 1 / 1500}, "links": [[0, 1], [2, 3]], "duplex": False}})


def old_bound(problem: Problem) -> float:
    with mock.patch.object(bounds, "idle_bound", lambda *a: 0.0):
        return bounds.makespan_lower_bound(problem).value


def knapsack_bound(problem: Problem) -> float:
    with mock.patch.object(bounds, "_before_first_b", lambda *a: 0.0), \
            mock.patch.object(bounds, "_after_last_f", lambda *a: 0.0):
        return bounds.makespan_lower_bound(problem).value


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("files", nargs="*")
    parser.add_argument("--solve", type=float, default=0.0, help="seconds per solve (0: bounds only)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--po-case", action="store_true")
    args = parser.parse_args()
    problems = [(Path(f).stem, load_problem(f)) for f in args.files]
    if args.po_case:
        problems.insert(0, (po_case().name, po_case()))
    head = "| problem | old bound | idle, memory | idle, memory + link |"
    if args.solve:
        head += " makespan (old cut) | bound | gap | makespan (new cut) | bound | gap |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for name, problem in problems:
        old, knap = old_bound(problem), knapsack_bound(problem)
        new = bounds.makespan_lower_bound(problem).value
        row = f"| {name} | {old:g} | {knap:g} | {new:g} |"
        if args.solve:
            for patch in (mock.patch.object(bounds, "idle_bound", lambda *a: 0.0), mock.MagicMock()):
                with patch:
                    r = solve(problem, SolveOptions(time_limit=args.solve, threads=args.threads))
                row += f" {r.schedule.makespan:g} | {r.lower_bound:g} | {r.gap:.1%} |"
        print(row, flush=True)


if __name__ == "__main__":
    main()
