"""The solve's tuning knobs, as values passed in (``SolveOptions.settings``), never module globals.

The defaults are the measured choices (docs/solver.md says what was measured and
with which command); experiments and tests pass other values, e.g.
``SolveOptions(settings=Settings(lns=LnsSettings(tail_stall=1.0)))``.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class BudgetSettings:
    """How the time limit is shared out (``ppsolve.solvers.budget``)."""

    warm_start_share: float = 0.2  # of the time limit
    reserve_share: float = 0.08  # of the time limit, at least, kept for realising and checking
    # Deterministic mode: the deterministic work of a search is this share of its wall time (in each
    # backend's calibrated unit), so that a solve uses most of its time limit on the bench machine (a
    # shared 2-core machine; at 0.5 hard offload solves ended after 4-8 s of a 30 s limit); on a slower or
    # busier machine the wall clock ends the step and the file says the run may not be reproducible; and
    # the warm start collects acceptable candidates while (candidates x ops) stays below
    # warm_start_ops_per_second x this share of its own share (at least one): one candidate (a baseline
    # or a plan: simulated and checked) cost 10 000 to 120 000 op-tries a CPU second there (see
    # docs/solver.md). Methods that do not apply or refuse the caps are not counted.
    deterministic_share: float = 0.9
    warm_start_ops_per_second: int = 10_000
    reserve_checks: int = 4  # the reserve is at least this many times one check of the warm start
    # when the last phase's answers are checked schedules already (the large-neighbourhood search), only
    # writing one is left: the reserve shrinks to this share of the time limit (or reserve_checks checks)
    lean_reserve_share: float = 0.01


@dataclass(frozen=True)
class PhaseSettings:
    """How a solve splits its time limit between its phases, and when it switches to windows."""

    # Shares of the time limit (the warm start's is in budget.py); "keep" is what later phases need.
    share_makespan: float = 0.8
    share_makespan_before_offload: float = 0.65
    share_offload: float = 0.15
    share_makespan_before_memory: float = 0.35
    share_memory: float = 0.45
    # Problem size, in the ops a model places (compute ops, and with offload the transfers it may add).
    # Above whole_model_ops the makespan is improved by large-neighbourhood search alone (the whole
    # model is neither built nor searched); above lns_after_ops, when the makespan phase has at least
    # lns_min_seconds, the whole model gets whole_share of it and the search the rest (set by
    # measurement: docs/solver.md; a search of a few windows is no use).
    whole_model_ops: int = 3000
    lns_after_ops: int = 200
    lns_min_seconds: float = 5.0
    whole_share: float = 0.3
    whole_shares_first: float = 0.3  # of the OVERHEAD phase's time: the quick search with whole shares first
    # the warm start's plans with both levers (plans.mixed_plans), the start only where shorter than every
    # other (warm_start.shortest): on the 13B-like v = 2 problem at 15 GiB the search from such a plan ends
    # shorter than from recompute alone (docs/solver.md, plans with both levers)
    mixed_plans: bool = True
    shed_tries: int = 2000  # deterministic mode: the levers the shedding pass tries to drop (a few ms each)


@dataclass(frozen=True)
class LnsSettings:
    """The large-neighbourhood search (``ppsolve.solvers.search.lns``)."""

    start_size: int = 120  # free ops in the first window
    min_size: int = 60
    max_size: int = 2000
    window_seconds: float = 1.0  # the most one window's search may take (wall clock, or deterministic work)
    # Deterministic mode: a window's wall clock is only the guard, this many times window_seconds. Its
    # deterministic limit took 0.75 to 0.92 s of wall time on windows of 1 500 to 3 000 model variables
    # (vsh2-d16-m64 of the scale suite, 2-core machine), so a guard of 1 s fired first in some windows
    # and made the run irreproducible (docs/solver.md)
    window_guard: float = 3.0
    # Deterministic mode counts work without the clock: each window's search as the backend reports it
    # (PhaseAnswer.work), plus window_overhead per window (building its model) and round_seconds_per_op
    # per op of the schedule and round (re-timing and checking it; measured: docs/solver.md).
    window_overhead: float = 0.05
    round_seconds_per_op: float = 5e-5
    ops_per_window: int = 1500  # a round solves one window per this many ops of the schedule ...
    max_batch: int = 12  # ... up to this many
    picks_per_window: int = 3  # a round draws up to this many picks per window of its batch
    orders: bool = True  # without transfers, ops after a window keep their order rather than their times
    # up to this many devices a window spans all of them; beyond, half its windows take a block (at d = 32,
    # windows over all devices did better on three of the four problems measured, 1 % worse on the linear
    # one with offload: docs/solver.md)
    all_devices: int = 32
    block: int = 8  # devices in a block window
    # A window shortens a longest path where the path waits: one whose range holds no critical op that
    # its device sits idle before is drawn again, up to this many draws in all (1: any draw). Continuing
    # from a 300 s vsh2-d32 schedule with one draw, 1 of the 118 windows centred in 0.3-0.8 of the
    # makespan, where device 0 is busy throughout, shortened its path; 26 of the other 140 did
    # (docs/solver.md, benchmarks/window_positions.py@5331613)
    idle_draws: int = 8
    # Tail windows (schedules without transfers, where later ops keep their order): once the ordinary
    # windows have not shortened the schedule for tail_stall of the search's time, the rest of it goes
    # to windows over the end of the schedule, tail_span times one microbatch's critical path on every
    # device and tail_back times it more on the most loaded devices, each with tail_seconds. Ordinary
    # windows are time slices: they cannot take work of the busiest device from before its last
    # admission into the idle of the drain after it, which is what bounds the V-shapes (vsh2-d16-m64:
    # 2364.1 -> 2344.9 in 256 s of tail windows after a 300 s solve, ordinary windows 2362.0; from
    # another start 2360.4 -> 2354.7, ordinary windows 2349.5: benchmarks/tail_windows.py@5331613). Given the
    # last half of every search, they made 300 s solves longer (vsh2-d16 2384.2, vsh2-d32 4972.2): the
    # ordinary windows need that time first.
    tail_stall: float = 0.15
    tail_span: tuple[float, float] = (0.8, 1.3)
    tail_back: tuple[float, float] = (0.8, 2.0)
    tail_seconds: float = 20.0
    tail_max_ops: int = 1400  # larger tails are shrunk to about this many free ops
    # Drain windows: at each share in drain_at of the search's time, one window over every device from
    # drain_span times one microbatch's critical path before the end, given drain_share of the search's
    # time (a window of that size needs tens of seconds), and only where it frees at most drain_max_ops
    # ops. Unlike tail windows they run on schedules with transfers too (their ops keep their times; a
    # window that ends at the makespan has nothing after it). From 100 s solves (2 threads) one such
    # window of 60 s shortened the 8B-like v = 2 problem at 21 GiB 5507.60 -> 5448.02 (in 20 s: nothing)
    # and the 13B-like v = 2 problem at 15 GiB 3802.56 -> 3776.73 (in 20 s: 3779.74); reaching further
    # back on the busiest device, nothing. A second one at 0.7 did not hold up in 300 s solves (docs/solver.md)
    drain_at: tuple[float, ...] = (0.4,)
    drain_share: float = 0.2
    drain_span: float = 1.25
    drain_max_ops: int = 400
    # Refits (problems that may recompute and offload, under a cap): once the windows have not shortened
    # the incumbent for refit_stall of the search's time, and at least refit_room of it is left, the search
    # goes on from the incumbent with the levers fitted again (``ppsolve.solvers.search.refit``: the
    # compute orders kept, recomputes to each cap raised by a share of an activation, offload for the
    # rest); where the incumbent has not moved since the last refit, from the schedule that refit came
    # from with the next of refit_variants (share, gap, prefer), then from the best. Windows cannot change
    # the lever of a microbatch whose F and B lie further apart than they reach; a refit trades recomputes
    # of the busiest devices for transfers. 300 s solves of the 13B-like linear problem at 11 GiB: 4128.23
    # with refit_stall 0.05, 4153.86 with 0.1, 4187.29 without (docs/solver.md)
    refit_stall: float = 0.05
    refit_room: float = 0.25
    # A refit that starts more than this share longer than the schedule it came from is not gone on from:
    # its line needs the time it is behind to catch up. Traced 300 s solves (2 threads) of the 13B-like
    # linear problem at 11 GiB: the lines from refits 0.4-2.3 % longer overtook the best in six of eight
    # cases, from 3.1 % and 3.3 % longer in neither; on the 13B-like v = 2 problem at 15 GiB a refit 5.8 %
    # longer, 104 s before the end, never came back (docs/solver.md)
    refit_slack: float = 0.025
    refit_variants: tuple[tuple[float, int, str], ...] = ((0.25, 2, "longest"), (0.25, 1, "longest"),
                                                          (0.25, 2, "hidden"))
    refit_work: float = 1.0  # deterministic mode: the work a refit counts as, in seconds


@dataclass(frozen=True)
class QuickSettings:
    """Time limits too short for a model: the quick path (``ppsolve.solvers.quick``)."""

    # A limit of ``below`` seconds or more always builds the model (so those solves are unchanged); a shorter
    # one builds it only when it can pay: at least model_seconds plus model_seconds_per_op per op the model
    # places (up to PhaseSettings.whole_model_ops: larger problems search windows). Set by comparing both
    # paths at 0.3, 0.6 and 0.9 s on the 4 x 8 to 6 x 12 problems of instances/ (96 to 192 ops; 2-core
    # machine, shared): equal on most, either one up to 5 % shorter on the others; at d = 8, m = 32 the
    # model path found no schedule at all within 2 s on the busy machine (its import and build alone).
    below: float = 1.0
    model_seconds: float = 0.5
    model_seconds_per_op: float = 0.001
    warm_start_share: float = 0.6  # of the time limit: the heuristics; the order search gets the rest
    # deterministic mode: the order search tries this many orders per op-second of its share (a try is one
    # simulation, about 2 microseconds per op on the bench machine)
    tries_per_op_second: int = 100_000
    # ... and the search that plans each order anew with the list scheduler (a build costs about 9 simulations)
    greedy_tries_per_op_second: int = 11_000
    # a full solve of a per-microbatch problem first runs the quick path this long (at most a tenth of its
    # limit) and starts from the better of its answer and the warm start's
    as_warm_start: float = 0.5


@dataclass(frozen=True)
class Settings:
    """Every knob of a solve."""

    budget: BudgetSettings = field(default_factory=BudgetSettings)
    phases: PhaseSettings = field(default_factory=PhaseSettings)
    lns: LnsSettings = field(default_factory=LnsSettings)
    quick: QuickSettings = field(default_factory=QuickSettings)
