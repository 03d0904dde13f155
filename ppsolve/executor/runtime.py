"""One rank walking its action list, as SPEC.md's runtime section (contract version 2) says.

The list is the rank's ops in issue order (:func:`ppsolve.simulator.issue_order`: by planned
start, a transfer before a compute op that starts at the same time). An action starts once

- its data is there: F its input (received, or handed over directly when the previous stage
  is on this rank), B its output gradient and its RELOAD's copies, W its B, OFFLOAD its F,
  RELOAD its OFFLOAD's copies, R its F (the checkpoint; a B of a recomputed (s,j) its R);
- the action before it on its lane has ended;
- every action of this rank whose planned end is at or before its planned start has ended:
  :func:`ppsolve.simulator.device_waits`, the same definition the simulator re-times with,
  names them (per other lane, the last one in lane order).

Microbatch j's data and messages have its own sequence length where the problem gives one
(``x-microbatch-tokens``, :mod:`ppsolve.executor.tokens`).

Sends are asynchronous (``isend``); how receives are matched is the ``comm`` module's
business (tags up front on gloo, ordered channels on NCCL). The ``Device`` does the rest:

- CPU: one thread runs the list in order and transfers are synchronous copies at their
  place in it, so when an action starts every action before it in the list has ended;
  what ends by an action's planned start comes before it in the list, so the waits hold
  without doing anything (``mark`` and ``wait`` are no-ops).
- CUDA: compute runs on the compute stream, OFFLOAD on the d2h side stream, RELOAD on the
  h2d one (both on one stream when the link is half-duplex: one lane); a stream runs its
  lane in order. An event is recorded after every action, and before issuing an action
  its stream waits for the events of its ``device_waits``: a forward waits for the offload
  planned to free its memory, a transfer for the compute ops planned to end by its start,
  and for nothing planned to be still running then (an offload overlaps the next forward).
  Times are CUDA events there, read after the walk.
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
from ppsolve.executor.tokens import microbatch_lengths
from ppsolve.ops import OpKind
from ppsolve.problem import Problem
from ppsolve.schedule import Schedule, ScheduledOp, schedule_from_dict
from ppsolve.simulator import device_waits, issue_order


@dataclass
class Job:
    """Everything a rank needs, picklable: the schedule and model as dicts."""

    schedule: dict
    model: dict
    steps: int = 1
    check: bool = False
    runtime: str = "ppsolve"
    csv_text: str | None = None
    torch_plan: dict | None = None  # the torch runtime: the export's side file (ppsolve.export.torch_levers)
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
    waited: float = 0.0  # seconds from issue to ``start``: its input or gradient, and (CUDA) its waits


@dataclass
class RankResult:
    rank: int
    records: list[OpRecord] = field(default_factory=list)
    activation_bytes: dict[int, list[int]] = field(default_factory=dict)
    hold_bytes: dict[int, list[int]] = field(default_factory=dict)  # held from B to W (split backward)
    keep_bytes: dict[int, list[int]] = field(default_factory=dict)  # kept from F to R, recomputed microbatches
    peak: int = 0
    losses: dict[int, float] = field(default_factory=dict)
    grads: dict[str, torch.Tensor] = field(default_factory=dict)  # on the CPU
    device: str = "cpu"
    max_allocated: int | None = None  # torch.cuda.max_memory_allocated over the measured walk (CUDA)
    warmup_span: float | None = None  # seconds the first step took when it was a warm-up (steps > 1), not measured
    executed: list[str] = field(default_factory=list)  # torch runtime: the actions the rank ran in the last step


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
    built = models.build_stages(spec, S, keep=mine, blocks=spec.blocks_of_stages(S, problem.annotations))
    modules = {s: dev.place(m) for s, m in built.items()}
    ordered = (job.comm or ("ordered" if dev.backend == "nccl" else "tagged")) == "ordered"
    channels = Channels(schedule, rank, dev.device, job.timeout_s) if ordered else None
    result = RankResult(rank)
    lengths = microbatch_lengths(problem, spec)
    shapes = [models.boundary_shape(spec, lengths and lengths.shape_length(j)) for j in range(M)]
    data = ({j: models.microbatch(spec, j, lengths) for j in range(M)} if (0 in mine or S - 1 in mine) else {})
    for step in range(job.steps):
        for module in modules.values():
            module.zero_grad(set_to_none=True)
        walked = walk(schedule, rank, modules, models.loss_fn(spec), data, shapes, dev, timeout_s=job.timeout_s,
                      channels=channels, fail_at=job.fail_at)
        if step == 0 and job.steps > 1:
            first = max((r.end for r in walked.records), default=0.0)
        walked.warmup_span = first if job.steps > 1 else None
        result = walked
    if job.check:
        result.grads = parameter_grads(modules)
    return result


def walk(schedule: Schedule, rank: int, modules: dict[int, torch.nn.Module], loss_fn, data: dict,
         shapes: list[tuple[int, ...]], dev: Device, *, timeout_s: float, channels: Channels | None = None,
         contexts: dict[int, dict] | None = None, fail_at: tuple[int, int] | None = None) -> RankResult:
    """One iteration of ``schedule`` on this rank: its stage ``modules`` (stage -> module) run the
    forward and backward of every microbatch, adding the weight gradients to their ``.grad``.

    ``data``: microbatch -> (input, target), read by the first and last stages; ``shapes``: the
    shape of each microbatch's messages between stages; ``contexts``: microbatch -> keyword
    arguments of every stage's module (its document ids); ``channels``: NCCL's ordered channels
    (``comm``), else tagged messages."""
    problem = schedule.problem
    S, M = problem.num_stages, problem.microbatches
    params = [p for m in modules.values() for p in m.parameters()]
    ledger = SavedBytes(params)
    stages = {s: Stage(s, S, modules[s], loss_fn, M, ledger, dev) for s in sorted(modules)}
    comm = (OrderedComm(channels, problem.placement, shapes, dev.device, timeout_s) if channels is not None
            else TaggedComm(schedule, rank, stages, shapes, timeout_s))
    placed = {j: tuple(dev.place(t) for t in pair) for j, pair in data.items()}
    context = {j: {k: dev.place(v) for k, v in c.items()} for j, c in (contexts or {}).items()}
    actions, waits = rank_plan(schedule, rank)
    return _walk(rank, schedule, stages, ledger, actions, waits, comm, dev, placed, context, fail_at)


def rank_plan(schedule: Schedule, rank: int) -> tuple[list[ScheduledOp], list[list[int]]]:
    """The rank's actions in issue order, and for each the indices of the earlier actions whose
    events it waits for (contract version 2: :func:`ppsolve.simulator.device_waits`)."""
    actions = issue_order(schedule.problem, schedule.ops_of_device(rank))
    return actions, device_waits(schedule.problem, actions)


def lane_name(problem: Problem, kind: OpKind) -> str:
    """The ``Device`` lane an action of ``kind`` runs on: ``compute``, or the host link's ``d2h``
    (OFFLOAD) and ``h2d`` (RELOAD) lanes; a half-duplex link is one lane, ``d2h``."""
    if kind.is_compute:
        return "compute"
    if kind is OpKind.OFFLOAD:
        return "d2h"
    if kind is OpKind.RELOAD:
        return "h2d" if problem.offload.duplex else "d2h"
    raise ValueError(f"no lane for op kind {kind!r}")


def _walk(rank: int, schedule: Schedule, stages: dict[int, Stage], ledger: SavedBytes, actions: list[ScheduledOp],
          waits: list[list[int]], comm, dev: Device, data: dict, contexts: dict, fail_at) -> RankResult:
    problem = schedule.problem
    S, M, place = problem.num_stages, problem.microbatches, problem.placement
    recomputed = {(s, j) for s, js in schedule.recomputed_by_stage().items() if s in stages for j in js}
    local: dict[tuple[int, int, int], torch.Tensor] = {}
    result = RankResult(rank, device=dev.kind)
    events = []  # the device event after each action (None on CPU)
    stamps = []
    dist.barrier()
    dev.begin()
    peak = 0
    for index, op in enumerate(actions):
        if fail_at is not None and fail_at == (rank, index):
            raise RuntimeError(f"injected failure at action {index} ({op.op})")
        s, j, kind = op.stage, op.microbatch, op.kind
        stage = stages[s]
        moved = 0
        with dev.lane(lane_name(problem, kind)):
            issued = dev.stamp()
            for u in waits[index]:
                dev.wait(events[u])
            if kind is OpKind.F:
                x = data[j][0] if s == 0 else (local.pop((FWD, s, j)) if place[s - 1] == rank
                                              else comm.wait_recv(FWD, s, j))
                start = dev.stamp()
                out = stage.forward(j, x, data[j][1] if s == S - 1 else None, recompute=(s, j) in recomputed,
                                    context=contexts.get(j))
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
                start = dev.stamp()
                stage.backward_weight(j)
            elif kind is OpKind.R:
                start = dev.stamp()  # its F is among the waits: planned to end by this start
                stage.recompute(j)
            elif kind is OpKind.OFFLOAD:
                start = dev.stamp()  # its F is among the waits: planned to end by this start
                act = problem.activation.at(s, j)
                moved = stage.offload(j, op.amount / act if act > 0 else 1.0)
            elif kind is OpKind.RELOAD:
                dev.wait(stage.copied(j))  # its OFFLOAD's copies
                start = dev.stamp()
                moved = stage.reload(j)
            else:
                raise ValueError(f"the executor cannot run op kind {kind!r}")
            end = dev.stamp()
            events.append(dev.mark())
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
        if stage.pending or stage.checkpoints:
            raise RuntimeError(f"stage {s}: microbatches {sorted(set(stage.pending) | set(stage.checkpoints))} "
                               "never finished their backward")
        result.activation_bytes[s] = [stage.bytes_of[j] for j in range(M)]
        result.hold_bytes[s] = [stage.hold_of.get(j, 0) for j in range(M)]
        result.keep_bytes[s] = [stage.keep_of[j] for j in sorted(stage.keep_of)]
        result.losses.update({j: float(loss) for j, loss in stage.losses.items()})
    return result


def _pass(comm, local: dict, direction: int, stage: int, j: int, tensor: torch.Tensor,
          dst: int, rank: int) -> None:
    """Hand a tensor to ``stage``: directly on this rank, else an asynchronous send."""
    if dst == rank:
        local[(direction, stage, j)] = tensor
    else:
        comm.send(direction, stage, j, tensor, dst)
