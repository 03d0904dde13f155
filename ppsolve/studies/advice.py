"""What a solve means for the user: how it compares with the published schedules, and what to try next.

:func:`advise` runs every published baseline that applies (within the caps, and
again without them for the ones the caps refuse), and reads the bounds, so that
``ppsolve solve`` can say in a few lines: which published schedule is the best
that fits and how much faster the solve is; which ones the cap refuses and what
they would need; whether a remaining gap is the bound's or the schedule's; which
memory lever (recompute, offload) was used where and why; and what memory cap reaches the unbounded
speed. When microbatches differ, it also says what the best published schedule gives in data
order and in the best microbatch order found (:func:`compare_orders`).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from ppsolve.baselines.microbatch_order import base_name
from ppsolve.baselines.portfolio import ordered_baselines
from ppsolve.bounds import makespan_lower_bound, min_capacity
from ppsolve.methods import INFEASIBLE, Method, RunOptions, published_methods, run_and_check
from ppsolve.problem import Problem
from ppsolve.schedule import Schedule
from ppsolve.solvers.api import Status
from ppsolve.tolerance import EPS, exceeds

SHOWN_REFUSALS = 3
"""Refused published schedules named in the text summary (the fastest ones; --json lists all)."""


@dataclass(frozen=True)
class Fit:
    """A published schedule that fits the caps: its makespan and highest peak."""

    name: str
    makespan: float
    peak: float


@dataclass(frozen=True)
class Refusal:
    """A published schedule the caps refuse: what it would need, where, and how fast it would be."""

    name: str
    need: float
    device: int
    capacity: float
    makespan: float


@dataclass(frozen=True)
class Advice:
    """The summary of one solve, as data (``to_dict``) and as lines for a terminal (``lines``)."""

    makespan: float
    best: Fit | None
    refused: tuple[Refusal, ...]
    gap: str
    offload: str
    unbounded_makespan: float | None
    least_cap: float | None
    least_cap_by: str | None
    least_cap_command: str | None
    notes: tuple[str, ...] = field(default=())
    recompute: str | None = None  # None: the problem cannot recompute (no line)
    best_order: Fit | None = None  # microbatches that differ: the best published schedule in another order

    @property
    def speedup(self) -> float | None:
        """How much faster the solve is than the best published schedule that fits (0.1 = 10 %); None when
        there is none, or when the solve takes no time and it does (every op of length 0 but a latency)."""
        return None if self.best is None else _speedup(self.makespan, self.best.makespan)

    def to_dict(self) -> dict:
        return {
            "best_published": None if self.best is None else {
                "name": self.best.name, "makespan": self.best.makespan, "peak_memory": self.best.peak,
                "faster_by": None if self.speedup is None else round(self.speedup, 6)},
            "refused_by_capacity": [{"name": r.name, "needs": r.need, "device": r.device, "capacity": r.capacity,
                                     "makespan": r.makespan} for r in self.refused],
            "best_published_order": None if self.best_order is None else {
                "name": self.best_order.name, "makespan": self.best_order.makespan,
                "peak_memory": self.best_order.peak},
            "gap": self.gap, "offload": self.offload, "recompute": self.recompute,
            "unbounded_makespan": self.unbounded_makespan,
            "least_capacity_for_unbounded_makespan": self.least_cap, "least_capacity_by": self.least_cap_by,
            "least_capacity_command": self.least_cap_command,
        }

    def lines(self) -> list[str]:
        out = []
        if self.best is None:
            out.append("published schedules: none fits the memory cap")
        else:
            out.append(f"best published schedule that fits: {self.best.name}, makespan {self.best.makespan:g} "
                       f"(this solve is {_faster(self.makespan, self.best.makespan)} it)")
        if self.best_order is not None:
            data = "none fits the memory cap" if self.best is None else f"{self.best.name}, {self.best.makespan:g}"
            order = self.best_order
            out.append(f"this batch in data order: {data}; best published order: {order.name}, {order.makespan:g} "
                       f"(this solve is {_faster(self.makespan, order.makespan)} it)")
        if self.refused:
            shown = "; ".join(f"{r.name} (makespan {r.makespan:g}) needs {r.need:g} on device {r.device}"
                              for r in self.refused[:SHOWN_REFUSALS])
            more = len(self.refused) - SHOWN_REFUSALS
            out.append(f"refused by the cap ({self.refused[0].capacity:g}): {shown}"
                       + (f"; {more} more (--json lists them)" if more > 0 else ""))
        out.append(f"gap: {self.gap}")
        if self.recompute is not None:
            out.append(f"recompute: {self.recompute}")
        out.append(f"offload: {self.offload}")
        if self.least_cap is not None:
            exact = "" if self.least_cap_command is None else " (at most; the least is found by the command below)"
            out.append(f"unbounded optimum {self.unbounded_makespan:g} is reached with a cap of "
                       f"{self.least_cap:g}{exact}, e.g. by {self.least_cap_by}")
        if self.least_cap_command is not None:
            out.append(f"least cap for the unbounded optimum: {self.least_cap_command}")
        return out


def _speedup(makespan: float, other: float) -> float | None:
    """How much faster ``makespan`` is than ``other`` (0.1 = 10 %); None when it takes no time and ``other`` does."""
    if makespan <= 0:
        return 0.0 if other <= 0 else None
    return other / makespan - 1.0


def _faster(makespan: float, other: float) -> str:
    """"12.0% faster than", "as fast as" or (no time against some) "faster than"."""
    speedup = _speedup(makespan, other)
    return "faster than" if speedup is None else "as fast as" if abs(speedup) < EPS else f"{speedup:.1%} faster than"


def _refusal(method: Method, problem: Problem) -> Refusal | None:
    """What ``method`` needs beyond the caps: rebuilt ignoring them, the device it exceeds most."""
    schedule = run_and_check(method, problem, RunOptions(ignore_capacity=True), checked=False).schedule
    if schedule is None:
        return None
    over = [(peak - cap, d, peak, cap) for d, (peak, cap) in enumerate(zip(schedule.peak_memory, problem.capacity))
            if exceeds(peak, cap)]
    if not over:
        return None
    _, device, peak, cap = max(over)
    return Refusal(method.name, peak, device, cap, schedule.makespan)


def compare_published(problem: Problem) -> tuple[Fit | None, list[Refusal]]:
    """The fastest published schedule within the caps, and those the caps refuse (with their needs)."""
    fits: list[Fit] = []
    refused: list[Refusal] = []
    for method in published_methods():
        outcome = run_and_check(method, problem, RunOptions(), checked=False)
        if outcome.status == INFEASIBLE:
            refusal = _refusal(method, problem)
            if refusal is not None:
                refused.append(refusal)
        elif outcome.schedule is not None:  # else a method that turns this problem down: not a comparison
            fits.append(Fit(method.name, outcome.schedule.makespan, max(outcome.schedule.peak_memory)))
    best = min(fits, key=lambda f: (f.makespan, f.peak), default=None)
    return best, sorted(refused, key=lambda r: r.makespan)


def compare_orders(problem: Problem, best: Fit | None) -> Fit | None:
    """When microbatches differ: the fastest published schedule within the caps in another microbatch
    order (each one longest first and shortest first, then the order search of the fastest of those and
    ``best``, the fastest in data order); None when the microbatches cost the same or none fits."""
    if not problem.per_microbatch:
        return None
    names = [m.name for m in published_methods()]
    found = [Fit(s.method.name, s.makespan, max(s.peak_memory))
             for s in ordered_baselines(problem, RunOptions(), ("longest-first", "shortest-first"), names)]
    leader = min(found + ([best] if best is not None else []), key=lambda f: (f.makespan, f.peak), default=None)
    if leader is not None:
        found += [Fit(s.method.name, s.makespan, max(s.peak_memory))
                  for s in ordered_baselines(problem, RunOptions(), ("search",), [base_name(leader.name)])]
    return min(found, key=lambda f: (f.makespan, f.peak), default=None)


def explain_gap(schedule: Schedule, status: Status, lower_bound: float, problem_path: str | None = None) -> str:
    """Whether the distance to the analytic bound is the bound's (schedule proven optimal) or still open;
    an open gap on a capped problem the split bound applies to names its command (``problem_path``)."""
    analytic = makespan_lower_bound(schedule.problem).value
    span = schedule.makespan
    if span <= analytic * (1 + EPS) + EPS:
        return f"none: the makespan equals the analytic lower bound ({analytic:g})"
    share = (span - analytic) / span
    if status == Status.OPTIMAL:
        return (f"the bound's: {schedule.method.name} proved {span:g} optimal; the analytic bound ({analytic:g}) "
                f"is {share:.1%} below it")
    open_share = (span - lower_bound) / span if span > 0 else 0.0
    text = f"open: {open_share:.1%} between the makespan and the best proven bound ({lower_bound:g}); " + \
        _more_time(schedule)
    problem = schedule.problem
    if problem_path is not None and any(cap is not None for cap in problem.capacity):
        from ppsolve.solvers.cpsat.split_bound import why_not  # CP-SAT's module: only where a gap is open

        if why_not(problem) is None:
            text += (f"; a higher bound may come from smaller problems proven by CP-SAT: "
                     f"ppsolve bound {shlex.quote(problem_path)} --split 300")
    return text


USED_SHARE = 0.75  # a solve that ended before this share of its time limit left time unused


def _more_time(schedule: Schedule) -> str:
    """Whether more --time-limit may help: yes when the search used its time (or a step's wall clock, or
    Ctrl-C, ended it); when it ended well before, with --threads 1 its deterministic limits ended it
    (they grow with the time limit), else it stopped on its own and more time may change nothing."""
    method = schedule.method
    limit, threads = method.params.get("time_limit"), method.params.get("threads")
    clock = any("wall clock stopped" in note for note in method.extra.get("notes", ()))
    if not limit or method.seconds >= USED_SHARE * limit or method.extra.get("interrupted") or clock:
        return "more --time-limit may close it from either side"
    used = f"the search ended after {method.seconds:.1f} s of its {limit:g} s"
    if threads == 1:
        return f"{used}, at its deterministic limits (--threads 1), which a larger --time-limit raises"
    return f"{used}, on its own: more --time-limit may not change it"


def _least_overhead_proven(schedule: Schedule) -> bool:
    extra = schedule.method.extra
    return extra.get("least_overhead", extra.get("least_offload")) == "optimal"


def _in_flight(problem: Problem, stage: int) -> str:
    """How many whole activations of ``stage`` its device's cap holds at once."""
    device = problem.placement[stage]
    cap = problem.capacity[device]
    act = problem.activation.high(stage)
    held = int(cap / act + EPS)
    largest = " (its largest)" if problem.activation.varies else ""
    return (f"the cap ({cap:g}) holds {held} whole activation{'' if held == 1 else 's'}{largest} of stage {stage} "
            f"on device {device} at once")


