"""Large-neighbourhood search: windows of a valid schedule, and the search built on them."""

from __future__ import annotations

import math
import random
import time

import pytest

from ppsolve.bounds import critical_path
from ppsolve.baselines.engines.offload_fit import fit_by_offload
from ppsolve.baselines.families.recompute import fit_by_recompute
from ppsolve.checker import check
from ppsolve.ops import OpKind
from ppsolve.schedule import make_schedule
from ppsolve.simulator import simulate
from ppsolve.solvers import SolveOptions, phases, solve
from ppsolve.solvers.api import Phase, PhaseAnswer, PhaseTask, Status
from ppsolve.solvers.budget import Budget, Limit
from ppsolve.solvers.cpsat import backend
from ppsolve.solvers.progress import Progress
from ppsolve.solvers.scaling import build_scaling
from ppsolve.solvers.search import lns
from ppsolve.solvers.search.refit import RefitVariant, refit, refittable
from ppsolve.solvers.search.window import Incumbent, compose, make_window, on_model_grid
from ppsolve.solvers.settings import LnsSettings, PhaseSettings, Settings
from ppsolve.solvers.warm_start.plans import limited_1f1b_orders, serial_orders
from tests.helpers import make_problem

OFFLOAD = {"fraction": 1, "bandwidth": {"d2h": 0.5, "h2d": 0.5}, "links": [[0, 1], [2, 3]]}


def _problem(offload=None, capacity=2.25, recompute=None):
    """4 devices x 12 microbatches, uneven stages, p2p, room for two activations per device."""
    extra = {"offload": offload} if offload else {}
    extra.update({"recompute": recompute} if recompute else {})
    return make_problem(devices=4, microbatches=12, time_forward=[2, 3, 3, 4], time_backward_input=[3, 4, 4, 5],
                        time_backward_weight=[2, 2, 2, 3], time_p2p=0.5, memory_activation=1,
                        memory_weight_hold=0.25, memory_capacity=capacity, **extra)


def _serial(problem, offload=False):
    return make_schedule(problem, simulate(problem, serial_orders(problem, offload)), "serial")


def _improve(problem, start, work=4.0):
    """The search over ``work`` seconds of deterministic work (one thread): how far it gets does not depend on
    the machine's load; the wall clock (10 minutes) only guards against a runaway."""
    options = SolveOptions(time_limit=GUARD, threads=1)
    budget = Budget(GUARD, deterministic=True)
    return lns.improve(problem, build_scaling(problem), options, budget, Progress(budget, "cpsat"), backend, start,
                       Limit(time.monotonic() + GUARD, work), problem.can_offload, 0.0)


GUARD = 600.0


@pytest.fixture
def checked_incumbents(monkeypatch):
    """Every schedule the search takes as its incumbent, each checked when it is taken."""
    seen = []

    class Checked(Incumbent):
        def __init__(self, schedule):
            assert check(schedule).ok
            seen.append(schedule)
            super().__init__(schedule)

    monkeypatch.setattr(lns, "Incumbent", Checked)
    return seen


@pytest.mark.parametrize("offload, capacity", [(None, 2.25), (OFFLOAD, 2.25), (OFFLOAD, None)],
                         ids=["no-offload", "shared-links", "offload-without-cap"])
def test_every_incumbent_is_valid_and_none_is_longer(offload, capacity, checked_incumbents):
    problem = _problem(offload, capacity)
    start = _serial(problem, offload=offload is not None)
    result = _improve(problem, start)  # a few windows
    assert check(result.best).ok
    assert result.improved > 0 and result.best.makespan < start.makespan  # serial leaves much to gain
    makespans = [s.makespan for s in checked_incumbents]
    assert makespans == sorted(makespans, reverse=True) and len(makespans) == result.improved + 1


