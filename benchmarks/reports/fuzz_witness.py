"""Valid, odd problems with a witness schedule, for the fuzz campaign; written apart from ppsolve and its tests.

Nothing here imports ppsolve or the tests' helpers: the problem, the witness's times, its peak memory
and its metrics follow the contract (``SPEC.md``, version 4) as written there, so that a command that
disagrees with a witness is judged by an outside reading, not by ppsolve's own code.

A problem is odd where valid problems may be: zero-length ops (a forward, a backward or a weight
gradient of 0, a p2p of 0), a weight hold equal to the activation or 0, a zero activation, tiny
numbers (1e-6 s, 1e-3 of an activation) beside ordinary ones, offload of a zero share on some
stages, recompute that keeps everything or nothing and lasts 0, explicit placements, a cap exactly
at the witness's peak.

The witness runs one op at a time over the whole pipeline (microbatch after microbatch: every F, then
every B with its W right after it), with an optional tiny or partial OFFLOAD right after an F and its
RELOAD right before the B, and an optional R right before the B: no two ops overlap anywhere, so only
the data rules and memory remain, and the cap is set at or above the witness's peak. Whatever a command
says of such a problem, it may not call it infeasible, nor prove an optimum or a lower bound above the
witness's makespan, nor refuse the witness as invalid.
"""

from __future__ import annotations

import random

# Small beside the others yet inside ppsolve's limits (durations within 1e9 of each other, numbers of a
# problem at least 1e-12): a tiny time, a tiny activation or offload share, a slow and a fast link
TINY = 1e-6
SMALL = 1e-3
BANDWIDTHS = [0.05, 0.5, 4]


def _per_stage(rng: random.Random, stages: int, choices: list[float]) -> list[float]:
    return [rng.choice(choices) for _ in range(stages)]


def odd_problem(rng: random.Random) -> dict:
    """A valid problem with some of the odd values above (the cap is set by :func:`witness`)."""
    devices = rng.choice([1, 2, 2, 3, 4])
    chunks = rng.choice([1, 1, 2])
    placement = "linear" if chunks == 1 else rng.choice(["interleaved", "vshape", "explicit"])
    stages = devices * chunks
    split = rng.random() < 0.6
    times = [0, 0, TINY, 1, 1, 2, 3.5]
    activation = _per_stage(rng, stages, [0, SMALL, 0.5, 1, 1, 2])
    data = {"format": "ppsolve/problem@1", "name": "witness", "devices": devices,
            "microbatches": rng.choice([1, 2, 3, 4]), "chunks": chunks,
            "placement": placement, "backward": "split" if split else "fused",
            "time": {"forward": _per_stage(rng, stages, times), "backward_input": _per_stage(rng, stages, times),
                     "backward_weight": _per_stage(rng, stages, times), "p2p": rng.choice([0, 0, TINY, 1])},
            "memory": {"activation": activation}}
    if placement == "explicit":  # every device holds at least one stage
        order = list(range(devices)) + [rng.randrange(devices) for _ in range(stages - devices)]
        rng.shuffle(order)
        data["placement"] = order
    if split:
        data["memory"]["weight_hold"] = [a * rng.choice([0, 0.5, 1]) for a in activation]
    lever = rng.random()
    if lever < 0.4:
        data["offload"] = {"fraction": _per_stage(rng, stages, [0, SMALL, 0.5, 1]),
                           "bandwidth": {"d2h": rng.choice(BANDWIDTHS), "h2d": rng.choice(BANDWIDTHS)},
                           "duplex": rng.random() < 0.5}
        if devices > 1 and rng.random() < 0.5:
            data["offload"]["links"] = [list(range(devices))]
    elif lever < 0.7:
        data["recompute"] = {"keep": [a * rng.choice([0, 0.5, 1]) for a in activation],
                             "time": _per_stage(rng, stages, [0, TINY, 1, 2])}
    return data


