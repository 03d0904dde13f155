"""``ppsolve bound PROBLEM.json``: makespan lower bound and least feasible memory caps."""

from __future__ import annotations

import argparse
import json

from ppsolve.bounds import capacity_shortfalls, makespan_lower_bound, min_capacity
from ppsolve.problem import load_problem


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("bound", help="lower bound on the makespan and the least memory cap that works")
    parser.add_argument("problem", help="problem file (ppsolve/problem@1)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    return parser


def run(args: argparse.Namespace) -> int:
    problem = load_problem(args.problem)
    bound = makespan_lower_bound(problem)
    no_off = min_capacity(problem, offload=False)
    with_off = min_capacity(problem, offload=True) if problem.can_offload else None
    short = capacity_shortfalls(problem)
    if args.json:
        print(json.dumps({
            "makespan_lower_bound": bound.value, "binding": bound.binding,
            "device_bounds": list(bound.device_bounds), "memory_bounds": list(bound.memory_bounds),
            "idle_bounds": list(bound.idle_bounds), "admission_bounds": list(bound.admission_bounds),
            "sequence_bounds": list(bound.sequence_bounds),
            "critical_path": bound.critical_path,
            "min_capacity": {"no_offload": no_off, "offload": with_off},
            "capacity": list(problem.capacity), "feasible": not short,
        }, indent=1))
        return 0
    print(f"makespan >= {bound.value:g}  ({bound.binding})")
    print(f"  critical path of one microbatch: {bound.critical_path:g}")
    print("  per device (head + load + tail): " + ", ".join(f"{b:g}" for b in bound.device_bounds))
    if any(bound.memory_bounds):
        print("  per device (memory cap: round trips in flight, memory x time): "
              + ", ".join(f"{b:g}" for b in bound.memory_bounds))
    if bound.idle_bounds != bound.device_bounds:
        print("  per device (load + idle forced by memory and host link before the first B and after the last F): "
              + ", ".join(f"{b:g}" for b in bound.idle_bounds))
    if any(bound.admission_bounds):
        print("  per device (load after the cap of stage 0's device spaces the microbatches): "
              + ", ".join(f"{b:g}" for b in bound.admission_bounds))
    if any(bound.sequence_bounds):
        print("  per device (its ops with microbatches in order, earliest starts and tails, one machine): "
              + ", ".join(f"{b:g}" for b in bound.sequence_bounds))
    print("least memory capacity per device: " + ", ".join(f"{c:g}" for c in no_off) + " without offload"
          + ("; at least " + ", ".join(f"{c:g}" for c in with_off) + " with offload" if with_off else ""))
    caps = ", ".join("unbounded" if c is None else f"{c:g}" for c in problem.capacity)
    print(f"capacity: {caps}" + ("" if not short else "  -> INFEASIBLE on device(s) "
                                 + ", ".join(str(d) for d, _, _ in short)))
    return 0
