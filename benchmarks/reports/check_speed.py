"""Time ``ppsolve check`` on the largest schedule files the limits allow.

Usage: python -m benchmarks.reports.check_speed [--devices 8] [--microbatches 4096] [--out DIR]
                                                     [--profile] [--write docs/bench/check_speed.txt]

Writes three schedule files of one problem (d devices, m microbatches, split backward: 3*d*m compute ops,
100 000 at the limit) and times ``python -m ppsolve check`` on each as a user runs it (a new process:
reading the file, checking, printing the first 20 violations and the count):
- ``valid``: the 1f1b-offload baseline (every forward's allowed share offloaded; valid and executable);
- ``duplicates``: the 1F1B schedule with every op listed twice (200 000 ops, the file limit);
- ``scrambled``: the 1F1B schedule's ops with random start times (violations of every rule).
Prints one row per file: ops, violations, seconds (wall) and the process's CPU seconds.
``--profile`` runs each under ``python -m cProfile -s cumtime`` instead and prints the top of the profile.
``--write FILE`` also writes the table there, after the command that measured it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ppsolve.jsonio import write_text_atomic
from ppsolve.methods import run_method
from ppsolve.problem import problem_from_dict
from ppsolve.schedule import make_schedule


def _problem(devices: int, microbatches: int):
    return problem_from_dict({
        "format": "ppsolve/problem@1", "devices": devices, "microbatches": microbatches,
        "time": {"forward": 1, "backward_input": 1, "backward_weight": 1, "p2p": 0.05},
        "memory": {"activation": 1.0},
        "offload": {"fraction": 0.5, "bandwidth": {"d2h": 4.0, "h2d": 4.0}}})


def schedules(devices: int, microbatches: int, seed: int = 0) -> dict[str, dict]:
    """name -> schedule file contents (the three files described above)."""
    problem = _problem(devices, microbatches)
    base = run_method("1f1b", problem)
    out = {"valid": run_method("1f1b-offload", problem).to_dict()}
    data = base.to_dict()
    data["ops"] = [op for op in data["ops"] for _ in range(2)]
    out["duplicates"] = data
    rng = random.Random(seed)
    makespan = base.makespan
    ops = [op._replace(start=t, end=t + op.duration)
           for op in base.ops for t in [round(rng.uniform(0, makespan), 3)]]
    out["scrambled"] = make_schedule(problem, ops, "scrambled").to_dict()
    return out


def _run(path: Path, profile: bool) -> tuple[float, float, int, str]:
    command = [sys.executable] + (["-m", "cProfile", "-s", "cumtime"] if profile else []) + \
        ["-m", "ppsolve", "check", str(path)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if done.returncode not in (0, 1):
        raise SystemExit(f"check failed on {path}: {done.stderr.strip()}")
    verdict = [line for line in done.stdout.splitlines() if line.endswith("violation(s)")][-1]
    return wall, cpu, int(verdict.split()[-2]), done.stdout if profile else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--microbatches", type=int, default=4096)
    parser.add_argument("--out", help="folder for the schedule files (default: a temporary one)")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of each check")
    parser.add_argument("--write", help="also write the table to this file")
    args = parser.parse_args()
    rows = [f"{'file':<12}{'ops':>8}{'violations':>12}{'seconds':>9}{'cpu s':>8}"]
    print(rows[0])
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.out or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in schedules(args.devices, args.microbatches).items():
            path = folder / f"check_{name}.json"
            path.write_text(json.dumps(data))
            wall, cpu, violations, profile = _run(path, args.profile)
            rows.append(f"{name:<12}{len(data['ops']):>8}{violations:>12}{wall:>9.2f}{cpu:>8.2f}")
            print(rows[-1], flush=True)
            if profile:
                print("\n".join(profile.splitlines()[:45]))
    if args.write:
        command = "python -m benchmarks.reports.check_speed " + " ".join(sys.argv[1:])
        header = [f"`{command}` ({args.devices} devices x {args.microbatches} microbatches, split backward; "
                  f"{os.cpu_count()} cores shared with other work: seconds are wall time, cpu s the check "
                  "process's own)", ""]
        write_text_atomic(Path(args.write), "\n".join(header + rows) + "\n")


if __name__ == "__main__":
    main()
