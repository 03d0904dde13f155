"""CP-SAT against the MILP backend, side by side in one run: time to proof and gap at the limit.

    python -m benchmarks.reports.solver_compare --time-limit 20 --out docs/bench/solver_compare.md [instances/*.json]

Each backend solves each problem once through ``ppsolve.solvers.solve`` (the same warm start,
phases and checks); "proof" is the wall time of the run when it ended proven optimal (the
least-offload phase included), else "-"; the gap is against the reported lower bound; "engine"
is the one that searched (``method.engine``: HiGHS, or CBC when highspy is missing); "(least)"
marks an overhead (recompute time, then offloaded amount) proven the least at that makespan
(``method.least_overhead``; ``least_offload`` in older files).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

from benchmarks import harness
from ppsolve.errors import PpsolveError
from ppsolve.problem import load_problem
from ppsolve.solvers import SolveOptions, solve


def cells(problem, solver: str, limit: float, threads: int | None) -> list[str]:
    try:
        r = solve(problem, SolveOptions(solver=solver, time_limit=limit, threads=threads))
    except PpsolveError as exc:
        return [type(exc).__name__, "-", "-", "-", "-", "-"]
    except Exception as exc:  # a crash is a figure too: the row says which
        return [f"crash: {type(exc).__name__}", "-", "-", "-", "-", "-"]
    proof = f"{r.seconds:.1f}" if r.status == "optimal" else "-"
    engine = r.schedule.method.extra.get("engine", "-")
    offloaded = f"{r.schedule.offloaded:g}"
    extra = r.schedule.method.extra
    if extra.get("least_overhead", extra.get("least_offload")) == "optimal":
        offloaded += " (least)"
    return [r.status, f"{r.schedule.makespan:g}", f"{r.gap:.2%}", proof, offloaded, engine]


def main(argv=None) -> int:
    parser = harness.parser(__doc__, problems=True, time_limit=20.0, threads=None)
    parser.add_argument("--out", type=Path, help="write the table (Markdown) here")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", DeprecationWarning)
    lines = harness.table(["problem", "cpsat status", "makespan", "gap", "proof s", "offloaded", "engine",
                           "milp status", "makespan", "gap", "proof s", "offloaded", "engine"])
    print("\n".join(lines), flush=True)
    for path in harness.problem_paths(args.problems, harness.ROOT / "instances"):
        problem = load_problem(path)
        lines.append(harness.row([path.stem, *cells(problem, "cpsat", args.time_limit, args.threads),
                                  *cells(problem, "milp", args.time_limit, args.threads)]))
        print(lines[-1], flush=True)
    if args.out:
        harness.write_section(args.out, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