def test_a_window_with_a_second_range_frees_a_lever_whose_f_and_b_lie_apart():
    """A window over device 0 around F(0, j) and, separately, around B(0, j) of a 1F1B schedule frees
    neither the ops between the two ranges nor a lever whose R lies there; it lets microbatch j's
    lever change, admits its own placement, and composes into a valid schedule."""
    from ppsolve.methods import run_method
    from ppsolve.ops import Op, OpKind

    problem = _problem({"fraction": 1, "bandwidth": {"d2h": 0.5, "h2d": 0.5}}, capacity=4.25,
                       recompute={"keep": 0.25})
    inc = Incumbent(run_method("1f1b", problem))
    f, b = inc.by_op[Op(OpKind.F, 0, 3)], inc.by_op[Op(OpKind.B, 0, 3)]
    first, second = (f.start, f.end), (b.start, b.end)
    between = [op for op in inc.compute[0] if f.end <= op.start < b.start]
    assert between  # the ranges leave ops of device 0 fixed between them
    alone = make_window(inc, [0], *first, offload=True)
    assert (0, 3) not in alone.choosable
    window = make_window(inc, [0], *first, offload=True, then=second)
    assert {op.op for op in window.free} == {f.op, b.op}
    assert window.choosable == {(0, 3)}
    assert not {op.op for op in between} & window.moves
    low, high = window.low[Op(OpKind.R, 0, 3)], window.high[Op(OpKind.R, 0, 3)]
    assert (low, high) == (window.low[b.op], window.high[b.op])  # a new R goes with its B's range
    budget = Budget(30, deterministic=True)
    task = PhaseTask(problem, build_scaling(problem), Phase.MAKESPAN, SolveOptions(time_limit=30, threads=1),
                     budget, budget.search(0.005), Progress(budget, "cpsat"), window=window)
    answer = backend.run_phase(task)
    assert answer.status is Status.OPTIMAL
    assert window.measure(answer.solutions[-1])[0] <= window.current + 1e-9
    assert check(make_schedule(problem, compose(inc, [(window, answer.solutions[-1])]), "x")).ok
    with pytest.raises(ValueError):
        make_window(inc, [0], *second, offload=True, then=first)
    # recomputed: its lever may change only where its R is free too, and that R keeps its own bounds
    inc = Incumbent(run_method("1f1b-recompute", problem))
    f, r, b = (inc.by_op[Op(kind, 0, 3)] for kind in (OpKind.F, OpKind.R, OpKind.B))
    assert f.end < r.start and r.end < b.start
    assert (0, 3) not in make_window(inc, [0], f.start, f.end, offload=True, then=(b.start, b.end)).choosable
    window = make_window(inc, [0], f.start, f.end, offload=True, then=(r.start, b.end))
    assert window.choosable == {(0, 3)}
    assert (window.low[r.op], window.high[r.op]) == (window.low[b.op], window.high[b.op])


@pytest.mark.parametrize("capacity", [2.25, None], ids=["capped", "uncapped"])
def test_a_window_admits_its_own_placement(capacity):
    """Every window of a valid schedule has a solution at least as good as the incumbent's placement,
    and that solution composes into a valid schedule."""
    problem = _problem(OFFLOAD, capacity)
    start = _serial(problem, offload=True)
    inc = Incumbent(start)
    budget = Budget(30, deterministic=True)
    options = SolveOptions(time_limit=30, threads=1)
    scaling = build_scaling(problem)
    for t0 in (0.0, inc.makespan / 3, 2 * inc.makespan / 3):
        window = make_window(inc, range(problem.devices), t0, t0 + inc.makespan / 4, offload=True)
        assert window is not None and window.choosable
        task = PhaseTask(problem, scaling, Phase.MAKESPAN, options, budget, budget.search(0.005),
                         Progress(budget, "cpsat"), window=window)
        answer = backend.run_phase(task)
        assert answer.status.solved, answer.status
        path, _ = window.measure(answer.solutions[-1])
        assert path <= window.current + 1e-9
        assert check(make_schedule(problem, compose(inc, [(window, answer.solutions[-1])]), "x")).ok


def test_a_start_with_amounts_off_the_model_grid_is_put_on_it_so_that_its_windows_have_solutions():
    """A plan that offloads what the link can move by then (``fit_by_offload``) has amounts off the model's
    memory grid, which a window reads rounded down: at the cap, left as it is, those windows have no solution
    and the search does not leave the plan (5 of 8 windows infeasible, 165 kept). Each amount is rounded up
    by less than one memory unit, the schedule re-timed and checked, and the search goes on from it."""
    problem = _problem({"fraction": 1, "bandwidth": {"d2h": 0.37, "h2d": 0.37}}, capacity=2.5)
    orders = limited_1f1b_orders(problem.replace(offload=None, recompute=None), problem.devices)
    plan, _, stuck = fit_by_offload(problem, orders)
    start = make_schedule(problem, plan.time(problem), "fit")
    scaling = build_scaling(problem)
    unit = 1 / scaling.memory_scale

    def off_grid(schedule):
        return {op.op: op.amount for op in schedule.ops
                if op.kind.is_transfer and not math.isclose(op.amount / unit, round(op.amount / unit), abs_tol=1e-6)}

    assert not stuck and check(start).ok and off_grid(start)
    snapped = on_model_grid(problem, scaling, start)
    assert check(snapped).ok and not off_grid(snapped)
    before = {op.op: op.amount for op in start.ops if op.kind.is_transfer}
    after = {op.op: op.amount for op in snapped.ops if op.kind.is_transfer}
    assert after.keys() == before.keys()
    assert all(before[op] <= after[op] < before[op] + unit for op in before)
    assert snapped.makespan <= start.makespan + len(before) * unit / 0.37 + 1e-9
    assert on_model_grid(problem, scaling, snapped) is snapped  # on the grid: left as it is
    result = _improve(problem, start, work=2.0)
    assert result.infeasible == 0 and result.best.makespan < start.makespan - 1


