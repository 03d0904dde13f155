"""The solver's gap on the bundled realistic problems, beside the published plans with recompute.

    python -m benchmarks.reports.realistic_gaps [--time-limit 300] [--threads 2] [--seed 1]
        [--section docs/bench/sections/52-realistic-gaps.md] [--json docs/bench/realistic_gaps.json]
        [problem.json ...]

Every problem of instances/realistic/ (8B-like and 13B-like on 8 H100s, linear and v = 2, three activation
budgets each, recompute and offload allowed) by default. For each: Megatron's full recompute and AdaPipe-like
per-stage recompute (``recompute_bench.baseline_plans``: the best of their rows), then one solve of the problem
as it is (offload and recompute), its makespan, its proven lower bound and the gap between them. Every schedule
is checked. The summary gives the median and the largest gap.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass

from benchmarks import harness
from benchmarks.harness import ROOT, fmt
from benchmarks.reports.recompute_bench import baseline_plans
from ppsolve.checker import check
from ppsolve.errors import PpsolveError
from ppsolve.problem import load_problem
from ppsolve.solvers import SolveOptions, solve

FULL = ("1f1b-recompute", "interleaved-1f1b-recompute")
PER_STAGE = ("1f1b-adapipe", "interleaved-1f1b-adapipe")


@dataclass
class Row:
    """One problem: the best published plans with recompute and the solve."""

    problem: str
    megatron_full: float | None = None
    adapipe_like: float | None = None
    makespan: float | None = None
    lower_bound: float | None = None
    status: str = ""
    seconds: float = 0.0
    valid: bool = False
    note: str = ""

    @property
    def gap(self) -> float | None:
        if self.makespan is None or self.lower_bound is None:
            return None
        return (self.makespan - self.lower_bound) / self.makespan


def _best(plans, names) -> float | None:
    found = [p.makespan for p in plans if p.plan.split(" (")[0] in names and p.makespan is not None and p.valid]
    return min(found, default=None)


def measure(path, time_limit: float, threads: int | None, seed: int) -> Row:
    problem = load_problem(path)
    plans = baseline_plans(path.stem, problem)
    row = Row(path.stem, _best(plans, FULL), _best(plans, PER_STAGE))
    started = time.perf_counter()
    try:
        result = solve(problem, SolveOptions(time_limit=time_limit, threads=threads, seed=seed))
    except PpsolveError as exc:
        row.note = str(exc).splitlines()[0]
        return row
    row.seconds = time.perf_counter() - started
    row.makespan, row.lower_bound, row.status = result.schedule.makespan, result.lower_bound, result.status.value
    row.valid = check(result.schedule).ok
    return row


def section(rows: list[Row], command: str) -> str:
    lines = ["## The solver's gap on the realistic problems", "",
             f"Measured by `{command}` (one run, one solve per problem; 2-core machine). Offload and recompute "
             "allowed; the bound is the solve's proven lower bound. Times in ms.", "",
             "| problem | Megatron full recompute | AdaPipe-like | solve | bound | gap | status | s | valid |",
             "|---|---:|---:|---:|---:|---:|---|---:|---|"]
    for r in rows:
        if r.makespan is None:
            lines.append(f"| {r.problem} | {fmt(r.megatron_full, '.2f')} | {fmt(r.adapipe_like, '.2f')} | - | | | "
                         f"{r.note} | | |")
            continue
        lines.append(f"| {r.problem} | {fmt(r.megatron_full, '.2f')} | {fmt(r.adapipe_like, '.2f')} | "
                     f"{r.makespan:.2f} | {r.lower_bound:.2f} | {100 * r.gap:.1f} % | {r.status} | {r.seconds:.0f} | "
                     f"{'yes' if r.valid else 'NO'} |")
    gaps = [r.gap for r in rows if r.gap is not None]
    if gaps:
        lines += ["", f"Gap over {len(gaps)} problems: median {100 * statistics.median(gaps):.1f} %, "
                      f"largest {100 * max(gaps):.1f} %."]
    return "\n".join(lines) + "\n"


def _command(args) -> str:
    return harness.command(__spec__, "--time-limit", f"{args.time_limit:g}",
                           *(["--threads", str(args.threads)] if args.threads else []), "--seed", str(args.seed),
                           *(str(p.relative_to(ROOT)) if p.is_absolute() and ROOT in p.parents else str(p)
                             for p in args.problems))


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__, problems=True, time_limit=300.0, threads=None, section=None, json=None,
                            render=None)
    parser.add_argument("--seed", type=int, default=1, help="the solver's seed")
    args = parser.parse_args(argv)
    if args.render:
        rows = [Row(**row) for row in json.loads(args.render.read_text())]
    else:
        rows = []
        for path in harness.problem_paths(args.problems, ROOT / "instances" / "realistic"):
            rows.append(measure(path, args.time_limit, args.threads, args.seed))
            r = rows[-1]
            print(f"{r.problem:48s} {fmt(r.makespan, '.2f'):>10s} bound {fmt(r.lower_bound, '.2f'):>10s} "
                  f"gap {fmt(None if r.gap is None else 100 * r.gap, '.1f'):>5s} % {r.seconds:5.0f}s {r.note}",
                  flush=True)
    return harness.publish(section(rows, _command(args)), args.section, None if args.render else args.json,
                           [asdict(r) for r in rows])


if __name__ == "__main__":
    raise SystemExit(main())
