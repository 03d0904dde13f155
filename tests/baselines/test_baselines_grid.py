"""Every baseline x d x m x backward x costs: a checked schedule or one clean refusal."""

from __future__ import annotations

import pytest

from ppsolve.baselines.common import Requirement
from ppsolve.baselines.engines.listsched import ListPolicy, list_orders
from ppsolve.bounds import min_capacity
from ppsolve.checker import check
from ppsolve.errors import InfeasibleError, NotApplicableError
from ppsolve.memory import peak_memory
from ppsolve.methods import RunOptions, all_methods, get_method
from ppsolve.ops import OpKind
from ppsolve.simulator import simulate
from tests.baselines.problems import make_problem

METHODS = [m.name for m in all_methods("baseline")]
LINK = {"bandwidth": {"d2h": 2.0, "h2d": 2.0}}


def home_placement(name: str) -> str:
    requirement = get_method(name).requirements
    if requirement.startswith("vshape"):
        return "vshape"
    if requirement.startswith("interleaved"):
        return "interleaved"
    return "linear"


def grid():
    for d in (2, 3, 4, 8):
        for m in sorted({1, d - 1, d, 2 * d + 1, 4 * d} - {0}):
            for backward in ("split", "fused"):
                for costs in ("uniform", "uneven"):
                    yield d, m, backward, costs


def assert_clean_refusal(exc: Exception, name: str) -> None:
    text = str(exc)
    assert text and "\n" not in text and "Traceback" not in text
    assert isinstance(exc, (NotApplicableError, InfeasibleError))


def run_checked(name: str, problem) -> None:
    method = get_method(name)
    reason = method.why_not(problem)
    try:
        schedule = method.run(problem, RunOptions())
    except (NotApplicableError, InfeasibleError) as exc:
        assert_clean_refusal(exc, name)
        if isinstance(exc, NotApplicableError):
            assert reason is not None
        else:  # a capacity refusal: --ignore-capacity still builds a schedule valid apart from memory
            broken = method.run(problem, RunOptions(ignore_capacity=True))
            report = check(broken)
            assert broken.method.extra.get("capacity_broken")
            assert all(v.rule in ("memory", "retime") for v in report.violations), report.violations[:3]
            assert all(v.rule != "retime" or "capacity" in v.message for v in report.violations)
        return
    assert reason is None, f"{name} built a schedule although it does not apply: {reason}"
    report = check(schedule)
    assert report.ok, [v.render() for v in report.violations[:3]]
    assert schedule.method.name == name


@pytest.mark.parametrize("name", METHODS)
def test_every_method_on_the_grid(name):
    placements = ["linear", "interleaved", "vshape"] if name == "greedy" else [home_placement(name)]
    for placement in placements:
        for d, m, backward, costs in grid():
            offload = dict(LINK, links=[[0, 1]]) if costs == "uneven" and d > 2 else LINK
            problem = make_problem(d, m, placement, backward, costs, offload=offload)
            run_checked(name, problem)


@pytest.mark.parametrize("name", METHODS)
def test_foreign_placements_are_refused_in_one_line(name):
    for placement in ("linear", "interleaved", "vshape"):
        problem = make_problem(4, 4, placement, "split", "uniform")
        run_checked(name, problem)


@pytest.mark.parametrize("name", METHODS)
def test_tight_capacity_is_kept_or_refused(name):
    """Under a cap between the least feasible and 1F1B's, a method fits or refuses cleanly."""
    placement = home_placement(name)
    for d in (2, 4):
        for m in (d, 2 * d + 1):
            base = make_problem(d, m, placement, "split", "uneven", offload=LINK)
            cap = [1.5 * c for c in min_capacity(base)]
            run_checked(name, make_problem(d, m, placement, "split", "uneven", capacity=cap, offload=LINK))


@pytest.mark.parametrize("placement", ["linear", "interleaved", "vshape"])
def test_greedy_applies_everywhere_and_keeps_the_least_cap(placement):
    for d in (2, 3, 4):
        for backward in ("split", "fused"):
            base = make_problem(d, 2 * d + 1, placement, backward, "uneven")
            cap = min_capacity(base)
            problem = make_problem(d, 2 * d + 1, placement, backward, "uneven", capacity=cap)
            schedule = get_method("greedy").run(problem)
            assert check(schedule).ok
            assert all(p <= c + 1e-9 for p, c in zip(schedule.peak_memory, cap))


def test_greedy_offloads_below_the_no_offload_minimum():
    """Device 0 of a V-shape capped below one microbatch without offload: greedy offloads and fits.

    (Device 0's stages 0 and 2d-1 are far apart, so the offload of stage 0 ends before F of
    stage 2d-1; the cap of the other devices stays at the least that works without offload.)
    """
    link = {"bandwidth": {"d2h": 20.0, "h2d": 20.0}}
    base = make_problem(4, 9, "vshape", "split", "uneven", offload=link)
    cap = [min_capacity(base, offload=True)[0]] + min_capacity(base)[1:]
    assert cap[0] < min_capacity(base)[0]
    problem = make_problem(4, 9, "vshape", "split", "uneven", capacity=cap, offload=link)
    schedule = get_method("greedy").run(problem)
    assert check(schedule).ok
    assert schedule.offloaded > 0


