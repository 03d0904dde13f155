"""``ppsolve bench [PROBLEM.json ... | DIR] --methods all|NAME,NAME --time-limit S --out DIR``.

Runs each method on each problem, checks every schedule, and writes results.csv,
results.md, ratio.png and memory_vs_makespan.png into the output directory.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ppsolve.methods import Method


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "bench", help="run methods on problems, check every schedule, write tables and plots",
        description="Directories are searched recursively for *.json problem files.")
    parser.add_argument("problems", nargs="*", help="problem files or directories (default: instances)")
    parser.add_argument("--methods", default="all", help="'all' or method names separated by commas")
    parser.add_argument("--time-limit", type=float, default=10.0, help="seconds per method and problem (solvers)")
    parser.add_argument("--threads", type=int, default=None, help="solver threads")
    parser.add_argument("--out", default="bench-out", help="output directory (default bench-out)")
    parser.add_argument("--save-schedules", action="store_true",
                        help="also write every schedule to OUT/schedules/PROBLEM/METHOD.json")
    parser.add_argument("--no-plots", action="store_true", help="skip the two PNG plots")
    parser.add_argument("--quiet", action="store_true", help="no progress bar and no table")
    return parser


def select_methods(spec: str) -> list[Method]:
    """'all', or comma-separated method names (unknown names are an error listing known ones)."""
    from ppsolve.errors import InputError, NotApplicableError
    from ppsolve.methods import all_methods, get_method

    if spec.strip().lower() == "all":
        methods = all_methods()
        if not methods:
            raise NotApplicableError("no methods are registered (install the baselines or solvers)")
        return methods
    names = [name.strip() for name in spec.split(",") if name.strip()]
    if not names:
        raise InputError("--methods", "give 'all' or method names separated by commas")
    try:
        return [get_method(name) for name in names]
    except NotApplicableError as exc:
        raise InputError("--methods", str(exc)) from None


def run(args: argparse.Namespace) -> int:
    from ppsolve.studies.bench import collect_problems, run_bench, write_csv, write_markdown
    from ppsolve.errors import InputError
    from ppsolve.limits import check_seconds
    from ppsolve.methods import RunOptions

    check_seconds(args.time_limit, "--time-limit")
    problems = collect_problems(args.problems or ["instances"])
    methods = select_methods(args.methods)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise InputError("--out", f"must be a directory, {out} is a file")
    out.mkdir(parents=True, exist_ok=True)  # the output directory is bench's own to create
    options = RunOptions(time_limit=args.time_limit, threads=args.threads, quiet=True)

    def save(row, schedule) -> None:
        if args.save_schedules:
            folder = out / "schedules" / row.problem
            folder.mkdir(parents=True, exist_ok=True)
            schedule.save(folder / f"{row.method}.json")

    total = len(problems) * len(methods)
    show = not args.quiet and sys.stderr.isatty()
    if show:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn("[bold]bench"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TextColumn("{task.description}"), console=Console(stderr=True), transient=True) as bar:
            task = bar.add_task("", total=total)
            rows = run_bench(problems, methods, options,
                             on_start=lambda p, m: bar.update(task, description=f"{p} / {m}"),
                             on_done=lambda row: bar.advance(task), on_schedule=save)
    else:
        rows = run_bench(problems, methods, options, on_schedule=save)

    write_csv(rows, out / "results.csv")
    write_markdown(rows, out / "results.md")
    written = ["results.csv", "results.md"]
    if not args.no_plots and any(r.valid for r in rows):
        from ppsolve.plot.bench_plot import write_bench_plots

        written += [p.name for p in write_bench_plots(rows, out)]
    if not args.quiet:
        _print_table(rows)
    bad = [r for r in rows if r.valid is False]
    print(f"{len(problems)} problem(s) x {len(methods)} method(s): {sum(r.valid is True for r in rows)} valid, "
          f"{sum(r.status == 'skipped' for r in rows)} skipped, {len(bad)} invalid, "
          f"{sum(r.status == 'infeasible' for r in rows)} refused over the memory cap, "
          f"{sum(r.status == 'error' for r in rows)} errors; wrote "
          + ", ".join(str(out / name) for name in written))
    return 1 if bad else 0


def _print_table(rows) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="ppsolve bench", show_lines=False)
    for name, justify in [("problem", "left"), ("method", "left"), ("status", "left"), ("makespan", "right"),
                          ("bound", "right"), ("ratio", "right"), ("bubble", "right"), ("peak mem", "right"),
                          ("offloaded", "right"), ("s", "right"), ("valid", "center")]:
        table.add_column(name, justify=justify)
    for r in rows:
        if not r.has_schedule:
            table.add_row(r.problem, r.method, f"[dim]{r.status}[/dim]", "", "", "", "", "", "", "", "",
                          style="dim")
            continue
        valid = "[green]yes[/green]" if r.valid else "[red]NO[/red]"
        table.add_row(r.problem, r.method, r.status, f"{r.makespan:g}", f"{r.lower_bound:g}", f"{r.ratio:.3f}",
                      f"{r.bubble_ratio:.1%}", f"{r.peak_memory:g}", f"{r.offloaded:g}", f"{r.seconds:.2f}", valid)
    console = Console()
    if not console.is_terminal:  # a log or a pipe: print whole cells rather than squeezing to 80 columns
        console = Console(width=200)
    console.print(table)
