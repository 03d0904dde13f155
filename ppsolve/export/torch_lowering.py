"""What PyTorch makes of a compute_only CSV, and whether the plan's timing survives it.

``_PipelineScheduleRuntime._load_csv(path)`` (torch 2.13; what torchtitan's
``pipeline_parallel_schedule_csv`` calls) places the sends and receives itself:
``_add_unshard_reshard`` and ``_add_reduce_grad`` per rank, then ``_add_send_recv``, which
walks the ranks round-robin, one compute action per rank per round, and appends each
receive to the receiving rank's row as soon as the sender reaches the send. The
messages two ranks exchange are therefore ordered by that walk, not by the plan's
times; on a FIFO channel (gloo, NCCL's per-pair stream) a message planned early can
wait behind one planned late (head-of-line blocking, pytorch/pytorch#172668, #188833).

:func:`pytorch_rows` runs PyTorch's own lowering functions (torch is imported here
only, when installed); :func:`timing` replays both that lowering and ppsolve's own
placement (:mod:`ppsolve.export.torch_comms`) with the plan's durations
(:func:`ppsolve.export.torch_replay.replay_times`). The replay times the compute lane:
an R (recompute) runs at the start of the action the side file puts it before, before
that action waits for its input (as :mod:`ppsolve.executor.torch_plan` runs it); offloads
and reloads run on their own lanes and are not replayed.
"""

from __future__ import annotations

from dataclasses import dataclass

from ppsolve.export.torch_comms import compute_comms_rows, torch_action
from ppsolve.export.torch_csv import compute_only_rows
from ppsolve.export.torch_levers import side_plan
from ppsolve.export.torch_replay import Action, parse_rows, replay_times
from ppsolve.ops import OpKind
from ppsolve.schedule import Schedule

def pytorch_rows(compute_rows: list[list[str]], placement: tuple[int, ...], microbatches: int) -> list[list[str]]:
    """PyTorch's lowering of compute-only rows, as ``_prepare_schedule_with_comms`` does it
    (without ``defer_pp_recv``); ImportError without torch."""
    from torch.distributed.pipelining import schedules as pt

    actions = {rank: [pt._Action.from_str(a) for a in row] for rank, row in enumerate(compute_rows)}
    lowered = {rank: pt._add_reduce_grad(pt._add_unshard_reshard(row), microbatches) for rank, row in actions.items()}
    lowered = pt._add_send_recv(lowered, stage_to_rank=lambda s: placement[s], num_stages=len(placement))
    return [[str(a) for a in lowered[rank]] for rank in range(len(compute_rows))]


@dataclass(frozen=True)
class Timing:
    """Makespans of one plan: as planned, replayed with ppsolve's placement of the sends and
    receives, and replayed with PyTorch's (None when torch is not installed)."""

    planned: float
    ppsolve: float
    pytorch: float | None

    @property
    def delayed(self) -> bool:
        """PyTorch's placement ends later than the plan."""
        return self.pytorch is not None and self.pytorch > self.planned * (1 + 1e-9) + 1e-12


def durations(schedule: Schedule):
    """``(duration, lead)`` for the replay: ``duration(rank, action)`` the planned duration of a
    compute action (0 for anything else), ``lead(rank, action)`` that of the R ops the side file
    puts before it (they run at its start, before it waits for its input)."""
    split = schedule.problem.split_backward
    table: dict[tuple[int, str], float] = {}
    for op in schedule.ops:
        if op.kind in (OpKind.F, OpKind.B, OpKind.W):
            table[(op.device, torch_action(op.kind, op.stage, op.microbatch, split))] = op.duration
    recompute = {(op.device, op.stage, op.microbatch): op.duration for op in schedule.ops if op.kind is OpKind.R}
    leads: dict[tuple[int, str], float] = {}
    for rank in side_plan(schedule)["ranks"]:
        for entry in rank["extra"]:
            if entry["kind"] == "R" and entry["before"] is not None:
                key = (rank["rank"], entry["before"])
                leads[key] = leads.get(key, 0.0) + recompute[(rank["rank"], entry["stage"], entry["microbatch"])]

    def duration(rank: int, action: Action) -> float:
        return table.get((rank, str(action)), 0.0)

    def lead(rank: int, action: Action) -> float:
        return leads.get((rank, str(action)), 0.0)

    return duration, lead


def timing(schedule: Schedule) -> Timing:
    """Planned makespan against the replays of both placements (see the module docstring)."""
    problem = schedule.problem
    duration, lead = durations(schedule)
    def makespan(rows: list[list[str]]) -> float:
        return max(replay_times(parse_rows("\n".join(",".join(r) for r in rows)), duration, problem.latency, lead=lead))

    ours = makespan(compute_comms_rows(schedule))
    try:
        theirs = pytorch_rows(compute_only_rows(schedule), problem.placement, problem.microbatches)
    except ImportError:
        return Timing(schedule.makespan, ours, None)
    return Timing(schedule.makespan, ours, makespan(theirs))
