"""``ppsolve export --to torch``: the compute_comms CSV (sends and receives placed by ppsolve,
replayed under the runtime's blocking rules and accepted by PyTorch's own checks), the side
file for offload and recompute, and the compute_only CSV."""

from __future__ import annotations

import json

import pytest

from ppsolve.cli import main
from ppsolve.errors import DeadlockError, InputError
from ppsolve.export.torch_csv import plan_path, to_compute_comms_csv
from ppsolve.export.torch_levers import side_plan
from ppsolve.export.torch_replay import parse_rows, replay
from ppsolve.methods import RunOptions, all_methods, run_method
from ppsolve.problem import load_problem
from ppsolve.schedule import make_schedule
from ppsolve.simulator import simulate
from tests.baselines.problems import make_problem as family_problem
from tests.executor.helpers import mixed_levers, per_microbatch, permuted, pipelined_orders
from tests.helpers import ROOT, make_problem, one_f_one_b_orders, schedule_from_orders, serial_orders

OFFLOAD = {"bandwidth": {"d2h": 1, "h2d": 1}}


def _one_f_one_b(tmp_path):
    problem = make_problem(devices=2, microbatches=2)
    path = tmp_path / "s.json"
    schedule_from_orders(problem, one_f_one_b_orders(problem)).save(path)
    return path


def test_compute_only_keeps_the_compute_actions(tmp_path):
    out = tmp_path / "s.csv"
    assert main(["export", str(_one_f_one_b(tmp_path)), "--to", "torch", "--format", "compute_only",
                 "-o", str(out)]) == 0
    assert out.read_text().splitlines() == ["0F0,0F1,0I0,0W0,0I1,0W1", "1F0,1I0,1W0,1F1,1I1,1W1"]


def test_compute_comms_places_sends_after_producers_and_receives_before_consumers(tmp_path, capsys):
    out = tmp_path / "s.csv"
    assert main(["export", str(_one_f_one_b(tmp_path)), "--to", "torch", "-o", str(out)]) == 0
    assert "compute_comms" in capsys.readouterr().out
    assert out.read_text().splitlines() == [
        "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0I0,0W0,0RECV_B1,0I1,0W1,0REDUCE_GRAD",
        "1RECV_F0,1F0,1RECV_F1,1I0,1SEND_B0,1W0,1F1,1I1,1SEND_B1,1W1,1REDUCE_GRAD"]
    assert not plan_path(out).exists()  # nothing to put in a side file


def test_both_formats_write_the_side_file_of_a_plan_that_offloads(tmp_path, capsys):
    problem = make_problem(devices=2, microbatches=2, offload=OFFLOAD)
    path = tmp_path / "s.json"
    schedule = schedule_from_orders(problem, serial_orders(problem, offload=True))
    schedule.save(path)
    only = tmp_path / "only.csv"
    assert main(["export", str(path), "--to", "torch", "--format", "compute_only", "-o", str(only)]) == 0
    assert str(plan_path(only)) in capsys.readouterr().out
    assert {a.kind for row in parse_rows(only.read_text()) for a in row} <= {"F", "I", "W"}
    out = tmp_path / "s.csv"
    assert main(["export", str(path), "--to", "torch", "-o", str(out)]) == 0
    side = json.loads(plan_path(out).read_text())
    assert json.loads(plan_path(only).read_text()) == side
    assert str(plan_path(out)) in capsys.readouterr().out
    rows = parse_rows(out.read_text())
    for rank in side["ranks"]:
        compute = [str(a) for a in rows[rank["rank"]] if a.kind in ("F", "I", "B", "W")]
        for extra in rank["extra"]:
            s, j = extra["stage"], extra["microbatch"]
            # OFFLOAD follows its F; RELOAD comes before its I, after the OFFLOAD
            if extra["kind"] == "OFFLOAD":
                assert compute.index(extra["after"]) >= compute.index(f"{s}F{j}") and extra["share"] == 1.0
            else:
                assert compute.index(extra["before"]) <= compute.index(f"{s}I{j}")
            assert compute.index(extra["before"]) == compute.index(extra["after"]) + 1
    assert {e["kind"] for r in side["ranks"] for e in r["extra"]} == {"OFFLOAD", "RELOAD"}


def test_format_applies_to_torch_only(tmp_path, capsys):
    out = tmp_path / "t.json"
    assert main(["export", str(_one_f_one_b(tmp_path)), "--to", "chrome-trace", "--format", "compute_only",
                 "-o", str(out)]) == 2
    assert "--format" in capsys.readouterr().err


