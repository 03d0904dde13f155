"""What one device's memory, link and compute can prove, counted configuration by configuration.

    python -m benchmarks.reports.device_configurations [PROBLEM ...] [--step 0.5]

For each device of a linear problem (one chunk, costs per stage; default: the
13B-like problem at 11 GiB, whose gap is the largest of the realistic set) a linear programme
bounds the makespan T of any valid schedule from that device's memory alone:

* At every instant the device holds one *configuration*: for each of its microbatches in flight a
  whole activation ``a`` (from its F to its B, or from its R or its RELOAD to its B), a checkpoint
  ``k`` (recomputed, from its F to its R), a part ``a - x`` (offloaded by ``x``, from the end of
  its OFFLOAD to the start of its RELOAD) or a weight hold ``h`` (split backward: from its B to its W), summing to
  at most the cap. Offloaded amounts fall into classes of ``--step`` GiB; a part counts as the
  least size of its class, so every configuration a schedule passes through is a column, and the
  time it spends in each sums to at most T.
* Each microbatch holds its activation (whole, checkpoint or part) from its F's start to its B's end,
  at least F + the least round trip through the later stages + B; whole for at least its R + B
  (recomputed), F + x/d2h + x/h2d + B (offloaded by at least x) or all of it (kept); and a hold for
  at least W.
* The device computes F + B + W of every microbatch and R of each recomputed one within T; the
  host link carries x/d2h (x/h2d) per offloaded one within T per direction (their sum when the link
  is not duplex).

Lever counts are fractions, and nothing says when a configuration may occur (the fill and the
drain are free), so the figure is a lower bound (weaker than the device's own bound where those
matter). Printed per device: the figure, the lever mix the programme chose, the figure with the host link
removed (no offload), and the problem's bound.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ortools.linear_solver import pywraplp

from benchmarks import harness
from benchmarks.harness import ROOT
from ppsolve.bounds import makespan_lower_bound
from ppsolve.bounds.chains import Chains, microbatch_chains
from ppsolve.bounds.prices import link_rate, transfer_time
from ppsolve.ops import OpKind
from ppsolve.problem import Problem, load_problem

DEFAULT = ROOT / "instances/realistic/llama13b-like-8x32-cap11-decide.json"
_F, _B, _W, _R = OpKind.F, OpKind.B, OpKind.W, OpKind.R


@dataclass(frozen=True)
class Device:
    """One device's figures, read from the problem."""

    a: float  # activation
    h: float  # weight hold
    k: float  # recompute checkpoint (a when it cannot recompute)
    cap: float | None  # None: uncapped
    life: float  # least time from an F's start to its B's end
    compute: float  # F + B + W
    f: float
    b: float
    w: float
    r: float | None  # R's duration, None without recompute
    x_max: float  # the most one activation may offload (0 without offload)
    tau: float  # link time per GiB out and back (ppsolve.bounds.prices.transfer_time)
    rate: float  # GiB the link moves out and back per ms (ppsolve.bounds.prices.link_rate)


def device_figures(problem: Problem, s: int, chains: Chains | None = None) -> Device:
    """Stage ``s``'s figures on its device (linear placement: one stage per device; costs per stage, read
    as microbatch 0's). ``chains``: :func:`microbatch_chains` of the problem, when the caller has them."""
    chains = chains or microbatch_chains(problem)
    split = problem.split_backward
    f, b = problem.duration(_F, s, 0), problem.duration(_B, s, 0)  # fused: B lasts B + W
    w = problem.duration(_W, s, 0) if split else 0.0
    rec = problem.recompute_saving(s, 0) > 0
    key = (s, chains.columns[0])
    return Device(a=problem.activation.at(s, 0), h=problem.weight_hold.at(s, 0) if split else 0.0,
                  k=problem.recompute.keep.at(s, 0) if rec else problem.activation.at(s, 0),
                  cap=problem.capacity[problem.placement[s]], life=chains.b_head[key] + b - chains.f_head[key],
                  compute=f + b + w, f=f, b=b, w=w, r=problem.duration(_R, s, 0) if rec else None,
                  x_max=problem.max_offload(s, 0), tau=transfer_time(problem), rate=link_rate(problem))


def configurations(dev: Device, parts: list[float]) -> Iterator[tuple[int, int, tuple[int, ...], int]]:
    """(whole, holds, parts of each class, checkpoints) that fit the cap, each with as many checkpoints
    as the room left takes (more never hurts the programme). Objects of size 0 take no room: their
    counts are left at 0 and the programme does not ask for them (:func:`bound`)."""
    eps = 1e-9

    def counts(i: int, room: float) -> Iterator[tuple[int, ...]]:
        if i == len(parts):
            yield ()
            return
        n = 0
        while n * parts[i] <= room + eps:
            for rest in counts(i + 1, room - n * parts[i]):
                yield (n, *rest)
            n += 1

    for whole in range(int(dev.cap / dev.a + eps) + 1):
        for holds in range(int((dev.cap - whole * dev.a) / dev.h + eps) + 1 if dev.h > 0 else 1):
            room = dev.cap - whole * dev.a - holds * dev.h
            for ps in counts(0, room):
                left = room - sum(n * size for n, size in zip(ps, parts))
                yield whole, holds, ps, int((left + eps) / dev.k) if dev.k > 0 else 0