def test_windows_that_share_nothing_are_independent():
    problem = _problem()
    inc = Incumbent(_serial(problem))
    early = make_window(inc, range(4), 0.0, 20.0, offload=False)
    late = make_window(inc, range(4), inc.makespan - 20.0, inc.makespan, offload=False)
    overlapping = make_window(inc, range(4), 10.0, 30.0, offload=False)
    assert early.independent(late) and late.independent(early)
    assert not early.independent(overlapping)


@pytest.mark.parametrize("capacity", [2.25, None], ids=["capped", "uncapped"])
def test_time_slices_that_keep_orders_need_only_be_disjoint_in_time(capacity):
    """Without transfers, adjacent time slices are independent although the later one reads the earlier
    one's ops, and their placements compose into a valid schedule; a block of devices, or slices that
    overlap, are not."""
    problem = _problem(capacity=capacity)
    inc = Incumbent(_serial(problem))
    H = inc.makespan
    budget = Budget(30, deterministic=True)
    options = SolveOptions(time_limit=30, threads=1)
    slices = [make_window(inc, range(4), a * H, b * H, offload=False, orders=True)
              for a, b in ((0.1, 0.3), (0.3, 0.5), (0.5, 0.7))]
    assert all(w.time_slice for w in slices)
    assert not slices[0].moves.isdisjoint(slices[1].reads)  # the general rule would refuse them
    assert slices[0].independent(slices[1]) and slices[1].independent(slices[2]) and slices[0].independent(slices[2])
    assert slices[0].may_be_independent(inc, range(4), 0.3 * H, 0.4 * H)
    assert not slices[0].may_be_independent(inc, range(4), 0.25 * H, 0.4 * H)
    overlapping = make_window(inc, range(4), 0.2 * H, 0.4 * H, offload=False, orders=True)
    block = make_window(inc, (1, 2), 0.3 * H, 0.5 * H, offload=False, orders=True)
    assert not block.time_slice and not slices[0].independent(overlapping)
    fixed_times = make_window(inc, range(4), 0.3 * H, 0.5 * H, offload=False)
    assert not fixed_times.independent(slices[0])
    placements = []
    for window in slices:
        task = PhaseTask(problem, build_scaling(problem), Phase.MAKESPAN, options, budget, budget.search(0.01),
                         Progress(budget, "cpsat"), window=window)
        answer = backend.run_phase(task)
        assert answer.status.solved
        placements.append((window, answer.solutions[-1]))
    composed = make_schedule(problem, compose(inc, placements), "x")
    assert check(composed).ok and composed.makespan < H  # serial leaves room in every slice


SMALL_WHOLE_MODEL = Settings(phases=PhaseSettings(whole_model_ops=10))


def test_solve_switches_to_neighbourhoods_above_the_size_limit():
    problem = _problem()
    result = solve(problem, SolveOptions(time_limit=1, threads=1, settings=SMALL_WHOLE_MODEL))
    assert check(result.schedule).ok
    counts = result.schedule.method.extra["neighbourhoods"]
    assert counts["windows"] >= counts["drain_windows"] + counts["tail_windows"]
    assert result.status == "feasible" and Status.FEASIBLE.value == "feasible"


