"""CP-SAT against the MILP backend, side by side in one run: time to proof and gap at the limit.

    python benchmarks/solver_compare.py --time-limit 20 --out docs/bench/solver_compare.md [instances/*.json]

Each backend solves each problem once through ``ppsolve.solvers.solve`` (the same warm start,
phases and checks); "proof" is the wall time of the run when it ended proven optimal (the
least-offload phase included), else "-"; the gap is against the reported lower bound; "engine"
is the one that searched (``method.engine``: HiGHS, or CBC when highspy is missing); "(least)"
marks an overhead (recompute time, then offloaded amount) proven the least at that makespan
(``method.least_overhead``; ``least_offload`` in older files).
"""

from __future__ import annotations

import argparse
import glob
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ppsolve.errors import PpsolveError  # noqa: E402
from ppsolve.jsonio import write_text_atomic  # noqa: E402
from ppsolve.problem import load_problem  # noqa: E402
from ppsolve.solvers import SolveOptions, solve  # noqa: E402


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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="*")
    parser.add_argument("--time-limit", type=float, default=20.0)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", DeprecationWarning)
    paths = args.problems or sorted(glob.glob(str(ROOT / "instances/*.json")))
    head = ("| problem | cpsat status | makespan | gap | proof s | offloaded | engine "
            "| milp status | makespan | gap | proof s | offloaded | engine |")
    lines = [head, "|" + "---|" * 13]
    print("\n".join(lines), flush=True)
    for path in paths:
        problem = load_problem(path)
        row = [Path(path).stem] + cells(problem, "cpsat", args.time_limit, args.threads) \
            + cells(problem, "milp", args.time_limit, args.threads)
        lines.append("| " + " | ".join(row) + " |")
        print(lines[-1], flush=True)
    if args.out:
        write_text_atomic(Path(args.out), "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