def explain_recompute(schedule: Schedule) -> str | None:
    """Why the schedule recomputes activations, where, and at what cost, or why it does not (None: the
    problem cannot recompute)."""
    problem = schedule.problem
    if problem.recompute is None:
        return None
    if not problem.can_recompute:
        return "not possible: every stage's recompute keeps its whole activation"
    unbounded = all(cap is None for cap in problem.capacity)
    n, total = schedule.recomputed, problem.num_stages * problem.microbatches
    if n == 0:
        if unbounded:
            return "not used: memory is unbounded, so rerunning forwards cannot make it faster"
        return ("not used: this makespan is reached within the cap without it "
                f"(peak {max(schedule.peak_memory):g}; a recompute costs compute time and is used only where it helps)")
    by_stage = schedule.recomputed_by_stage()
    where = ", ".join(f"stage {s}: {len(js)}" for s, js in by_stage.items())
    text = f"{n} of {total} activations ({where}), {schedule.recompute_time:g} of compute time"
    if unbounded:
        return text + "; memory is unbounded"
    first = min(by_stage, key=lambda s: (problem.capacity[problem.placement[s]] or 0) / problem.activation.high(s))
    text += f"; {_in_flight(problem, first)}"
    return text + ("; no schedule at this makespan recomputes less (proven)" if _least_overhead_proven(schedule)
                   else "; the least recompute found at this makespan")