def _placement(data: dict) -> list[int]:
    d, v, placement = data["devices"], data["chunks"], data["placement"]
    if isinstance(placement, list):
        return placement
    if placement == "linear" or placement == "interleaved":
        return [s % d for s in range(d * v)]
    return [s % d if (s // d) % 2 == 0 else d - 1 - s % d for s in range(d * v)]  # vshape


def witness(rng: random.Random, data: dict, cap_slack: float = 0.0) -> dict:
    """The serial witness schedule of ``data`` (which gets its cap: the witness's peak per device, plus
    ``cap_slack`` of it); returns the schedule file's content."""
    place = _placement(data)
    stages, m = len(place), data["microbatches"]
    t, mem = data["time"], data["memory"]
    split = data["backward"] == "split"
    p2p = t["p2p"]
    fwd, bwd, wgt = t["forward"], t["backward_input"], t["backward_weight"]
    act = mem["activation"]
    hold = mem.get("weight_hold", [0] * stages) if split else [0] * stages
    offload, recompute = data.get("offload"), data.get("recompute")
    ops: list[dict] = []
    clock = 0.0

    def add(kind: str, s: int, j: int, duration: float, **extra) -> dict:
        nonlocal clock
        op = {"kind": kind, "stage": s, "microbatch": j, "device": place[s], "start": clock,
              "end": clock + duration, **extra}
        clock = op["end"]
        ops.append(op)
        return op

    def lat(a: int, b: int) -> float:
        return p2p if place[a] != place[b] else 0.0

    recomputed, moved = set(), {}
    for j in range(m):
        for s in range(stages):
            if s:
                clock += lat(s - 1, s)
            add("F", s, j, fwd[s])
            if offload and offload["fraction"][s] * act[s] > 0 and rng.random() < 0.5:
                most = offload["fraction"][s] * act[s]
                amount = most * rng.choice([SMALL, 0.5, 1])  # dust, part or all of the share
                moved[(s, j)] = amount
                add("OFFLOAD", s, j, amount / offload["bandwidth"]["d2h"], amount=amount)
            elif recompute and rng.random() < 0.5:
                recomputed.add((s, j))
        for s in reversed(range(stages)):
            if s < stages - 1:
                clock += lat(s, s + 1)
            if (s, j) in moved:
                add("RELOAD", s, j, moved[(s, j)] / offload["bandwidth"]["h2d"], amount=moved[(s, j)])
            if (s, j) in recomputed:
                add("R", s, j, recompute["time"][s])
            add("B", s, j, bwd[s] + (0 if split else wgt[s]))
            if split:
                add("W", s, j, wgt[s])
    keep = recompute["keep"] if recompute else act
    peaks = _peaks(ops, place, data["devices"], act, hold, keep, recomputed, split)
    mem["capacity"] = [p * (1 + cap_slack) for p in peaks]
    work = sum(op["end"] - op["start"] for op in ops if op["kind"] in ("F", "B", "W"))
    makespan = max(op["end"] for op in ops)
    return {"format": "ppsolve/schedule@1", "problem": data,
            "method": {"name": "witness", "params": {}, "status": "heuristic", "lower_bound": None, "seconds": 0},
            "ops": ops,
            "metrics": {"makespan": makespan, "peak_memory": peaks,
                        "bubble_ratio": 1 - work / (data["devices"] * makespan) if makespan > 0 else 0.0,
                        "offloaded": sum(moved.values()), "recomputed": len(recomputed)}}


def _peaks(ops: list[dict], place: list[int], devices: int, act, hold, keep, recomputed: set,
           split: bool) -> list[float]:
    """Each device's peak by the contract's memory events and tie rule: at one instant releases count before
    allocations, except a release of an activation whose own allocation (by its F or R) is at that instant:
    that allocation counts first, then that release, both still before the other allocations (the reading
    under which a runtime's re-timing never raises a peak)."""
    events = []  # (device, time, allocation instant of its activation, delta)
    allocated: dict[tuple[int, int], set] = {}
    for op in ops:
        s, j, kind = op["stage"], op["microbatch"], op["kind"]
        key = (s, j)
        if kind == "F":
            events.append((s, j, op["start"], +(keep[s] if key in recomputed else act[s])))
            allocated.setdefault(key, set()).add(op["start"])
        elif kind == "R":
            events.append((s, j, op["start"], +(act[s] - keep[s])))
            allocated.setdefault(key, set()).add(op["start"])
        elif kind == "OFFLOAD":
            events.append((s, j, op["end"], -op["amount"]))
        elif kind == "RELOAD":
            events.append((s, j, op["start"], +op["amount"]))
        elif kind == "B":
            events.append((s, j, op["end"], -(act[s] - hold[s]) if split else -act[s]))
        elif kind == "W":
            events.append((s, j, op["end"], -hold[s]))
    peaks = [0.0] * devices
    level = [0.0] * devices

    released = {(s, j, time) for s, j, time, delta in events if delta < 0}
    first = {}  # the position of each activation's first event: pairs at one instant count in that order
    for position, (s, j, _, _) in enumerate(events):
        first.setdefault((s, j), position)

    def order(event):
        # at one instant: releases; then each activation allocated by its F or R and released there, its
        # allocation before its release; then the other allocations (a RELOAD allocates too)
        s, j, time, delta = event
        own = time in allocated.get((s, j), ()) and (s, j, time) in released
        if own:
            return (time, 1, first[(s, j)], 0 if delta >= 0 else 1)
        return (time, 2 if delta >= 0 else 0, 0, 0)

    for s, j, _, delta in sorted(events, key=order):
        d = place[s]
        level[d] += delta
        peaks[d] = max(peaks[d], level[d])
    return peaks
