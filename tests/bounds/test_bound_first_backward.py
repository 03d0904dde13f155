"""The idle before a device's first B, counted per stage with the host link (``ppsolve.bounds.first_backward``),
against random valid schedules of tiny two-chunk problems with offload.

The argument says something of every valid schedule, not only of an optimal one: on each capped device,
the start of its first B less the F work before it is at least ``least_idle_before``. The schedules here
come from random device orders (the ops drawn in a random order that obeys the dependency rules, written
out below from the contract), most activations offloaded after their F by a random amount and reloaded just
before their B, timed by the simulator, the problem capped at the schedule's own peak memory per device and
the schedule passed by the checker; each is a witness against the figure (and against the whole bound: its
makespan is at least ``makespan_lower_bound``)."""

from __future__ import annotations

import random
from unittest import mock

import pytest

from ppsolve.bounds import analytic, makespan_lower_bound, min_capacity
from ppsolve.bounds.chains import microbatch_chains
from ppsolve.bounds.first_backward import StageForwards, least_idle_before, stage_forwards
from ppsolve.checker import check
from ppsolve.errors import PpsolveError
from ppsolve.ops import Op, OpKind
from ppsolve.problem import load_problem, problem_from_dict
from ppsolve.schedule import make_schedule
from ppsolve.simulator import forwards_wait_for_offloads, simulate
from ppsolve.solvers import SolveOptions, solve
from tests.helpers import ROOT

_F, _B, _W = OpKind.F, OpKind.B, OpKind.W


def draw_problem(rng: random.Random) -> dict:
    """1-2 devices, two chunks (interleaved or V-shape), 2-4 microbatches, stages of different sizes, a
    host link; no cap yet."""
    devices = rng.choice([1, 2])
    S = 2 * devices
    act = [rng.choice([1, 2, 3, 4]) for _ in range(S)]
    return {"format": "ppsolve/problem@1", "devices": devices, "microbatches": rng.randint(2, 4), "chunks": 2,
            "placement": rng.choice(["interleaved", "vshape"]) if devices == 2 else "vshape",
            "backward": rng.choice(["split", "fused"]),
            "time": {"forward": [rng.randint(1, 4) for _ in range(S)],
                     "backward_input": [rng.randint(1, 3) for _ in range(S)],
                     "backward_weight": [rng.randint(0, 2) for _ in range(S)], "p2p": rng.choice([0, 1])},
            "memory": {"activation": act, "weight_hold": [rng.choice([0, a / 2]) for a in act]},
            "offload": {"fraction": rng.choice([0.5, 1, 1]),
                        "bandwidth": {"d2h": rng.choice([0.25, 0.5, 1]), "h2d": rng.choice([0.5, 1, 2])},
                        "duplex": rng.random() < 0.7}}


def _prerequisites(op: Op, S: int) -> list[Op]:
    """The compute ops ``op`` waits for (the contract's ordering rules 1 to 4)."""
    s, j = op.stage, op.microbatch
    if op.kind is _F:
        return [Op(_F, s - 1, j)] if s > 0 else []
    if op.kind is _B:
        return [Op(_F, s, j)] + ([Op(_B, s + 1, j)] if s < S - 1 else [])
    return [Op(_B, s, j)]


def random_orders(problem, rng: random.Random, offload_share: float, eager: float) -> tuple[list[list[Op]], dict]:
    """Device orders of one random order of every compute op that obeys the dependencies (a ready F
    taken first with probability ``eager``, else any ready op), with about ``offload_share`` of the
    activations offloaded right after their F (a random amount up to the share that may go) and reloaded
    right before their B; and those amounts."""
    S, m, split = problem.num_stages, problem.microbatches, problem.split_backward
    kinds = (_F, _B, _W) if split else (_F, _B)
    left = {Op(k, s, j) for k in kinds for s in range(S) for j in range(m)}
    done: set[Op] = set()
    orders: list[list[Op]] = [[] for _ in range(problem.devices)]
    amounts = {}
    while left:
        ready = sorted((op for op in left if all(p in done for p in _prerequisites(op, S))),
                       key=lambda op: (op.kind.value, op.stage, op.microbatch))
        forwards = [op for op in ready if op.kind is _F]
        op = rng.choice(forwards if forwards and rng.random() < eager else ready)
        left.remove(op)
        done.add(op)
        order = orders[problem.placement[op.stage]]
        key = (op.stage, op.microbatch)
        if op.kind is _B and key in amounts:
            order.append(Op(OpKind.RELOAD, *key))
        order.append(op)
        if op.kind is _F and rng.random() < offload_share and problem.max_offload(*key) > 0:
            amounts[key] = problem.max_offload(*key) * rng.choice([0.5, 1.0, 1.0])
            order.append(Op(OpKind.OFFLOAD, *key))
    return orders, amounts


