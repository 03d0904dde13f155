"""CP-SAT model size and solve figures on every bundled instance (for before/after comparisons).

    python benchmarks/cpsat_model_size.py --time-limit 10 --out docs/bench/cpsat_model_size.json \
        --before docs/bench/cpsat_model_size_v1.json --section docs/bench/sections/20-contract-v2-cpsat.md

For each problem: variables and constraints of the makespan model (phase A, unbounded
horizon), then one ``solve`` with the given limit: status, makespan, lower bound, gap
and wall seconds. Prints a markdown table; ``--out`` keeps JSON; ``--before`` puts an
earlier run (same script, other code) beside it in the BENCHMARKS.md section ``--section``.
"""

from __future__ import annotations

import argparse
import importlib
import glob
import json
import sys
import time
from pathlib import Path

from ppsolve.jsonio import write_text_atomic
from ppsolve.problem import load_problem
from ppsolve.solvers.scaling import build_scaling

from ppsolve.solvers import SolveOptions, solve  # noqa: E402
from ppsolve.solvers.api import Phase, PhaseTask  # noqa: E402
from ppsolve.solvers.budget import Budget  # noqa: E402
from ppsolve.solvers.progress import Progress  # noqa: E402

backend = importlib.import_module("ppsolve.solvers.cpsat.backend")


def model_size(problem) -> tuple[int, int]:
    budget = Budget(3600, False)
    task = PhaseTask(problem, build_scaling(problem), Phase.MAKESPAN, SolveOptions(), budget, budget.search(1.0),
                     Progress(budget, "cpsat"))
    proto = backend.build_model(task).proto
    return len(proto.variables), len(proto.constraints)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="*")
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out")
    parser.add_argument("--before", help="JSON of an earlier run to compare with")
    parser.add_argument("--section", help="write a BENCHMARKS.md section (markdown) here")
    args = parser.parse_args(argv)
    paths = args.problems or sorted(glob.glob("instances/*.json"))
    rows = []
    print("| problem | variables | constraints | status | makespan | bound | gap | seconds |")
    print("|---|---|---|---|---|---|---|---|")
    for path in paths:
        problem = load_problem(path)
        variables, constraints = model_size(problem)
        t = time.monotonic()
        try:
            result = solve(problem, SolveOptions(time_limit=args.time_limit, threads=args.threads))
            row = dict(status=result.status, makespan=result.schedule.makespan, bound=result.lower_bound,
                       gap=result.gap)
        except Exception as exc:  # a refusal (capacity) is a figure too
            row = dict(status=type(exc).__name__, makespan=None, bound=None, gap=None)
        row.update(problem=path.split("/")[-1].removesuffix(".json"), variables=variables,
                   constraints=constraints, seconds=round(time.monotonic() - t, 1))
        rows.append(row)
        fmt = lambda x, f="{:g}": "-" if x is None else f.format(x)  # noqa: E731
        print(f"| {row['problem']} | {variables} | {constraints} | {row['status']} | {fmt(row['makespan'])} "
              f"| {fmt(row['bound'])} | {fmt(row['gap'], '{:.2%}')} | {row['seconds']} |", flush=True)
    if args.out:
        write_text_atomic(args.out, json.dumps(rows, indent=1) + "\n")
    if args.section:
        before = json.loads(Path(args.before).read_text()) if args.before else []
        write_text_atomic(args.section, section(rows, before, args.time_limit))
    return 0


def section(after: list[dict], before: list[dict], limit: float) -> str:
    """Markdown: model size and solve figures of contract v1's model beside v2's."""
    old = {row["problem"]: row for row in before}
    out = ["## Contract v2: the CP-SAT model without runtime tightness and transfer anchoring", "",
           "Contract v1 could not let a forward wait for an offload, so the model carried runtime tightness "
           "(every start equal to one of the ends it waits for: element constraints, up to 40 000 choices) and "
           "transfer anchoring (no transfer starting inside a compute op). Contract v2 makes every valid schedule "
           "run as planned, so both are gone. `v1` was measured on commit c6e6bd3 with this script, `v2` on the "
           f"current code; both solve with `--time-limit {limit:g}` on all cores of a shared 2-core machine "
           "(timings are noisy; problems without offload have the same model in both).", "",
           "| problem | variables v1 | v2 | constraints v1 | v2 | makespan v1 | v2 | bound v1 | v2 | status v1 | v2 "
           "| seconds v1 | v2 |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    fmt = lambda x: "-" if x is None else f"{x:g}"  # noqa: E731
    for row in after:
        was = old.get(row["problem"], {})
        out.append(f"| {row['problem']} | {was.get('variables', '-')} | {row['variables']} "
                   f"| {was.get('constraints', '-')} | {row['constraints']} | {fmt(was.get('makespan'))} "
                   f"| {fmt(row['makespan'])} | {fmt(was.get('bound'))} | {fmt(row['bound'])} "
                   f"| {was.get('status', '-')} | {row['status']} | {was.get('seconds', '-')} | {row['seconds']} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
