"""A memory-aware list scheduler: the engine behind ZB-H1/H2, ZB-V, V-Half, V-Min and greedy.

Time advances event by event; whenever a device is idle it runs, among its ready
ops, the most urgent one (the default order; :class:`ListPolicy` can change it):

1. a B (oldest microbatch first, later stage first): it frees memory and feeds
   the device before it;
2. a forward of a microbatch the device already holds (a later chunk): it was
   reserved when the microbatch was admitted;
3. a forward that admits a new microbatch (oldest first), only if its whole
   chain of activations on this device fits under the device's limit together
   with everything held and reserved; this reservation keeps every admitted
   microbatch able to finish, so the scheduler cannot deadlock once a limit
   holds one microbatch (a ``lean`` policy relaxes this and may get stuck:
   :class:`DeadlockError`, and the caller falls back);
4. a W, filling time that would otherwise be idle (and freeing what B kept).

In ``unit`` mode it times every F, B, W as 1 (fused B as 2), p2p as 0 and
counts activations as 1 per stage: this gives the order a published schedule
defines on uniform costs, which the simulator then times on the real costs.
In real mode every op has its own microbatch's duration, lags and memory.
In real mode it may offload the activations of chosen stages right after
their F and reload them before their B (see :class:`ListPolicy`).
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

from ppsolve.baselines.common import most_offload
from ppsolve.dependencies import dependency_table
from ppsolve.errors import DeadlockError
from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem
from ppsolve.tolerance import EPS

_F, _B, _W, _OFF, _REL = OpKind.F, OpKind.B, OpKind.W, OpKind.OFFLOAD, OpKind.RELOAD

# event codes, in the order events of one instant are handled
_DONE, _XDONE, _READY, _XREADY, _RELREQ = 0, 1, 2, 3, 4

# what an idle device may run (a B, a held microbatch's forward, an admission forward, a W),
# most preferred first, for each order of kinds
_RB, _RFC, _RFA, _RW = range(4)
_new_op = tuple.__new__  # Op(kind, s, j) without the NamedTuple constructor's overhead
_CLASSES = {"BFW": (_RB, _RFC, _RFA, _RW), "FBW": (_RFC, _RFA, _RB, _RW), "BWF": (_RB, _RW, _RFC, _RFA),
            "FWB": (_RFC, _RFA, _RW, _RB), "WBF": (_RW, _RB, _RFC, _RFA), "WFB": (_RW, _RFC, _RFA, _RB)}


@dataclass(frozen=True)
class ListPolicy:
    """How the list scheduler runs.

    ``limit[d]``: memory device d keeps within (None: unbounded), in unit counts
    (one per stage activation) in unit mode, else in the problem's memory unit.
    ``offload``: stages whose activations move to host (real mode only), the
    amount being ``offload_share`` of the most allowed.
    ``forward_first``: a held microbatch's next forward goes before a ready B
    (rule 2 before rule 1), which pushes microbatches deeper into the pipeline.
    ``lean``: reserve room for one later forward instead of all the held
    microbatches' later forwards, which then wait for memory; more microbatches
    fit in flight (offloads free memory while they wait), but the scheduler may
    get stuck, so callers keep the safe policy as a fallback.
    ``wait_for_offloads``: a forward dispatched after an offload of its device ended
    waits for it in the plan (contract version 2), so the memory it freed is usable
    at once; off, freed memory counts for admissions only once the device's next
    compute op has ended (as under version 1), which sometimes packs better.
    ``order``: the kinds in the order an idle device prefers them: "BFW" (the module's
    rules), "FBW" (every ready forward, held or admitted, before a B) or "BWF" (W before
    forwards, which frees weight holds sooner).
    ``late_first``: among the ready B and the ready forwards of held microbatches, the latest
    stage first (else the oldest microbatch first): a microbatch goes through the device's
    chunks before the next one.
    """

    limit: tuple[float | None, ...]
    unit: bool = False
    offload: frozenset[int] = field(default_factory=frozenset)
    offload_share: float = 1.0
    forward_first: bool = False
    lean: bool = False
    wait_for_offloads: bool = True
    order: str = "BFW"
    late_first: bool = False

    def __post_init__(self):
        if self.order not in _CLASSES:
            raise ValueError(f"ListPolicy.order must be a permutation of 'BFW', got {self.order!r}")



def list_orders(problem: Problem, policy: ListPolicy) -> tuple[list[list[Op]], dict[tuple[int, int], float],
                                                                dict[Op, list[Op]]]:
    """Per-device action lists, offload amounts and waits (a forward waiting for an offload's end)."""
    return _ListScheduler(problem, policy).run()


class _ListScheduler:
    """One run of the list scheduler: the costs it reads (unit or real), then the state of its events."""

    def __init__(self, problem: Problem, policy: ListPolicy):
        self.p = problem
        self.policy = policy
        S, D, m = problem.num_stages, problem.devices, problem.microbatches
        unit = policy.unit
        self.S, self.D, self.m = S, D, m
        self.dev = list(problem.placement)
        # per kind (or per stage) and stage, the m values of its microbatches
        if unit:
            ones, zeros = (1.0,) * m, (0.0,) * m
            self.dur = {_F: [ones] * S, _B: [ones if problem.split_backward else (2.0,) * m] * S, _W: [ones] * S}
            self.lat = [zeros] * S
            self.act = [ones] * S
            self.hold = [tuple(h / a if a > 0 else 0.0 for h, a in zip(problem.weight_hold.row(s),
                                                                        problem.activation.row(s)))
                         for s in range(S)] if problem.split_backward else [zeros] * S
        else:
            self.dur = {k: [problem.durations[k].row(s) for s in range(S)] for k in (_F, _B, _W)}
            self.lat = [tuple(problem.latency(s, s + 1, j) if s + 1 < S else 0.0 for j in range(m)) for s in range(S)]
            self.act = [problem.activation.row(s) for s in range(S)]
            self.hold = ([problem.weight_hold.row(s) for s in range(S)] if problem.split_backward
                         else [(0.0,) * m] * S)
        self.split = problem.split_backward
        self.first = [min(st, default=-1) for st in problem.stages_of_device]  # -1: a device without a stage
        self.rest = [tuple(sum(self.act[s][j] for s in st) - self.act[min(st)][j] for j in range(m)) if st
                     else (0.0,) * m for st in problem.stages_of_device]
        self.limit = list(policy.limit)
        # offload: amounts and which B start triggers the reload (from the stage's largest amount
        # and shortest backwards, so that the reload is early for every microbatch)
        self.amount = [(0.0,) * m] * S
        self.trigger: dict[int, list[int]] = {}
        if not unit and problem.can_offload:
            for s in policy.offload:
                if s == S - 1 or most_offload(problem, s) <= 0:
                    continue
                self.amount[s] = tuple(problem.max_offload(s, j) * policy.offload_share for j in range(m))
                back = problem.duration(_REL, s, amount=max(self.amount[s]))
                t, lead = s + 1, 0.0
                while True:
                    lead += min(self.dur[_B][t]) + min(self.lat[t - 1])
                    if lead >= back or t == S - 1:
                        break
                    t += 1
                self.trigger.setdefault(t, []).append(s)
        # what admitting microbatch j needs on each device: its whole chain, less what
        # the offloads of its earlier stages move out before its later forwards start
        self.need = []
        for st in problem.stages_of_device:
            row = []
            for j in range(m):
                held = worst = 0.0
                for s in st:
                    worst = max(worst, held + self.act[s][j])
                    held += self.act[s][j] - self.amount[s][j]
                row.append(worst)
            self.need.append(row)

    def run(self):
        """Every op placed, event by event: (orders, offload amounts, waits)."""
        self._start()
        for j in range(self.m):
            self._ready(0.0, _F, 0, j)
        events, touched, idle = self.events, self.touched, self.idle
        while events or touched:
            if touched:
                for d in sorted(touched):
                    if idle[d]:
                        self._dispatch(d, self.now)
                touched.clear()
                continue
            self.now = now = events[0][0]
            while events and events[0][0] <= now + EPS:
                t, code, _, kind, s, j = heapq.heappop(events)
                self._handlers[code](t, kind, s, j)
        if self.remaining:
            raise DeadlockError(f"list scheduler stuck with {self.remaining} ops left (memory limit too tight)")
        return self.orders, self.amounts, self.waits

    def _successors(self) -> dict[tuple, list]:
        """(kind, stage) -> the compute ops that wait for it, with the lag of each microbatch (rules 1-4,
        from the one dependency table)."""
        p, unit = self.p, self.policy.unit
        after: dict[tuple, list] = {(k, st): [] for k in p.kinds for st in range(self.S)}
        for (kind, s), deps in dependency_table(p, p.kinds).items():
            for dep in deps:
                if dep.kind in p.kinds:
                    lags = tuple(0.0 if unit else dep.lag_of(p, j) for j in range(self.m))
                    after[(dep.kind, dep.stage)].append((kind, s, lags))
        return after

    def _preferences(self) -> list[int]:
        """The ready classes an idle device tries, most preferred first (``order``, ``forward_first``)."""
        classes = list(_CLASSES[self.policy.order])
        if self.policy.forward_first and classes.index(_RFC) > classes.index(_RB):
            classes.remove(_RFC)
            classes.insert(classes.index(_RB), _RFC)
        return classes

    def _start(self) -> None:
        """The state of a run: ready queues, memory levels, device clocks, events, transfers."""
        p, S, D, m = self.p, self.S, self.D, self.m
        self.after = self._successors()
        self.classes = self._preferences()
        self.lean, self.late = self.policy.lean, self.policy.late_first
        self.lean_room = [max((max(self.act[s]) for s in st if s != min(st)), default=0.0) if st else 0.0
                          for st in p.stages_of_device]
        self.orders: list[list[Op]] = [[] for _ in range(D)]
        self.rb = [[] for _ in range(D)]   # ready B: (j, -s), or (-s, j) with late_first
        self.rfc = [[] for _ in range(D)]  # ready continuation F: (j, s), or (-s, j) with late_first
        self.rfa = [[] for _ in range(D)]  # ready admission F: (j, s)
        self.rw = [deque() for _ in range(D)]
        self.level = [0.0] * D
        self.committed = [0.0] * D
        self.busy = [0.0] * D              # end of the compute op running (or last run)
        self.run_start = [0.0] * D
        self.idle = [True] * D
        self.events: list[tuple] = []
        self.seq = 0
        # offload state
        self.off_done: dict[tuple[int, int], float] = {}
        self.reload_wait = [deque() for _ in range(D)]   # accepted-later reload requests
        self.b_need: dict[tuple[int, int], int] = {}     # B waiting for its reload
        self.lane_free: dict[int, float] = {}
        # contract v2: a forward dispatched after an offload of its device ended waits for it in the
        # plan, so the memory that offload freed is usable at once (the latest one covers the earlier)
        self.last_offload: list[Op | None] = [None] * D
        self.waits: dict[Op, list[Op]] = {}
        self.unusable = [0.0] * D  # without waits: freed by an offload, usable once the next compute op ends
        self.on_host = [0] * D
        self.reserve = [max((max(self.amount[s]) for s in st), default=0.0) for st in p.stages_of_device]
        self.want_reload: set[tuple[int, int]] = set()
        self.offloading = bool(self.trigger)
        self.amounts: dict[tuple[int, int], float] = {}
        self.remaining = S * m * (3 if self.split else 2)
        self.now = 0.0
        self.touched: set[int] = set()
        self._handlers = {_DONE: self._done, _READY: self._ready, _XREADY: self._transfer_ready,
                          _XDONE: self._transfer_done, _RELREQ: self._reload_request}

    def _push(self, t, code, a, b, c) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, code, self.seq, a, b, c))

    def _ready(self, t, kind, s, j) -> None:
        """Op (kind, s, j) is ready at ``t``: queue it on its device (later: an event)."""
        if t > self.now + EPS:
            self._push(t, _READY, kind, s, j)
            return
        d = self.dev[s]
        if kind is _B:
            if self.offloading:
                b_need = self.b_need
                if (s, j) in b_need:
                    b_need[(s, j)] -= 1
                    if b_need[(s, j)] > 0:
                        return
            heapq.heappush(self.rb[d], (-s, j) if self.late else (j, -s))
        elif kind is _F:
            if s == self.first[d]:
                heapq.heappush(self.rfa[d], (j, s))
            else:
                heapq.heappush(self.rfc[d], (-s, j) if self.late else (j, s))
        else:
            self.rw[d].append((s, j))
        self.touched.add(d)

    def _try_reload(self, d, t) -> None:
        """Accept waiting reload requests of device d that fit in memory."""
        q, limit, level, amount = self.reload_wait[d], self.limit, self.level, self.amount
        while q:
            s, j = q[0]
            if limit[d] is not None and level[d] + amount[s][j] > limit[d] + EPS:
                return
            q.popleft()
            level[d] += amount[s][j]
            self.orders[d].append(Op(_REL, s, j))
            start = max(t, self.busy[d], self.off_done[(s, j)])
            self._push(start, _XREADY, _REL, s, j)

    def _dispatch(self, d, t) -> None:
        """Start on idle device d the ready op it prefers that memory allows, if any."""
        limit, level, act, committed = self.limit, self.level, self.act, self.committed
        lean, late = self.lean, self.late
        rb, rfc, rfa, rw = self.rb[d], self.rfc[d], self.rfa[d], self.rw[d]
        for cls in self.classes:
            if cls == _RB:
                if rb:
                    a, b = heapq.heappop(rb)
                    j, s, kind = (b, -a, _B) if late else (a, -b, _B)
                    break
            elif cls == _RFC:
                if rfc:
                    a, b = rfc[0]
                    s = -a if late else b
                    j = b if late else a
                    if not lean or limit[d] is None or level[d] + self.unusable[d] + act[s][j] <= limit[d] + EPS:
                        heapq.heappop(rfc)
                        kind = _F
                        committed[d] -= act[s][j]
                        level[d] += act[s][j]
                        break
            elif cls == _RFA:
                if rfa and (limit[d] is None or level[d] + (self.lean_room[d] if lean else committed[d])
                            + self.need[d][rfa[0][0]] + self.unusable[d]
                            + (self.reserve[d] if self.on_host[d] and not lean else 0.0) <= limit[d] + EPS):
                    j, s = heapq.heappop(rfa)
                    kind = _F
                    level[d] += act[s][j]
                    committed[d] += self.rest[d][j]
                    break
            elif rw:
                s, j = rw.popleft()
                kind = _W
                break
        else:
            return
        op = _new_op(Op, (kind, s, j))
        self.orders[d].append(op)
        if kind is _F and self.last_offload[d] is not None:
            self.waits[op] = [self.last_offload[d]]
            self.last_offload[d] = None
        end = t + self.dur[kind][s][j]
        self.run_start[d], self.busy[d], self.idle[d] = t, end, False
        self._push(end, _DONE, kind, s, j)
        if kind is _B and self.offloading and s in self.trigger:
            self._request_reloads(s, j, t)

    def _request_reloads(self, s, j, t) -> None:
        """B(s, j) started at ``t``: request the reloads it triggers, to end as the B chain reaches them."""
        amount, dur, lat = self.amount, self.dur, self.lat
        for low in self.trigger[s]:
            if amount[low][j] <= 0:
                continue
            if (low, j) not in self.off_done:
                self.want_reload.add((low, j))
                continue
            ahead = sum(dur[_B][u][j] + lat[u - 1][j] for u in range(low + 1, s + 1))
            target = t + ahead - self.p.duration(_REL, low, amount=amount[low][j])
            self._push(max(t, target), _RELREQ, _REL, low, j)

    def _done(self, t, kind, s, j) -> None:
        """A compute op ended: its device is idle, its successors get ready, its memory changes."""
        d = self.dev[s]
        self.remaining -= 1
        self.idle[d] = True
        self.touched.add(d)
        self.unusable[d] = 0.0
        ready = self._ready
        for nkind, ns, lag in self.after[(kind, s)]:
            ready(t + lag[j], nkind, ns, j)
        if kind is _F:
            amount = self.amount[s][j]
            if amount > 0:
                self.orders[d].append(Op(_OFF, s, j))
                self.amounts[(s, j)] = amount
                self.b_need[(s, j)] = 2
                self._push(t, _XREADY, _OFF, s, j)
            return
        if kind is _B:
            self.level[d] -= self.act[s][j] - self.hold[s][j]
        elif kind is _W:
            self.level[d] -= self.hold[s][j]
        else:
            raise ValueError(f"the list scheduler has no rule for op kind {kind!r}")
        if self.reload_wait[d]:
            self._try_reload(d, t)

    def _transfer_ready(self, t, kind, s, j) -> None:
        """A transfer may start: when its lane is free, and not while its device runs a compute op that
        began before it."""
        d = self.dev[s]
        ln = self.p.lane(d, kind)
        free = self.lane_free.get(ln, 0.0)
        if free > t + EPS:
            self._push(free, _XREADY, kind, s, j)
        elif self.run_start[d] < t - EPS and t < self.busy[d] - EPS:
            self._push(self.busy[d], _XREADY, kind, s, j)
        else:
            end = t + self.p.duration(kind, s, amount=self.amount[s][j])
            self.lane_free[ln] = end
            self._push(end, _XDONE, kind, s, j)

    def _transfer_done(self, t, kind, s, j) -> None:
        """An offload ended (memory freed, a reload may follow) or a reload ended (its B may run)."""
        d = self.dev[s]
        if kind is _OFF:
            self.off_done[(s, j)] = t
            self.level[d] -= self.amount[s][j]
            if self.policy.wait_for_offloads:
                self.last_offload[d] = Op(_OFF, s, j)
            else:
                self.unusable[d] += self.amount[s][j]
            self.on_host[d] += 1
            if (s, j) in self.want_reload:
                self.want_reload.discard((s, j))
                self._push(t, _RELREQ, _REL, s, j)
            self._try_reload(d, t)
        else:
            self.on_host[d] -= 1
            self._ready(t, _B, s, j)

    def _reload_request(self, t, kind, s, j) -> None:
        d = self.dev[s]
        self.reload_wait[d].append((s, j))
        self._try_reload(d, t)
