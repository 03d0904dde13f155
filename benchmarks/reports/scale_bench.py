"""The solver against every applicable published schedule at the sizes users run (instances/scale/).

    python -m benchmarks.reports.scale_bench [--all] [--time-limit 60] [--threads 1] [--jobs 2]
        [--section docs/bench/sections/40-scale.md] [--json out.json] [problem.json ...]
    python -m benchmarks.reports.scale_bench --render out.json --time-limit 60 --threads 1 --section ...

By default the problems of instances/scale/ tagged "core" (``x-suite.tags``; ``--all``: every
one). For each problem every applicable baseline runs once (PipeOffload's, zero-bubble's, the
V-shape ones, ... and ``greedy``, ppsolve's own list scheduler, which is not a published
schedule), then ``ppsolve solve`` runs as its own process (so that its wall time and peak RSS
are its own: ``os.wait4``). A published schedule that breaks the cap is left out.

Figures: the solver's makespan over the best published schedule's and over the best baseline's
(greedy included), the gap to the lower bound the solve reports, on offload problems the speed-up
over the better of po-h and po-f where one of them fits, wall seconds and peak RSS of the solve.
The summary gives the geometric mean of makespan / best published over the problems where one
fits (every problem of the suite has a cap), and each target of issue 12 as reached or not.
``--jobs N`` runs N problems at a time (each its baselines and its solve; with ``--threads 1`` on N
cores the solves do not share a core).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from statistics import geometric_mean

from benchmarks import harness
from benchmarks.harness import ROOT, fmt
from ppsolve.jsonio import read_json, write_json_atomic
from ppsolve.methods import RunOptions, all_methods, get_method, run_and_check
from ppsolve.problem import Problem, load_problem

OFFLOAD_PUBLISHED = ("po-h", "po-f")


@dataclass
class Row:
    name: str
    devices: int
    microbatches: int
    chunks: int
    offload: bool
    baselines: dict[str, float] = field(default_factory=dict)  # fitting ones: name -> makespan
    makespan: float | None = None
    status: str = ""
    lower_bound: float | None = None
    offloaded: float = 0.0
    seconds: float = 0.0
    rss_mb: float = 0.0
    error: str = ""

    def best(self, published: bool) -> tuple[str, float] | None:
        items = [(v, k) for k, v in self.baselines.items() if not published or get_method(k).published]
        return (min(items)[1], min(items)[0]) if items else None

    def offload_best(self) -> float | None:
        figures = [self.baselines[k] for k in OFFLOAD_PUBLISHED if k in self.baselines]
        return min(figures) if figures else None

    @property
    def gap(self) -> float | None:
        if self.makespan is None or self.lower_bound is None:
            return None
        return max(0.0, (self.makespan - self.lower_bound) / self.makespan)


def baselines(problem: Problem) -> dict[str, float]:
    out = {}
    for method in all_methods("baseline"):
        schedule = run_and_check(method, problem, RunOptions(threads=1), checked=False).schedule
        if schedule is not None and not schedule.method.extra.get("capacity_broken"):
            out[method.name] = schedule.makespan
    return out


def solve_process(path: Path, limit: float, threads: int | None, row: Row) -> None:
    """``ppsolve solve`` as a child process: makespan, bound, wall seconds, peak RSS."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "schedule.json"
        cmd = [sys.executable, "-m", "ppsolve", "solve", str(path), "-o", str(out), "--time-limit", f"{limit:g}",
               "--quiet"]
        if threads is not None:
            cmd += ["--threads", str(threads)]
        began = time.monotonic()
        child = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 env={**os.environ, "PYTHONPATH": str(ROOT)})
        _, status, usage = os.wait4(child.pid, 0)
        row.seconds = time.monotonic() - began
        row.rss_mb = usage.ru_maxrss / 1024  # KiB on Linux
        stderr = child.stderr.read().decode(errors="replace").strip().splitlines()
        child.stderr.close()
        if os.waitstatus_to_exitcode(status) != 0 or not out.exists():
            row.error = (stderr[-1] if stderr else f"exit {os.waitstatus_to_exitcode(status)}")[:80]
            return
        data = read_json(out, "schedule")
    row.makespan = data["metrics"]["makespan"]
    row.offloaded = data["metrics"]["offloaded"]
    row.status = data["method"]["status"]
    row.lower_bound = data["method"].get("lower_bound")


