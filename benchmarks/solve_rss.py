"""Peak resident memory of ``ppsolve solve`` on large problems, and the size of its CP-SAT model.

    PYTHONPATH=. python benchmarks/solve_rss.py FILE... [--time-limits 60,300] [--threads 1] [--model-size]

Each solve runs as its own process under ``/usr/bin/time -v`` (its "Maximum resident set size"
is the figure); the summary line of ``--json`` gives status, makespan, bound and the notes (e.g.
whether the model was built in time). ``--model-size`` also builds the makespan model once in a
child process with no time limit: variables, constraints, seconds to build and that process's
peak RSS (from ``resource.getrusage``).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BUILD = """
import resource, sys, time
sys.path.insert(0, {root!r})
from ppsolve.problem import load_problem
from ppsolve.solvers import SolveOptions
from ppsolve.solvers.api import Phase, PhaseTask
from ppsolve.solvers.budget import Budget
from ppsolve.solvers.progress import Progress
from ppsolve.solvers.scaling import build_scaling
from ppsolve.bounds import makespan_lower_bound
from ppsolve.solvers.cpsat import backend
problem = load_problem({path!r})
budget = Budget(10**6, False)
began = time.monotonic()
scaling = build_scaling(problem)
cut = scaling.time(makespan_lower_bound(problem).value) if scaling.exact else 0
task = PhaseTask(problem, scaling, Phase.MAKESPAN, SolveOptions(), budget, budget.search(1.0),
                 Progress(budget, "cpsat"), lower_bound=cut)
proto = backend.build_model(task).proto
print(len(proto.variables), len(proto.constraints), round(time.monotonic() - began, 1),
      resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def solve_rss(path: str, limit: float, threads: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "schedule.json"
        cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "ppsolve", "solve", path, "-o", str(out),
               "--time-limit", str(limit), "--threads", str(threads), "--json", "--quiet"]
        run = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", run.stderr).group(1))
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", run.stderr).group(1)
    summary = json.loads(run.stdout) if run.returncode == 0 else {}
    return {"rc": run.returncode, "rss_mb": rss / 1024, "wall": wall, **{k: summary.get(k) for k in
            ("status", "makespan", "lower_bound", "gap", "notes")}}


def model_size(path: str) -> tuple[int, int, float, float]:
    run = subprocess.run([sys.executable, "-c", BUILD.format(root=str(ROOT), path=path)],
                         capture_output=True, text=True, check=True)
    variables, constraints, seconds, rss = run.stdout.split()
    return int(variables), int(constraints), float(seconds), int(rss) / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("files", nargs="+")
    parser.add_argument("--time-limits", default="60,300")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--model-size", action="store_true")
    args = parser.parse_args()
    if args.model_size:
        print("| problem | variables | constraints | build s | peak RSS MB |")
        print("|---|---|---|---|---|")
        for path in args.files:
            v, c, s, rss = model_size(path)
            print(f"| {Path(path).stem} | {v} | {c} | {s:g} | {rss:.0f} |", flush=True)
    limits = [float(t) for t in args.time_limits.split(",") if t]
    if not limits:
        return
    print("| problem | time limit s | wall | peak RSS MB | status | makespan | bound | gap | model built |")
    print("|---|---|---|---|---|---|---|---|---|")
    for path in args.files:
        for limit in limits:
            r = solve_rss(path, limit, args.threads)
            built = not any("could not be built" in n for n in r["notes"] or [])
            gap = f"{r['gap']:.1%}" if r["gap"] is not None else "-"
            print(f"| {Path(path).stem} | {limit:g} | {r['wall']} | {r['rss_mb']:.0f} | {r['status']} | "
                  f"{r['makespan'] or 0:.6g} | {r['lower_bound'] or 0:.6g} | {gap} | {'yes' if built else 'no'} |",
                  flush=True)


if __name__ == "__main__":
    main()
