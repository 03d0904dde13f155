"""The same schedule through PyTorch's own pipeline runtime, from the exported CSV and side plan.

Each rank wraps its stage modules in ``PipelineStage`` (global stage numbers),
builds a ``_PipelineScheduleRuntime`` with the model's loss (``scale_grads=True``:
gradients are averaged over microbatches, as in the reference), loads the
exported compute_comms CSV's text in memory (ppsolve's sends and receives), attaches the side
file's offloads and recomputes (:func:`ppsolve.executor.torch_plan.attach`) and
runs ``steps`` steps. Every step, the actions the rank ran (its compute actions,
sends, receives and gradient reductions, and the side file's actions, logged as
they run) must be the CSV's row with the side file's actions where the plan puts
them; a difference fails the rank. The activation bytes are the adapter's (its
saved-tensors hooks), reported as ppsolve's own runtime reports them.
Microbatches of different lengths (``x-microbatch-tokens``) run padded to the
problem's ``x-token-budget`` (:mod:`ppsolve.executor.tokens`): one shape for every
microbatch, the padding left out of the loss.
Quirk of that runtime (torch 2.13): stage 0's I is a no-op and its W runs the
whole backward. When an action fails, that runtime logs its whole schedule (thousands of
lines for a large plan): the log goes to a file, ``ppsolve-torch-rank<r>-*.log`` in the
temporary folder, which the rank's one-line error names. A rank that holds no stage runs
nothing.
"""

from __future__ import annotations

import logging
import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

from ppsolve.executor import models
from ppsolve.executor.device import CpuDevice, Device
from ppsolve.executor.runtime import Job, OpRecord, RankResult, parameter_grads
from ppsolve.executor.tokens import microbatch_lengths
from ppsolve.executor.torch_plan import COMPUTE_KINDS, PlanRun, attach, load_actions

_LOGGED = {"get_fwd_send_ops": "SEND_F", "get_bwd_send_ops": "SEND_B",
           "get_fwd_recv_ops": "RECV_F", "get_bwd_recv_ops": "RECV_B"}


def run_rank_torch(job: Job, rank: int, device: Device | None = None) -> RankResult:
    dev = device or CpuDevice()
    schedule, spec = job.load()
    problem = schedule.problem
    S, M = problem.num_stages, problem.microbatches
    mine = sorted(problem.stages_of_device[rank])
    if not mine:
        return RankResult(rank, device=dev.kind)
    built = models.build_stages(spec, S, keep=set(mine), blocks=spec.blocks_of_stages(S, problem.annotations))
    modules = {s: dev.place(m) for s, m in built.items()}
    pipe = pipeline(modules, S, M, models.loss_fn(spec), job.csv_text, job.torch_plan, dev, rank)
    if job.fail_at is not None and job.fail_at[0] == rank:
        _fail_at(pipe.runtime, pipe.plan, job.fail_at[1])
    lengths = microbatch_lengths(problem, spec)  # with tokens: padded to the budget, one shape (api.prepare)
    batches = [models.microbatch(spec, j, lengths) for j in range(M)]
    inputs = dev.place(torch.cat([x for x, _ in batches]))
    targets = dev.place(torch.cat([t for _, t in batches]))
    for _ in range(job.steps):
        for module in modules.values():
            module.zero_grad(set_to_none=True)
        pipe.step(inputs, targets)
    dev.synchronize()
    return measured(RankResult(rank, device=dev.kind), pipe.plan, pipe.plan.log,
                    parameter_grads(modules) if job.check else None)


@dataclass
class Pipeline:
    """PyTorch's runtime running one schedule on this rank, its custom functions (``plan``, whose
    ``log`` lists what the rank ran) and the actions the exported CSV and side plan say it runs."""

    runtime: _PipelineScheduleRuntime
    plan: PlanRun
    rank: int
    expected: list[str]
    has_first: bool
    has_last: bool

    def step(self, inputs: torch.Tensor, targets: torch.Tensor, **kwargs) -> None:
        """One step: ``inputs`` and ``targets`` are every microbatch's, concatenated along dim 0 (read by
        the first and last stages); ``kwargs`` go to every stage's module, split the same way. The actions
        the rank ran must be the expected ones, or it raises."""
        log = self.plan.log
        log.clear()
        losses: list = []
        with runtime_log(self.rank):
            self.runtime.step(*((inputs,) if self.has_first else ()),
                              **({"target": targets, "losses": losses} if self.has_last else {}), **kwargs)
        if log != self.expected:
            expected = self.expected
            at = next((i for i, (a, b) in enumerate(zip(log, expected)) if a != b), min(len(log), len(expected)))
            raise RuntimeError(f"rank {self.rank} ran {log[at] if at < len(log) else 'nothing'} at action {at}, the "
                               f"exported files say {expected[at] if at < len(expected) else 'nothing'}")


