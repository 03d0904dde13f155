"""The deterministic columns of the scale table, re-computed with the code as it is: every published
schedule's makespan and the analytic lower bound of each problem in docs/bench/scale.json.

    python -m benchmarks.reports.scale_baselines [--json docs/bench/scale.json]

Prints one line per problem (the stored figure -> today's) and the count of baseline makespans that
differ; exits 1 if any does. The solver's own makespans depend on the time limit and the machine's
load and are re-measured by ``scale_bench`` instead. The stored ``lower_bound`` is what the solve
reported, which may be a bound CP-SAT proved above the analytic one.
"""

from __future__ import annotations

import json
import sys

from benchmarks import harness
from benchmarks.harness import ROOT
from ppsolve.bounds import makespan_lower_bound
from ppsolve.methods import RunOptions, get_method, run_and_check
from ppsolve.problem import load_problem


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__)
    parser.add_argument("--json", default=str(ROOT / "docs" / "bench" / "scale.json"), help="the scale run's figures")
    args = parser.parse_args(argv)
    differ = same = 0
    for row in json.loads(open(args.json).read()):
        problem = load_problem(ROOT / "instances" / "scale" / f"{row['name']}.json")
        line = [row["name"], f"bound {row['lower_bound']:g} (analytic now {makespan_lower_bound(problem).value:g})"]
        for name, old in row["baselines"].items():
            outcome = run_and_check(get_method(name), problem, RunOptions(time_limit=60))
            new = outcome.schedule.makespan if outcome.schedule is not None else None
            equal = new is not None and abs(new - old) <= 1e-6 * max(1.0, abs(old))
            same, differ = same + equal, differ + (not equal)
            line.append(f"{name} {old:g} -> {'none' if new is None else f'{new:g}'}{'' if equal else ' DIFFERS'}")
        print("; ".join(line), flush=True)
    print(f"baseline makespans equal to the stored ones: {same}, different: {differ}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
