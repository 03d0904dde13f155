"""``ppsolve export SCHEDULE --to torchtitan -o DIR``: the files and settings that make torchtitan run a plan.

torchtitan 0.3.0 (``torchtitan/distributed/pipeline_parallel.py``) loads an outside
schedule from ``parallelism.pipeline_parallel_schedule_csv`` into a
``_PipelineScheduleRuntime`` with ``_load_csv(path)``: the compute-only format, whose
sends and receives PyTorch places itself. It maps stages to ranks from the *schedule
name*, not from the CSV: loop style (rank r runs stages r, r + D, ...) for every name
but ``ZBVZeroBubble`` and ``DualPipeV``, which map a V (rank r runs stages r and
2D - 1 - r, exactly two per rank). The name must also say how many stages a rank runs:
a single-stage name (``1F1B``) one, a multi-stage name two unless
``module_fqns_per_model_part`` lists the model parts.

DIR gets:

- ``schedule.csv``: the compute-only CSV (:func:`ppsolve.export.torch_csv.to_torch_csv`);
- ``schedule.plan.json``: the side plan of offloads and recomputes
  (:mod:`ppsolve.export.torch_levers`), run by :func:`ppsolve.executor.torchtitan.apply_plan`;
- ``schedule.comms.csv`` only where PyTorch's placement of the sends and receives delays
  the plan (:mod:`ppsolve.export.torch_lowering`): ppsolve's placement, which
  ``apply_plan(..., comms=...)`` loads in its place;
- ``torchtitan_config.py``: a function that sets these fields on a torchtitan
  ``Trainer.Config`` (torchtitan 0.3.0 configurations are Python), and ``torchtitan.args``:
  the same as command-line flags (``module_fqns_per_model_part``, a list of lists, has no
  flag form and is only in the Python fragment).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from ppsolve.costmodel.partition import ANNOTATION as PARTITION
from ppsolve.costmodel.partition import Partition
from ppsolve.errors import InputError, NotApplicableError
from ppsolve.export.torch_csv import to_compute_comms_csv, to_torch_csv
from ppsolve.export.torch_levers import side_plan
from ppsolve.export.torch_lowering import Timing, timing
from ppsolve.jsonio import write_json_atomic, write_text_atomic
from ppsolve.problem import Problem
from ppsolve.schedule import Schedule

CSV, PLAN, COMMS = "schedule.csv", "schedule.plan.json", "schedule.comms.csv"
CONFIG, ARGS = "torchtitan_config.py", "torchtitan.args"
VERSION = "0.3.0"
INSTALL = (f"pip install --no-deps torchtitan=={VERSION} && pip install spmd_types==0.2.3 tyro "
           "(ppsolve's [torchtitan] extra)")


def loop_placement(devices: int, chunks: int) -> tuple[int, ...]:
    """torchtitan's loop-style rank of every stage."""
    return tuple(s % devices for s in range(devices * chunks))


def v_placement(devices: int) -> tuple[int, ...]:
    """torchtitan's V-style rank of every stage (two per rank)."""
    return tuple(s if s < devices else 2 * devices - 1 - s for s in range(2 * devices))


def schedule_name(problem: Problem) -> str:
    """The ``pipeline_parallel_schedule`` whose rank map is the problem's placement;
    NotApplicableError naming what would work when torchtitan has none."""
    d, chunks, place = problem.devices, problem.chunks, problem.placement
    counts = [len(stages) for stages in problem.stages_of_device]
    if len(set(counts)) > 1:
        raise NotApplicableError(f"cannot export to torchtitan: ranks run {min(counts)} to {max(counts)} stages and "
                                 "torchtitan needs the same number on every rank (use placement interleaved or vshape)")
    if place == loop_placement(d, chunks):
        return "1F1B" if chunks == 1 else "Interleaved1F1B"
    if chunks == 2 and place == v_placement(d):
        return "ZBVZeroBubble"
    if problem.placement_name == "vshape":
        raise NotApplicableError(f"cannot export to torchtitan: a V with {chunks} stages per rank; torchtitan's V "
                                 "schedules (ZBVZeroBubble, DualPipeV) run exactly 2 (use chunks 2, or placement "
                                 "interleaved)")
    raise NotApplicableError(f"cannot export to torchtitan: placement {list(place)} is neither loop style (stage s on "
                             f"rank s mod {d}) nor a V with 2 stages per rank, the two rank maps torchtitan has (use "
                             "placement interleaved, or vshape with chunks 2)")


def model_parts(problem: Problem) -> list[list[str]] | None:
    """``module_fqns_per_model_part`` from the problem's layer partition (``x-partition``, written by
    ``ppsolve problem``'s cost model), named as torchtitan's decoder models name their modules; None
    when the problem records no partition."""
    raw = problem.annotations.get(PARTITION)
    if raw is None:
        return None
    counts = raw.get("layers") if isinstance(raw, dict) else None
    if (not isinstance(counts, list) or len(counts) != problem.num_stages
            or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts)):
        raise InputError(f"problem.{PARTITION}.layers", f"must list {problem.num_stages} layer counts, one per stage")
    return module_fqns(Partition(tuple(counts)).blocks())


def module_fqns(blocks: list[range]) -> list[list[str]]:
    """The module names of each stage, given its blocks: the embedding on the first stage, the
    final norm and LM head on the last (torchtitan's decoders' names)."""
    last = len(blocks) - 1
    return [(["tok_embeddings"] if s == 0 else []) + [f"layers.{i}" for i in stage]
            + (["norm", "lm_head"] if s == last else []) for s, stage in enumerate(blocks)]


