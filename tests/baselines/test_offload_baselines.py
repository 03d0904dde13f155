"""PipeOffload's schedules (GIS, GIS-H, PO-H, PO-F, 1F1B full offload): validity and published memory."""

from __future__ import annotations

import math

import pytest

from ppsolve.baselines.engines.offload_pass import reference_plan
from ppsolve.baselines.families.offload import gis_orders, least_group
from ppsolve.bounds import min_capacity
from ppsolve.checker import check
from ppsolve.memory import peak_memory
from ppsolve.methods import get_method
from ppsolve.ops import OpKind
from ppsolve.problem import load_problem
from ppsolve.simulator import simulate
from tests.baselines.problems import make_problem
from tests.helpers import ROOT

FAMILY = ["gis", "gis-h", "po-h", "po-f", "1f1b-offload"]


def link(k: float, F: float = 1.0, B: float = 1.0, activation: float = 1.0, **extra) -> dict:
    """A host link whose round trip of one activation is ``k (F + B)``."""
    bandwidth = 2 * activation / (k * (F + B))
    return {"bandwidth": {"d2h": bandwidth, "h2d": bandwidth}, **extra}


def run(name, problem):
    schedule = get_method(name).run(problem)
    report = check(schedule)
    assert report.ok, [v.render() for v in report.violations[:3]]
    return schedule


LINKS = {"private": {}, "shared": {"links": [[0, 1]]}, "half-duplex": {"duplex": False}}


@pytest.mark.parametrize("name", FAMILY)
@pytest.mark.parametrize("kind", sorted(LINKS))
def test_every_output_passes_the_checker(name, kind):
    for d in (2, 3, 4):
        for m in (d, 2 * d + 1, 3 * d):
            for v in ((1,) if name == "1f1b-offload" else (1, 2, 3)):
                for k in (0.5, 1.5):
                    for costs in ("uniform", "uneven"):
                        placement = "linear" if v == 1 else "interleaved"
                        problem = make_problem(d, m, placement, costs=costs, chunks=v,
                                               offload=link(k, **LINKS[kind]))
                        run(name, problem)


@pytest.mark.parametrize("d", [2, 3, 4, 8])
@pytest.mark.parametrize("v", [1, 2, 4])
def test_gis_warm_up_is_the_reference_building_block(d, v):
    # device i runs (v-1) g + (d-1-i) forwards, then one more before its first backward
    problem = make_problem(d, 2 * d, "interleaved" if v > 1 else "linear", chunks=v)
    for i, order in enumerate(gis_orders(problem, d, d)):
        first_b = next(k for k, op in enumerate(order) if op.kind is OpKind.B)
        assert first_b == (v - 1) * d + (d - 1 - i) + 1
        assert order[first_b + 1].kind is OpKind.W  # W right after its B


@pytest.mark.parametrize("d", [3, 4, 5, 6, 8])
@pytest.mark.parametrize("v", [2, 3, 4])
def test_gis_and_gis_h_memory_on_rank_0(d, v):
    # Table 1 of PipeOffload, in stage activations on rank 0: GIS holds d v; GIS-H g (v-1) + d with g the
    # least group (ceil(d/2) on even costs): the warm-up (v-1) g + (d-1) forwards and one more.
    problem = make_problem(d, 4 * d, "interleaved", chunks=v)
    g = least_group(problem)
    assert g == (d + 1) // 2
    assert run("gis", problem).peak_memory[0] == d * v
    assert run("gis-h", problem).peak_memory[0] == g * (v - 1) + d


@pytest.mark.parametrize("d,v", [(4, 2), (8, 2), (5, 3), (8, 4)])
def test_groups_of_one_spaced_by_k_keep_the_reference_building_block_delay(d, v):
    # Groups of 1 spaced by K (PO-H's order, the reference's offload script): the building block delays
    # every (v / gcd(v, K))-th chunk by one group, which keeps gcd(v, K) - 1 more activations in flight.
    problem = make_problem(d, 4 * d, "interleaved", chunks=v)
    K = least_group(problem)
    ops = simulate(problem, gis_orders(problem, 1, K))
    assert peak_memory(problem, ops)[0] == K * (v - 1) + d + math.gcd(v, K) - 1


