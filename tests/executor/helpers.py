"""Schedules for executor tests, built with the simulator from simple per-device orders,
and ``run_schedule_and_compare`` that runs any schedule and checks it against the reference."""

from __future__ import annotations


from ppsolve.ops import B, F, OFFLOAD, RELOAD, W, Op
from ppsolve.problem import problem_from_dict
from ppsolve.schedule import Schedule, make_schedule
from ppsolve.simulator import forwards_wait_for_offloads, simulate
from tests.helpers import one_f_one_b_orders
from tests.helpers import ROOT

MODELS = ROOT / "models"


def problem(devices: int, microbatches: int, chunks: int = 1, placement: str = "linear", split: bool = True,
            offload: bool = False, duplex: bool = True, bandwidth: float = 100, keep: float | None = None, **times):
    """A problem with unit activations; ``keep`` adds a recompute block (R lasts a forward)."""
    data = {"format": "ppsolve/problem@1", "devices": devices, "microbatches": microbatches, "chunks": chunks,
            "placement": placement, "backward": "split" if split else "fused",
            "time": {"forward": times.get("f", 1), "backward_input": times.get("b", 1),
                     "backward_weight": times.get("w", 1), "p2p": 0},
            "memory": {"activation": 1, "weight_hold": 1 if split else 0, "capacity": None}}
    if offload:
        data["offload"] = {"bandwidth": {"d2h": bandwidth, "h2d": bandwidth}, "duplex": duplex}
    if keep is not None:
        data["recompute"] = {"keep": keep}
    return problem_from_dict(data)


def pipelined_orders(prob, lag: int, w_delay: int = 0) -> list[list[Op]]:
    """A topological order of the whole iteration restricted to each device: at step t the
    forward chain of microbatch t, then the backward chain of t - lag, then (split) the W
    chain of t - lag - w_delay. Valid for any placement; ``lag`` bounds microbatches in flight."""
    S, M = prob.num_stages, prob.microbatches
    global_order: list[Op] = []
    for t in range(M + lag + w_delay + 1):
        if t < M:
            global_order += [F(s, t) for s in range(S)]
        if 0 <= t - lag < M:
            global_order += [B(s, t - lag) for s in reversed(range(S))]
        if prob.split_backward and 0 <= t - lag - w_delay < M:
            global_order += [W(s, t - lag - w_delay) for s in reversed(range(S))]
    orders: list[list[Op]] = [[] for _ in range(prob.devices)]
    for op in global_order:
        orders[prob.placement[op.stage]].append(op)
    return orders


def add_offload(prob, orders, pairs) -> list[list[Op]]:
    """OFFLOAD(s,j) right after F(s,j) and RELOAD(s,j) right before B(s,j), for each (s, j) in pairs."""
    out = []
    for actions in orders:
        new = []
        for op in actions:
            if op.kind.value == "B" and (op.stage, op.microbatch) in pairs:
                new.append(RELOAD(op.stage, op.microbatch))
            new.append(op)
            if op.kind.value == "F" and (op.stage, op.microbatch) in pairs:
                new.append(OFFLOAD(op.stage, op.microbatch))
        out.append(new)
    return out


def mixed_levers(prob, orders, recomputed, offloaded) -> Schedule:
    """``orders`` with R right before B for each (s, j) in ``recomputed`` (``with_recompute``) and
    OFFLOAD/RELOAD around the others in ``offloaded``, timed by the simulator with every F and R
    waiting for the offloads listed before it (what they allocate comes after what they free)."""
    from ppsolve.baselines.common import with_recompute

    listed = add_offload(prob, with_recompute(orders, recomputed), offloaded)
    return make(prob, listed, "mixed-levers", waits=forwards_wait_for_offloads(listed))


def make(prob, orders, name: str, waits=None) -> Schedule:
    return make_schedule(prob, simulate(prob, orders, waits=waits), name)


def full_offload_1f1b(devices: int, microbatches: int, duplex: bool = True, wait: bool = True,
                      bandwidth: float = 2) -> Schedule:
    """Linear 1F1B with every activation but the last stage's offloaded right after its F and
    reloaded right before its B (PipeOffload's full offload); with ``wait`` each forward waits
    for the offloads listed before it (contract version 2). F = B = W = 1, transfers 1 / bandwidth."""
    prob = problem(devices, microbatches, offload=True, duplex=duplex, bandwidth=bandwidth)
    orders = one_f_one_b_orders(prob)
    pairs = {(s, j) for s in range(devices - 1) for j in range(microbatches)}
    full = add_offload(prob, orders, pairs)
    return make(prob, full, "1f1b-full-offload", waits=forwards_wait_for_offloads(full) if wait else None)


def run_schedule_and_compare(schedule: Schedule, model_path, ranks: int | None = None, runtime: str = "ppsolve",
                             tolerance: float = 1e-5, **job_options):
    """Run ``schedule`` on ``ranks`` processes (default: its devices) with the model file,
    compare loss and every gradient with the single-process reference, and return
    (comparison, results). Fails the test when the error exceeds ``tolerance``."""
    from ppsolve.executor.api import execute

    outcome = execute(schedule, model_path, ranks=ranks, check=True, runtime=runtime, **job_options)
    assert outcome.comparison is not None
    assert outcome.comparison.ok(tolerance), (
        f"max error {outcome.comparison.max_error:.3g} at {outcome.comparison.worst}; "
        f"missing {outcome.comparison.missing}")
    return outcome


def per_microbatch(prob, mult: list[float],
                   keys=("forward", "backward_input", "backward_weight", "activation", "weight_hold")):
    """``prob`` with microbatch j of every stage costing ``mult[j]`` times the stage's value of each
    field of ``keys`` (time fields, ``activation``, ``weight_hold``; version 4's S lists of m)."""
    data = prob.to_dict()
    for key in keys:
        block = "memory" if key in ("activation", "weight_hold") else "time"
        grid = getattr(prob, key)
        data[block][key] = [[grid[s] * x for x in mult] for s in range(prob.num_stages)]
    if prob.recompute is not None:  # keep <= activation for every microbatch
        data["recompute"]["keep"] = [[prob.recompute.keep[s] * min(mult)] * len(mult)
                                     for s in range(prob.num_stages)]
    return problem_from_dict(data)


def permuted(orders: list[list[Op]], perm: list[int]) -> list[list[Op]]:
    """``orders`` with microbatch j renamed ``perm[j]``: the same order, other microbatches first."""
    return [[Op(op.kind, op.stage, perm[op.microbatch]) for op in row] for row in orders]
