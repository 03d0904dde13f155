"""The published figures of DOMAIN.md, reproduced on uniform costs and zero latency."""

from __future__ import annotations

import pytest

from ppsolve.bounds import makespan_lower_bound
from ppsolve.checker import check
from ppsolve.methods import get_method
from tests.baselines.problems import make_problem

SIZES = [(d, m) for d in (2, 3, 4, 8) for m in (d, 2 * d + 1, 4 * d)]


def build(name, problem):
    schedule = get_method(name).run(problem)
    assert check(schedule).ok
    return schedule


@pytest.mark.parametrize("d,m", SIZES)
def test_1f1b_and_gpipe_fused_makespan_and_memory(d, m):
    # fused backward: B lasts B + W = 2, so (m + d - 1)(F + B + W) = 3 (m + d - 1)
    problem = make_problem(d, m, backward="fused")
    onef1b = build("1f1b", problem)
    assert onef1b.makespan == (m + d - 1) * 3
    assert onef1b.peak_memory == [float(min(d - i, m)) for i in range(d)]
    gpipe = build("gpipe", problem)
    assert gpipe.makespan == (m + d - 1) * 3
    assert gpipe.peak_memory == [float(m)] * d


@pytest.mark.parametrize("d,m", SIZES)
def test_1f1b_split_w_after_b_drains_no_slower(d, m):
    split = build("1f1b", make_problem(d, m))
    assert split.makespan <= (m + d - 1) * 3
    assert split.peak_memory == [float(min(d - i, m)) for i in range(d)]


@pytest.mark.parametrize("d,m", SIZES)
@pytest.mark.parametrize("F,B,W", [(1, 1, 1), (2, 2, 2)])
def test_zb_h1_bubble_is_d_minus_1_times_f_plus_b_minus_w(d, m, F, B, W):
    schedule = build("zb-h1", make_problem(d, m, F=F, B=B, W=W))
    assert schedule.makespan == m * (F + B + W) + (d - 1) * (F + B - W)
    # the reference's limit: every device within d microbatches (1F1B's busiest device)
    assert max(schedule.peak_memory) == min(d, m)


@pytest.mark.parametrize("d,m", [(d, m) for d, m in SIZES if m >= d])
@pytest.mark.parametrize("F,B,W", [(1, 1, 1), (2, 2, 2)])
def test_handcrafted_zb_h1_has_the_papers_bubble_at_1f1b_memory(d, m, F, B, W):
    schedule = build("zb-h1-handcrafted", make_problem(d, m, F=F, B=B, W=W))
    assert schedule.makespan == m * (F + B + W) + (d - 1) * (F + B - W)
    # 1F1B's activations (d - i on device i) plus the weight-gradient inputs held for the deferred W's
    assert max(schedule.peak_memory) <= d


@pytest.mark.parametrize("d,m", [(d, m) for d, m in SIZES if m >= 2 * d - 1])
def test_zb_h2_within_2d_and_no_idle_beyond_the_bound(d, m):
    problem = make_problem(d, m)
    schedule = build("zb-h2", problem)
    assert max(schedule.peak_memory) <= 2 * d  # the reference's limit: 2d microbatches on every device
    # uniform F = B = W: (d-1)(F+B-2W) = 0 bubble, the makespan is the device-load bound
    assert schedule.makespan == makespan_lower_bound(problem).value


@pytest.mark.parametrize("d,m", [(d, m) for d, m in SIZES if m >= 2 * d])
def test_zb_v_is_optimal_at_1f1b_memory(d, m):
    problem = make_problem(d, m, "vshape")
    schedule = build("zb-v", problem)
    assert schedule.makespan == makespan_lower_bound(problem).value
    # 1F1B's busiest device holds d microbatches: 2d chunk activations of 1 each
    assert max(schedule.peak_memory) == 2 * d


@pytest.mark.parametrize("d,m", [(d, m) for d, m in SIZES if m >= 2 * d])
def test_v_half_and_v_min_peaks(d, m):
    problem = make_problem(d, m, "vshape")
    half = build("v-half", problem)
    vmin = build("v-min", problem)
    # a microbatch is 2 chunk activations on a device: (d+2)//2 and at most (d+4)//3 microbatches
    # (the reference's V-Min block holds 3 chunk activations at d = 2)
    assert max(half.peak_memory) == 2 * ((d + 2) // 2)
    assert max(vmin.peak_memory) <= 2 * ((d + 4) // 3)
    onef1b = build("1f1b", make_problem(d, m, F=2, B=2, W=2))  # the same model on a linear placement
    work = 6 * m
    assert half.makespan - work <= (onef1b.makespan - work) * 0.75  # about half of 1F1B's bubble


@pytest.mark.parametrize("d,m", SIZES)
def test_interleaved_bubble_and_memory(d, m):
    # fused, v = 2, chunk costs F = 1, B = 2: bubble (d-1)(F+B) per device of chunk costs,
    # i.e. the published (d-1)(F+B)/v of whole-stage costs; device 0 holds dv + d - 1 chunks
    problem = make_problem(d, m, "interleaved", "fused")
    schedule = build("interleaved-1f1b", problem)
    assert schedule.makespan == m * 2 * 3 + (d - 1) * 3
    if m >= 2 * d and m % d == 0:
        assert schedule.peak_memory[0] == 2 * d + d - 1


@pytest.mark.parametrize("d,m", [(d, m) for d, m in SIZES if m >= 2 * d])
def test_dualpipe_v_order_is_bubble_free_on_uniform_costs(d, m):
    problem = make_problem(d, m, "vshape")
    schedule = build("dualpipe-v", problem)
    assert schedule.makespan == makespan_lower_bound(problem).value
    assert len(set(schedule.peak_memory)) == 1  # balanced across devices


def test_offload_lowers_peak_memory():
    link = {"bandwidth": {"d2h": 2.0, "h2d": 2.0}}
    problem = make_problem(4, 16, "interleaved", offload=link)
    gis, gis_h = build("gis", problem), build("gis-h", problem)
    po_f, po_h = build("po-f", problem), build("po-h", problem)
    assert max(gis_h.peak_memory) < max(gis.peak_memory)
    assert max(po_f.peak_memory) < max(gis.peak_memory) and po_f.offloaded > 0
    assert max(po_h.peak_memory) < max(gis_h.peak_memory) and po_h.offloaded > 0
