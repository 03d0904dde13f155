"""The side file of a torch export (``<out>.plan.json``): what PyTorch's runtime has no action for.

``_PipelineScheduleRuntime`` runs F, I, B and W; a ppsolve plan may also offload
activations to host memory and back (OFFLOAD, RELOAD) and recompute them (R).
This file lists, per rank, each such action with the compute action it follows
(``after``) and the one it precedes (``before``) in the rank's planned order;
:func:`ppsolve.executor.torch_plan.attach` issues them at the start of the
``before`` action, after the sends and receives the CSV puts between the two.

Format ``ppsolve/torch-plan@1``::

    {"format": "ppsolve/torch-plan@1", "devices": 2, "stages": 2, "microbatches": 4,
     "backward": "split", "recomputed": [[0, 1]],
     "ranks": [{"rank": 0,
                "extra": [{"action": "0OFFLOAD2", "kind": "OFFLOAD", "stage": 0, "microbatch": 2,
                           "share": 1.0, "lane": "d2h", "after": "0F2", "before": "0F3",
                           "waits": ["0F2"]}, ...],
                "waits": {"0F3": ["0OFFLOAD2"]}}, ...]}

``share`` is the planned amount over the activation of that stage and microbatch (OFFLOAD); ``lane`` the
host-link lane (``d2h``; ``h2d`` for RELOAD, ``d2h`` on a half-duplex link) or
``compute`` (R); ``waits`` (contract version 2, :func:`ppsolve.simulator.device_waits`)
the actions of the rank on other lanes that must have ended first, for extra actions
and, under ``ranks[].waits``, for compute actions. Labels are ``<stage><kind><mb>``.
"""

from __future__ import annotations

from ppsolve.export.torch_comms import torch_action
from ppsolve.ops import OpKind
from ppsolve.schedule import Schedule, ScheduledOp
from ppsolve.simulator import device_waits, issue_order

FORMAT = "ppsolve/torch-plan@1"


def label(op: ScheduledOp, split: bool) -> str:
    """The op as a torch action string (F, I, B, W) or ``<stage><R|OFFLOAD|RELOAD><mb>``."""
    if op.kind in (OpKind.F, OpKind.B, OpKind.W):
        return torch_action(op.kind, op.stage, op.microbatch, split)
    return f"{op.stage}{op.kind.value}{op.microbatch}"


def lane_of(schedule: Schedule, kind: OpKind) -> str:
    """``compute`` for R; the host-link lane of a transfer (one lane, ``d2h``, on a half-duplex link)."""
    if kind.is_compute:
        return "compute"
    if kind is OpKind.RELOAD and schedule.problem.offload.duplex:
        return "h2d"
    return "d2h"


def side_plan(schedule: Schedule) -> dict:
    """The side file's content (also for a schedule without extra actions: empty lists)."""
    problem = schedule.problem
    split = problem.split_backward
    ranks = []
    for device in range(problem.devices):
        issued = issue_order(problem, schedule.ops_of_device(device))
        waits = device_waits(problem, issued)
        labels = [label(op, split) for op in issued]
        torch_ops = [i for i, op in enumerate(issued) if op.kind in (OpKind.F, OpKind.B, OpKind.W)]
        extra, compute_waits = [], {}
        for i, op in enumerate(issued):
            waited = [labels[u] for u in waits[i]]
            if i in torch_ops:
                if waited:
                    compute_waits[labels[i]] = waited
                continue
            before = next((labels[k] for k in torch_ops if k > i), None)
            after = next((labels[k] for k in reversed(torch_ops) if k < i), None)
            entry = {"action": labels[i], "kind": op.kind.value, "stage": op.stage, "microbatch": op.microbatch}
            if op.kind is OpKind.OFFLOAD:
                act = problem.activation.at(op.stage, op.microbatch)
                entry["share"] = op.amount / act if act > 0 else 1.0
            entry.update({"lane": lane_of(schedule, op.kind), "after": after, "before": before, "waits": waited})
            extra.append(entry)
        ranks.append({"rank": device, "extra": extra, "waits": compute_waits})
    recomputed = sorted((op.stage, op.microbatch) for op in schedule.ops if op.kind is OpKind.R)
    return {"format": FORMAT, "devices": problem.devices, "stages": problem.num_stages,
            "microbatches": problem.microbatches, "backward": problem.backward_mode,
            "recomputed": [list(x) for x in recomputed], "ranks": ranks}


def has_extra(plan: dict) -> bool:
    return any(rank["extra"] for rank in plan["ranks"])
