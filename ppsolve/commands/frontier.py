"""``ppsolve frontier PROBLEM.json [--capacities auto|LIST] [--time-limit S] -o frontier.png``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ppsolve.solvers import DEFAULT_SOLVER


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "frontier", help="the memory/time trade-off: the solver's makespan at each memory capacity",
        description="Runs the solver at capacities from the least feasible to unbounded (the same on every "
                    "device), draws its makespan against capacity with the baselines as points at their own "
                    "peak memory, and writes the figures as CSV beside the image. A problem with an offload link "
                    "or a recompute block also gets the curves with fewer levers (with both: offload only and "
                    "recompute only, whose answers at each capacity the solve with both starts from, so it is "
                    "never longer; then no lever).")
    parser.add_argument("problem", help="problem file (ppsolve/problem@1)")
    parser.add_argument("--capacities", default="auto",
                        help="'auto' (least feasible .. unbounded peak) or a list like 4,6,8,inf")
    parser.add_argument("--points", type=int, default=7, help="capacities for 'auto' besides unbounded (default 7)")
    parser.add_argument("--time-limit", type=float, default=10.0, help="solver seconds per capacity (default 10)")
    parser.add_argument("--threads", type=int, default=None, help="solver threads")
    parser.add_argument("--solver", default=DEFAULT_SOLVER, help=f"solver method (default {DEFAULT_SOLVER})")
    parser.add_argument("--no-compare", action="store_true",
                        help="only the problem's own curve: skip the curves with fewer memory levers (offload "
                             "only, recompute only, no lever)")
    parser.add_argument("--no-baselines", action="store_true", help="do not run the baselines")
    parser.add_argument("-o", "--output", required=True, help="image: .png, .svg or .pdf")
    parser.add_argument("--csv", help="CSV file (default: the image's path with .csv)")
    return parser


def parse_capacities(text: str) -> list[float | None] | None:
    """'auto' -> None; '4,6,8,inf' -> [4.0, 6.0, 8.0, None] ('inf'/'none'/'unbounded' = unbounded)."""
    from ppsolve.commands.flags import positive_number

    if text.strip().lower() == "auto":
        return None
    return [None if part.strip().lower() in ("inf", "none", "unbounded")
            else positive_number(part.strip(), "--capacities", "'auto' or numbers separated by commas")
            for part in text.split(",")]


def run(args: argparse.Namespace) -> int:
    from ppsolve.errors import InputError
    from ppsolve.limits import check_seconds
    from ppsolve.studies.frontier import compute_frontier, write_frontier_csv
    from ppsolve.plot.figure import image_format
    from ppsolve.plot.frontier_plot import plot_frontier
    from ppsolve.problem import load_problem

    from ppsolve.jsonio import require_directory

    image_format(args.output, "--output")
    require_directory(args.output)
    if args.csv:
        require_directory(args.csv)
    check_seconds(args.time_limit, "--time-limit")
    if not 2 <= args.points <= 40:
        raise InputError("--points", f"must be between 2 and 40, got {args.points}")
    capacities = parse_capacities(args.capacities)
    problem = load_problem(args.problem)

    def report(point) -> None:
        if sys.stderr.isatty():
            cap = "unbounded" if point.capacity is None else f"{point.capacity:g}"
            found = "-" if point.makespan is None else f"{point.makespan:g}"
            print(f"  {point.curve:>17} capacity {cap:>9}: {point.status:<10} makespan {found}", file=sys.stderr)

    frontier = compute_frontier(problem, capacities, time_limit=args.time_limit, points=args.points,
                                solver_name=args.solver, compare=not args.no_compare,
                                baselines=not args.no_baselines, threads=args.threads, on_point=report)
    csv_path = Path(args.csv) if args.csv else Path(args.output).with_suffix(".csv")
    write_frontier_csv(frontier, csv_path)
    plot_frontier(frontier, args.output)
    for point in frontier.points:
        if point.curve == "baseline":
            continue
        cap = "unbounded" if point.capacity is None else f"{point.capacity:g}"
        best = "-" if point.best_makespan is None else f"{point.best_makespan:g}"
        print(f"{point.curve:>17}  capacity {cap:>9}  {point.status:<10}  makespan {best}")
    print(f"wrote {args.output} and {csv_path}")
    return 0