def explain_offload(schedule: Schedule) -> str:
    """Why the schedule moves activations to host memory, or why it does not (the other lever:
    :func:`explain_recompute`; both: :func:`explain_levers`)."""
    problem = schedule.problem
    if problem.offload is None:
        return "not possible: the problem has no offload block"
    if not problem.can_offload:
        return "not possible: every stage's offload fraction is 0"
    unbounded = all(cap is None for cap in problem.capacity)
    if unbounded and schedule.offloaded > 0:
        return f"used ({schedule.offloaded:g} moved) to lower the peak: memory is unbounded"
    if unbounded:
        return "not used: memory is unbounded, so moving activations to host cannot make it faster"
    if schedule.offloaded > 0:
        no_off = min_capacity(problem, offload=False)
        short = [d for d, cap in enumerate(problem.capacity) if exceeds(no_off[d], cap)]
        if short and not problem.can_recompute:
            return (f"used ({schedule.offloaded:g} moved): without it no schedule fits the cap at all "
                    f"(device {short[0]} needs {no_off[short[0]]:g})")
        stages = sorted(schedule.offloaded_by_stage())
        return (f"used ({schedule.offloaded:g} moved, stage{'' if len(stages) == 1 else 's'} "
                f"{', '.join(map(str, stages))}): "
                f"{_in_flight(problem, stages[0])}; "
                + ("no schedule at this makespan has less overhead (proven)" if _least_overhead_proven(schedule)
                   else "this is the least offload found at this makespan"))
    return ("not used: this makespan is reached within the cap without it "
            f"(peak {max(schedule.peak_memory):g}; offload costs host-link time and is used only where it helps)")