def run_one(path: Path, limit: float, threads: int | None) -> Row:
    """One problem: every applicable baseline, then the solve as its own process."""
    problem = load_problem(path)
    row = Row(path.stem, problem.devices, problem.microbatches, problem.chunks, problem.can_offload)
    row.baselines = baselines(problem)
    solve_process(path, limit, threads, row)
    return row


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None else f"{a / b:.3f}"


def table(rows: list[Row]) -> list[str]:
    lines = harness.table(["problem", "best published", "greedy", "solver", "/ published", "/ best baseline",
                           "gap to bound", "vs better of po-h, po-f", "solve s", "peak RSS MB"])
    for r in rows:
        pub = r.best(published=True)
        allb = r.best(published=False)
        po = r.offload_best()
        speed = "-" if po is None or r.makespan is None else f"{1 - r.makespan / po:+.1%}"
        solver = r.error or f"{r.makespan:g} ({r.status})"
        lines.append(harness.row([
            r.name, f"{pub[0]} {pub[1]:g}" if pub else "none fits", f"{r.baselines['greedy']:g}"
            if "greedy" in r.baselines else "-", solver, _ratio(r.makespan, pub[1] if pub else None),
            _ratio(r.makespan, allb[1] if allb else None), fmt(r.gap, ".1%"), speed, f"{r.seconds:.0f}",
            f"{r.rss_mb:.0f}"]))
    return lines


def summary(rows: list[Row]) -> list[str]:
    done = [r for r in rows if r.makespan is not None]
    ratios = [r.makespan / r.best(True)[1] for r in done if r.best(True)]
    ratios_all = [r.makespan / r.best(False)[1] for r in done if r.best(False)]
    geo = geometric_mean(ratios) if ratios else None
    geo_all = geometric_mean(ratios_all) if ratios_all else None
    worse = [r.name for r in done if r.best(True) and r.makespan > r.best(True)[1] + 1e-9]
    out = [f"- problems: {len(rows)} ({len(rows) - len(done)} without a solver schedule); a published schedule "
           f"fits {len(ratios)} of them",
           f"- never worse than the best published schedule: {'yes' if not worse else 'no: ' + ', '.join(worse)}",
           f"- geometric mean of makespan / best published: {geo:.3f}" if geo else "- no published schedule fits",
           f"- geometric mean of makespan / best baseline (greedy included): {geo_all:.3f}" if geo_all else ""]
    for label, test, target in (("d <= 16 without offload", lambda r: r.devices <= 16 and not r.offload, 0.02),
                                ("d = 32 without offload", lambda r: r.devices == 32 and not r.offload, 0.05),
                                ("with offload", lambda r: r.offload, None)):
        gaps = [r.gap for r in done if test(r) and r.gap is not None]
        if gaps:
            reach = "" if target is None else (f" (target <= {target:.0%}: " + (
                "reached)" if max(gaps) <= target else f"{sum(g <= target for g in gaps)} of {len(gaps)})"))
            out.append(f"- gap to the lower bound, {label}: largest {max(gaps):.1%}, median "
                       f"{sorted(gaps)[len(gaps) // 2]:.1%}{reach}")
    speeds = [1 - r.makespan / r.offload_best() for r in done if r.offload and r.offload_best()]
    if speeds:
        out.append(f"- faster than the better of po-h and po-f (target >= 10%): {min(speeds):+.1%} to "
                   f"{max(speeds):+.1%} over {len(speeds)} problems")
        room = [1 - r.lower_bound / r.offload_best() for r in done
                if r.offload and r.offload_best() and r.lower_bound is not None]
        if room:
            out.append(f"- room the lower bound leaves below the better of po-h and po-f: {min(room):.1%} to "
                       f"{max(room):.1%} (no schedule can be faster than that)")
    out += offload_bounds(done)
    rss = max((r.rss_mb for r in done), default=0.0)
    out.append(f"- peak RSS of a solve: at most {rss:.0f} MB")
    return [line for line in out if line]


