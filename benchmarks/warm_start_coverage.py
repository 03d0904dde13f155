"""Whether a solve's warm start holds the best published schedule, on every problem of instances/scale/.

    PYTHONPATH=. python benchmarks/warm_start_coverage.py [--time-limit 300] [--section FILE] [problem.json ...]

``ppsolve solve`` never returns a schedule slower than its warm start (``phases._solve_makespan``
keeps the warm start when no model solution beats it), and its warm start is the shortest of the
applicable baselines and its own plans that it tries within its share of the time limit
(``budget.WARM_START_SHARE``). So where that share reaches the best published schedule, the solve
is never slower than it, however the search goes. This runs, for each problem, every applicable
published schedule without a deadline (the best that fits), then the warm start exactly as a solve
with ``--time-limit`` would (``best_warm_start`` with the same deadline), and reports both and the
seconds the warm start took. Far cheaper than 300 s solves of all 270 problems, and it is the
guarantee itself rather than a sample of it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.scale_bench import OURS, baselines  # noqa: E402
from ppsolve.jsonio import write_text_atomic  # noqa: E402
from ppsolve.problem import load_problem  # noqa: E402
from ppsolve.solvers.budget import Budget  # noqa: E402
from ppsolve.solvers.warm_start import best_warm_start  # noqa: E402


def coverage(path: Path, time_limit: float) -> tuple[str, str, str, float, bool | None]:
    """(problem, best published "name makespan", warm start "name makespan", its seconds, whether it is
    at least as short as the best published; None where none fits)."""
    problem = load_problem(path)
    published = {k: v for k, v in baselines(problem).items() if k not in OURS}
    budget = Budget(time_limit, deterministic=False)
    began = time.monotonic()
    warm = best_warm_start(problem, "auto", max(1.0, 0.2 * time_limit), budget.warm_start_deadline())
    seconds = time.monotonic() - began
    best = min(published.items(), key=lambda kv: kv[1]) if published else None
    ok = None if best is None else warm is not None and warm.makespan <= best[1] + 1e-9 * max(1.0, best[1])
    return (path.stem, f"{best[0]} {best[1]:g}" if best else "none fits",
            f"{warm.method.name} {warm.makespan:g}" if warm else "none", seconds, ok)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="*")
    parser.add_argument("--time-limit", type=float, default=300.0, help="the solve's --time-limit to mimic")
    parser.add_argument("--section", help="write a Markdown section here")
    args = parser.parse_args(argv)
    paths = [Path(p) for p in args.problems] or sorted((ROOT / "instances" / "scale").glob("*.json"))
    lines = ["| problem | best published | warm start | warm start s | holds it |", "|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    rows = []
    for path in paths:
        row = coverage(path, args.time_limit)
        rows.append(row)
        name, pub, warm, seconds, ok = row
        lines.append(f"| {name} | {pub} | {warm} | {seconds:.1f} | {'-' if ok is None else 'yes' if ok else 'NO'} |")
        print(lines[-1], flush=True)
    fits = [r for r in rows if r[4] is not None]
    missed = [r[0] for r in fits if not r[4]]
    share = Budget(args.time_limit, deterministic=False).warm_start_deadline() - time.monotonic()
    summary = [f"- problems: {len(rows)}; a published schedule fits {len(fits)} of them",
               f"- the warm start of a {args.time_limit:g} s solve (about {share:.0f} s for it) is at least as short "
               f"as the best published schedule on {len(fits) - len(missed)} of {len(fits)}"
               + (f"; not on: {', '.join(missed)}" if missed else ""),
               f"- slowest warm start: {max(r[3] for r in rows):.1f} s"]
    print("\n".join(summary))
    if args.section:
        head = ["## The warm start holds the best published schedule (every scale problem)", "",
                f"`PYTHONPATH=. python benchmarks/warm_start_coverage.py --time-limit {args.time_limit:g}`: "
                "a solve is never slower than its warm start, so where the warm start of a "
                f"{args.time_limit:g} s solve holds the best published schedule that fits, the solve is never "
                "slower than any published schedule (benchmarks/warm_start_coverage.py says why).", ""]
        write_text_atomic(Path(args.section), "\n".join(head + lines + [""] + summary + [""]))
    return 0 if not missed else 1


if __name__ == "__main__":
    sys.exit(main())