def test_a_window_proves_its_least_path_then_ends_its_ops_earlier(monkeypatch):
    """Two steps: the least longest path through the window, proven (the answer is optimal), then at
    that path the least sum of ends; without the second step the path is the same and the ops end
    no earlier, on some windows later."""
    problem = _problem()
    inc = Incumbent(_serial(problem))
    budget = Budget(30, deterministic=True)
    options = SolveOptions(time_limit=30, threads=1)

    def answer(window, share):
        monkeypatch.setattr(backend, "FLOW_SHARE", share)
        task = PhaseTask(problem, build_scaling(problem), Phase.MAKESPAN, options, budget, budget.search(0.05),
                         Progress(budget, "cpsat"), window=window)
        return backend.run_phase(task)

    later = 0
    for start, end in ((1 / 3, 1 / 2), (1 / 4, 1 / 2), (0.4, 0.6)):
        window = make_window(inc, range(problem.devices), inc.makespan * start, inc.makespan * end, offload=False)
        both, first_only = answer(window, 0.5), answer(window, 0.0)
        assert both.status is Status.OPTIMAL and first_only.status is Status.OPTIMAL
        path, flow = window.measure(both.solutions[-1])
        path_first, flow_first = window.measure(first_only.solutions[-1])
        assert path == pytest.approx(path_first) and path < window.current - 1e-9  # serial leaves room
        assert flow <= flow_first + 1e-9
        later += flow < flow_first - 1e-9  # the first step's placement leaves ops later than they could end
    assert later


def test_a_window_spans_every_device_up_to_all_devices_and_beyond_some_take_a_block():
    problem = make_problem(devices=6, microbatches=6)
    inc = Incumbent(_serial(problem))
    rng = random.Random(0)
    picks = [lns.pick(inc, rng, 10, LnsSettings(all_devices=6)) for _ in range(40)]
    assert all(devices == tuple(range(6)) for devices, _, _ in picks)
    for _, t0, t1 in picks:
        assert 0 <= t0 < t1 <= inc.makespan

    picks = [lns.pick(inc, rng, 10, LnsSettings(all_devices=5, block=2))[0] for _ in range(40)]
    blocks = [devices for devices in picks if devices != tuple(range(6))]
    assert blocks and len(blocks) < len(picks)  # about half of them
    for devices in blocks:
        assert len(devices) == 2 and devices[1] == devices[0] + 1 and 0 <= devices[0] <= 4


def test_the_critical_waits_are_the_ops_of_a_longest_path_that_wait_for_their_device():
    problem = _problem()
    inc = Incumbent(_serial(problem))
    previous = {b.op: a.end for ops in inc.compute for a, b in zip(ops, ops[1:])}
    waits = [op for op in inc.critical_ops if op.start > previous.get(op.op, 0.0) + 1e-9]
    assert {op.op for op in inc.critical_waits} == {op.op for op in waits}
    assert 0 < len(waits) < len(inc.critical_ops)  # the serial schedule has critical ops that do not wait


def test_a_pick_whose_range_holds_no_wait_of_a_longest_path_is_drawn_again(monkeypatch):
    problem = _problem()
    inc = Incumbent(_serial(problem))
    waits = inc.critical_waits
    busy = [op for op in inc.critical_ops if op not in waits]
    assert waits and busy

    def holds_a_wait(devices, t0, t1) -> bool:  # what waits_within says, the long way
        return any(op.device in devices and t0 < op.start < t1 for op in waits)

    rng = random.Random(3)
    for _ in range(200):
        devices, t0, t1 = lns.draw(inc, rng, 1)
        assert inc.waits_within(devices, t0, t1) == holds_a_wait(devices, t0, t1)
        assert not inc.waits_within(devices, t0, t0)

    def with_a_wait(draws: int) -> int:
        """How many of 60 narrow picks hold a waiting critical op, with ``draws`` draws at most."""
        rng = random.Random(5)
        return sum(holds_a_wait(*lns.pick(inc, rng, 1, LnsSettings(idle_draws=draws))) for _ in range(60))

    default = LnsSettings().idle_draws
    once, redrawn = with_a_wait(1), with_a_wait(default)
    assert once < 60  # narrow windows drawn once often hold no wait ...
    assert redrawn > once and redrawn >= 55  # ... drawn again they nearly always do


