"""``ppsolve solve PROBLEM.json -o SCHEDULE.json``: an optimal (or best found) schedule (CP-SAT or MILP)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from ppsolve.errors import InputError
from ppsolve.jsonio import read_json, require_directory
from ppsolve.planning import solve_result
from ppsolve.problem import load_problem
from ppsolve.schedule import schedule_from_dict
from ppsolve.solvers.api import DEFAULT_SOLVER, DEFAULT_TIME_LIMIT
from ppsolve.solvers.backends import BACKENDS
from ppsolve.units import warn as warn_implausible

# Of --time-limit, the share (at most AFTER_MAX seconds) kept after the solve for writing the file and
# comparing with the published schedules (the comparison is skipped when it does not fit).
AFTER_SHARE = 0.1
AFTER_MAX = 5.0


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "solve", help="find an optimal schedule (order, timing, selective offload) and prove its bound",
        description="Exit 0: schedule written; 2: bad input; 3: infeasible (says the least capacity that could "
                    "work); 4: no schedule found within the time limit. Ctrl-C writes the best schedule so far.")
    parser.add_argument("problem", help="problem file (ppsolve/problem@1)")
    parser.add_argument("-o", "--output", required=True, help="schedule file to write (ppsolve/schedule@1)")
    parser.add_argument("--solver", choices=tuple(BACKENDS), default=DEFAULT_SOLVER,
                        help="the model: " + " or ".join(
                            f"{name} ({record.model}{', default' if name == DEFAULT_SOLVER else ''})"
                            for name, record in BACKENDS.items()))
    parser.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT, metavar="S",
                        help=f"seconds for the whole run, warm start included (default {DEFAULT_TIME_LIMIT:g})")
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="solver threads (default: all cores); 1 is deterministic for a given --seed "
                             "(the file notes when the time limit cut a step short instead)")
    parser.add_argument("--seed", type=int, default=0, metavar="K", help="random seed (default 0)")
    parser.add_argument("--objective", choices=("makespan", "memory"), default="makespan",
                        help="makespan (default; then the least overhead: recompute time, then offloaded "
                             "amount) or memory (least peak under a makespan limit)")
    parser.add_argument("--makespan-limit", default=None, metavar="T",
                        help="with --objective memory: an absolute makespan, or e.g. 1.02x of the best known one")
    parser.add_argument("--warm-start", default="auto", metavar="METHOD|auto|none|FILE",
                        help="hint the search with this baseline, the best applicable one (auto), nothing, "
                             "or a schedule file for the same pipeline (e.g. an earlier solve's, to go on from it)")
    parser.add_argument("--ignore-capacity", action="store_true", help="solve as if memory were unbounded")
    parser.add_argument("--quiet", action="store_true", help="no progress line on stderr")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    return parser


def _limit(text: str | None):
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return text  # validated by the solver ('1.02x')


def _warm_schedule(choice: str):
    """The schedule file ``--warm-start`` names (a path ending in .json, or an existing file), else None
    (a method name, ``auto`` or ``none``)."""
    if not (choice.lower().endswith(".json") or Path(choice).is_file()):
        return None
    return schedule_from_dict(read_json(choice, "warm-start"), "warm-start")


def _is_program() -> bool:
    """Whether this process is the ppsolve program itself (not a caller of ``main()``, such as a test run)."""
    program = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path()
    return program.name == "ppsolve" or (program.name == "__main__.py" and program.parent.name == "ppsolve")


def run(args: argparse.Namespace) -> int:
    if args.makespan_limit is not None and args.objective != "memory":
        raise InputError("--makespan-limit", "applies only with --objective memory")
    require_directory(args.output)
    problem = load_problem(args.problem)  # bad input is answered before the solver is even imported
    warn_implausible(problem)
    warm_schedule = _warm_schedule(args.warm_start)
    started = getattr(args, "started", None) or time.monotonic()  # cli.main: when the command began
    deadline = started + args.time_limit
    result = solve_result(
        problem, time_limit=args.time_limit, solver=args.solver, threads=args.threads, seed=args.seed,
        objective=args.objective, makespan_limit=_limit(args.makespan_limit),
        warm_start=args.warm_start if warm_schedule is None else warm_schedule, ignore_capacity=args.ignore_capacity,
        progress=None if args.quiet else sys.stderr, started=started,
        keep_after=min(AFTER_SHARE * args.time_limit, AFTER_MAX))
    schedule = result.schedule  # solve() returns only schedules that passed the checker
    schedule.save(args.output)
    advice, cut = None, False
    if not result.interrupted:
        advice, cut = _advice(args.problem, result, deadline)
    if cut:
        result.notes.append("no comparison with the published schedules: it did not fit in the time limit "
                            "(ppsolve bench compares them)")
    summary = {
        "output": args.output, "status": result.status.value, "makespan": schedule.makespan,
        "lower_bound": result.lower_bound, "gap": result.gap, "seconds": round(result.seconds, 3),
        "peak_memory": schedule.peak_memory, "capacity": list(schedule.problem.capacity),
        "offloaded": schedule.offloaded, "offloaded_by_stage": schedule.offloaded_by_stage(),
        "recomputed": schedule.recomputed, "recomputed_by_stage": schedule.recomputed_by_stage(),
        "interrupted": result.interrupted, "units": dict(zip(("time", "memory"), schedule.problem.units)),
        "from_warm_start": result.from_warm_start, "notes": result.notes,
    }
    if advice is not None:
        summary["advice"] = advice.to_dict()
    if args.json:
        print(json.dumps(summary, indent=1))
        return _done(result)
    peaks = ", ".join(f"{p:g}" for p in schedule.peak_memory)
    caps = ", ".join("-" if c is None else f"{c:g}" for c in schedule.problem.capacity)
    head = "interrupted: best so far" if result.interrupted else result.status.value
    time_unit, memory_unit = schedule.problem.units
    print(f"{args.output}: {head}, makespan {schedule.makespan:g}, lower bound {result.lower_bound:g} "
          f"({time_unit}), gap {result.gap:.2%}, {result.seconds:.1f} s")
    recomputed = f", recomputed {schedule.recomputed}" if schedule.problem.recompute is not None else ""
    print(f"peak memory [{peaks}] (capacity [{caps}]) {memory_unit}, offloaded {schedule.offloaded:g}{recomputed}, "
          f"bubble {schedule.bubble_ratio:.1%}")
    if schedule.offloaded:
        print(f"to host memory: {schedule.describe_offload()}")
    if schedule.recomputed:
        print(f"recomputed: {schedule.describe_recompute()}")
    for note in result.notes:
        print(f"note: {note}")
    for line in advice.lines() if advice is not None else []:
        print(line)
    return _done(result)


def _advice(problem_path: str, result, deadline: float):
    """The comparison with the published schedules, if it ends by ``deadline`` (the time limit);
    (advice or None, whether it was cut short: then its thread runs on, and ``_done`` ends the process)."""
    from ppsolve.studies.advice import advise
    from ppsolve.solvers.api import wait_for

    advice, cut = wait_for(lambda: advise(problem_path, result.schedule, result.status, result.lower_bound),
                           lambda: time.monotonic() > deadline)
    result.abandoned = result.abandoned or cut
    return advice, cut


def _done(result) -> int:
    if result.interrupted or (result.abandoned and _is_program()):
        # After a stopped search, OR-Tools 9.15 sometimes aborts while the interpreter shuts down
        # ("terminate called without an active exception"), and a search left running in a thread
        # (HiGHS past its limit) aborts it too; the schedule is written, so leave now.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0
