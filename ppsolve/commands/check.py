"""``ppsolve check SCHEDULE.json``: validate a schedule against SPEC.md and re-time it."""

from __future__ import annotations

import argparse
import json

from ppsolve.checker import check
from ppsolve.schedule import load_schedule


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "check", help="validate a schedule file and re-time it as a runtime would",
        description="Exit 0: valid and executable; 1: violations; 2: unreadable or malformed input.")
    parser.add_argument("schedule", help="schedule file (ppsolve/schedule@1)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--max-violations", type=int, default=20, help="how many violations to print (text mode)")
    return parser


def run(args: argparse.Namespace) -> int:
    schedule = load_schedule(args.schedule)
    report = check(schedule)
    if args.json:
        print(json.dumps(report.to_dict(), indent=1))
        return 0 if report.ok else 1
    peaks = ", ".join(f"{p:g}" for p in report.peak_memory)
    stopped = " (interrupted: the best found before Ctrl-C)" if schedule.method.interrupted else ""
    print(f"{args.schedule}: method {schedule.method.name}{stopped}, makespan {report.makespan:g}, "
          f"bubble {report.bubble_ratio:.1%}, peak memory [{peaks}], offloaded {report.offloaded:g}, "
          f"recomputed {report.recomputed}")
    if report.retimed_makespan is not None:
        re_peaks = ", ".join(f"{p:g}" for p in report.retimed_peak_memory)
        print(f"re-timed by the runtime rules: makespan {report.retimed_makespan:g}, peak memory [{re_peaks}]")
    for warning in report.warnings:
        print(f"warning: {warning}")
    for violation in report.violations[: args.max_violations]:
        print(violation.render())
    if len(report.violations) > args.max_violations:
        print(f"... {len(report.violations) - args.max_violations} more violations")
    verdict = "valid and executable" if report.ok else (
        "INVALID" if not report.valid else "valid as planned but NOT executable as planned")
    print(f"{verdict}: {len(report.violations)} violation(s)")
    return 0 if report.ok else 1