@pytest.mark.parametrize("deterministic", [True, False])
def test_in_deterministic_mode_the_wall_clock_only_guards_a_window(deterministic):
    """With --threads 1 a window ends at its deterministic limit; its wall clock is a guard well past it."""
    knobs = LnsSettings(tail_stall=1.0)  # ordinary windows only
    problem = _problem()
    seconds = 20.0
    budget = Budget(seconds, deterministic=deterministic)
    allowed = []

    class Recording:
        @staticmethod
        def run_phase(task):
            allowed.append(task.limit.until - time.monotonic())
            if len(allowed) >= 3:
                raise KeyboardInterrupt  # three windows are enough
            return PhaseAnswer(Status.UNKNOWN, work=1.0)

    options = SolveOptions(time_limit=seconds, threads=1 if deterministic else None, settings=Settings(lns=knobs))
    lns.improve(problem, build_scaling(problem), options, budget, Progress(budget, "cpsat"), Recording,
                _serial(problem), budget.search(1.0), False, 0.0)
    assert len(allowed) == 3
    if deterministic:
        assert all(2 * knobs.window_seconds < s <= knobs.window_seconds * knobs.window_guard for s in allowed)
    else:
        assert all(s <= knobs.window_seconds for s in allowed)


def test_a_window_may_start_at_a_different_time_on_each_device():
    """A tail window: each device frees exactly its ops that start at or after its own t0."""
    problem = _problem()
    inc = Incumbent(_serial(problem))
    H = inc.makespan
    t0 = {0: H - 10.0, 1: H - 10.0, 2: H - 10.0, 3: H - 40.0}
    window = make_window(inc, range(4), t0, H, offload=False, orders=True)
    free = {op.op for op in window.free}
    expected = {op.op for op in inc.schedule.ops if op.kind.is_compute and op.start >= t0[op.device] - 1e-9}
    assert free == expected
    assert window.t0 == H - 40.0
    assert any(op.device == 3 and op.start < H - 10.0 for op in window.free)


def _record_windows(problem, start, count, knobs: LnsSettings = LnsSettings(), offload: bool = False,
                    limits: list | None = None):
    """The windows ``lns.improve`` asks for, none of them solved, until ``count``; and its result.
    ``limits``: each window's deterministic limit is appended there."""
    seen = []

    class Recording:
        @staticmethod
        def run_phase(task):
            seen.append(task.window)
            if limits is not None:
                limits.append(task.limit.deterministic)
            if len(seen) >= count:
                raise KeyboardInterrupt
            return PhaseAnswer(Status.UNKNOWN, work=1.0)

    budget = Budget(60, deterministic=True)
    options = SolveOptions(time_limit=60, threads=1, settings=Settings(lns=knobs))
    limit = budget.search(1.0)
    result = lns.improve(problem, build_scaling(problem), options, budget, Progress(budget, "cpsat"), Recording,
                         start, limit, offload, 0.0)
    return seen, result, limit


def test_tail_windows_end_at_the_makespan_and_reach_back_on_the_busiest_device():
    """A tail window frees every device's last ops and reaches further back on the most loaded
    device (the last stage here)."""
    problem = _problem()
    start = _serial(problem)
    loads = [problem.device_load(d) for d in range(problem.devices)]
    busiest = loads.index(max(loads))
    seen, result, _ = _record_windows(problem, start, 3, LnsSettings(tail_stall=0.0))
    assert len(seen) == 3 and result.tail_windows == result.windows == 2  # the third was interrupted
    for window in seen:
        assert window.t1 == start.makespan
        first = {d: min(op.start for op in window.free if op.device == d) for d in range(problem.devices)}
        assert first[busiest] < min(first[d] for d in range(problem.devices) if d != busiest)


def test_tail_windows_start_when_the_ordinary_ones_stall():
    """No window improves: after tail_stall of the search's work the ordinary windows give way."""
    problem = _problem()
    seen, result, limit = _record_windows(problem, _serial(problem), 12)
    knobs = LnsSettings()
    ordinary = math.ceil(knobs.tail_stall * limit.deterministic / (1.0 + knobs.window_overhead) - 1e-9)
    assert 0 < ordinary < 11
    assert result.windows == 11 and result.tail_windows == 11 - ordinary


def test_a_drain_window_frees_every_device_alike_up_to_the_end_transfers_included():
    """When due, the drain window spans every device from drain_span microbatch paths before the end to
    the end, on a schedule with transfers too (their times fixed), with drain_share of the search's
    work; ordinary windows follow."""
    problem = _problem(OFFLOAD)
    start = _serial(problem, offload=True)
    knobs = LnsSettings(drain_at=(0.0,))
    limits: list = []
    seen, result, limit = _record_windows(problem, start, 3, knobs, offload=True, limits=limits)
    drain, after = seen[0], seen[1:]
    t0 = start.makespan - knobs.drain_span * critical_path(problem)
    assert drain.devices == tuple(range(problem.devices)) and drain.t1 == start.makespan and not drain.orders
    assert {op.op for op in drain.free} == {op.op for op in start.ops if op.start >= t0 - 1e-9}
    assert any(op.kind.is_transfer for op in drain.free)
    assert limits[0] == pytest.approx(knobs.drain_share * limit.deterministic)
    assert len(after) == 2 and limits[1] == knobs.window_seconds
    assert result.drain_windows == 1 and result.windows == 2