def _torch_accepts(text: str, problem) -> None:
    """PyTorch's own checks: ``_validate_schedule`` (what ``_load_csv`` runs) and its dry-run
    ``_simulate_comms_compute`` (a receive waits for its send)."""
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    actions = {r: [schedules._Action.from_str(a) for a in line.split(",")]
               for r, line in enumerate(text.splitlines())}
    mapping = schedules._validate_schedule(actions, problem.devices, problem.num_stages, problem.microbatches)
    assert mapping == {s: problem.placement[s] for s in range(problem.num_stages)}
    comms = {r: [a for a in row if a.computation_type != schedules.REDUCE_GRAD] for r, row in actions.items()}
    schedules._simulate_comms_compute(comms, lambda s: mapping[s], problem.num_stages)  # it knows no REDUCE_GRAD


def _assert_placed(text: str, schedule) -> None:
    """Sends right after their producer; receives before their consumer; the replay finishes
    with receives that block too; PyTorch accepts it."""
    rows = parse_rows(text)
    for row in rows:
        names = [str(a) for a in row]
        for i, a in enumerate(row):
            if a.kind == "SEND_F":
                assert names[i - 1] == f"{a.stage}F{a.microbatch}"
            elif a.kind == "SEND_B":
                assert names[i - 1] in (f"{a.stage}I{a.microbatch}", f"{a.stage}B{a.microbatch}")
            elif a.kind.startswith("RECV"):
                consumer = f"{a.stage}F{a.microbatch}" if a.kind == "RECV_F" else None
                later = names[i + 1:]
                assert (consumer in later) if consumer else any(
                    n in later for n in (f"{a.stage}I{a.microbatch}", f"{a.stage}B{a.microbatch}"))
    replay(rows)
    replay(rows, recv_blocks=True)
    _torch_accepts(text, schedule.problem)


FAMILIES = [(d, m, placement, backward, costs)
            for d, m in ((2, 4), (4, 8))
            for placement in ("linear", "interleaved", "vshape")
            for backward in ("split", "fused")
            for costs in ("uniform", "uneven")]


@pytest.mark.parametrize("d,m,placement,backward,costs", FAMILIES)
def test_every_baseline_exports_a_csv_that_cannot_hang(d, m, placement, backward, costs):
    problem = family_problem(d, m, placement, backward, costs)
    ran = 0
    for method in all_methods("baseline"):
        if method.why_not(problem) is not None:
            continue
        schedule = method.run(problem, RunOptions())
        _assert_placed(to_compute_comms_csv(schedule), schedule)
        ran += 1
    assert ran >= 2


def _with_levers(problem_data: dict) -> dict:
    data = dict(problem_data)
    data["offload"] = {"bandwidth": {"d2h": 2, "h2d": 2}}
    data["recompute"] = {"keep": 0.25}
    data["memory"] = dict(data["memory"], capacity=2.5)
    return data


@pytest.mark.parametrize("placement", ["linear", "interleaved", "vshape"])
def test_lever_plans_export_with_a_side_file(placement, tmp_path):
    from ppsolve.problem import problem_from_dict
    problem = problem_from_dict(_with_levers(family_problem(2, 4, placement).to_dict()))
    names = [m.name for m in all_methods("baseline") if m.why_not(problem) is None
             and m.name.endswith(("offload", "recompute", "po-h", "po-f", "adapipe"))]
    schedules = [run_method(n, problem, RunOptions()) for n in names]
    schedules.append(run_method("cpsat", problem, RunOptions(time_limit=3, threads=1)))
    orders = pipelined_orders(problem, lag=2, w_delay=1)
    pairs = [(s, j) for s in range(problem.num_stages) for j in range(problem.microbatches)]
    schedules.append(mixed_levers(problem, orders, {p for p in pairs if sum(p) % 3 == 0},
                                  {p for p in pairs if sum(p) % 3 == 1}))
    levers = 0
    for schedule in schedules:
        text = to_compute_comms_csv(schedule)
        _assert_placed(text, schedule)
        plan = side_plan(schedule)
        extra = [e for r in plan["ranks"] for e in r["extra"]]
        assert len(extra) == sum(1 for op in schedule.ops if op.kind.value in ("R", "OFFLOAD", "RELOAD"))
        assert sorted(map(tuple, plan["recomputed"])) == sorted(
            (op.stage, op.microbatch) for op in schedule.ops if op.kind.value == "R")
        levers += bool(extra)
    assert levers >= 2


