"""``ppsolve baseline PROBLEM.json --method NAME -o SCHEDULE.json`` and ``ppsolve baseline --list``."""

from __future__ import annotations

import argparse
import json
import sys

from ppsolve.checker import check
from ppsolve.jsonio import require_directory
from ppsolve.methods import RunOptions, all_methods, get_method
from ppsolve.problem import load_problem


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "baseline", help="build a published pipeline schedule (1f1b, zb-h1, zb-v, po-f, greedy, ...)",
        description="Exit 0: written and checked; 2: bad input or the method does not apply; "
                    "3: the method needs more memory than the capacity.")
    parser.add_argument("problem", nargs="?", help="problem file (ppsolve/problem@1)")
    parser.add_argument("--method", "-m", help="baseline method name (see --list)")
    parser.add_argument("-o", "--output", help="schedule file to write (ppsolve/schedule@1)")
    parser.add_argument("--list", action="store_true", help="list the baseline methods and what they need")
    parser.add_argument("--ignore-capacity", action="store_true",
                        help="build the method's schedule even when it breaks the memory cap (and say so)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    return parser


def _list() -> int:
    methods = all_methods("baseline")
    width = max(len(m.name) for m in methods)
    req_width = max(len(m.requirements) for m in methods)
    for m in methods:
        print(f"{m.name:<{width}}  {m.requirements:<{req_width}}  {m.description}")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.list:
        return _list()
    missing = [flag for flag, value in (("PROBLEM", args.problem), ("--method", args.method), ("-o", args.output))
               if not value]
    if missing:
        print(f"ppsolve baseline: error: {', '.join(missing)} required (or use --list)", file=sys.stderr)
        return 2
    require_directory(args.output)
    problem = load_problem(args.problem)
    method = get_method(args.method)
    if method.family != "baseline":
        print(f"ppsolve baseline: error: {method.name} is a {method.family}, not a baseline "
              f"(see ppsolve baseline --list)", file=sys.stderr)
        return 2
    schedule = method.run(problem, RunOptions(ignore_capacity=args.ignore_capacity))
    schedule.save(args.output)
    report = check(schedule)
    broken = bool(schedule.method.extra.get("capacity_broken"))
    gap = schedule.gap
    summary = {
        "method": schedule.method.name, "output": args.output, "makespan": schedule.makespan,
        "lower_bound": schedule.method.lower_bound, "gap": gap, "bubble_ratio": schedule.bubble_ratio,
        "peak_memory": schedule.peak_memory, "capacity": list(problem.capacity), "offloaded": schedule.offloaded,
        "offloaded_by_stage": schedule.offloaded_by_stage(), "recomputed": schedule.recomputed,
        "recomputed_by_stage": schedule.recomputed_by_stage(),
        "capacity_broken": broken, "valid": report.valid, "executable": report.executable,
        "seconds": schedule.method.seconds,
    }
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        peaks = ", ".join(f"{p:g}" for p in schedule.peak_memory)
        gap_text = "n/a" if gap is None else f"{gap:.1%}"
        print(f"{args.output}: {schedule.method.name}, makespan {schedule.makespan:g} "
              f"(bound {schedule.method.lower_bound:g}, gap {gap_text}), bubble {schedule.bubble_ratio:.1%}, "
              f"peak memory [{peaks}], offloaded {schedule.offloaded:g}"
              + (f", recomputed {schedule.recomputed}" if problem.recompute is not None else ""))
        if schedule.offloaded:
            print(f"to host memory: {schedule.describe_offload()}")
        if schedule.recomputed:
            print(f"recomputed: {schedule.describe_recompute()}")
        if broken:
            devices = ", ".join(str(d) for d in schedule.method.extra.get("capacity_broken_on", []))
            print(f"warning: this schedule breaks the memory cap on device(s) {devices} (--ignore-capacity)")
    problems = [v for v in report.violations
                if not (broken and (v.rule == "memory" or (v.rule == "retime" and "capacity" in v.message)))]
    if problems:
        for violation in problems[:5]:
            print(violation.render(), file=sys.stderr)
        return 1
    return 0