def test_a_drain_window_is_skipped_when_it_would_free_too_many_ops():
    problem = _problem()
    start = _serial(problem)
    seen, result, _ = _record_windows(problem, start, 2, LnsSettings(drain_at=(0.0,), drain_max_ops=5))
    inc = Incumbent(start)
    assert lns.drain_starts(inc, critical_path(problem), LnsSettings(drain_max_ops=5)) is None
    assert lns.drain_starts(inc, critical_path(problem)) is not None
    assert result.drain_windows == 0 and len(seen) == 2


def test_drain_windows_with_transfers_keep_every_incumbent_valid(checked_incumbents):
    """Drain windows solved (at the start and halfway) on a schedule that offloads: each schedule kept
    passes the checker, and the first one shortens the serial start's drain."""
    problem = _problem(OFFLOAD)
    start = _serial(problem, offload=True)
    knobs = LnsSettings(drain_at=(0.0, 0.5), drain_share=0.25)
    options = SolveOptions(time_limit=GUARD, threads=1, settings=Settings(lns=knobs))
    budget = Budget(GUARD, deterministic=True)
    result = lns.improve(problem, build_scaling(problem), options, budget, Progress(budget, "cpsat"), backend, start,
                         Limit(time.monotonic() + GUARD, 4.0), True, 0.0)
    assert result.drain_windows == 2 and result.drain_improved >= 1
    assert check(result.best).ok and result.best.makespan < start.makespan
    assert len(checked_incumbents) == result.improved + 1


def test_tail_windows_are_shrunk_to_the_op_limit():
    problem = _problem()
    inc = Incumbent(_serial(problem))
    t0 = lns.pick_tail(inc, random.Random(0), 4 * inc.makespan, (3,), LnsSettings(tail_max_ops=30))
    assert sum(1 for op in inc.schedule.ops if op.kind.is_compute and op.start >= t0[op.device]) <= 30
    assert t0[3] < t0[0] == t0[1] == t0[2]


@pytest.mark.parametrize("offload", [None, OFFLOAD])
def test_the_compute_ops_a_pick_frees_are_known_before_its_window_is_built(offload):
    """A round skips a pick that would move an op one of its windows reads, without building it:
    ``Incumbent.compute_between`` is exactly the compute ops the window would free (host links closed)."""
    problem = _problem(offload)
    inc = Incumbent(_serial(problem, offload is not None))
    H = inc.makespan
    for devices, t0, t1 in (((0,), 0.2 * H, 0.5 * H), ((1, 2), 0.0, 0.3 * H), (range(4), 0.6 * H, 0.65 * H)):
        window = make_window(inc, devices, t0, t1, offload=offload is not None)
        frees = {op.op for op in window.free if op.kind.is_compute}
        assert set(inc.compute_between(devices, t0, t1)) == frees and frees


def _record_limits(monkeypatch, *names) -> dict:
    """The limit and the budget's deadline each of ``names`` (searches of ``phases`` called as
    ``name(problem, scaling, options, budget, progress, backend, start, limit, ...)``) is given."""
    limits = {}
    for name in names:
        def recording(*args, real=getattr(phases, name), name=name):
            limits[name] = (args[7], args[3].deadline)
            return real(*args)

        monkeypatch.setattr(phases, name, recording)
    return limits


@pytest.mark.slow
def test_a_search_that_ends_the_solve_keeps_a_lean_reserve(monkeypatch):
    """Every schedule the search keeps is checked: only writing one is left after it, so its limit
    runs to the deadline less lean_reserve_share of the time limit, not the usual reserve."""
    limits = _record_limits(monkeypatch, "improve")
    solve(_problem(), SolveOptions(time_limit=20, threads=2, settings=SMALL_WHOLE_MODEL))
    limit, deadline = limits["improve"]
    assert deadline - limit.until == pytest.approx(0.2, abs=0.05)  # 1 % of 20 s: the check took far less
    assert 0.2 < Budget(20, False).reserve