def explain_levers(schedule: Schedule) -> tuple[str | None, str]:
    """(recompute, offload): which memory lever the schedule uses where, and why."""
    return explain_recompute(schedule), explain_offload(schedule)


def least_cap(schedule: Schedule, problem_path: str) -> tuple[float | None, float | None, str | None, str | None]:
    """(unbounded optimum if known, a cap that reaches it, the schedule that shows it, the command for the least).

    Cheap: the uncapped analytic bound is the unbounded optimum when this solve or some published
    schedule built without the caps reaches it; the least of their peaks is then a cap that reaches it,
    and the least one when it equals the least capacity any schedule needs (bounds.min_capacity).
    Otherwise the exact least cap is a memory-objective solve, whose command is returned.
    """
    free = schedule.problem.replace(capacity=None)
    bound = makespan_lower_bound(free).value
    reach: list[tuple[float, str]] = []
    if schedule.makespan <= bound * (1 + EPS) + EPS:
        reach.append((max(schedule.peak_memory), "this solve"))
    for method in published_methods():
        built = run_and_check(method, free, RunOptions(), checked=False).schedule
        if built is None:
            continue
        if built.makespan <= bound * (1 + EPS) + EPS:
            reach.append((max(built.peak_memory), method.name))
    command = (f"ppsolve solve {shlex.quote(problem_path)} --ignore-capacity --objective memory "
               "--makespan-limit 1x --time-limit 300 -o least-cap.json")
    if not reach:
        return None, None, None, command
    cap, name = min(reach)
    floor = max(min_capacity(free, offload=free.can_offload))
    return bound, cap, name, None if cap <= floor + EPS else command


def advise(problem_path: str, schedule: Schedule, status: Status, lower_bound: float) -> Advice:
    """The summary of a solve of the problem read from ``problem_path`` that produced ``schedule``.

    The comparison uses the problem as solved (``schedule.problem``: without caps under --ignore-capacity).
    """
    problem = schedule.problem
    best, refused = compare_published(problem)
    unbounded, cap, by, command = least_cap(schedule, problem_path)
    return Advice(makespan=schedule.makespan, best=best, refused=tuple(refused),
                  best_order=compare_orders(problem, best),
                  gap=explain_gap(schedule, status, lower_bound, problem_path), offload=explain_offload(schedule),
                  recompute=explain_recompute(schedule),
                  unbounded_makespan=unbounded, least_cap=cap, least_cap_by=by, least_cap_command=command)
