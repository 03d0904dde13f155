"""Windows that re-decide one microbatch's lever on the first devices: two time ranges, around its F and its B.

    python -m benchmarks.reports.lever_windows SCHEDULE [--devices 0] [--before 200] [--after 400]
        [--seconds 15] [--windows 40] [--seed 0] [--threads 2] [-o OUT]

The search's windows (``ppsolve/solvers/search/window.py``) are one time range over all devices of a
d = 8 problem, about 600 ms wide on the 13B-like problem at 11 GiB, where the F and the B of a
microbatch of devices 0-2 lie 505 to 2286 ms apart: no window frees both, so none can change its lever
(keep, offload, recompute). Here each window draws a recomputed (stage, microbatch) of ``--devices``
and frees their compute ops that start in [F - before, F + after) and in [B - after - R, B + before)
(``make_window`` with a second range: transfers it adds take the device-to-host lane's bounds of the
first range and the host-to-device lane's of the second). A microbatch whose F and B are both free may
change its lever, if its R (when it has one) is free too. Each window is solved with the
search's model, composed, re-timed and checked as the search does (``lns.accept``); printed per window:
the microbatch, the free ops, the levers that may change, CP-SAT's status, the longest path through the
window before and after, the levers placed, and whether the composed schedule was kept (else why not).
"""

from __future__ import annotations

import argparse
import random
import time

from ppsolve.checker import check
from ppsolve.jsonio import write_json_atomic
from ppsolve.ops import Op, OpKind
from ppsolve.schedule import load_schedule, make_schedule
from ppsolve.solvers import SolveOptions
from ppsolve.solvers.api import Phase, PhaseTask
from ppsolve.solvers.budget import Budget, Limit
from ppsolve.solvers.cpsat import backend
from ppsolve.solvers.progress import Progress
from ppsolve.solvers.scaling import build_scaling
from ppsolve.solvers.search.window import Incumbent, compose, make_window
from ppsolve.solvers.search.lns import accept

_F, _B, _R, _OFF = OpKind.F, OpKind.B, OpKind.R, OpKind.OFFLOAD


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("schedule")
    parser.add_argument("--devices", type=int, nargs="+", default=[0])
    parser.add_argument("--before", type=float, default=200.0)
    parser.add_argument("--after", type=float, default=400.0)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--windows", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("-o", "--output", help="write the last kept schedule here")
    args = parser.parse_args(argv)
    start = load_schedule(args.schedule)
    problem = start.problem
    inc = Incumbent(make_schedule(problem, start.ops, start.method.name))
    budget, scaling = Budget(args.seconds * args.windows * 2, False), build_scaling(problem)
    options, rng = SolveOptions(threads=args.threads, seed=args.seed), random.Random(args.seed)
    devices = tuple(args.devices)
    print(f"start: makespan {inc.makespan:.2f}")
    for k in range(args.windows):
        recomputed = [op for op in inc.schedule.ops if op.kind is _R and op.device in devices]
        if not recomputed:
            break
        pick = rng.choice(recomputed)
        f, b = inc.by_op[Op(_F, pick.stage, pick.microbatch)], inc.by_op[Op(_B, pick.stage, pick.microbatch)]
        first = (f.start - args.before, f.start + args.after)
        second = (max(first[1], b.start - args.after - (pick.end - pick.start)), b.start + args.before)
        window = make_window(inc, devices, first[0], first[1], offload=True, then=second)
        if window is None:
            continue
        began = time.monotonic()
        task = PhaseTask(problem, scaling, Phase.MAKESPAN, options, budget, Limit(began + args.seconds),
                         Progress(budget, "cpsat"), window=window)
        answer = backend.run_phase(task)
        line = (f"{k}: ({pick.stage}, {pick.microbatch}) F {f.start:.0f} B {b.start:.0f}, {window.size} free, "
                f"{len(window.choosable)} levers free, {answer.status.name} in {time.monotonic() - began:.1f} s")
        if answer.status.solved:
            placed = answer.solutions[-1]
            path, flow = window.measure(placed)
            moved = sorted(f"{op.kind.name}{op.microbatch}" for op in placed if op.kind in (_R, _OFF))
            line += f", path {window.current:.1f} -> {path:.1f}, levers {' '.join(moved) or '-'}"
            if path < window.current - 1e-6 or (path <= window.current + 1e-6 and flow < window.flow - 1e-6):
                better = accept(problem, inc, [(window, placed)])
                if better is not None:
                    inc = Incumbent(better)
                    line += f": kept, makespan {better.makespan:.2f}"
                else:
                    composed = make_schedule(problem, compose(inc, [(window, placed)]), "composed")
                    report = check(composed)
                    why = report.violations[0].message if report.violations else "not better"
                    line += f": not kept (composed {composed.makespan:.2f}: {why})"
        print(line, flush=True)
    print(f"end: makespan {inc.makespan:.2f}")
    if args.output:
        write_json_atomic(args.output, inc.schedule.to_dict())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