@pytest.mark.slow
def test_with_levers_the_search_and_the_overhead_windows_keep_a_lean_reserve(monkeypatch):
    """With levers the OVERHEAD phase follows the search, on windows of one device: its schedules are
    checked too, so the search runs to the deadline less the lean reserve and the share kept for that
    phase, and the phase to the deadline less the lean reserve, not the usual 8 % of the limit."""
    limits = _record_limits(monkeypatch, "improve", "lower_overhead")
    problem = _problem(capacity=2.0, recompute={"keep": 0.25, "time": 2})
    result = solve(problem, SolveOptions(time_limit=20, threads=2, settings=SMALL_WHOLE_MODEL))
    assert result.schedule.recomputed > 0 and set(limits) == {"improve", "lower_overhead"}
    (search, deadline), (overhead, _) = limits["improve"], limits["lower_overhead"]
    kept = PhaseSettings().share_offload * 20
    assert deadline - search.until == pytest.approx(0.2 + kept, abs=0.05)
    assert deadline - overhead.until == pytest.approx(0.2, abs=0.05)  # the usual reserve: 1.6


def test_the_lean_reserve_never_grows_and_covers_a_few_checks():
    budget = Budget(300, False)
    assert budget.reserve == pytest.approx(24.0)
    budget.lean_reserve(0.1)
    assert budget.reserve == pytest.approx(3.0)  # lean_reserve_share of 300 s
    budget.lean_reserve(2.0)
    assert budget.reserve == pytest.approx(3.0)
    slow = Budget(300, False)
    slow.lean_reserve(2.0)
    assert slow.reserve == pytest.approx(8.0)  # reserve_checks checks
    tight = Budget(300, False)
    tight.lean_reserve(10.0)
    assert tight.reserve == pytest.approx(24.0)


def test_a_round_that_is_not_better_is_tried_again_with_its_shorter_paths_alone(monkeypatch):
    problem = _problem()
    inc = Incumbent(_serial(problem))
    H = inc.makespan
    budget = Budget(30, deterministic=True)
    same = make_window(inc, range(4), 0.1 * H, 0.2 * H, offload=False, orders=True)
    shorter = make_window(inc, range(4), 0.4 * H, 0.6 * H, offload=False, orders=True)
    task = PhaseTask(problem, build_scaling(problem), Phase.MAKESPAN, SolveOptions(time_limit=30, threads=1), budget,
                     budget.search(0.01), Progress(budget, "cpsat"), window=shorter)
    placed = backend.run_phase(task).solutions[-1]
    assert shorter.measure(placed)[0] < shorter.current - 1e-9
    placements = [(same, list(same.free)), (shorter, placed)]  # the first leaves its window as it was
    calls = []
    real = lns.composed

    def first_refused(problem_, inc_, tried):
        calls.append([w for w, _ in tried])
        return None if len(calls) == 1 else real(problem_, inc_, tried)

    monkeypatch.setattr(lns, "composed", first_refused)
    better = lns.accept(problem, inc, placements)
    assert calls == [[same, shorter], [shorter]]
    assert better is not None and better.makespan < H and check(better).ok


RECOMPUTE = {"keep": 0.1, "time": [2, 3, 3, 4]}


def _recomputing(problem):
    """1F1B fitted to the cap by recomputes alone (offload left out)."""
    orders = limited_1f1b_orders(problem.replace(offload=None, recompute=None), problem.devices)
    fitted, timed = fit_by_recompute(problem.replace(offload=None), orders)
    return make_schedule(problem, simulate(problem, fitted), "recompute")


def _compute_orders(schedule):
    return [[op.op for op in sorted(schedule.ops, key=lambda o: o.start)
             if op.device == d and op.kind in (OpKind.F, OpKind.B, OpKind.W)] for d in range(schedule.problem.devices)]


def _recomputes(schedule):
    return sum(op.kind is OpKind.R for op in schedule.ops)


def _shifted(schedule, by):
    """``schedule`` with every op ``by`` later (a longer schedule with the same orders and levers)."""
    return make_schedule(schedule.problem, [op._replace(start=op.start + by, end=op.end + by) for op in schedule.ops],
                         schedule.method.name)


def test_a_refit_keeps_the_compute_orders_and_trades_recomputes_for_transfers():
    problem = _problem(OFFLOAD, capacity=3.0, recompute=RECOMPUTE)
    start = _recomputing(problem)
    assert refittable(start) and _recomputes(start) > 0 and not start.offloaded
    fitted = refit(start)
    assert fitted is not None and check(fitted).ok
    assert _compute_orders(fitted) == _compute_orders(start)
    assert _recomputes(fitted) < _recomputes(start) and fitted.offloaded > 0
    assert refit(fitted) is None  # fitted again it recomputes no less
    # without offload, or without a recompute to trade, there is nothing to refit
    assert not refittable(_recomputing(_problem(None, capacity=3.0, recompute=RECOMPUTE)))
    assert not refittable(_serial(problem))


