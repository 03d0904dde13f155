"""Lower bounds with and without the new parts, and the solver's gap with each (issue 12).

    PYTHONPATH=. python benchmarks/bound_gaps.py FILE... [--solve SECONDS] [--threads 1] [--po-case]

For each problem the bound as it was (head + load + tail, round trips in flight, critical path:
the solver's cut before), then with each new part added in turn: memory x time, the forced idle
from the memory knapsacks, the forced idle with the host-link recurrences, and the in-order
bound (``ppsolve.bounds.sequence``; the full bound). ``--changed-by-in-order`` prints only the
problems whose bound the in-order bound raises. (The admission bound is in every column.)
With ``--solve`` each problem is solved twice in one run, with the old and the full bound as the
solver's cut: makespan, bound and gap. ``--po-case`` adds issue
12's PipeOffload-kind problem (4 devices, 8 microbatches, 2 chunks interleaved, half-duplex links
shared by device pairs, round trip 1.5 x a stage's F + B, cap 5 chunk activations, F = B = W =
1000, p2p 10).
"""

from __future__ import annotations

import argparse
import contextlib
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


# the new parts, switched off from the last added to the first
PARTS = [("sequence_bounds", ()), ("_before_first_b", 0.0), ("_after_last_f", 0.0), ("idle_bound", 0.0),
         ("memory_time_bound", 0.0)]


def without(count: int) -> contextlib.ExitStack:
    """A context with the last ``count`` of the new parts switched off."""
    stack = contextlib.ExitStack()
    for name, value in PARTS[:count]:
        stack.enter_context(mock.patch.object(bounds, name, lambda *a, v=value: v))
    return stack


def bound_without(problem: Problem, count: int) -> float:
    with without(count):
        return bounds.makespan_lower_bound(problem).value


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("files", nargs="*")
    parser.add_argument("--solve", type=float, default=0.0, help="seconds per solve (0: bounds only)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--po-case", action="store_true")
    parser.add_argument("--changed-by-in-order", action="store_true")
    args = parser.parse_args()
    problems = [(Path(f).stem, load_problem(f)) for f in args.files]
    if args.po_case:
        problems.insert(0, (po_case().name, po_case()))
    head = ("| problem | old bound | + memory x time | + forced idle (knapsacks) "
            "| + forced idle (start recurrences, host link) | + in order |")
    if args.solve:
        head += " makespan (old cut) | bound | gap | makespan (new cut) | bound | gap |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for name, problem in problems:
        figures = [bound_without(problem, k) for k in (5, 4, 3, 1, 0)]
        if args.changed_by_in_order and figures[-1] <= figures[-2] + 1e-9:
            continue
        row = f"| {name} | " + " | ".join(f"{x:g}" for x in figures) + " |"
        if args.solve:
            for count in (5, 0):
                with without(count):
                    r = solve(problem, SolveOptions(time_limit=args.solve, threads=args.threads))
                row += f" {r.schedule.makespan:g} | {r.lower_bound:g} | {r.gap:.1%} |"
        print(row, flush=True)


if __name__ == "__main__":
    main()
