"""One rank walking its action list, as SPEC.md's runtime section says.

The list is the rank's ops sorted by planned start (a transfer before a compute op
that starts at the same time). F waits for its input (received, or handed over
directly when the previous stage is on this rank), B for its output gradient and
its RELOAD, W for its B. Sends are asynchronous (``isend``); how receives are
matched is the ``comm`` module's business (tags up front on gloo, ordered channels
on NCCL). The ``Device`` does the rest: on CPU transfers are synchronous copies at
their place in the list; on CUDA an OFFLOAD (RELOAD) runs on the d2h (h2d) side
stream after waiting for an event recorded after the compute op just before it in
the list (a RELOAD also for its OFFLOAD's copies), and a B's stream waits for its
RELOAD's event. Times are CUDA events there, read after the walk.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from ppsolve.executor import models
from ppsolve.executor.comm import BWD, FWD, Channels, OrderedComm, TaggedComm
from ppsolve.executor.device import Device, make_device
from ppsolve.executor.spec import ModelSpec, model_from_dict
from ppsolve.executor.stage import SavedBytes, Stage
from ppsolve.ops import OpKind
from ppsolve.schedule import Schedule, schedule_from_dict


@dataclass
class Job:
    """Everything a rank needs, picklable: the schedule and model as dicts."""

    schedule: dict
    model: dict
    steps: int = 1
    check: bool = False
    runtime: str = "ppsolve"
    csv_text: str | None = None
    timeout_s: float = 120.0
    fail_at: tuple[int, int] | None = None  # (rank, action index): testing hook for the failure path
    micro_batch_size: int | None = None
    device: str = "cpu"  # "cpu" or "cuda", chosen before launch (``device.select_device``)
    comm: str | None = None  # "tagged" or "ordered"; None: what the backend needs (testing hook)

    def load(self) -> tuple[Schedule, ModelSpec]:
        spec = model_from_dict(self.model).with_micro_batch_size(self.micro_batch_size)
        return schedule_from_dict(self.schedule), spec


@dataclass
class OpRecord:
    op: str
    kind: str
    stage: int
    microbatch: int
    start: float
    end: float
    held: int
    moved: int = 0
    waited: float = 0.0  # seconds spent waiting for the input or gradient before ``start``


@dataclass
class RankResult:
    rank: int
    records: list[OpRecord] = field(default_factory=list)
    activation_bytes: dict[int, list[int]] = field(default_factory=dict)
    hold_bytes: dict[int, list[int]] = field(default_factory=dict)  # held from B to W (split backward)
    peak: int = 0
    losses: dict[int, float] = field(default_factory=dict)
    grads: dict[str, torch.Tensor] = field(default_factory=dict)  # on the CPU
    device: str = "cpu"
    max_allocated: int | None = None  # torch.cuda.max_memory_allocated over the measured walk (CUDA)
    warmup_span: float | None = None  # seconds the first step took when it was a warm-up (steps > 1), not measured


def parameter_grads(modules: dict) -> dict[str, torch.Tensor]:
    """Every parameter gradient of a rank's stage modules, copied to the CPU, by parameter name."""
    return {name: p.grad.detach().cpu().clone()
            for module in modules.values() for name, p in module.named_parameters() if p.grad is not None}


def run_rank(job: Job, rank: int, device: Device | None = None) -> RankResult:
    """Build this rank's stages and run ``job.steps`` iterations; the last one is recorded."""
    schedule, spec = job.load()
    dev = device or make_device(job.device)
    problem = schedule.problem
    S, M = problem.num_stages, problem.microbatches
    mine = set(problem.stages_of_device[rank])
    modules = {s: dev.place(m) for s, m in models.build_stages(spec, S, keep=mine).items()}
    params = [p for m in modules.values() for p in m.parameters()]
    ordered = (job.comm or ("ordered" if dev.backend == "nccl" else "tagged")) == "ordered"
    channels = Channels(schedule, rank, dev.device, job.timeout_s) if ordered else None
    result = RankResult(rank)
    actions = schedule.ops_of_device(rank)
    for step in range(job.steps):
        for p in params:
            p.grad = None
        ledger = SavedBytes(params)
        stages = {s: Stage(s, S, modules[s], models.loss_fn(spec), M, ledger, dev) for s in sorted(mine)}
        shape = models.boundary_shape(spec)
        comm = (OrderedComm(channels, problem.placement, shape, dev.device, job.timeout_s) if ordered
                else TaggedComm(schedule, rank, stages, shape, job.timeout_s))
        walked = _walk(job, rank, schedule, spec, stages, ledger, actions, comm, dev)
        if step == 0 and job.steps > 1:
            first = max((r.end for r in walked.records), default=0.0)
        walked.warmup_span = first if job.steps > 1 else None
        result = walked
    if job.check:
        result.grads = parameter_grads(modules)
    return result