def witnesses(seed: int, problems: int, per_problem: int):
    """(problem, valid schedule) pairs: for each of ``problems`` drawn from ``seed``, ``per_problem`` random
    schedules, each with the problem capped at the schedule's own peak memory per device (so that the cap
    binds somewhere in every witness)."""
    rng = random.Random(seed)
    for _ in range(problems):
        free = problem_from_dict(draw_problem(rng))
        for _ in range(per_problem):
            orders, amounts = random_orders(free, rng, rng.choice([0.7, 1.0]), rng.choice([0.0, 0.6, 1.0]))
            waits = forwards_wait_for_offloads(orders)
            keep = rng.choice([0.0, 0.5, 1.0])  # the forwards that wait for the offloads before them
            waits = {op: before for op, before in waits.items() if rng.random() < keep}
            try:
                ops = simulate(free, orders, amounts, waits)
            except PpsolveError:
                continue
            problem = free.replace(capacity=tuple(make_schedule(free, ops, "random").peak_memory))
            schedule = make_schedule(problem, ops, "random")
            assert check(schedule).ok
            yield problem, schedule


def idle_before_first_b(schedule, device: int) -> tuple[float, float]:
    """The start of the device's first B less the F work before it, and the most memory the device holds
    at the start of a forward before that B (the contract's memory rules: an F allocates its activation at
    its start, an offload frees its amount at its end, a reload takes it back at its start; nothing else
    happens before the first B)."""
    ops = [op for op in schedule.ops if op.device == device]
    first_b = min(op.start for op in ops if op.kind is _B)
    forwards = [op for op in ops if op.kind is _F and op.start < first_b]
    activation = schedule.problem.activation

    def held(t: float) -> float:
        return (sum(activation.at(op.stage, op.microbatch) for op in forwards if op.start <= t)
                - sum(op.amount for op in ops if op.kind is OpKind.OFFLOAD and op.end <= t)
                + sum(op.amount for op in ops if op.kind is OpKind.RELOAD and op.start <= t))

    return first_b - sum(op.end - op.start for op in forwards), max((held(op.start) for op in forwards), default=0.0)


def figure(problem, device: int, cap: float, d2h: float | None = None) -> float | None:
    """``least_idle_before`` for the device at ``cap`` (and the problem's link, or ``d2h``)."""
    chains = microbatch_chains(problem)
    items = chains.items(problem.stages_of_device[device])
    return least_idle_before(stage_forwards(problem, items, chains.f_head, chains.weight), cap,
                             min(chains.b_head[i] for i in items), problem.offload.d2h if d2h is None else d2h)


def test_no_random_valid_schedule_idles_less_before_its_first_b_than_the_figure():
    tally = {"schedules": 0, "above_head": 0}
    for problem, schedule in witnesses(seed=3, problems=40, per_problem=12):
        assert schedule.makespan >= makespan_lower_bound(problem).value - 1e-9
        tally["schedules"] += 1
        chains = microbatch_chains(problem)
        for device in range(problem.devices):
            # the argument needs the cap only at the last forward before the first B: the most held then
            # serves as well as the cap, and tightens the check
            idle, held = idle_before_first_b(schedule, device)
            least = figure(problem, device, held)
            assert idle >= least - 1e-9, (problem, device, idle, least)
            assert figure(problem, device, problem.capacity[device]) <= least + 1e-9
            head = min(chains.f_head[i] for i in chains.items(problem.stages_of_device[device]))
            tally["above_head"] += least > head + 1e-9
    # the figure says more than the head alone on many devices
    assert tally["schedules"] >= 400 and tally["above_head"] >= 200, tally