@dataclass
class Settings:
    """The torchtitan fields that run the plan."""

    schedule: str
    degree: int
    microbatches: int
    csv: str
    parts: list[list[str]] | None
    chunks: int

    def fields(self) -> dict:
        """``parallelism`` fields (microbatch size 1: the local batch size is the microbatch count)."""
        out = {"pipeline_parallel_degree": self.degree, "pipeline_parallel_schedule": self.schedule,
               "pipeline_parallel_schedule_csv": self.csv, "pipeline_parallel_microbatch_size": 1}
        if self.parts is not None:
            out["module_fqns_per_model_part"] = self.parts
        return out

    def flags(self) -> str:
        parallelism = " ".join(f"--parallelism.{k} {shlex.quote(str(v))}" for k, v in self.fields().items()
                               if k != "module_fqns_per_model_part")
        return f"{parallelism} --training.local_batch_size {self.microbatches}"

    def python(self, header: str) -> str:
        lines = [f"# {line}" for line in header.splitlines()]
        lines += ["", "", "def apply_ppsolve_pipeline(config):",
                  '    """Set the pipeline fields of a torchtitan Trainer.Config to run the ppsolve plan."""',
                  "    p = config.parallelism"]
        lines += [f"    p.{k} = {v!r}" for k, v in self.fields().items()]
        lines.append(f"    config.training.local_batch_size = {self.microbatches}  # microbatches x microbatch size 1: "
                     "scale it and pipeline_parallel_microbatch_size together")
        if self.parts is None and self.chunks != (1 if self.schedule == "1F1B" else 2):
            lines.append(f"    # set p.module_fqns_per_model_part to {self.degree * self.chunks} model parts "
                         f"({self.chunks} per rank): the problem records no layer partition")
        lines.append("    return config")
        return "\n".join(lines) + "\n"


@dataclass
class TorchtitanExport:
    """What ``export --to torchtitan`` wrote and found."""

    settings: Settings
    timing: Timing
    files: list[Path] = field(default_factory=list)
    comms: Path | None = None
    plan: Path | None = None

    def call(self) -> str:
        comms = f", comms={str(self.comms)!r}" if self.comms is not None else ""
        return (f"from ppsolve.executor.torchtitan import apply_plan\n"
                f"apply_plan(pp_schedule, {str(self.plan)!r}{comms})")

    def summary(self) -> str:
        s, t = self.settings, self.timing
        lines = ["wrote " + ", ".join(map(str, self.files)),
                 f"torchtitan {VERSION}: schedule {s.schedule}, pipeline degree {s.degree}, {s.microbatches} "
                 f"microbatches, " + (f"{len(s.parts)} model parts from the problem's layer partition"
                                      if s.parts is not None else "no layer partition in the problem")]
        lines.append(timing_line(t))
        if self.comms is not None:
            lines.append(f"PyTorch's placement delays the plan: {self.comms} holds ppsolve's, which apply_plan's "
                         "comms argument loads in its place")
        lines.append(f"flags: {s.flags()}")
        lines.append("after torchtitan builds its schedule (pp_schedule, from pipeline_llm), add:")
        lines += ["    " + line for line in self.call().splitlines()]
        return "\n".join(lines)


def timing_line(t: Timing) -> str:
    head = f"makespan: planned {t.planned:g}, replayed with ppsolve's sends and receives {t.ppsolve:g}"
    if t.pytorch is None:
        return head + "; PyTorch's own placement not replayed (torch is not installed: pip install torch)"
    change = (t.pytorch - t.planned) / t.planned * 100 if t.planned > 0 else 0.0
    return head + f", with PyTorch's (what torchtitan loads) {t.pytorch:g} ({change:+.1f}%)"


def export_torchtitan(schedule: Schedule, directory: str | Path) -> TorchtitanExport:
    """Write DIR (created if its parent exists) and return what was written and found."""
    problem = schedule.problem
    name = schedule_name(problem)
    parts = model_parts(problem)
    out = Path(directory)
    if not out.parent.is_dir():
        raise InputError(str(directory), f"cannot write: directory {out.parent} does not exist")
    if out.exists() and not out.is_dir():
        raise InputError(str(directory), "must be a directory (the torchtitan export writes several files)")
    out.mkdir(exist_ok=True)
    csv, plan = out / CSV, out / PLAN
    settings = Settings(name, problem.devices, problem.microbatches, str(csv.resolve()), parts, problem.chunks)
    found = TorchtitanExport(settings, timing(schedule), plan=plan.resolve())
    write_text_atomic(csv, to_torch_csv(schedule))
    write_json_atomic(plan, side_plan(schedule))
    found.files = [csv, plan]
    if found.timing.delayed:
        comms = out / COMMS
        write_text_atomic(comms, to_compute_comms_csv(schedule))
        found.comms = comms.resolve()
        found.files.append(comms)
    header = (f"ppsolve export --to torchtitan (torchtitan {VERSION}): {timing_line(found.timing)}\n"
              f"after torchtitan builds its schedule, add:\n" + found.call())
    write_text_atomic(out / CONFIG, settings.python(header))
    write_text_atomic(out / ARGS, settings.flags() + "\n")
    found.files += [out / CONFIG, out / ARGS]
    return found


def write(schedule: Schedule, path: str | Path) -> list[Path]:
    """The exporter registry's entry point: the files :func:`export_torchtitan` wrote."""
    return export_torchtitan(schedule, path).files