_LANE = {OpKind.OFFLOAD: "d2h", OpKind.RELOAD: "h2d"}


def _walk(job: Job, rank: int, schedule: Schedule, spec: ModelSpec, stages: dict[int, Stage],
          ledger: SavedBytes, actions, comm, dev: Device) -> RankResult:
    problem = schedule.problem
    S, M, place = problem.num_stages, problem.microbatches, problem.placement
    data = ({j: tuple(dev.place(t) for t in models.microbatch(spec, j)) for j in range(M)}
            if (0 in stages or S - 1 in stages) else {})
    local: dict[tuple[int, int, int], torch.Tensor] = {}
    result = RankResult(rank, device=dev.kind)
    stamps = []
    dist.barrier()
    dev.begin()
    peak = 0
    after_compute = None  # event after the last compute op issued (CUDA)
    for index, op in enumerate(actions):
        if job.fail_at is not None and job.fail_at == (rank, index):
            raise RuntimeError(f"injected failure at action {index} ({op.op})")
        s, j, kind = op.stage, op.microbatch, op.kind
        stage = stages[s]
        moved = 0
        with dev.lane(_LANE.get(kind, "compute")):
            issued = start = dev.stamp()
            if kind is OpKind.F:
                x = data[j][0] if s == 0 else (local.pop((FWD, s, j)) if place[s - 1] == rank
                                              else comm.wait_recv(FWD, s, j))
                start = dev.stamp()
                out = stage.forward(j, x, data[j][1] if s == S - 1 else None)
                if out is not None:
                    _pass(comm, local, FWD, s + 1, j, out, place[s + 1], rank)
            elif kind is OpKind.B:
                grad = None if s == S - 1 else (local.pop((BWD, s, j)) if place[s + 1] == rank
                                                else comm.wait_recv(BWD, s, j))
                dev.wait(stage.copied(j))  # its RELOAD's copies
                start = dev.stamp()
                grad_in = (stage.backward_input(j, grad) if problem.split_backward
                           else stage.backward_full(j, grad))
                if s > 0:
                    _pass(comm, local, BWD, s - 1, j, grad_in, place[s - 1], rank)
            elif kind is OpKind.W:
                stage.backward_weight(j)
            else:
                dev.wait(after_compute)  # the compute op just before this transfer in the list
                if kind is OpKind.RELOAD:
                    dev.wait(stage.copied(j))  # its OFFLOAD's copies
                start = dev.stamp()
                if kind is OpKind.OFFLOAD:
                    act = problem.activation[s]
                    moved = stage.offload(j, op.amount / act if act > 0 else 1.0)
                else:
                    moved = stage.reload(j)
            end = dev.stamp()
        if kind.is_compute:
            after_compute = dev.mark()
        peak = max(peak, ledger.held)
        stamps.append((op, issued, start, end, ledger.held, moved))
    comm.finish()
    dev.synchronize()
    for op, issued, start, end, held, moved in stamps:
        begin = dev.seconds(start)
        result.records.append(OpRecord(str(op.op), op.kind.value, op.stage, op.microbatch, begin,
                                       dev.seconds(end), held, moved, begin - dev.seconds(issued)))
    result.peak = peak
    result.max_allocated = dev.max_allocated()
    for s, stage in stages.items():
        if stage.pending:
            raise RuntimeError(f"stage {s}: microbatches {sorted(stage.pending)} never finished their backward")
        result.activation_bytes[s] = [stage.bytes_of[j] for j in range(M)]
        result.hold_bytes[s] = [stage.hold_of.get(j, 0) for j in range(M)]
        result.losses.update({j: float(loss) for j, loss in stage.losses.items()})
    return result


def _pass(comm, local: dict, direction: int, stage: int, j: int, tensor: torch.Tensor,
          dst: int, rank: int) -> None:
    """Hand a tensor to ``stage``: directly on this rank, else an asynchronous send."""
    if dst == rank:
        local[(direction, stage, j)] = tensor
    else:
        comm.send(direction, stage, j, tensor, dst)
