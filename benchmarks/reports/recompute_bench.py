"""The memory levers measured in one run: full recompute, per-stage recompute, offload only,
recompute only, and offload with recompute, on the bundled realistic problems.

    python -m benchmarks.reports.recompute_bench [--time-limit 300] [--threads 2]
        [--section docs/bench/sections/50-recompute.md] [--json docs/bench/recompute.json] [problem.json ...]

By default the problem of the recompute issue, instances/realistic/llama8b-like-8x32-cap20-decide.json
(``--all``: every problem of instances/realistic/). Each problem file has a ``recompute`` block
(``ppsolve problem ... --recompute decide``) and an offload link. For each problem, one after another:

* the recompute baselines: Megatron's full recompute (``1f1b-recompute``: every activation recomputed
  right before its backward; with a fused backward too, Megatron's default, where W cannot be
  deferred) and per-stage recompute in the manner of AdaPipe (``1f1b-adapipe``), with their
  interleaved forms on v = 2;
* three solves of ``--time-limit`` seconds each: offload only (the problem without its recompute
  block), recompute only (without its offload link), and offload and recompute (the problem as it is).

Every schedule is checked (``ppsolve.checker.check``). The figures: makespan, the ratio to the better
single lever (offload only or recompute only, whichever is shorter), the gap to the problem's lower
bound (the bound the offload-and-recompute solve reports, valid with both levers), what was
recomputed and offloaded. The section says where the solve is not at most the better single lever.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass

from benchmarks import harness
from benchmarks.harness import ROOT, fmt
from ppsolve.checker import check
from ppsolve.errors import PpsolveError
from ppsolve.methods import SKIPPED, RunOptions, get_method, run_and_check
from ppsolve.problem import Problem, load_problem, problem_from_dict
from ppsolve.schedule import Schedule
from ppsolve.solvers import SolveOptions, solve

DEFAULT = ROOT / "instances" / "realistic" / "llama8b-like-8x32-cap20-decide.json"
BASELINES = ("1f1b-recompute", "interleaved-1f1b-recompute", "1f1b-adapipe", "interleaved-1f1b-adapipe")
SOLVES = ("offload only", "recompute only", "offload + recompute")


@dataclass
class Plan:
    """One plan of one problem: how it was made and what it costs."""

    problem: str
    plan: str
    makespan: float | None = None
    recomputed: int = 0
    recompute_ms: float = 0.0
    offloaded: float = 0.0
    status: str = ""
    lower_bound: float | None = None
    seconds: float = 0.0
    valid: bool = False
    note: str = ""


def _plan(name: str, label: str, schedule: Schedule, seconds: float, status: str = "heuristic",
          lower_bound: float | None = None) -> Plan:
    report = check(schedule)
    return Plan(name, label, schedule.makespan, schedule.recomputed, schedule.recompute_time, schedule.offloaded,
                status, lower_bound, seconds, report.ok,
                "" if report.ok else f"{len(report.violations)} violation(s): {report.violations[0].message}")


def fused(problem: Problem) -> Problem:
    """The same problem with a fused backward (Megatron's default: B and W in one op)."""
    data = problem.to_dict()
    data["backward"] = "fused"
    return problem_from_dict(data)


def baseline_plans(name: str, problem: Problem) -> list[Plan]:
    out = []
    variants = [("", problem), (" (fused backward)", fused(problem))] if problem.split_backward else [("", problem)]
    for method in BASELINES:
        for suffix, variant in variants:
            if suffix and "adapipe" in method:
                continue
            outcome = run_and_check(get_method(method), variant, RunOptions(), checked=False)
            if outcome.status == SKIPPED:
                continue
            if outcome.schedule is None:
                out.append(Plan(name, method + suffix, note=outcome.note.splitlines()[0]))
                continue
            out.append(_plan(name, method + suffix, outcome.schedule, outcome.seconds))
    return out


def solve_plans(name: str, problem: Problem, time_limit: float, threads: int | None) -> list[Plan]:
    variants = {"offload only": problem.replace(recompute=None), "recompute only": problem.replace(offload=None),
                "offload + recompute": problem}
    out = []
    for label in SOLVES:
        started = time.perf_counter()
        try:
            result = solve(variants[label], SolveOptions(time_limit=time_limit, threads=threads))
        except PpsolveError as exc:
            out.append(Plan(name, label, note=str(exc).splitlines()[0]))
            continue
        out.append(_plan(name, label, result.schedule, time.perf_counter() - started, result.status,
                         result.lower_bound))
    return out


def section(plans: list[Plan], time_limit: float, threads: int | None, command: str) -> str:
    lines = [
        "## Memory levers: recompute beside offload",
        "",
        f"Measured by `{command}` (one run; each solve {time_limit:g} s, "
        f"{'all cores' if threads is None else f'{threads} thread(s)'}; 2-core machine). "
        "Full recompute is Megatron's: every activation recomputed right before its backward, with the "
        "problem's split backward and with a fused one (Megatron's default). Per stage is AdaPipe's "
        "choice: the fewest stages fully recomputed that fit the cap, cheapest recompute per GiB saved first. "
        "The bound is the lower bound of the offload + recompute solve: no schedule with any mix of "
        "keeping, offloading and recomputing is faster. Times in ms, memory in GiB.",
        "",
    ]
    for name in dict.fromkeys(p.problem for p in plans):
        mine = [p for p in plans if p.problem == name]
        solved = {p.plan: p for p in mine if p.plan in SOLVES and p.makespan is not None}
        singles = [solved[k].makespan for k in ("offload only", "recompute only") if k in solved]
        best_single = min(singles) if singles else None
        both = solved.get("offload + recompute")
        bound = both.lower_bound if both else None
        lines += [f"### {name}", "",
                  "| plan | makespan | / better single lever | gap to bound | recomputed (R ops, ms) | "
                  "offloaded | status | s | valid |",
                  "|---|---:|---:|---:|---:|---:|---|---:|---|"]
        for p in mine:
            if p.makespan is None:
                lines.append(f"| {p.plan} | - | | | | | {p.note} | | |")
                continue
            ratio = fmt(p.makespan / best_single, ".3f") if best_single else "-"
            gap = fmt(100 * (p.makespan - bound) / p.makespan, ".1f") + " %" if bound else "-"
            lines.append(f"| {p.plan} | {p.makespan:.2f} | {ratio} | {gap} | {p.recomputed} ({p.recompute_ms:.0f}) "
                         f"| {p.offloaded:.3f} | {p.status} | {p.seconds:.0f} | {'yes' if p.valid else 'NO'} |")
        if both and best_single:
            verdict = "at most" if both.makespan <= best_single + 1e-6 else "ABOVE"
            lines += ["", f"Offload + recompute is {verdict} the better single lever "
                          f"({both.makespan:.2f} against {best_single:.2f}: "
                          f"{100 * (1 - both.makespan / best_single):.1f} % shorter); bound {fmt(bound, '.2f')}."]
            full = [p.makespan for p in mine if p.plan.startswith(("1f1b-recompute", "interleaved-1f1b-recompute"))
                    and p.makespan is not None]
            offload = solved.get("offload only")
            if full and offload:
                other = min(min(full), offload.makespan)
                lines.append(f"Against the better of Megatron's full recompute (best of its rows: {min(full):.2f}) "
                             f"and offload only ({offload.makespan:.2f}): {100 * (1 - both.makespan / other):.1f} % "
                             f"shorter, {100 * (both.makespan - bound) / both.makespan:.1f} % above the bound.")
        lines.append("")
    return "\n".join(lines)


def _command(args) -> str:
    """The command that measured the figures (the options that change them)."""
    return harness.command(__spec__, *(["--all"] if args.all else []), "--time-limit", f"{args.time_limit:g}",
                           *(["--threads", str(args.threads)] if args.threads else []),
                           *(str(p.relative_to(ROOT)) if p.is_absolute() and ROOT in p.parents else str(p)
                             for p in args.problems))


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__, problems=True, time_limit=300.0, threads=None, section=None, json=None,
                            render=None)
    parser.add_argument("--all", action="store_true", help="every problem of instances/realistic/")
    args = parser.parse_args(argv)
    if args.render:  # with that run's --time-limit and --threads
        plans = [Plan(**row) for row in json.loads(args.render.read_text())]
    else:
        paths = args.problems or (harness.problem_paths([], ROOT / "instances" / "realistic") if args.all
                                  else [DEFAULT])
        plans = []
        for path in paths:
            problem = load_problem(path)
            for plan in baseline_plans(path.stem, problem) + solve_plans(path.stem, problem, args.time_limit,
                                                                         args.threads):
                plans.append(plan)
                print(f"{path.stem:45s} {plan.plan:38s} {fmt(plan.makespan, '.2f'):>10s} {plan.status:9s} "
                      f"R {plan.recomputed:4d} off {plan.offloaded:8.3f} {plan.seconds:6.0f}s {plan.note}",
                      flush=True)
    return harness.publish(section(plans, args.time_limit, args.threads, _command(args)), args.section,
                           None if args.render else args.json, [asdict(p) for p in plans])


if __name__ == "__main__":
    raise SystemExit(main())
