"""Is ``--time-limit`` the whole run's wall clock, and is ``--threads 1`` reproducible? Runs ``ppsolve
solve`` end to end (a new process: start-up, warm start, model building, search, checking, writing)
and compares its wall time with the promise, at most limit x 1.1 + 1 s; with ``--threads 1`` it runs
each problem ``--repeat`` times and says whether the schedule files are identical apart from
``method.seconds``, and whether a run recorded that the wall clock decided something (then it may
not be reproducible).

    python -m benchmarks.reports.time_limit --time-limit 10 --solver cpsat --solver milp --threads all \\
        --threads 1 [--repeat 2] [--large] [--section FILE.md] [PROBLEM.json|FOLDER ...]
        (default: instances/*.json and instances/suite)

``--large`` adds a linear problem with d = 32 devices and m = 256 microbatches (24 576
compute ops, a memory cap of 4 activations per device).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import harness
from benchmarks.harness import ROOT

SLACK = (1.1, 1.0)  # the promise: limit x 1.1 + 1 s
HEADING = "The time limit, end to end, and --threads 1"
COLUMNS = ["problem", "solver", "threads", "limit s", "wall s", "within", "identical", "exit"]


def large_problem(path: Path) -> Path:
    problem = {
        "format": "ppsolve/problem@1", "name": "large: d = 32, m = 256, cap 4 activations",
        "devices": 32, "microbatches": 256, "backward": "split",
        "time": {"forward": 1.0, "backward_input": 1.0, "backward_weight": 1.0, "p2p": 0.1},
        "memory": {"activation": 1.0, "weight_hold": 0.25, "capacity": 4.0},
    }
    path.write_text(json.dumps(problem))
    return path


def problems(args: list[Path]) -> list[Path]:
    """The files given, each folder given as its ``*.json`` files (default: instances/ and instances/suite/)."""
    out = []
    for path in args or [ROOT / "instances", ROOT / "instances" / "suite"]:
        out += harness.problem_paths([], path) if path.is_dir() else [path]
    return out


def run(problem: Path, solver: str, limit: float, threads: str, out: Path) -> tuple[float, int, dict | None, str]:
    """(wall seconds, exit code, the schedule file or None, the first line of output)."""
    cmd = [sys.executable, "-m", "ppsolve", "solve", str(problem), "-o", str(out), "--solver", solver,
           "--time-limit", str(limit), "--quiet"]
    if threads != "all":
        cmd += ["--threads", threads, "--seed", "0"]
    out.unlink(missing_ok=True)
    began = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    took = time.monotonic() - began
    head = (proc.stdout or proc.stderr).splitlines()[0] if (proc.stdout or proc.stderr) else ""
    data = json.loads(out.read_text()) if proc.returncode == 0 and out.exists() else None
    return took, proc.returncode, data, head


def _comparable(data: dict | None) -> str | None:
    if data is None:
        return None
    data = dict(data, method=dict(data["method"]))
    data["method"].pop("seconds", None)
    return json.dumps(data, sort_keys=True)


def _clock_notes(data: dict | None) -> bool:
    notes = data["method"].get("notes", []) if data else []
    return any("not be reproducible" in note for note in notes)


def main(argv=None) -> int:
    parser = harness.parser(__doc__, problems=True, time_limit=10.0, section=None)
    parser.add_argument("--solver", action="append", default=None)
    parser.add_argument("--threads", action="append", default=None, help="'all' (default) or a number; repeatable")
    parser.add_argument("--repeat", type=int, default=2, help="runs per problem with --threads 1 (default 2)")
    parser.add_argument("--large", action="store_true")
    parser.add_argument("--heading", default=HEADING, help="the section's heading")
    args = parser.parse_args(argv)
    solvers = args.solver or ["cpsat", "milp"]
    modes = args.threads or ["all"]
    limit = args.time_limit
    promise = limit * SLACK[0] + SLACK[1]
    rows, worst, differ = [], 0.0, 0
    with tempfile.TemporaryDirectory() as tmp:
        paths = problems(args.problems)
        if args.large:
            paths.append(large_problem(Path(tmp) / "large-d32-m256.json"))
        print(f"time limit {limit:g} s: promise {promise:g} s end to end")
        print("\n".join(harness.table(COLUMNS + ["first line"])), flush=True)
        for path in paths:
            for threads in modes:
                for solver in solvers:
                    repeat = args.repeat if threads == "1" else 1
                    results = [run(path, solver, limit, threads, Path(tmp) / f"out{i}.json") for i in range(repeat)]
                    walls = [r[0] for r in results]
                    worst = max([worst] + walls)
                    ok = "yes" if max(walls) <= promise else "NO"
                    same = "-"
                    if repeat > 1:
                        texts = {_comparable(r[2]) for r in results}
                        same = "yes" if len(texts) == 1 and None not in texts else "NO"
                        if any(_clock_notes(r[2]) for r in results):
                            same += " (clock decided)"
                        differ += same.startswith("NO")
                    row = [path.stem, solver, threads, f"{limit:g}", " / ".join(f"{w:.1f}" for w in walls), ok, same,
                           ",".join(str(r[1]) for r in results), results[0][3][:80].replace("|", "/")]
                    rows.append(row)
                    print(harness.row(row), flush=True)
    print(f"worst {worst:.1f} s against {promise:g} s; {differ} problem(s) not identical across runs")
    if args.section:
        harness.write_section(args.section, section(rows, limit, promise, worst,
                                                    argv if argv is not None else sys.argv[1:], args.heading))
    return 0 if worst <= promise else 1


def section(rows: list[list[str]], limit: float, promise: float, worst: float, argv: list[str],
            heading: str = HEADING) -> str:
    cmd = harness.command(__spec__, *argv)
    lines = [f"## {heading}", "",
             f"`ppsolve solve --time-limit {limit:g}` as a new process per run (start-up, warm start, model "
             f"building, search, checking, writing), on a shared 2-core machine. The promise is limit x 1.1 + "
             f"1 s = {promise:g} s; the worst run took {worst:.1f} s. With `--threads 1 --seed 0` each problem "
             "ran more than once: `identical` says whether the schedule files are the same apart from "
             "`method.seconds`, and `(clock decided)` that a run's notes say the wall clock (the hard guard) "
             "rather than a deterministic limit ended a step, so that run may not be reproducible.", "",
             f"Command: `{cmd}`", "",
             *harness.table(COLUMNS)]
    lines += [harness.row(row[:len(COLUMNS)]) for row in rows]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