def test_a_stalled_search_restarts_from_refits_of_its_best_and_keeps_the_best(checked_incumbents):
    """No window improves (none is solved): at each stall the search goes on from a refit of its best,
    the next variant each time as the best does not change, then no more; the best stays the start."""
    problem = _problem(OFFLOAD, capacity=3.0, recompute=RECOMPUTE)
    start = _recomputing(problem)
    knobs = LnsSettings(refit_stall=1e-9, drain_at=())
    seen, result, _ = _record_windows(problem, start, 6, knobs, offload=True)
    refits = [refit(start, RefitVariant(*variant)) for variant in knobs.refit_variants]
    assert result.refits == sum(r is not None for r in refits) >= 1
    assert [s.makespan for s in checked_incumbents[1:]] == [r.makespan for r in refits if r is not None]
    assert result.best is start or result.best.makespan < start.makespan
    assert result.refits_improved == 0
    # the first window is drawn on the start, the next on the first refit, which offloads
    assert not any(op.kind.is_transfer for op in seen[0].free)
    assert any(op.kind.is_transfer for op in seen[1].free)


def test_refits_in_a_search_keep_every_incumbent_valid_and_the_best_is_the_shortest(checked_incumbents):
    problem = _problem(OFFLOAD, capacity=3.0, recompute=RECOMPUTE)
    start = _recomputing(problem)
    knobs = LnsSettings(refit_stall=0.05, drain_at=())
    options = SolveOptions(time_limit=GUARD, threads=1, settings=Settings(lns=knobs))
    budget = Budget(GUARD, deterministic=True)
    result = lns.improve(problem, build_scaling(problem), options, budget, Progress(budget, "cpsat"), backend, start,
                         Limit(time.monotonic() + GUARD, 4.0), True, 0.0)
    assert result.refits >= 1 and check(result.best).ok
    assert result.best.makespan == min(s.makespan for s in checked_incumbents) <= start.makespan


def test_a_line_from_a_refit_replaces_the_best_only_when_it_overtakes_it(monkeypatch):
    """While the incumbent is a refit's line, a better schedule of that line becomes the incumbent, and the
    best only once it is shorter than the best."""
    problem = _problem(OFFLOAD, capacity=3.0, recompute=RECOMPUTE)
    base = _recomputing(problem)
    best, line, still_longer = _shifted(base, 1.0), _shifted(base, 2.0), _shifted(base, 1.5)
    budget = Budget(60, deterministic=True)
    search = lns.Search(problem, build_scaling(problem), SolveOptions(time_limit=60, threads=1), budget,
                        Progress(budget, "cpsat"), backend, best, budget.search(1.0), True)
    search.inc = Incumbent(line)
    for found, expected_best in ((still_longer, best), (base, base)):
        monkeypatch.setattr(lns, "accept", lambda *args, found=found: found)
        assert search.apply([])
        assert search.inc.schedule is found and search.result.best is expected_best
    assert search.result.refits_improved == 1 and search.result.improved == 2


@pytest.mark.parametrize("longer, taken", [(0.02, True), (0.05, False)], ids=["within-slack", "beyond-slack"])
def test_a_refit_longer_than_its_base_beyond_the_slack_is_not_gone_on_from(monkeypatch, checked_incumbents,
                                                                           longer, taken):
    """A stalled search goes on from a refit only where it starts at most refit_slack longer than the
    schedule it came from (here every refit is ``longer`` times the start's makespan later)."""
    problem = _problem(OFFLOAD, capacity=3.0, recompute=RECOMPUTE)
    start = _recomputing(problem)
    stretched = _shifted(refit(start), longer * start.makespan)
    monkeypatch.setattr(lns, "refit", lambda schedule, variant: stretched)
    knobs = LnsSettings(refit_stall=1e-9, drain_at=(), refit_slack=0.025)
    _, result, _ = _record_windows(problem, start, 6, knobs, offload=True)
    assert result.refits == (len(knobs.refit_variants) if taken else 0)  # each variant once on the start
    assert (stretched in checked_incumbents) is taken and result.best is start
