"""Is ``--time-limit`` the whole run's wall clock? Runs ``ppsolve solve`` end to end (a new process:
start-up, warm start, model building, search, checking, writing) and compares its wall time
with the promise: at most limit x 1.1 + 1 s (default), or 2 x limit + 5 s with ``--threads 1``.

    python benchmarks/time_limit.py --time-limit 10 --solver cpsat --solver milp [--threads 1]
        [--large] [PROBLEM.json ...]      (default: instances/*.json)

``--large`` adds a linear problem with d = 32 devices and m = 256 microbatches (24 576
compute ops, a memory cap of 4 activations per device).
"""

from __future__ import annotations

import argparse
import glob
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def large_problem(path: Path) -> Path:
    problem = {
        "format": "ppsolve/problem@1", "name": "large: d = 32, m = 256, cap 4 activations",
        "devices": 32, "microbatches": 256, "backward": "split",
        "time": {"forward": 1.0, "backward_input": 1.0, "backward_weight": 1.0, "p2p": 0.1},
        "memory": {"activation": 1.0, "weight_hold": 0.25, "capacity": 4.0},
    }
    path.write_text(json.dumps(problem))
    return path


def run(problem: Path, solver: str, limit: float, threads: int | None, out: Path) -> tuple[float, int, str]:
    cmd = [sys.executable, "-m", "ppsolve", "solve", str(problem), "-o", str(out), "--solver", solver,
           "--time-limit", str(limit), "--quiet"]
    if threads is not None:
        cmd += ["--threads", str(threads)]
    began = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    took = time.monotonic() - began
    head = (proc.stdout or proc.stderr).splitlines()[0] if (proc.stdout or proc.stderr) else ""
    return took, proc.returncode, head


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="*")
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--solver", action="append", default=None)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--large", action="store_true")
    args = parser.parse_args(argv)
    solvers = args.solver or ["cpsat", "milp"]
    paths = [Path(p) for p in (args.problems or sorted(glob.glob(str(ROOT / "instances/*.json"))))]
    limit = args.time_limit
    promise = 2 * limit + 5 if args.threads == 1 else limit * 1.1 + 1
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        if args.large:
            paths.append(large_problem(Path(tmp) / "large-d32-m256.json"))
        print(f"time limit {limit:g} s, threads {args.threads or 'all'}: promise {promise:g} s end to end")
        print("| problem | solver | wall s | exit | within | first line |")
        print("|---|---|---|---|---|---|")
        for path in paths:
            for solver in solvers:
                took, code, head = run(path, solver, limit, args.threads, Path(tmp) / "out.json")
                worst = max(worst, took)
                ok = "yes" if took <= promise else "NO"
                print(f"| {path.stem} | {solver} | {took:.1f} | {code} | {ok} | {head[:90]} |", flush=True)
    print(f"worst {worst:.1f} s against {promise:g} s")
    return 0 if worst <= promise else 1


if __name__ == "__main__":
    sys.exit(main())
