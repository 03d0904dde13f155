"""How long ``ppsolve.solve(problem, time_limit=T)`` takes inside a program, and how good its plan is.

For each problem: one call to warm up (imports, caches), then ``--repeat`` calls at each ``--time-limit``
in this process (what a training loop pays per step): the wall time (median and most), the process's
CPU time, and the makespan; beside it a ``--reference`` seconds solve of the same problem and the ratio.
The first line says how busy the machine was (load average) and how fast (a fixed Python loop).

    python -m benchmarks.reports.plan_time [--time-limit 0.5 ...] [--repeat 5] [--reference 60] [--threads N]
        [PROBLEM.json ...]   (default: instances/per-microbatch/dynapipe-d8-m32-s0.8-k0.json)
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import ppsolve
from benchmarks.harness import ROOT

DEFAULT = ROOT / "instances" / "per-microbatch" / "dynapipe-d8-m32-s0.8-k0.json"


def machine() -> str:
    began = time.perf_counter()
    total = 0
    for i in range(3_000_000):
        total += i
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    loop = time.perf_counter() - began
    return f"load average {load} on {os.cpu_count()} cores; a 3e6-step Python loop takes {loop:.2f} s"


def timed(problem, limit: float, threads: int | None) -> tuple[float, float, ppsolve.Schedule]:
    wall, cpu = time.perf_counter(), time.process_time()
    schedule = ppsolve.solve(problem, time_limit=limit, threads=threads)
    return time.perf_counter() - wall, time.process_time() - cpu, schedule


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("problems", nargs="*", type=Path, default=[DEFAULT])
    parser.add_argument("--time-limit", type=float, action="append", help="seconds (default 0.5; repeatable)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--reference", type=float, default=60.0, help="seconds of the reference solve (0: none)")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    print(machine())
    print("problem | limit s | wall s median | wall s most | CPU s median | makespan median (best..worst) | "
          f"{args.reference:g} s solve | ratio median (worst)")
    for path in args.problems:
        problem = ppsolve.load_problem(path)
        reference = ppsolve.solve(problem, time_limit=args.reference, threads=args.threads) if args.reference else None
        timed(problem, min(args.time_limit or [0.5]), args.threads)  # warm-up
        for limit in args.time_limit or [0.5]:
            runs = [timed(problem, limit, args.threads) for _ in range(args.repeat)]
            for _, _, schedule in runs:
                assert ppsolve.checker.check(schedule).ok
            spans = sorted(s.makespan for _, _, s in runs)
            walls = [w for w, _, _ in runs]
            middle = statistics.median(spans)
            ref = (f"{reference.makespan:g} | {middle / reference.makespan:.3f} ({spans[-1] / reference.makespan:.3f})"
                   if reference else "- | -")
            print(f"{path.name} | {limit:g} | {statistics.median(walls):.3f} | {max(walls):.3f} | "
                  f"{statistics.median(c for _, c, _ in runs):.3f} | {middle:g} ({spans[0]:g}..{spans[-1]:g}) | {ref}",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
