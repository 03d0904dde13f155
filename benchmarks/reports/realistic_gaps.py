"""The solver's gap on the bundled realistic problems, beside the published plans with recompute.

    python -m benchmarks.reports.realistic_gaps [--time-limit 300] [--threads 2] [--seed 1]
        [--section docs/bench/sections/52-realistic-gaps.md] [--json docs/bench/realistic_gaps.json]
        [--previous OLD.json [--previous-run TEXT]] [problem.json ...]

Every problem of instances/realistic/ (8B-like and 13B-like on 8 H100s, linear and v = 2, three activation
budgets each, recompute and offload allowed) by default. For each: Megatron's full recompute and AdaPipe-like
per-stage recompute (``recompute_bench.baseline_plans``: the best of their rows), then one solve of the problem
as it is (offload and recompute), its makespan, its proven lower bound and the gap between them. Every schedule
is checked. The summary gives the median and the largest gap. ``--previous`` puts an earlier run's solve and
bound (its ``--json`` file, e.g. ``git show COMMIT:docs/bench/realistic_gaps.json``) beside each row, with
``--previous-run`` saying what that run was.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks import harness
from benchmarks.harness import ROOT, fmt
from benchmarks.reports.recompute_bench import baseline_plans
from ppsolve.checker import check
from ppsolve.errors import PpsolveError
from ppsolve.problem import load_problem
from ppsolve.solvers import SolveOptions, solve
from ppsolve.solvers.settings import PhaseSettings, Settings

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
    previous_makespan: float | None = None  # an earlier run's (--previous)
    previous_bound: float | None = None

    @property
    def gap(self) -> float | None:
        if self.makespan is None or self.lower_bound is None:
            return None
        return max(0.0, self.makespan - self.lower_bound) / self.makespan  # a bound met up to rounding: 0


def _best(plans, names) -> float | None:
    found = [p.makespan for p in plans if p.plan.split(" (")[0] in names and p.makespan is not None and p.valid]
    return min(found, default=None)


def measure(path, time_limit: float, threads: int | None, seed: int, settings: Settings = Settings()) -> Row:
    problem = load_problem(path)
    plans = baseline_plans(path.stem, problem)
    row = Row(path.stem, _best(plans, FULL), _best(plans, PER_STAGE))
    started = time.perf_counter()
    try:
        result = solve(problem, SolveOptions(time_limit=time_limit, threads=threads, seed=seed, settings=settings))
    except PpsolveError as exc:
        row.note = str(exc).splitlines()[0]
        return row
    row.seconds = time.perf_counter() - started
    row.makespan, row.lower_bound, row.status = result.schedule.makespan, result.lower_bound, result.status.value
    row.valid = check(result.schedule).ok
    return row


def section(rows: list[Row], command: str, previous_run: str = "") -> str:
    before = any(r.previous_makespan is not None for r in rows)
    lines = ["## The solver's gap on the realistic problems", "",
             f"Measured by `{command}` (one run, one solve per problem; 2-core machine). Offload and recompute "
             "allowed; the bound is the solve's proven lower bound. Times in ms."
             + (f" The columns *before* are {previous_run}." if before and previous_run else ""), "",
             "| problem | Megatron full recompute | AdaPipe-like | " + ("solve before | bound before | " if before else "")
             + "solve | bound | gap | status | s | valid |",
             "|---|---:|---:|" + ("---:|---:|" if before else "") + "---:|---:|---:|---|---:|---|"]
    for r in rows:
        then = f"{fmt(r.previous_makespan, '.2f')} | {fmt(r.previous_bound, '.2f')} | " if before else ""
        if r.makespan is None:
            lines.append(f"| {r.problem} | {fmt(r.megatron_full, '.2f')} | {fmt(r.adapipe_like, '.2f')} | {then}- | | | "
                         f"{r.note} | | |")
            continue
        lines.append(f"| {r.problem} | {fmt(r.megatron_full, '.2f')} | {fmt(r.adapipe_like, '.2f')} | {then}"
                     f"{r.makespan:.2f} | {r.lower_bound:.2f} | {100 * r.gap:.1f} % | {r.status} | {r.seconds:.0f} | "
                     f"{'yes' if r.valid else 'NO'} |")
    gaps = [r.gap for r in rows if r.gap is not None]
    if gaps:
        lines += ["", f"Gap over {len(gaps)} problems: median {100 * statistics.median(gaps):.1f} %, "
                      f"largest {100 * max(gaps):.1f} %. Which bound binds on each: `ppsolve bound PROBLEM`; the "
                      "figures re-render from the JSON with `--render docs/bench/realistic_gaps.json`. A solve "
                      "with more than one thread does not repeat itself; how far repeated runs of the hardest "
                      "problems spread: [docs/solver.md](docs/solver.md#large-problems-large-neighbourhood-search) (drain windows)."]
    return "\n".join(lines) + "\n"


def _command(args) -> str:
    return harness.command(__spec__, "--time-limit", f"{args.time_limit:g}",
                           *(["--threads", str(args.threads)] if args.threads else []), "--seed", str(args.seed),
                           *(["--no-mixed-plans"] if args.no_mixed_plans else []),
                           *(str(p.relative_to(ROOT)) if p.is_absolute() and ROOT in p.parents else str(p)
                             for p in args.problems))


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__, problems=True, time_limit=300.0, threads=None, section=None, json=None,
                            render=None)
    parser.add_argument("--seed", type=int, default=1, help="the solver's seed")
    parser.add_argument("--previous", type=Path, help="an earlier run's --json file: its solve and bound beside each row")
    parser.add_argument("--previous-run", default="", help="what that run was (a sentence for the section)")
    parser.add_argument("--no-mixed-plans", action="store_true",
                        help="the warm start's plans with both levers off (PhaseSettings(mixed_plans=False))")
    args = parser.parse_args(argv)
    settings = Settings(phases=PhaseSettings(mixed_plans=False)) if args.no_mixed_plans else Settings()
    if args.render:  # the rows hold an earlier run's figures already
        rows = [Row(**row) for row in json.loads(args.render.read_text())]
    else:
        earlier = {row["problem"]: row for row in json.loads(args.previous.read_text())} if args.previous else {}
        rows = []
        for path in harness.problem_paths(args.problems, ROOT / "instances" / "realistic"):
            rows.append(measure(path, args.time_limit, args.threads, args.seed, settings))
            r = rows[-1]
            if r.problem in earlier:
                r.previous_makespan, r.previous_bound = earlier[r.problem]["makespan"], earlier[r.problem]["lower_bound"]
            print(f"{r.problem:48s} {fmt(r.makespan, '.2f'):>10s} bound {fmt(r.lower_bound, '.2f'):>10s} "
                  f"gap {fmt(None if r.gap is None else 100 * r.gap, '.1f'):>5s} % {r.seconds:5.0f}s {r.note}",
                  flush=True)
    return harness.publish(section(rows, _command(args), args.previous_run), args.section, None if args.render else args.json,
                           [asdict(r) for r in rows])


if __name__ == "__main__":
    raise SystemExit(main())
