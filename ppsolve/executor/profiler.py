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
from ppsolve.errors import InputError
from ppsolve.executor import models
from ppsolve.executor.device import CpuDevice, Device, make_device
from ppsolve.executor.spec import ModelSpec
from ppsolve.executor.stage import SavedBytes, Stage
from ppsolve.executor.tokens import BUDGET, TOKENS, Lengths
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
            recompute: bool = False, lengths: Lengths | None = None) -> Problem:
    """Measure every stage on ``device`` ("cpu" or "cuda") and return the problem (validated).

    ``partition``: the blocks of each stage (default: an even split); the file records it.
    ``recompute``: a ``recompute`` block with the measured checkpoint bytes and R times.
    ``lengths``: the real tokens of each microbatch (and the padded budget): every length is
    measured, times per microbatch at its real tokens, memory at the length it runs at (the
    budget when padded: then one value per stage); the file records them
    (:mod:`ppsolve.executor.tokens`)."""
    num_stages = devices * chunks
    expand_placement(placement, devices, chunks, "placement")
    if partition is None:
        partition = Partition(tuple(len(r) for r in spec.layers_of_stages(num_stages, f"model {spec.name}: layers")))
    if lengths is not None and len(lengths.tokens) != microbatches:
        raise InputError("lengths.tokens", f"must give {microbatches} token counts (one per microbatch), "
                                           f"got {len(lengths.tokens)}")
    torch.set_num_threads(1)
    dev = make_device(device)
    built = models.build_stages(spec, num_stages, blocks=partition.blocks())
    modules = {s: dev.place(m) for s, m in built.items()}
    runs = [None] if lengths is None else sorted(set(lengths.tokens) | {lengths.budget} - {None})
    inputs = {n: tuple(dev.place(t) for t in models.microbatch(spec, 0, None if n is None else Lengths((n,))))
              for n in runs}
    measured: list[dict] = []  # per stage: sequence length -> StageFigures
    for s in range(num_stages):
        measured.append({n: measure_stage(modules[s], s, num_stages, spec, x, target if s == num_stages - 1 else None,
                                          split, warmup, repeats, dev, recompute)
                         for n, (x, target) in inputs.items()})
        with torch.no_grad():
            inputs = {n: (modules[s](x) if s < num_stages - 1 else x, target) for n, (x, target) in inputs.items()}
    time_of = (lambda j: None) if lengths is None else (lambda j: lengths.tokens[j])  # noqa: E731
    shape_of = (lambda j: None) if lengths is None else lengths.shape_length
    field = lambda read, at: _grid([[read(m[at(j)]) for j in range(microbatches)] for m in measured])  # noqa: E731
    backward = (lambda f: f.backward_input) if split else (lambda f: f.backward_input / 2)
    weight = (lambda f: f.backward_weight) if split else (lambda f: f.backward_input / 2)
    fwd = field(lambda f: round(f.forward, 6), time_of)
    bwd_in = field(lambda f: round(backward(f), 6), time_of)
    bwd_w = field(lambda f: round(weight(f), 6), time_of)
    act_bytes, hold_bytes = field(lambda f: f.activation, shape_of), field(lambda f: f.hold, shape_of)
    data = {
        "format": PROBLEM_FORMAT, "name": f"{spec.name} d{devices} v{chunks} {placement} m{microbatches}",
        "devices": devices, "microbatches": microbatches, "chunks": chunks, "placement": placement,
        "backward": "split" if split else "fused",
        "time": {"forward": fwd, "backward_input": bwd_in, "backward_weight": bwd_w, "p2p": p2p},
        "memory": {"activation": _scaled(act_bytes, 1 / GIB),
                   "weight_hold": _scaled(hold_bytes, 1 / GIB) if split else 0, "capacity": capacity},
        ANNOTATION: partition.annotation(),
        UNITS_ANNOTATION: file_units(),
        "x-profile": {"model": spec.to_dict(),
                      "torch": torch.__version__, "threads": 1, "device": dev.kind,
                      "activation_bytes": act_bytes, "weight_hold_bytes": hold_bytes},
    }
    if lengths is not None:
        data[TOKENS] = list(lengths.tokens)
        if lengths.budget is not None:
            data[BUDGET] = lengths.budget
    if recompute:
        keeps = field(lambda f: f.keep, shape_of)
        data["recompute"] = {"keep": _scaled(keeps, 1 / GIB), "time": field(lambda f: round(f.recompute, 6), time_of)}
        data["x-profile"]["keep_bytes"] = keeps
    if offload:
        largest = max(max(row) if isinstance(row, list) else row for row in act_bytes)
        d2h, h2d = (bw / MIB_PER_GIB for bw in dev.copy_bandwidth(int(largest)))
        data["offload"] = {"fraction": 1, "bandwidth": {"d2h": round(d2h, 9), "h2d": round(h2d, 9)}}
    return problem_from_dict(data)


def _grid(rows: list[list]) -> list:
    """A field of the file: one value per stage when every microbatch of each stage has the same
    value (always without token counts), else S lists of m."""
    return [row[0] for row in rows] if all(len(set(row)) == 1 for row in rows) else rows


def _scaled(values: list, factor: float) -> list:
    return [[x * factor for x in v] if isinstance(v, list) else v * factor for v in values]
