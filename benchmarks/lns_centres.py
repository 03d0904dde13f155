"""Where the large-neighbourhood search centres its windows: the share of windows centred on a wait.

    PYTHONPATH=. python benchmarks/lns_centres.py [--time-limit 150] [--threads 1] [--shares 0,0.2,0.5]
        [--seeds 0] [--jobs 2] problem.json ...

``lns.WAIT_SHARE`` of the windows are centred on an op of a longest path that its device sits
idle before (the rest on any op of a longest path). Each problem is solved through
``ppsolve.solvers.solve`` once per share and seed, each solve in its own process (``--jobs`` at a
time; with ``--threads 1`` each is reproducible), and the table gives the makespan of each, and
with several seeds their geometric mean over the share in the first column (docs/solver.md has runs).
"""

from __future__ import annotations

import argparse
import math
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ppsolve.problem import load_problem  # noqa: E402
from ppsolve.solvers import SolveOptions, lns, solve  # noqa: E402


def makespan(path: str, share: float, seed: int, time_limit: float, threads: int) -> float:
    lns.WAIT_SHARE = share
    options = SolveOptions(time_limit=time_limit, threads=threads, seed=seed)
    return solve(load_problem(path), options).schedule.makespan


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="+")
    parser.add_argument("--time-limit", type=float, default=150.0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--shares", default="0,0.2,0.5")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    shares = [float(x) for x in args.shares.split(",")]
    seeds = [int(x) for x in args.seeds.split(",")]
    with ProcessPoolExecutor(args.jobs) as pool:
        runs = {(path, share, seed): pool.submit(makespan, path, share, seed, args.time_limit, args.threads)
                for path in args.problems for seed in seeds for share in shares}
        print("| problem | seed | " + " | ".join(f"share {s:g}" for s in shares) + " |")
        print("|---|---|" + "---|" * len(shares))
        ratios: dict[float, list[float]] = {s: [] for s in shares}
        for path in args.problems:
            for seed in seeds:
                got = {s: runs[(path, s, seed)].result() for s in shares}
                for s in shares:
                    ratios[s].append(got[s] / got[shares[0]])
                cells = [f"{got[s]:g}" + (f" ({got[s] / got[shares[0]]:.3f}x)" if i else "")
                         for i, s in enumerate(shares)]
                print(f"| {Path(path).stem} | {seed} | " + " | ".join(cells) + " |", flush=True)
        if len(ratios[shares[0]]) > 1:
            means = [math.exp(sum(math.log(r) for r in ratios[s]) / len(ratios[s])) for s in shares]
            print("| geometric mean | | " + " | ".join(f"{x:.3f}x" for x in means) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
