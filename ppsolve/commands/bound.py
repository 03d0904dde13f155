"""``ppsolve bound PROBLEM.json``: makespan lower bound and least feasible memory caps."""

from __future__ import annotations

import argparse
import json
import sys
import time

from ppsolve.bounds import makespan_lower_bound, min_capacity, require_feasible_capacity
from ppsolve.errors import InputError
from ppsolve.limits import check_seconds
from ppsolve.problem import load_problem
from ppsolve.tolerance import EPS


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("bound", help="lower bound on the makespan and the least memory cap that works",
                                   description="Exit 0: figures printed; 2: bad input; 3: infeasible (says the "
                                               "least capacity that could work).")
    parser.add_argument("problem", help="problem file (ppsolve/problem@1)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--split", type=float, metavar="S", default=None,
                        help="also the split bound: CP-SAT proves smaller problems for up to S seconds "
                             "(no offload; docs/solver.md)")
    parser.add_argument("--threads", type=int, metavar="N", default=None,
                        help="CP-SAT threads of --split (default: all cores)")
    return parser


def _split_json(split) -> dict | None:
    if split is None:
        return None
    best = split.best

    def sizes(found):
        return [{"microbatches": n, "bound": value, "proven": proven} for n, (value, proven) in found.items()]

    return {"value": best.value if best else None, "reason": split.reason, "seconds": split.seconds,
            "interrupted": split.interrupted,
            "chain": None if best is None else {"heads": list(best.heads), "entries": list(best.entries),
                                                "rest_microbatches": best.rest_size, "rest": best.rest,
                                                "proven": best.proven},
            "entries": sizes(split.entries), "rests": sizes(split.rests)}


def _split_line(split) -> str:
    if split.best is None:
        return f"  split into smaller problems: not tried ({split.reason})"
    b = split.best
    stop = ", interrupted: the sizes done before Ctrl-C" if split.interrupted else ""
    return (f"  split into smaller problems (CP-SAT, {split.seconds:.0f} s{stop}): {b.value:g} = {b.describe()} "
            f"(A(n): the least start of the last F(0) with n microbatches; OPT(k): the least makespan with k"
            f"{'' if b.proven else '; some sides are proven bounds, not optima'})")


def _progress(began: float):
    """A line on stderr per smaller problem done, so a long --split is not silent."""
    def report(name: str, size: int, bound: float, proven: bool) -> None:
        print(f"  split: {name}({size}) {'=' if proven else '>='} {bound:g}  "
              f"({time.monotonic() - began:.0f} s)", file=sys.stderr, flush=True)
    return report


def run(args: argparse.Namespace) -> int:
    problem = load_problem(args.problem)
    if args.split is not None:
        check_seconds(args.split, "split")
    if args.threads is not None and args.threads < 1:
        raise InputError("threads", f"must be >= 1, got {args.threads}")
    require_feasible_capacity(problem)  # as solve: exit 3, one line naming the least capacity that could work
    bound = makespan_lower_bound(problem)
    split = None
    if args.split is not None:
        from ppsolve.solvers.cpsat.split_bound import split_bound  # CP-SAT: imported only when asked for

        split = split_bound(problem, args.split, args.threads, report=_progress(time.monotonic()))
    raised = split is not None and split.best is not None and split.best.value > bound.value * (1 + EPS)
    value = split.best.value if raised else bound.value
    no_off = min_capacity(problem, offload=False)
    with_off = min_capacity(problem, offload=True) if problem.can_offload else None
    with_rec = min_capacity(problem, offload=problem.can_offload, recompute=True) if problem.can_recompute else None
    if args.json:
        print(json.dumps({
            "makespan_lower_bound": value, "binding": "split" if raised else bound.binding,
            "split": _split_json(split),
            "device_bounds": list(bound.device_bounds), "memory_bounds": list(bound.memory_bounds),
            "idle_bounds": list(bound.idle_bounds), "admission_bounds": list(bound.admission_bounds),
            "sequence_bounds": list(bound.sequence_bounds),
            "recompute_bounds": list(bound.recompute_bounds), "forced_recompute": list(bound.forced_recompute),
            "drain_bounds": list(bound.drain_bounds), "last_backward_bounds": list(bound.last_backward_bounds),
            "slot_bounds": list(bound.slot_bounds),
            "critical_path": bound.critical_path,
            "min_capacity": {"no_offload": no_off, "offload": with_off, "all_levers": with_rec},
            "capacity": list(problem.capacity), "feasible": True,
        }, indent=1))
        return 0
    binding = "split into smaller problems, proven by CP-SAT" if raised else bound.binding
    print(f"makespan >= {value:g}  ({binding})")
    which = "the longest" if problem.per_microbatch else "one"
    print(f"  critical path of {which} microbatch: {bound.critical_path:g}")
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
    if any(bound.recompute_bounds):
        print("  per device (load + the least recompute its cap forces, memory x time with the host link): "
              + ", ".join(f"{b:g}" for b in bound.recompute_bounds))
        print("  least recompute time per device in a schedule that short (forced by its cap): "
              + ", ".join(f"{r:.4g}" for r in bound.forced_recompute))
    if any(bound.drain_bounds):
        print("  per device (load + forced idle, the recompute and reloads after the last F paid for): "
              + ", ".join(f"{b:g}" for b in bound.drain_bounds))
    if any(b > d + EPS for b, d in zip(bound.last_backward_bounds, bound.device_bounds)):
        print("  per device (load + forced idle before the first B + the tail after the last B that only the W its cap "
              "holds fill): "
              + ", ".join(f"{b:g}" for b in bound.last_backward_bounds))
    if any(bound.slot_bounds):
        print("  per device (load + recompute, against the activations its cap lets it hold at once; 0: not above the "
              "rest): " + ", ".join(f"{b:g}" for b in bound.slot_bounds))
    if split is not None:
        print(_split_line(split))
    print("least memory capacity per device: " + ", ".join(f"{c:g}" for c in no_off) + " without offload"
          + ("; at least " + ", ".join(f"{c:g}" for c in with_off) + " with offload" if with_off else "")
          + ("; at least " + ", ".join(f"{c:g}" for c in with_rec)
             + (" with offload and recompute" if with_off else " with recompute") if with_rec else ""))
    caps = ", ".join("unbounded" if c is None else f"{c:g}" for c in problem.capacity)
    print(f"capacity: {caps}")
    return 0
