"""The checker against a brute force written from SPEC.md: on small damaged schedules it flags exactly
the ops, pairs and devices that a pairwise search finds (the checker sorts each lane once and scans it;
the brute force compares every pair and sums memory at every instant)."""

from __future__ import annotations

import dataclasses
import itertools
import random

import pytest

from ppsolve.checker import check
from ppsolve.ops import OpKind
from ppsolve.schedule import Schedule, ScheduledOp
from tests.helpers import make_problem, one_f_one_b_orders, schedule_from_orders, serial_orders

_F, _B, _W, _R, _OFF, _REL = OpKind.F, OpKind.B, OpKind.W, OpKind.R, OpKind.OFFLOAD, OpKind.RELOAD
LINK = {"fraction": 1, "bandwidth": {"d2h": 2, "h2d": 2}}


def _starts() -> list[Schedule]:
    """Valid schedules: 1F1B split and fused with p2p latency, offload on a shared half-duplex link,
    recompute."""
    out = []
    for backward in ("split", "fused"):
        p = make_problem(devices=3, microbatches=3, time_p2p=0.5, backward=backward, memory_capacity=3)
        out.append(schedule_from_orders(p, one_f_one_b_orders(p)))
    p = make_problem(devices=2, microbatches=3, memory_capacity=2, offload=dict(LINK, links=[[0, 1]], duplex=False))
    out.append(schedule_from_orders(p, serial_orders(p, offload=True)))
    p = make_problem(devices=2, microbatches=2, memory_capacity=1.5, recompute={"keep": 0.25, "time": 1})
    orders = [[o for op in order for o in ((op, op._replace(kind=_R)) if op.kind is _F else (op,))]
              for order in serial_orders(p)]
    out.append(schedule_from_orders(p, orders))
    return out


def damaged(schedule: Schedule, rng: random.Random) -> Schedule:
    """1-4 random damages: an op duplicated, dropped, moved, stretched, on another device, a changed
    amount, or an R added to an offloaded pair."""
    ops = list(schedule.ops)
    p = schedule.problem
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(ops))
        op = ops[i]
        what = rng.choice(["duplicate", "drop", "move", "move", "stretch", "device", "amount", "recompute"])
        if what == "duplicate":
            ops.insert(rng.randrange(len(ops) + 1), op._replace(start=op.start + rng.choice([0, 0, 1])))
        elif what == "drop":
            del ops[i]
        elif what == "move":
            delta = rng.choice([-3, -1.5, -1, -0.5, 0.5, 1, 2])
            ops[i] = op._replace(start=op.start + delta, end=op.end + delta)
        elif what == "stretch":
            ops[i] = op._replace(end=op.end + rng.choice([0.5, 1]))
        elif what == "device":
            ops[i] = op._replace(device=(op.device + 1) % p.devices)
        elif what == "amount" and op.kind.is_transfer:
            ops[i] = op._replace(amount=rng.choice([0.0, 0.5, 2, 5]))
        elif what == "recompute" and op.kind is _OFF and p.recompute is not None:
            ops.append(ScheduledOp(_R, op.stage, op.microbatch, op.device, op.start, op.start + 1))
    return dataclasses.replace(schedule, ops=tuple(ops))


# ----- the brute force -----

def _overlapping_lanes(schedule: Schedule, eps: float) -> tuple[set[int], set[int]]:
    """Devices with two overlapping compute ops; link lanes with two overlapping transfers."""
    p = schedule.problem
    devices, lanes = set(), set()
    for a, b in itertools.combinations(schedule.ops, 2):
        if not (a.start + eps < b.end and b.start + eps < a.end):
            continue
        if a.kind.is_compute and b.kind.is_compute and a.device == b.device:
            devices.add(a.device)
        elif a.kind.is_transfer and b.kind.is_transfer and p.lane(a.device, a.kind) == p.lane(b.device, b.kind):
            lanes.add(p.lane(a.device, a.kind))
    return devices, lanes


