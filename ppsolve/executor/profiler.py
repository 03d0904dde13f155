"""Measuring each stage on this machine and writing a problem file.

For every stage: F, B (input gradient) and W (weight gradients) timed with the
executor's own code on microbatch 0's real input (median of ``repeats`` runs after
``warmup``), and the bytes its saved tensors hold. With ``recompute``, also what a
recomputed forward keeps (its input: the problem's ``recompute.keep``) and R, the
forward rerun from it with autograd (``recompute.time``). Units of the problem file:
milliseconds and GiB (bandwidth in GiB per ms), named in its ``x-units``; the exact
bytes are kept in ``x-profile``. One thread, as each rank uses.
Fused backward: one backward pass is timed and split half and half between
``backward_input`` and ``backward_weight`` (only their sum counts then). On CUDA
(``device="cuda"``: cuda:0, TF32 off) the ops are timed with CUDA events and the
host lanes with pinned buffers, d2h and h2d each; on CPU one host-to-host copy
gives both.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

import torch

from ppsolve.costmodel.partition import ANNOTATION, Partition
from ppsolve.executor import models
from ppsolve.executor.device import CpuDevice, Device, make_device
from ppsolve.executor.spec import ModelSpec
from ppsolve.executor.stage import SavedBytes, Stage
from ppsolve.problem import PROBLEM_FORMAT, expand_placement, problem_from_dict, Problem
from ppsolve.units import UNITS_ANNOTATION, file_units

GIB = float(2**30)
MIB_PER_GIB = 1024  # the device measures host copies in MiB per ms


@dataclass
class StageFigures:
    """One stage, one microbatch: times in ms, sizes in bytes (keep and R only when measured)."""

    forward: float
    backward_input: float
    backward_weight: float
    activation: int
    hold: int
    keep: int = 0
    recompute: float = 0.0


def measure_stage(stage_module, index: int, num_stages: int, spec: ModelSpec, x, target, split: bool,
                  warmup: int, repeats: int, dev: Device | None = None, recompute: bool = False) -> StageFigures:
    """F, B and W times, activation bytes and bytes held from B to W of one stage for one microbatch;
    with ``recompute`` also the bytes a recomputed F keeps and R's time."""
    dev = dev or CpuDevice()
    params = list(stage_module.parameters())
    times: list[tuple[float, float, float, float]] = []
    nbytes = hold = keep = 0
    for rep in range(warmup + repeats):
        stage = Stage(index, num_stages, stage_module, models.loss_fn(spec), 1, SavedBytes(params), dev)
        out: list = [None]
        t_f = dev.timed(lambda: out.__setitem__(0, stage.forward(0, x, target)))
        grad = None if out[0] is None else torch.ones_like(out[0]) / out[0].numel()
        nbytes = stage.bytes_of[0]
        if split:
            t_b = dev.timed(lambda: stage.backward_input(0, grad))
            hold = stage.hold_of[0]
            t_w = dev.timed(lambda: stage.backward_weight(0))
        else:
            t_b, t_w = dev.timed(lambda: stage.backward_full(0, grad)), 0.0
        t_r = 0.0
        if recompute:
            again = Stage(index, num_stages, stage_module, models.loss_fn(spec), 1, SavedBytes(params), dev)
            again.forward(0, x, target, recompute=True)
            keep = again.keep_of[0]
            t_r = dev.timed(lambda: again.recompute(0))
            again.backward_full(0, grad)
        stage_module.zero_grad(set_to_none=True)
        if rep >= warmup:
            times.append((t_f, t_b, t_w, t_r))
    f, b, w, r = (median(t[k] for t in times) for k in range(4))
    return StageFigures(f, b, w, nbytes, hold, keep, r)


def profile(spec: ModelSpec, devices: int, chunks: int, placement: str, microbatches: int, *,
            split: bool = True, offload: bool = False, p2p: float = 0.0, capacity: float | None = None,
            warmup: int = 2, repeats: int = 5, device: str = "cpu", partition: Partition | None = None,
            recompute: bool = False) -> Problem:
    """Measure every stage on ``device`` ("cpu" or "cuda") and return the problem (validated).

    ``partition``: the blocks of each stage (default: an even split); the file records it.
    ``recompute``: a ``recompute`` block with the measured checkpoint bytes and R times."""
    num_stages = devices * chunks
    expand_placement(placement, devices, chunks, "--placement")
    if partition is None:
        partition = Partition(tuple(len(r) for r in spec.layers_of_stages(num_stages, f"model {spec.name}: layers")))
    torch.set_num_threads(1)
    dev = make_device(device)
    built = models.build_stages(spec, num_stages, blocks=partition.blocks())
    modules = {s: dev.place(m) for s, m in built.items()}
    x, target = (dev.place(t) for t in models.microbatch(spec, 0))
    fwd, bwd_in, bwd_w, act, holds, keeps, rec = [], [], [], [], [], [], []
    for s in range(num_stages):
        m = measure_stage(modules[s], s, num_stages, spec, x, target if s == num_stages - 1 else None,
                          split, warmup, repeats, dev, recompute)
        b, w = (m.backward_input, m.backward_weight) if split else (m.backward_input / 2, m.backward_input / 2)
        fwd.append(round(m.forward, 6))
        bwd_in.append(round(b, 6))
        bwd_w.append(round(w, 6))
        act.append(m.activation / GIB)
        holds.append(m.hold / GIB)
        keeps.append(m.keep)
        rec.append(round(m.recompute, 6))
        with torch.no_grad():
            x = modules[s](x) if s < num_stages - 1 else x
    data = {
        "format": PROBLEM_FORMAT, "name": f"{spec.name} d{devices} v{chunks} {placement} m{microbatches}",
        "devices": devices, "microbatches": microbatches, "chunks": chunks, "placement": placement,
        "backward": "split" if split else "fused",
        "time": {"forward": fwd, "backward_input": bwd_in, "backward_weight": bwd_w, "p2p": p2p},
        "memory": {"activation": act, "weight_hold": holds if split else 0, "capacity": capacity},
        ANNOTATION: partition.annotation(),
        UNITS_ANNOTATION: file_units(),
        "x-profile": {"model": spec.to_dict(),
                      "torch": torch.__version__, "threads": 1, "device": dev.kind,
                      "activation_bytes": [int(round(a * GIB)) for a in act],
                      "weight_hold_bytes": [int(round(h * GIB)) for h in holds]},
    }
    if recompute:
        data["recompute"] = {"keep": [k / GIB for k in keeps], "time": rec}
        data["x-profile"]["keep_bytes"] = keeps
    if offload:
        d2h, h2d = (bw / MIB_PER_GIB for bw in dev.copy_bandwidth(int(max(act) * GIB)))
        data["offload"] = {"fraction": 1, "bandwidth": {"d2h": round(d2h, 9), "h2d": round(h2d, 9)}}
    return problem_from_dict(data)
