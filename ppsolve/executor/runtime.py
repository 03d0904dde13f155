"""One rank walking its action list, as SPEC.md's runtime section says.

The list is the rank's ops sorted by planned start (a transfer before a compute op
that starts at the same time). F waits for its input (received, or handed over
directly when the previous stage is on this rank), B for its output gradient and
its RELOAD, W for its B. Sends are asynchronous (``isend``); every receive is
posted up front with a tag naming (direction, stage, microbatch), so no order of
the lists can block on a receive that was not posted. Transfers are synchronous
copies here (CPU), run at their place in the list.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist

from ppsolve.executor import models
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
    grads: dict[str, torch.Tensor] = field(default_factory=dict)


class Comm:
    """Tagged asynchronous point-to-point messages between the stages of different ranks."""

    def __init__(self, num_stages: int, microbatches: int, timeout_s: float):
        self.num_stages, self.microbatches = num_stages, microbatches
        self.timeout = timedelta(seconds=timeout_s)
        self.recvs: dict[tuple[int, int, int], tuple[torch.Tensor, object]] = {}
        self.sends: list[object] = []

    def tag(self, direction: int, stage: int, j: int) -> int:
        return (direction * self.num_stages + stage) * self.microbatches + j

    def post_recv(self, direction: int, stage: int, j: int, src: int, shape: tuple[int, ...]) -> None:
        buf = torch.empty(shape)
        self.recvs[(direction, stage, j)] = (buf, dist.irecv(buf, src=src, tag=self.tag(direction, stage, j)))

    def wait_recv(self, direction: int, stage: int, j: int) -> torch.Tensor:
        buf, work = self.recvs.pop((direction, stage, j))
        work.wait(self.timeout)
        return buf

    def send(self, direction: int, stage: int, j: int, tensor: torch.Tensor, dst: int) -> None:
        self.sends.append(dist.isend(tensor.contiguous(), dst=dst, tag=self.tag(direction, stage, j)))

    def finish(self) -> None:
        for work in self.sends:
            work.wait(self.timeout)
        self.sends.clear()


FWD, BWD = 0, 1  # directions: activation into stage s, gradient into stage s


def run_rank(job: Job, rank: int) -> RankResult:
    """Build this rank's stages and run ``job.steps`` iterations; the last one is recorded."""
    schedule, spec = job.load()
    problem = schedule.problem
    S, M = problem.num_stages, problem.microbatches
    mine = set(problem.stages_of_device[rank])
    modules = models.build_stages(spec, S, keep=mine)
    params = [p for m in modules.values() for p in m.parameters()]
    result = RankResult(rank)
    actions = schedule.ops_of_device(rank)
    for step in range(job.steps):
        for p in params:
            p.grad = None
        ledger = SavedBytes(params)
        stages = {s: Stage(s, S, modules[s], models.loss_fn(spec), M, ledger) for s in sorted(mine)}
        result = _walk(job, rank, schedule, spec, stages, ledger, actions)
    if job.check:
        for module in modules.values():
            for name, p in module.named_parameters():
                if p.grad is not None:
                    result.grads[name] = p.grad.detach().clone()
    return result


def _walk(job: Job, rank: int, schedule: Schedule, spec: ModelSpec, stages: dict[int, Stage],
          ledger: SavedBytes, actions) -> RankResult:
    problem = schedule.problem
    S, M, place = problem.num_stages, problem.microbatches, problem.placement
    comm = Comm(S, M, job.timeout_s)
    shape = models.boundary_shape(spec)
    for s in stages:
        for j in range(M):
            if s > 0 and place[s - 1] != rank:
                comm.post_recv(FWD, s, j, place[s - 1], shape)
            if s < S - 1 and place[s + 1] != rank:
                comm.post_recv(BWD, s, j, place[s + 1], shape)
    data = {j: models.microbatch(spec, j) for j in range(M)} if (0 in stages or S - 1 in stages) else {}
    local: dict[tuple[int, int, int], torch.Tensor] = {}
    result = RankResult(rank)
    dist.barrier()
    t0 = time.perf_counter()
    peak = 0
    for index, op in enumerate(actions):
        if job.fail_at is not None and job.fail_at == (rank, index):
            raise RuntimeError(f"injected failure at action {index} ({op.op})")
        s, j, kind = op.stage, op.microbatch, op.kind
        stage = stages[s]
        issued = start = time.perf_counter() - t0
        moved = 0
        if kind is OpKind.F:
            x = data[j][0] if s == 0 else (local.pop((FWD, s, j)) if place[s - 1] == rank
                                          else comm.wait_recv(FWD, s, j))
            start = time.perf_counter() - t0
            out = stage.forward(j, x, data[j][1] if s == S - 1 else None)
            if out is not None:
                _pass(comm, local, FWD, s + 1, j, out, place[s + 1], rank)
        elif kind is OpKind.B:
            grad = None if s == S - 1 else (local.pop((BWD, s, j)) if place[s + 1] == rank
                                            else comm.wait_recv(BWD, s, j))
            start = time.perf_counter() - t0
            grad_in = (stage.backward_input(j, grad) if problem.split_backward
                       else stage.backward_full(j, grad))
            if s > 0:
                _pass(comm, local, BWD, s - 1, j, grad_in, place[s - 1], rank)
        elif kind is OpKind.W:
            stage.backward_weight(j)
        elif kind is OpKind.OFFLOAD:
            act = problem.activation[s]
            moved = stage.offload(j, op.amount / act if act > 0 else 1.0)
        else:
            moved = stage.reload(j)
        end = time.perf_counter() - t0
        peak = max(peak, ledger.held)
        result.records.append(OpRecord(str(op.op), kind.value, s, j, start, end, ledger.held, moved,
                                       start - issued))
    comm.finish()
    result.peak = peak
    for s, stage in stages.items():
        if stage.pending:
            raise RuntimeError(f"stage {s}: microbatches {sorted(stage.pending)} never finished their backward")
        result.activation_bytes[s] = [stage.bytes_of[j] for j in range(M)]
        result.hold_bytes[s] = [stage.hold_of.get(j, 0) for j in range(M)]
        result.losses.update(stage.losses)
    return result


def _pass(comm: Comm, local: dict, direction: int, stage: int, j: int, tensor: torch.Tensor,
          dst: int, rank: int) -> None:
    """Hand a tensor to ``stage``: directly on this rank, else an asynchronous send."""
    if dst == rank:
        local[(direction, stage, j)] = tensor
    else:
        comm.send(direction, stage, j, tensor, dst)