def test_no_solved_schedule_idles_less_before_its_first_b_than_the_figure():
    # Schedules that CP-SAT finds in a second (the figure taken out of the bound its model is cut at), on
    # caps from the least that works with offload to halfway to the least without: their warm-ups come close
    # enough to the figure that the same figure without the link (what the cap alone would force) is above
    # the idle of some of them.
    rng = random.Random(5)
    link_needed = 0
    for _ in range(16):
        problem = problem_from_dict(draw_problem(rng))
        low, high = min_capacity(problem, offload=True), min_capacity(problem)
        problem = problem.replace(capacity=tuple(rng.choice([lo, (lo + hi) / 2]) for lo, hi in zip(low, high)))
        with mock.patch.object(analytic, "least_idle_before", lambda *args: None):
            schedule = solve(problem, SolveOptions(time_limit=1, threads=1, seed=0)).schedule
        assert check(schedule).ok
        for device in range(problem.devices):
            idle, held = idle_before_first_b(schedule, device)
            assert idle >= figure(problem, device, held) - 1e-9, (problem, device)
            link_needed += idle < figure(problem, device, held, d2h=0.0) - 1e-9
    assert link_needed >= 2


def test_the_figure_raises_the_bound_of_the_interleaved_llama8b_like_problem_at_21_gib():
    # Device 6 holds stage 6 (3.375 GiB, F 31.86 ms) and stage 14 (2.25 GiB, F 21.24 ms) and waits until
    # 394.64 ms for its first B: 32.6 ms idle beyond its head (128.4 ms), which with the tail after its last
    # B raises the problem's bound from 5246.36 to 5278.96 ms.
    problem = load_problem(ROOT / "instances/realistic/llama8b-like-8x32-interleaved-v2-cap21-decide.json")
    assert figure(problem, 6, problem.capacity[6]) == pytest.approx(161.0, abs=0.01)
    bound = makespan_lower_bound(problem)
    assert bound.value == pytest.approx(5278.96, abs=0.01) == bound.last_backward_bounds[6]
    with mock.patch.object(analytic, "least_idle_before", lambda *args: None):
        assert makespan_lower_bound(problem).value == pytest.approx(5246.36, abs=0.01)


def test_the_figure_counts_each_stage_at_its_own_size_and_the_link_at_its_rate():
    # A device with stage a (2 forwards, activation 3, F 2, head 0) and stage b (2 forwards, activation 1,
    # F 1, head 2), cap 4, its first B no sooner than 6. Every forward at the least size (1) and the
    # longest F (2) would let four fill [0, 8): no idle. Per stage, without a link at most one of a fits
    # beside one of b (held 4): idle 6 - 3 = 3. With d2h 0.25, one of a and both of b (held 5) need 1 on
    # host, moved from 2 (the first F's end) by 2 + 1 / 0.25 = 6: idle 6 - 4 = 2. With d2h 1, all four
    # (held 8) need 4 on host by 2 + 4 = 6: idle 0.
    stages = [StageForwards(2, 3.0, 2.0, 2.0, 0.0), StageForwards(2, 1.0, 1.0, 1.0, 2.0)]
    assert least_idle_before(stages, 4.0, 6.0, 0.0) == pytest.approx(3.0)
    assert least_idle_before(stages, 4.0, 6.0, 0.25) == pytest.approx(2.0)
    assert least_idle_before(stages, 4.0, 6.0, 1.0) == pytest.approx(0.0)
    # 301 x 301 counts: too many to count, unless the link is slower than the forwards fill memory (only
    # counts whose activations, less what the link moves meanwhile, fit C + d2h (t_B - H - 2 f) can be least)
    many = [StageForwards(300, 1.0, 1.0, 1.0, 0.0)] * 2
    assert least_idle_before(many, 4.0, 6.0, 1.0) is None
    assert least_idle_before(many, 4.0, 6.0, 0.5) == pytest.approx(0.0)  # 6 by t = 6, 2 of them on host
