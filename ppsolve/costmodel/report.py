"""What ``ppsolve problem`` prints: the stages, PipeOffload's k per GPU, the partitions tried."""

from __future__ import annotations

from ppsolve.costmodel.descriptions import Hardware, Transformer, bundled_gpus
from ppsolve.costmodel.formulas import offload_k
from ppsolve.costmodel.partition import ANNOTATION
from ppsolve.problem import Problem


def _row(label: str, values) -> str:
    return f"  {label:<20}" + " ".join(f"{v:>8.3f}" if isinstance(v, float) else f"{v:>8}" for v in values)


def render_stages(problem: Problem) -> str:
    """One column per stage: layers, F/B/W ms, activation and held GiB (and recompute's keep and
    time); then p2p and caps."""
    partition = problem.annotations.get(ANNOTATION, {})
    lines = [f"  partition {partition.get('layout', '?')}",
             _row("stage", list(range(problem.num_stages))),
             _row("layers", partition.get("layers", ["?"] * problem.num_stages)),
             _row("forward ms", problem.forward),
             _row("backward_input ms", problem.backward_input),
             _row("backward_weight ms", problem.backward_weight),
             _row("activation GiB", problem.activation)]
    if problem.split_backward:
        lines.append(_row("weight_hold GiB", problem.weight_hold))
    if problem.recompute is not None:
        lines += [_row("recompute keep GiB", problem.recompute.keep), _row("recompute ms", problem.recompute.time)]
    memory = (problem.annotations.get("x-costmodel") or {}).get("memory")
    if memory:
        lines += _memory_rows(memory)
    caps = ", ".join("none" if c is None else f"{c:.1f}" for c in problem.capacity)
    lines.append(f"  p2p {problem.p2p:g} ms; activation capacity per device GiB: {caps}")
    if problem.offload is not None:
        links = [list(link) for link in problem.offload.links]
        shared = f" (shared links {links})" if problem.offload.links_given else ""
        lines.append(f"  host link {problem.offload.d2h:g} GiB/ms per direction{shared}")
    return "\n".join(lines)


def _memory_rows(memory: dict) -> list[str]:
    """Static memory per stage and, per device, static + reserve + what is left of the GPU's memory."""
    stages = memory["stages"]
    per = memory["bytes_per_param"]
    lines = [_row("params (M)", [f"{s['params'] / 1e6:.1f}" for s in stages]),
             _row("weights GiB", [s["weights"] for s in stages]),
             _row("gradients GiB", [s["gradients"] for s in stages]),
             _row("optimizer GiB", [s["optimizer"] for s in stages])]
    lines.append(f"  bytes per parameter: {per['weights']:g} weights + {per['gradients']:g} gradients + "
                 f"{per['optimizer']:g} optimizer states")
    devices = memory["devices"]
    lines += [f"  per device, of the GPU's {memory['gpu_memory']:g} GiB:",
              _row("device", list(range(len(devices)))),
              _row("static GiB", [f["static"] for f in devices]),
              _row("reserve GiB", [f["reserve"] for f in devices]),
              _row("left GiB", [f["left"] for f in devices])]
    return lines


def render_k_table(model: Transformer, hardware: Hardware) -> str:
    """PipeOffload's k of one block of ``model`` on every bundled GPU (and on ``hardware`` if it differs)."""
    gpus = dict(bundled_gpus())
    if hardware.overridden:
        gpus[f"{hardware.gpu.name} (yours)"] = hardware.gpu
    lines = ["PipeOffload k (one block's activation to host and back / its F+B+W; <= 1: full offload can be free):"]
    for name, gpu in gpus.items():
        k = offload_k(model, gpu.tflops, gpu.host_link_gbps)
        verdict = "free" if k <= 1 else "not free"
        lines.append(f"  {name:<14} k = {k:6.3f}  ({gpu.tflops:g} TFLOP/s, host link {gpu.host_link_gbps:g} GB/s): "
                     f"{verdict}")
    return "\n".join(lines)


def render_trials(trials, best) -> str:
    """The partitions the solver ran on, with bound, makespan and status."""
    lines = [f"  {'partition':<40} {'bound':>10} {'makespan':>10}  status"]
    for trial in trials:
        c = trial.candidate
        if trial.schedule is None:
            tail = f"{'-':>10}  {trial.error}"
        else:
            tail = f"{trial.schedule.makespan:>10.2f}  {trial.schedule.method.status}"
        mark = " <- chosen" if trial is best else ""
        lines.append(f"  {c.partition.layout:<40} {c.bound:>10.2f} {tail}{mark}")
    return "\n".join(lines)