def test_requirements_text_names_what_refusals_say():
    problem = make_problem(4, 4, "linear", "fused")
    reason = get_method("zb-h1").why_not(problem)
    assert "split" in reason
    with pytest.raises(NotApplicableError, match="zb-h1 does not apply"):
        get_method("zb-h1").run(problem)
    assert "offload" in get_method("po-f").why_not(make_problem(4, 4, "interleaved"))
    assert "vshape" in get_method("zb-v").why_not(make_problem(4, 4, "interleaved"))
    assert Requirement().why_not(problem) is None


def test_applicable_baselines_are_those_that_fit():
    from ppsolve.baselines.portfolio import applicable_baselines

    problem = make_problem(4, 8, "linear", "split", "uneven", capacity=[4.0] * 4)
    found = {s.method.name: s for s in applicable_baselines(problem)}
    assert found and all(check(s).ok for s in found.values())
    for method in all_methods("baseline"):
        if method.why_not(problem) is None:
            try:
                other = method.run(problem)
            except InfeasibleError:
                assert method.name not in found
                continue
            assert found[method.name].makespan == other.makespan


@pytest.mark.parametrize("name", METHODS)
def test_outputs_retime_to_themselves(name):
    """A runtime following SPEC.md's rules reproduces every op's start and end exactly."""
    from ppsolve.simulator import retime

    placement = home_placement(name)
    link = {"bandwidth": {"d2h": 1.5, "h2d": 1.0}, "links": [[0, 1]], "duplex": False}
    for d, m in ((3, 7), (4, 9)):
        problem = make_problem(d, m, placement, "split", "uneven", offload=link)
        if get_method(name).why_not(problem) is not None:
            continue
        schedule = get_method(name).run(problem)
        assert sorted(retime(problem, schedule.ops)) == sorted(schedule.ops)


def test_greedy_ignore_capacity_uses_the_least_memory_that_works():
    base = make_problem(3, 7, "vshape", "split", "uneven")
    least = min_capacity(base)
    problem = make_problem(3, 7, "vshape", "split", "uneven", capacity=[c / 2 for c in least])
    with pytest.raises(InfeasibleError, match="device 0 needs at least"):
        get_method("greedy").run(problem)
    schedule = get_method("greedy").run(problem, RunOptions(ignore_capacity=True))
    assert schedule.method.extra["capacity_broken"]
    assert all(p <= c + 1e-9 for p, c in zip(schedule.peak_memory, least))


@pytest.mark.parametrize("placement,chunks", [("interleaved", 3), ("interleaved", 4), ("vshape", 4)])
def test_more_chunks_per_device(placement, chunks):
    for name in METHODS:
        for d, m in ((2, 3), (3, 7), (4, 2)):
            for backward in ("split", "fused"):
                problem = make_problem(d, m, placement, backward, "uneven", chunks=chunks, offload=LINK)
                run_checked(name, problem)


def test_greedy_offload_beats_no_offload_under_a_tight_cap():
    """Eight devices, a cap of two microbatches: offloading lets more microbatches fly."""
    link = {"bandwidth": {"d2h": 4.0, "h2d": 4.0}}
    without = get_method("greedy").run(make_problem(8, 32, "vshape", capacity=4.0))
    with_link = get_method("greedy").run(make_problem(8, 32, "vshape", capacity=4.0, offload=link))
    assert check(with_link).ok and with_link.offloaded > 0
    assert max(with_link.peak_memory) <= 4.0
    assert with_link.makespan < 0.8 * without.makespan


def test_list_scheduler_forwards_wait_for_the_offload_that_frees_their_memory():
    """Contract v2: each wait is a forward holding for an earlier-listed offload of its device,
    and timing the plan with those waits keeps every device within the limit."""
    link = {"bandwidth": {"d2h": 4.0, "h2d": 4.0}}
    problem = make_problem(8, 32, "vshape", capacity=4.0, offload=link)
    policy = ListPolicy(limit=problem.capacity, offload=frozenset(range(problem.num_stages - 1)), lean=True)
    orders, amounts, waits = list_orders(problem, policy)
    assert waits
    for forward, (offload,) in waits.items():
        device = problem.placement[forward.stage]
        assert forward.kind is OpKind.F and offload.kind is OpKind.OFFLOAD
        assert problem.placement[offload.stage] == device
        assert orders[device].index(offload) < orders[device].index(forward)
    ops = simulate(problem, orders, amounts, waits)
    assert max(peak_memory(problem, ops)) <= 4.0 + 1e-9
    ends = {op.op: op.end for op in ops}
    starts = {op.op: op.start for op in ops}
    assert all(starts[f] >= ends[o] for f, (o,) in waits.items())
