"""``execute``: check the inputs, run a schedule on real processes, measure, compare.

Everything that can be refused is refused here, before any process starts: a
schedule that is not valid, a model whose layers cannot be cut into the stages,
a launch whose rank count is not the schedule's devices, ``device="cuda"`` where
CUDA is not there (one GPU per local rank). The torch runtime gets the exported
compute_comms CSV and its side file (offload, recompute); the torchtitan runtime
the compute-only CSV and the side file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ppsolve.checker import check
from ppsolve.errors import InputError
from ppsolve.executor.device import select_device
from ppsolve.executor.launch import in_torchrun, launch, local_ranks, run_in_torchrun
from ppsolve.executor.report import ActivationComparison, RankFigures, activation_comparison, figures
from ppsolve.executor.reference import Comparison, compare, reference_run
from ppsolve.executor.runtime import Job
from ppsolve.executor.spec import ModelSpec, load_model_spec
from ppsolve.executor.tokens import microbatch_lengths
from ppsolve.schedule import Schedule

TOLERANCE = 1e-5


@dataclass
class Outcome:
    schedule: Schedule
    spec: ModelSpec
    results: list | None  # per-rank RankResult on the reporting process, None on other torchrun ranks
    figures: list[RankFigures] | None = None
    comparison: Comparison | None = None
    activations: ActivationComparison | None = None  # per (stage, microbatch), for a problem profiled here

    @property
    def loss(self) -> float:
        parts = {j: v for r in self.results for j, v in r.losses.items()}
        return sum(parts.values()) / len(parts)


def prepare(schedule: Schedule, model: str | Path | ModelSpec, ranks: int | None, runtime: str,
            micro_batch_size: int | None = None) -> tuple[ModelSpec, str | None]:
    """Refuse what cannot run; return the model and, for the torch runtime, the compute_comms CSV text."""
    spec = model if isinstance(model, ModelSpec) else load_model_spec(model)
    spec = spec.with_micro_batch_size(micro_batch_size)
    problem = schedule.problem
    spec.blocks_of_stages(problem.num_stages, problem.annotations)
    lengths = microbatch_lengths(problem, spec)
    if runtime in ("torch", "torchtitan") and lengths is not None and lengths.budget is None:
        raise InputError("problem.x-token-budget", f"is needed by `runtime` {runtime} (its stages take one fixed "
                                                   "shape: every microbatch is padded to this many tokens)")
    profiled = problem.annotations.get("x-profile")
    model_info = profiled.get("model") if isinstance(profiled, dict) else None
    recorded = model_info.get("name") if isinstance(model_info, dict) else None
    if recorded is not None and recorded != spec.name:
        raise InputError("model", f"the schedule's problem was profiled on model {recorded!r}, not {spec.name!r}; "
                                  "profile this model (ppsolve profile) and solve again")
    if ranks is not None and ranks != problem.devices:
        raise InputError("ranks", f"the schedule is for {problem.devices} devices but {ranks} ranks were launched")
    report = check(schedule)
    if not report.valid:
        raise InputError("schedule", "is not valid: " + report.violations[0].message)
    if runtime not in ("ppsolve", "torch", "torchtitan"):
        raise InputError("runtime", f"must be ppsolve, torch or torchtitan, got {runtime!r}")
    csv_text = None
    if runtime == "torch":
        from ppsolve.export.torch_csv import to_compute_comms_csv
        csv_text = to_compute_comms_csv(schedule)
    elif runtime == "torchtitan":
        import importlib.util

        from ppsolve.export.torch_csv import to_torch_csv
        from ppsolve.export.torchtitan import INSTALL, schedule_name
        if importlib.util.find_spec("torchtitan") is None:
            raise InputError("runtime", f"torchtitan is not installed: {INSTALL}")
        schedule_name(problem)
        csv_text = to_torch_csv(schedule)
    return spec, csv_text


def execute(schedule: Schedule, model: str | Path | ModelSpec, *, ranks: int | None = None, steps: int = 1,
            check: bool = False, runtime: str = "ppsolve", timeout_s: float = 120.0,
            fail_at: tuple[int, int] | None = None, micro_batch_size: int | None = None,
            device: str = "auto", comm: str | None = None) -> Outcome:
    """Run ``schedule`` with the model for ``steps`` iterations and measure the last one.

    ``device``: auto (CUDA with NCCL when there is one GPU per local rank, else CPU with
    gloo), cpu or cuda. ``comm`` forces the message protocol (tests; see ``comm``)."""
    if steps < 1:
        raise InputError("steps", f"must be >= 1, got {steps}")
    torchrun = in_torchrun()
    if torchrun:
        import os
        ranks = int(os.environ["WORLD_SIZE"])
    spec, csv_text = prepare(schedule, model, ranks, runtime, micro_batch_size)
    kind = select_device(device, local_ranks(schedule.problem.devices))
    job = _job(schedule, spec, csv_text, kind, steps=steps, check=check, runtime=runtime, timeout_s=timeout_s,
               fail_at=fail_at, comm=comm)
    results = run_in_torchrun(job) if torchrun else launch(job, schedule.problem.devices)
    return _outcome(schedule, spec, results, check, kind)


def execute_all(schedules: list[Schedule], model: str | Path | ModelSpec, *, steps: int = 1, check: bool = False,
                runtime: str = "ppsolve", timeout_s: float = 120.0, device: str = "auto") -> list[Outcome]:
    """``execute`` for several schedules of one device count in one launch (the ranks start and
    import torch once, then run the schedules one after another): one Outcome per schedule."""
    if not schedules or len({s.problem.devices for s in schedules}) != 1:
        raise InputError("schedules", "must be one or more schedules with the same number of devices")
    if steps < 1:
        raise InputError("steps", f"must be >= 1, got {steps}")
    world = schedules[0].problem.devices
    kind = select_device(device, world)
    prepared = [prepare(schedule, model, None, runtime) for schedule in schedules]
    jobs = [_job(schedule, spec, csv_text, kind, steps=steps, check=check, runtime=runtime, timeout_s=timeout_s)
            for schedule, (spec, csv_text) in zip(schedules, prepared)]
    by_rank = launch(jobs, world)
    return [_outcome(schedule, spec, [results[k] for results in by_rank], check, kind)
            for k, (schedule, (spec, _)) in enumerate(zip(schedules, prepared))]


def _job(schedule: Schedule, spec: ModelSpec, csv_text: str | None, kind: str, **options) -> Job:
    torch_plan = None
    if options.get("runtime") in ("torch", "torchtitan"):
        from ppsolve.export.torch_levers import side_plan
        torch_plan = side_plan(schedule)
    return Job(schedule=schedule.to_dict(), model=spec.to_dict(), csv_text=csv_text, torch_plan=torch_plan,
               device=kind, **options)


def _outcome(schedule: Schedule, spec: ModelSpec, results: list | None, check: bool, kind: str) -> Outcome:
    """Measured against predicted, and (``check``) the gradients against a single-process run."""
    outcome = Outcome(schedule, spec, results)
    if results is None:
        return outcome
    outcome.figures = figures(schedule, results)
    outcome.activations = activation_comparison(schedule, results)
    if check:
        grads = {name: g for r in results for name, g in r.grads.items()}
        lengths = microbatch_lengths(schedule.problem, spec)
        outcome.comparison = compare(reference_run(spec, schedule.problem.microbatches, kind, lengths), outcome.loss,
                                     grads)
    return outcome
