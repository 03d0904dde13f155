"""The building block (``ppsolve.solvers.block``) against the solver at the sizes users run.

    PYTHONPATH=. python benchmarks/block_bench.py [--seconds 30] [--sizes 1,2]
        [--scale-json docs/bench/scale.json] [--section docs/bench/sections/43-building-block.md]
        [problem.json ...]

By default the problems of docs/bench/scale.json (the scale benchmark's core problems, with the
solver's makespan at 300 s and the best published schedule). For each: the period lower bound of a
one-microbatch block (a device's compute per microbatch), the least makespan any block of each size
could unroll to (``unrolled_lower_bound``: no search), then ``search_blocks`` for ``--seconds``:
the best block's size, period and unrolled makespan (checked), and the same re-timed as the runtime
would run it. Ratios are against the solver's makespan from the scale run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ppsolve.checker import check  # noqa: E402
from ppsolve.jsonio import read_json, write_text_atomic  # noqa: E402
from ppsolve.problem import load_problem  # noqa: E402
from ppsolve.schedule import make_schedule  # noqa: E402
from ppsolve.simulator import retime  # noqa: E402
from ppsolve.solvers.block import period_lower_bound, search_blocks, unroll, unrolled_lower_bound  # noqa: E402
from ppsolve.solvers.scaling import build_scaling  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="*")
    parser.add_argument("--seconds", type=float, default=30.0, help="block search per problem")
    parser.add_argument("--sizes", default="1,2", help="block sizes (microbatches per pattern)")
    parser.add_argument("--scale-json", default=str(ROOT / "docs" / "bench" / "scale.json"))
    parser.add_argument("--section", help="write the BENCHMARKS.md section here")
    args = parser.parse_args()
    sizes = tuple(int(x) for x in args.sizes.split(","))
    scale = {row["name"]: row for row in read_json(args.scale_json, "figures")}
    paths = [Path(p) for p in args.problems] or [ROOT / "instances" / "scale" / f"{name}.json" for name in scale]
    head = ("| problem | solver (300 s) | best published | least period | unrolled bound "
            + " | ".join(f"q={q}" for q in sizes) + " | best block (q, period) | unrolled | re-timed "
            "| / solver | search s |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    ratios = []
    for path in paths:
        problem = load_problem(path)
        sc = build_scaling(problem)
        row = scale.get(problem.name or path.stem, {})
        solver = row.get("makespan")
        published = min(((v, k) for k, v in row.get("baselines", {}).items() if k != "greedy"), default=None)
        began = time.monotonic()
        found = search_blocks(problem, args.seconds, scaling=sc, sizes=sizes)
        seconds = time.monotonic() - began
        bounds = " | ".join(f"{unrolled_lower_bound(problem, q):.1f}" for q in sizes)
        cells = [problem.name or path.stem, f"{solver:.1f}" if solver else "-",
                 f"{published[1]} {published[0]:.1f}" if published else "none fits",
                 f"{sc.to_time(period_lower_bound(problem, sc)):g}", bounds]
        if found.best is None:
            cells += ["none found", "-", "-", "-"]
        else:
            b = found.best
            planned = make_schedule(problem, unroll(problem, sc, b), "block")
            timed = make_schedule(problem, retime(problem, planned.ops), "block")
            ok = check(planned).ok and check(timed).ok
            best = min(planned.makespan, timed.makespan)
            cells += [f"{b.size}, {sc.to_time(b.period):.2f}", f"{planned.makespan:.1f}",
                      f"{timed.makespan:.1f}" + ("" if ok else " (checker refused)"),
                      f"{best / solver:.3f}" if solver else "-"]
            if solver:
                ratios.append(best / solver)
        cells.append(f"{seconds:.0f}")
        lines.append("| " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    if ratios:
        lines.append("")
        lines.append(f"- best block over the solver: from {min(ratios):.3f} to {max(ratios):.3f} "
                     f"({sum(r < 1 for r in ratios)} of {len(ratios)} below 1)")
    print("\n".join(lines[-2:]))
    if args.section:
        text = ["## The building block (a periodic pattern) against the solver", "",
                f"`PYTHONPATH=. python benchmarks/block_bench.py --seconds {args.seconds:g} --sizes {args.sizes}`: "
                "see docs/solver.md, \"The building block\".", ""] + lines
        write_text_atomic(Path(args.section), "\n".join(text) + "\n")


if __name__ == "__main__":
    main()