def _over_capacity(schedule: Schedule, eps: float) -> set[int]:
    """Devices whose held memory passes the cap at some instant: summed afresh at each instant, from
    SPEC.md's list of memory events and its tie rule (releases before allocations, except an activation
    allocated by its F or R at the instant of its own release: that allocation counts first)."""
    p = schedule.problem
    recomputed = {(o.stage, o.microbatch) for o in schedule.ops if o.kind is _R}
    events = []  # (device, time, allocation?, delta, (stage, microbatch), by F or R?)
    for o in schedule.ops:
        s, j, d = o.stage, o.microbatch, p.placement[o.stage]
        act = p.activation.at(s, j)
        if o.kind is _F:
            events.append((d, o.start, True, p.recompute.keep.at(s, j) if (s, j) in recomputed else act, (s, j), True))
        elif o.kind is _R:
            events.append((d, o.start, True, act - p.recompute.keep.at(s, j), (s, j), True))
        elif o.kind is _OFF:
            events.append((d, o.end, False, -o.amount, (s, j), False))
        elif o.kind is _REL:
            events.append((d, o.start, True, o.amount, (s, j), False))
        elif o.kind is _B:
            held = p.weight_hold.at(s, j) if p.split_backward else 0.0
            events.append((d, o.end, False, -(act - held), (s, j), False))
        else:
            events.append((d, o.end, False, -p.weight_hold.at(s, j), (s, j), False))
    out = set()
    for d, t in {(e[0], e[1]) for e in events}:
        if p.capacity[d] is None:
            continue
        at = [e for e in events if e[0] == d and e[1] == t and e[3] != 0]
        owned = {e[4] for e in at if e[2] and e[5]} & {e[4] for e in at if not e[2]}
        level = sum(e[3] for e in events if e[0] == d and e[1] < t)
        level += sum(e[3] for e in at if not e[2] and e[4] not in owned)  # the other releases first
        for key in owned:  # then each activation allocated and released here: allocation, then release
            level += sum(e[3] for e in at if e[2] and e[5] and e[4] == key)
            if level > p.capacity[d] + eps:
                out.add(d)
            level += sum(e[3] for e in at if e[4] == key and not (e[2] and e[5]))
        level += sum(e[3] for e in at if e[2] and e[4] not in owned)  # then the other allocations
        if any(e[2] for e in at) and level > p.capacity[d] + eps:
            out.add(d)
    return out


def _late_pairs(schedule: Schedule, eps: float) -> set[tuple]:
    """(waiting op, awaited op) pairs that break rules 1-5 and 9, written out from SPEC.md (an op listed
    twice: each listing waits for the first listing of what it awaits)."""
    p = schedule.problem
    first = {}
    for o in schedule.ops:
        first.setdefault(o.op, o)
    S = p.num_stages
    out = set()
    for o in schedule.ops:
        s, j = o.stage, o.microbatch
        need = []  # (awaited kind, stage, lag)
        if o.kind is _F and s > 0:
            need.append((_F, s - 1, p.latency(s - 1, s)))
        elif o.kind is _B:
            need += [(_F, s, 0.0)] if s == S - 1 else [(_B, s + 1, p.latency(s, s + 1))]
            need += [(_REL, s, 0.0), (_R, s, 0.0)]
        elif o.kind is _W:
            need.append((_B, s, 0.0))
        elif o.kind is _OFF or o.kind is _R:
            need.append((_F, s, 0.0))
        elif o.kind is _REL:
            need.append((_OFF, s, 0.0))
        for kind, stage, lag in need:
            before = first.get((kind, stage, j))
            if before is not None and o.start + eps < before.end + lag:
                out.add((str(o.op), str(before.op)))
    return out


def _expected_ops(schedule: Schedule) -> dict[str, set[str]]:
    """Ops that break the per-op rules (complete: listed twice; device; start; duration)."""
    p = schedule.problem
    seen, out = set(), {"complete": set(), "device": set(), "start": set(), "duration": set()}
    for o in schedule.ops:
        if o.op in seen:
            out["complete"].add(str(o.op))
        seen.add(o.op)
        if o.device != p.placement[o.stage]:
            out["device"].add(str(o.op))
        if o.start < 0:
            out["start"].add(str(o.op))
        if abs(o.duration - p.duration(o.kind, o.stage, o.microbatch, amount=o.amount)) > 1e-9:
            out["duration"].add(str(o.op))
    return out


CASES = [(start, seed) for start in range(4) for seed in range(40)]


@pytest.mark.parametrize("start,seed", CASES)
def test_same_violations_as_a_brute_force(start, seed):
    schedule = damaged(_starts()[start], random.Random(seed))
    report = check(schedule)
    eps = 1e-9 * max(1.0, schedule.makespan)
    found = {}
    for v in report.violations:
        found.setdefault(v.rule, []).append(v)
    assert {v.op for v in found.get("complete", []) if "appears" in v.message} == \
        _expected_ops(schedule)["complete"]
    for rule in ("device", "start", "duration"):
        assert {v.op for v in found.get(rule, [])} == _expected_ops(schedule)[rule], rule
    late = {(v.op, v.message.split(", before ")[1].split(" ends ")[0])
            for rule in ("R1", "R2", "R3", "R4", "R5", "R9") for v in found.get(rule, [])}
    assert late == _late_pairs(schedule, eps)
    devices, lanes = _overlapping_lanes(schedule, eps)
    assert {v.device for v in found.get("R6", [])} == devices
    assert {_lane_of(schedule, v) for v in found.get("R7", [])} == lanes
    assert {int(v.message.split()[1]) for v in found.get("memory", [])} == _over_capacity(schedule, eps)


def _lane_of(schedule: Schedule, violation) -> int:
    op = next(o for o in schedule.ops if str(o.op) == violation.op and o.device == violation.device)
    return schedule.problem.lane(op.device, op.kind)


def test_a_duplicated_op_is_named():
    schedule = _starts()[0]
    twice = dataclasses.replace(schedule, ops=schedule.ops + schedule.ops[:2])
    named = [v for v in check(twice).violations if v.rule == "complete"]
    assert [(v.op, v.device) for v in named] == [(str(o.op), o.device) for o in schedule.ops[:2]]