def pipeline(modules: dict, num_stages: int, microbatches: int, loss_fn, csv_text: str, side: dict | None,
             dev: Device, rank: int) -> Pipeline:
    """PyTorch's runtime for this rank's stage ``modules`` (stage -> module, global stage numbers), with
    the exported compute_comms CSV's text and side plan (offload, recompute) handed over in memory."""
    stages = [PipelineStage(modules[s], s, num_stages, dev.device) for s in sorted(modules)]
    runtime = _PipelineScheduleRuntime(stages, n_microbatches=microbatches, loss_fn=loss_fn, scale_grads=True)
    load_actions(runtime, csv_text)
    plan = attach(runtime, side, dev)
    plan.log = []
    for stage in stages:
        _log_comms(stage, plan.log)
    expected = expected_log(csv_text.splitlines()[rank].split(","), side, rank)
    return Pipeline(runtime, plan, rank, expected, 0 in modules, num_stages - 1 in modules)


def measured(result: RankResult, plan, executed: list[str], grads: dict | None) -> RankResult:
    """``result`` filled with what the plan's custom functions measured in the last step."""
    result.losses = {j: float(loss.detach()) for j, loss in plan.losses.items()}
    result.records = [OpRecord(r.action, r.kind, r.stage, r.microbatch, plan.seconds(r.start), plan.seconds(r.end),
                               r.held, r.moved) for r in plan.records]
    result.peak = plan.peak
    result.activation_bytes = plan.bytes_by_stage("activation_bytes")
    result.hold_bytes = plan.bytes_by_stage("hold_bytes")
    result.keep_bytes = plan.bytes_by_stage("keep_bytes")
    result.executed = list(executed)
    if grads is not None:
        result.grads = grads
    return result


@contextmanager
def runtime_log(rank: int):
    """PyTorch's pipelining runtime logging into a file, not to stderr; a failure inside names it."""
    logger = logging.getLogger(_PipelineScheduleRuntime.__module__)
    handle, path = tempfile.mkstemp(prefix=f"ppsolve-torch-rank{rank}-", suffix=".log")
    os.close(handle)
    handler = logging.FileHandler(path)
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    failed = False
    try:
        yield
    except Exception as exc:
        failed = True
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise RuntimeError(f"{type(exc).__name__}: {first} (PyTorch's runtime logged its schedule to {path})") from exc
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
        handler.close()
        if not failed:
            os.unlink(path)


def expected_log(row: list[str], side: dict | None, rank: int) -> list[str]:
    """The CSV row with the side file's actions before the compute action they precede."""
    before: dict[str, list[str]] = {}
    for entry in next((r["extra"] for r in (side or {}).get("ranks", []) if r["rank"] == rank), []):
        before.setdefault(entry["before"], []).append(entry["action"])
    out = []
    for action in row:
        out += before.get(action, [])
        out.append(action)
    return out


def _fail_at(runtime, plan, index: int) -> None:
    """Testing hook: the rank's compute action ``index`` (counted over the run) raises."""
    calls = iter(range(10**9))

    def failing(action, ctx):
        if next(calls) == index:
            raise RuntimeError(f"injected failure at action {index} ({action})")
        plan.run(action, ctx)

    for kind in COMPUTE_KINDS:
        runtime.register_custom_function(kind, failing)


def _log_comms(stage, log: list) -> None:
    """Log each send and receive the runtime posts for ``stage``, and its gradient reduction."""
    for name, kind in _LOGGED.items():
        method = getattr(stage, name)

        def logged(mb, _method=method, _kind=kind):
            log.append(f"{stage.stage_index}{_kind}{mb}")
            return _method(mb)

        setattr(stage, name, logged)
    reduce = stage.perform_reduce_grad

    def reduced(factor, _reduce=reduce):
        log.append(f"{stage.stage_index}REDUCE_GRAD")
        return _reduce(factor)

    stage.perform_reduce_grad = reduced