def offload_bounds(rows: list[Row]) -> list[str]:
    """The offload rows' lower bounds recomputed (``makespan_lower_bound``, what ``ppsolve bound`` prints) and
    what binds them: a device's head + load + tail holds for any amount offloaded, partial or whole."""
    from ppsolve.bounds import makespan_lower_bound

    found = [(r, makespan_lower_bound(load_problem(path))) for r in rows
             if r.offload and r.lower_bound is not None
             and (path := ROOT / "instances" / "scale" / f"{r.name}.json").exists()]
    if not found:
        return []
    above = [r.name for r, b in found if r.lower_bound > b.value + 1e-6 * max(1.0, b.value)]
    load = [r.name for r, b in found if b.binding.startswith("load of device")]
    line = (f"- lower bounds of the {len(found)} offload rows, recomputed by `ppsolve bound`: "
            f"{len(found) - len(above)} reported no higher" + (f" (higher: {', '.join(above)})" if above else "")
            + f"; in {len(load)} of them what binds is a device's head + load + tail, which no amount "
            "offloaded changes")
    return [line]


def main(argv=None) -> int:
    parser = harness.parser(__doc__, problems=True, time_limit=60.0, threads=None, jobs=1, section=None, json=None,
                            render=None)
    parser.add_argument("--all", action="store_true", help="every problem of instances/scale, not the core ones")
    args = parser.parse_args(argv)
    paths = harness.problem_paths(args.problems, ROOT / "instances" / "scale")
    rows = [Row(**row) for row in read_json(args.render, "figures")] if args.render else []
    print("\n".join(table(rows)), flush=True)
    chosen = [] if args.render else [path for path in paths if args.problems or args.all
                                     or "core" in load_problem(path).annotations.get("x-suite", {}).get("tags", [])]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for row in pool.map(run_one, chosen, [args.time_limit] * len(chosen), [args.threads] * len(chosen)):
            rows.append(row)
            print(table([row])[-1], flush=True)
    lines = summary(rows)
    print("\n".join(lines))
    command = harness.command(__spec__, *(["--all"] if args.all else []),
                              *(["--jobs", str(args.jobs)] if args.jobs > 1 else []),
                              "--time-limit", f"{args.time_limit:g}",
                              *([] if args.threads is None else ["--threads", str(args.threads)]))
    sizes = ("every problem (d = 8, 16, 32; m = 2d, 4d, 8d; caps at 1/2, 3/4 and 1 of 1F1B's peak; without "
             "offload, and with it at k = 0.5 and 1.5 on private links and links shared by two devices)"
             if args.all else "(d = 8, 16, 32; m = 4d; caps at half of 1F1B's peak; offload at k = 1.5 on links "
             "shared by two devices)")
    if args.section:
        text = ["## At the sizes users run (instances/scale)", "",
                f"`{command}`: "
                f"{len(rows)} problems of instances/scale/ {sizes}, the solver at "
                f"{args.time_limit:g} s per problem against every applicable published schedule. The solver "
                "improves the best baseline by large-neighbourhood search where the whole model is too large "
                "(docs/solver.md). \"gap to bound\" is against the lower bound the solve reports; \"solve s\" "
                "is the wall time of the `ppsolve solve` process (start-up, warm start, search, the comparison "
                "with the published schedules that the command prints), \"peak RSS\" its largest resident "
                f"memory. Run on {os.cpu_count()} cores shared with other jobs.", ""]
        text += table(rows) + [""] + lines + [""]
        harness.write_section(args.section, "\n".join(text))
    if args.json:
        write_json_atomic(args.json, [r.__dict__ for r in rows])
    return 0


if __name__ == "__main__":
    sys.exit(main())