@pytest.mark.parametrize("d", [4, 8])
def test_po_f_peak_is_a_small_fraction_of_1f1b(d):
    # The same model as 1F1B's with v = 2 chunks: a stage holds half a device's activation, so 1F1B's peak
    # is d whole activations = 2d stage activations. With a link that keeps up (k = 0.5: a round trip
    # lasts one F of a stage) PO-F holds at most 3 stage activations on any device at once: the forward
    # that runs, the one whose offload is still in flight, and the reloaded one its B or W still uses.
    # That is 3 / (2 d) of 1F1B's: 3/16 at d = 8, the paper's order 1/(v d).
    v = 2
    problem = make_problem(d, 4 * d, "interleaved", chunks=v, offload=link(0.5))
    whole = make_problem(d, 4 * d, "linear")  # one stage per device, twice the activation of a chunk
    onef1b_peak = max(run("1f1b", whole).peak_memory) * v
    po_f = run("po-f", problem)
    assert max(po_f.peak_memory) <= 3 / (v * d) * onef1b_peak
    assert po_f.makespan == run("gis", problem).makespan  # the offload is hidden


@pytest.mark.parametrize("d", [4, 8])
def test_po_h_holds_under_half_of_gis_h(d):
    problem = make_problem(d, 4 * d, "interleaved", chunks=2, offload=link(0.5))
    gis_h, po_h = run("gis-h", problem), run("po-h", problem)
    assert max(po_h.peak_memory) <= max(gis_h.peak_memory) / 2
    assert po_h.offloaded > 0


@pytest.mark.parametrize("d", [2, 4, 8])
@pytest.mark.parametrize("k", [0.5, 1.5])
def test_1f1b_full_offload_holds_one_activation_plus_the_link(d, k):
    # min_capacity(offload=True) is one activation on every device: one microbatch in flight with every
    # activation on host. 1F1B with full offload runs the forward that allocates it while the reload of the
    # next backward's activation is in flight (issued before the compute op that precedes that B), and
    # every forward first waits for the offloads before it: at most one more activation, whatever d.
    problem = make_problem(d, 4 * d, "linear", offload=link(k))
    schedule = run("1f1b-offload", problem)
    least = min_capacity(problem, offload=True)
    assert least == [1.0] * d
    assert all(p <= c + 1.0 for p, c in zip(schedule.peak_memory, least))
    assert schedule.peak_memory[-1] == 1.0  # the last stage keeps its activation and never overlaps two
    offloaded = {(op.stage, op.microbatch) for op in schedule.ops if op.kind is OpKind.OFFLOAD}
    assert offloaded == {(s, j) for s in range(d - 1) for j in range(4 * d)}
    assert schedule.method.params["memory_policy"] == "forwards wait for offloads"


def test_a_tight_cap_takes_the_capped_plan():
    # cap 1: any reload that overlaps a forward breaks it; the capped plan reloads right before each B
    # and holds each forward and reload until the offloads listed before them have ended
    problem = make_problem(4, 8, "linear", capacity=1.0, offload=link(0.5))
    for name in ("po-f", "1f1b-offload"):
        schedule = run(name, problem)
        assert schedule.method.params["memory_policy"] == "capped"
        assert max(schedule.peak_memory) <= 1.0


def _bundled():
    for path in sorted((ROOT / "instances").glob("*.json")) + sorted((ROOT / "instances" / "suite").glob("*.json")):
        yield path


@pytest.mark.parametrize("name", ["po-f", "po-h", "1f1b-offload"])
def test_offload_methods_build_valid_schedules_wherever_they_apply(name):
    applied = 0
    for path in _bundled():
        problem = load_problem(path)
        if get_method(name).why_not(problem) is None:
            schedule = run(name, problem)
            assert schedule.offloaded > 0, path.name
            applied += 1
    assert applied >= 8


def test_the_reference_offload_end_waits_hold_compute_on_a_busy_link():
    # One half-duplex link for 4 devices: transfers queue behind each other and end later than planned.
    # The compute op the reference lists after a send's "offload end" waits for it (contract version 2),
    # so the memory is freed before that op allocates; without the waits the same plan holds more.
    problem = make_problem(4, 16, "interleaved", chunks=2, offload=link(0.5, links=[[0, 1, 2, 3]], duplex=False))
    plan = reference_plan(problem, gis_orders(problem, 4, 4), range(problem.num_stages))
    assert plan.waits
    held = peak_memory(problem, plan.time(problem))
    unheld = peak_memory(problem, simulate(problem, plan.orders, plan.amounts))
    assert max(held) < max(unheld)


def test_which_activations_go_to_host():
    # PO-H: only the first v // 2 chunks; PO-F: every chunk, but the reference keeps an activation whose F
    # ends at most 3 round trips before its B (less one B): the last stage's B follows its F at once.
    d, v = 4, 4
    problem = make_problem(d, 4 * d, "interleaved", chunks=v, offload=link(0.5))
    po_h = {op.stage for op in run("po-h", problem).ops if op.kind is OpKind.OFFLOAD}
    assert po_h and all(s // d < v // 2 for s in po_h)
    po_f = {op.stage for op in run("po-f", problem).ops if op.kind is OpKind.OFFLOAD}
    assert {s // d for s in po_f} == set(range(v)) and d * v - 1 not in po_f