MULT = [1.6, 0.5, 1.0, 2.2, 0.7, 0.4, 1.2, 0.4]
PERMS = [[3, 0, 2, 1, 7, 5, 6, 4], [7, 6, 5, 4, 3, 2, 1, 0], [5, 1, 4, 0, 6, 2, 7, 3]]


def _permuted_1f1b(problem, perm):
    """A 1F1B-like order (1F1B itself on a linear placement) with its microbatches renamed by
    ``perm``, timed on the problem's per-microbatch costs."""
    orders = (one_f_one_b_orders(problem) if problem.placement == list(range(problem.devices))
              else pipelined_orders(problem, lag=problem.devices - 1, w_delay=1))
    return permuted(orders, perm)


@pytest.mark.parametrize("placement", ["linear", "interleaved", "vshape"])
@pytest.mark.parametrize("backward", ["split", "fused"])
def test_per_microbatch_schedules_in_any_microbatch_order_export_and_replay(placement, backward):
    problem = per_microbatch(family_problem(4, 8, placement, backward, "uneven"), MULT)
    assert problem.per_microbatch
    for perm in PERMS:
        schedule = make_schedule(problem, simulate(problem, _permuted_1f1b(problem, perm)), "permuted-1f1b")
        text = to_compute_comms_csv(schedule)
        _assert_placed(text, schedule)
        for row in parse_rows(text):  # each stage runs its forwards in the permuted order
            for stage in {a.stage for a in row}:
                assert [a.microbatch for a in row if a.kind == "F" and a.stage == stage] == perm


def test_per_microbatch_levers_share_is_of_their_own_microbatch(tmp_path):
    from ppsolve.problem import problem_from_dict
    problem = per_microbatch(problem_from_dict(_with_levers(family_problem(2, 8).to_dict())), MULT)
    problem = problem.replace(capacity=None)  # the levers here are placed by hand, not for a cap: export checks
    orders = _permuted_1f1b(problem, PERMS[0])
    pairs = [(s, j) for s in range(problem.num_stages) for j in range(problem.microbatches)]
    schedule = mixed_levers(problem, orders, {p for p in pairs if sum(p) % 3 == 0},
                            {p for p in pairs if sum(p) % 3 == 1})
    path, out = tmp_path / "s.json", tmp_path / "s.csv"
    schedule.save(path)
    assert main(["export", str(path), "--to", "torch", "-o", str(out)]) == 0
    _assert_placed(out.read_text(), schedule)
    side = json.loads(plan_path(out).read_text())
    offloads = [e for r in side["ranks"] for e in r["extra"] if e["kind"] == "OFFLOAD"]
    assert len(offloads) == sum(1 for p in pairs if sum(p) % 3 == 1 and p[0] < problem.num_stages)
    assert offloads and all(e["share"] == 1.0 for e in offloads)  # whole activations, of different sizes


INSTANCES = sorted((ROOT / "instances").glob("*.json"))


@pytest.mark.parametrize("path", INSTANCES, ids=[p.stem for p in INSTANCES])
def test_every_instance_schedule_is_accepted_by_pytorch(path):
    problem = load_problem(path)
    for method in all_methods("baseline"):
        if method.why_not(problem) is not None:
            continue
        schedule = method.run(problem, RunOptions(ignore_capacity=True))  # the order is what matters here
        _assert_placed(to_compute_comms_csv(schedule), schedule)


def test_replay_finds_a_hang_and_a_misordered_channel():
    # a ring (stages 0-5 on ranks 0, 1, 2, 0, 1, 2): rank 1 runs stage 4 before stage 1, whose
    # output is what stage 4's input comes from, two ranks around the ring
    hang = ("0F0,0SEND_F0,3RECV_F0,3F0,3SEND_F0\n"
            "1RECV_F0,4RECV_F0,4F0,4SEND_F0,1F0,1SEND_F0\n"
            "5RECV_F0,2RECV_F0,2F0,2SEND_F0,5F0\n")
    with pytest.raises(DeadlockError, match=r"rank 1 at action 2 \(4F0\) waits for 4RECV_F0 from rank 0"):
        replay(parse_rows(hang))
    # two activations on one channel, received in the other order than sent
    swapped = "0F0,0SEND_F0,0F1,0SEND_F1\n1RECV_F1,1RECV_F0,1F0,1F1\n"
    with pytest.raises(InputError, match="message 0 is 0SEND_F0 on rank 0 but 1RECV_F1 on rank 1"):
        replay(parse_rows(swapped))
    # a forward whose receive is never posted before it
    with pytest.raises(InputError, match=r"consumes 1RECV_F0"):
        replay(parse_rows("0F0,0SEND_F0\n1F0,1RECV_F0\n"))