def bound(dev: Device, m: int, step: float) -> tuple[float, dict[str, float]]:
    """The programme's least T and its lever mix (microbatches kept, recomputed, offloaded by each class)."""
    if dev.cap is None or dev.a <= 0:  # memory cannot bind: the device's compute alone
        return dev.compute * m, {"kept": float(m)}
    edges = sorted({0.0, dev.x_max, *(step * i for i in range(1, int(dev.x_max / step) + 1))}) if dev.x_max > 0 else []
    classes = [(lo, dev.a - hi) for lo, hi in zip(edges, edges[1:])]  # (least amount, least part size)
    sized = [i for i, (_, size) in enumerate(classes) if size > 1e-9]  # parts of size 0 take no room
    cols = list(configurations(dev, [classes[i][1] for i in sized]))
    lp = pywraplp.Solver.CreateSolver("GLOP")
    inf = lp.infinity()
    T = lp.NumVar(0, inf, "T")
    t = [lp.NumVar(0, inf, "") for _ in cols]
    kept = lp.NumVar(0, m, "kept")
    rec = lp.NumVar(0, m if dev.r is not None else 0, "recomputed")
    off = [lp.NumVar(0, m, "") for _ in classes]
    lp.Add(kept + rec + sum(off) == m)
    lp.Add(sum(t) <= T)
    whole_rec, ckpt = lp.NumVar(0, inf, ""), lp.NumVar(0, inf, "")
    whole_off = [lp.NumVar(0, inf, "") for _ in classes]
    part = [lp.NumVar(0, inf, "") for _ in classes]
    if dev.r is not None:
        lp.Add(whole_rec >= (dev.r + dev.b) * rec)
    lp.Add(whole_rec + ckpt >= dev.life * rec)
    for i, (x, _) in enumerate(classes):
        lp.Add(whole_off[i] >= (dev.f + x * dev.tau + dev.b) * off[i])
        lp.Add(whole_off[i] + part[i] >= dev.life * off[i])
    lp.Add(sum(c[0] * tc for c, tc in zip(cols, t)) >= dev.life * kept + whole_rec + sum(whole_off))
    if dev.h > 0:
        lp.Add(sum(c[1] * tc for c, tc in zip(cols, t)) >= dev.w * m)
    if dev.k > 0:
        lp.Add(sum(c[3] * tc for c, tc in zip(cols, t)) >= ckpt)
    for n, i in enumerate(sized):
        lp.Add(sum(c[2][n] * tc for c, tc in zip(cols, t)) >= part[i])
    lp.Add(dev.compute * m + (dev.r or 0.0) * rec <= T)
    if classes:
        lp.Add(sum(x * n for (x, _), n in zip(classes, off)) <= dev.rate * T)
    lp.Minimize(T)
    if lp.Solve() != pywraplp.Solver.OPTIMAL:
        raise RuntimeError("the configuration programme did not solve")
    mix = {"kept": kept.solution_value(), "recomputed": rec.solution_value()}
    for (x, _), n in zip(classes, off):
        if n.solution_value() > 1e-6:
            mix[f"offloaded {x:g}+"] = n.solution_value()
    return T.solution_value(), mix


def main(argv=None) -> int:
    parser = harness.parser(__doc__, problems=True, section=None)
    parser.add_argument("--step", type=float, default=0.5, help="GiB per class of offloaded amounts (default %(default)s)")
    args = parser.parse_args(argv)
    run = harness.command(__spec__, "--step", f"{args.step:g}")
    lines = ["## What one device's memory can prove", "",
             f"`{run}`: for each device, the least makespan its memory configurations, its compute and its host "
             "link allow (a linear programme; the script's docstring gives the argument), beside the problem's "
             "bound; *without offload*: the same with the problem's host link removed. Lever mix: microbatches kept, "
             "recomputed, and offloaded by at least each amount (GiB). Times in ms.",
             "", *harness.table(["problem", "device", "configurations", "lever mix", "without offload", "problem's bound"])]
    for path in args.problems or [DEFAULT]:
        problem = load_problem(path)
        if problem.chunks != 1 or problem.per_microbatch:
            raise SystemExit(f"{path}: only linear problems with costs per stage")
        lb = makespan_lower_bound(problem).value
        kept = problem.replace(offload=None)
        chains = microbatch_chains(problem)  # the same for both: offload changes no duration
        for s in range(problem.num_stages):
            value, mix = bound(device_figures(problem, s, chains), problem.microbatches, args.step)
            text = ", ".join(f"{name} {n:.1f}" for name, n in mix.items() if n > 0.05)
            alone = bound(device_figures(kept, s, chains), problem.microbatches, args.step)[0]
            lines.append(harness.row([path.stem, s, f"{value:.2f}", text, f"{alone:.2f}", f"{lb:.2f}"]))
    return harness.publish("\n".join(lines), args.section)


if __name__ == "__main__":
    raise SystemExit(main())
