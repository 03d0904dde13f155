"""A problem file from a transformer, a hardware description, a layout and a partition.

Units of the problem: milliseconds and GiB (bandwidths in GiB per ms), named in its
``x-units`` annotation. Times are rounded to 0.01 ms and memory to 1 MiB, which
keeps the solver's integer scaling exact. Every figure is that of one GPU of a
pipeline rank (see ``parallel`` for tensor, context and data parallelism). The
activation capacity of a device is its GPU memory less the static memory of its
stages (weights, gradients, optimizer states) and a runtime reserve. The file
records the model, the hardware, the parallelism, the partition, the memory
breakdown and where every number came from in ``x-`` annotations.
"""

from __future__ import annotations

from dataclasses import dataclass

from ppsolve.costmodel import formulas
from ppsolve.costmodel.descriptions import Hardware, Transformer
from ppsolve.costmodel.parallel import Parallelism
from ppsolve.costmodel.partition import ANNOTATION, Partition
from ppsolve.errors import InputError
from ppsolve.problem import PROBLEM_FORMAT, Problem, expand_placement, problem_from_dict
from ppsolve.units import UNITS_ANNOTATION, file_units

GIB = float(2**30)
TIME_DIGITS = 2
MEMORY_DIGITS = 3


@dataclass(frozen=True)
class Layout:
    """How the model is laid out on the pipeline and what the problem allows."""

    devices: int
    microbatches: int
    chunks: int = 1
    placement: str = "linear"
    backward: str = "split"
    offload: bool = False
    capacity: str | float | None = "hbm"  # "hbm": GPU memory less static memory and reserve; None: no cap
    parallel: Parallelism = Parallelism()
    reserve: str | float = "10%"  # GiB, or a share of the GPU memory, kept for the runtime

    @property
    def stages(self) -> int:
        return self.devices * self.chunks


def ms(flops: float, tflops: float) -> float:
    return flops / (tflops * 1e12) * 1e3


def gib_per_ms(gbps: float) -> float:
    return gbps * 1e9 / GIB / 1e3


def stage_costs(model: Transformer, partition: Partition, par: Parallelism = Parallelism(),
                pairs: float | None = None) -> list[formulas.PartCost]:
    """Per-stage costs on one GPU for one microbatch: the blocks, the embedding on the first, the head on the last
    (``pairs``: the attention's query-key pairs, see ``formulas.block``)."""
    last = partition.num_stages - 1
    block = formulas.block(model, par, pairs)
    return [block * count + (formulas.embedding(model, par) if s == 0 else formulas.PartCost())
            + (formulas.head(model, par) if s == last else formulas.PartCost())
            for s, count in enumerate(partition.layers)]


def stage_ms(flops: float, nbytes: float, hardware: Hardware) -> float:
    """Milliseconds of ``flops`` at the GPU's sustained rate plus ``nbytes`` over its NVLink (not overlapped)."""
    return ms(flops, hardware.gpu.tflops) + nbytes / (hardware.gpu.nvlink_gbps * 1e9) * 1e3


def p2p_ms(model: Transformer, hardware: Hardware, par: Parallelism) -> float:
    """Milliseconds of one microbatch's message to the next stage: its bytes over the p2p link plus the latency."""
    return formulas.boundary_bytes(model, par) / (hardware.p2p_gbps * 1e9) * 1e3 + hardware.p2p_latency_ms


def reserve_gib(layout: Layout, hardware: Hardware) -> float:
    """The runtime reserve of one GPU in GiB (``layout.reserve``: GiB, or ``N%`` of its memory)."""
    if isinstance(layout.reserve, str) and layout.reserve.endswith("%"):
        return hardware.gpu.hbm_gib * float(layout.reserve[:-1]) / 100
    return float(layout.reserve)


def memory_breakdown(model: Transformer, hardware: Hardware, layout: Layout, costs: list[formulas.PartCost],
                     placement: tuple[int, ...]) -> dict:
    """Static memory per stage (GiB of weights, gradients and optimizer states of one GPU) and, per
    device, its static sum, the reserve and the activation capacity left (GPU memory less both)."""
    per_param = layout.parallel.bytes_per_param(model.dtype)
    stages = [{"params": round(c.params), **{name: round(c.params * nbytes / GIB, MEMORY_DIGITS) for name, nbytes
                                            in zip(("weights", "gradients", "optimizer"), per_param)}}
              for c in costs]
    reserve = reserve_gib(layout, hardware)
    devices = []
    for device in range(layout.devices):
        static = sum(c.params for s, c in enumerate(costs) if placement[s] == device) * sum(per_param) / GIB
        devices.append({"static": round(static, MEMORY_DIGITS), "reserve": round(reserve, MEMORY_DIGITS),
                        "left": round(hardware.gpu.hbm_gib - static - reserve, MEMORY_DIGITS)})
    return {"gpu_memory": hardware.gpu.hbm_gib, "bytes_per_param": dict(zip(("weights", "gradients", "optimizer"),
                                                                           per_param)),
            "stages": stages, "devices": devices}


def _capacity(layout: Layout, hardware: Hardware, memory: dict,
              placement: tuple[int, ...]) -> list[float] | float | None:
    caps = []
    for device, figures in enumerate(memory["devices"]):
        # with a cap of its own (or none) the reserve is the user's to judge, the static memory is not
        over = figures["left"] <= 0 if layout.capacity == "hbm" else figures["static"] > hardware.gpu.hbm_gib
        if over:
            stages = [s for s, d in enumerate(placement) if d == device]
            parts = {k: sum(memory["stages"][s][k] for s in stages) for k in ("weights", "gradients", "optimizer")}
            which = f"stage {stages[0]}" if len(stages) == 1 else f"stages {', '.join(map(str, stages))}"
            reserve = f" + reserve {figures['reserve']:.1f} GiB" if layout.capacity == "hbm" else ""
            given = "none" if layout.capacity is None else f"{layout.capacity:g}" if layout.capacity != "hbm" else ""
            fix = "or give `layout.capacity`" if layout.capacity == "hbm" else \
                f"`layout.capacity` {given} cannot make it fit"
            raise InputError("layout.capacity", f"{which} (device {device}): static memory {figures['static']:.1f} "
                                                f"GiB (weights {parts['weights']:.1f} + gradients "
                                                f"{parts['gradients']:.1f} + optimizer {parts['optimizer']:.1f})"
                                                f"{reserve} does not fit in the {hardware.gpu.name}'s "
                                                f"{hardware.gpu.hbm_gib:g} GiB: add pipeline stages, "
                                                "`layout.parallel.tensor` or `layout.parallel.sharding`, "
                                                f"{fix}")
        caps.append(figures["left"])
    if layout.capacity is None:
        return None
    return caps if layout.capacity == "hbm" else float(layout.capacity)


def _links(layout: Layout, hardware: Hardware) -> list[list[int]] | None:
    if not hardware.gpu.shared_pcie_switch or layout.devices < 2:
        return None
    return [list(range(d, min(d + 2, layout.devices))) for d in range(0, layout.devices, 2)]


def problem_data(model: Transformer, hardware: Hardware, layout: Layout, partition: Partition) -> dict:
    """The problem file's content (not yet validated)."""
    placement = expand_placement(layout.placement, layout.devices, layout.chunks, "layout.placement")
    par = layout.parallel
    costs = stage_costs(model, partition, par)
    t = lambda flops, nbytes=0.0: round(stage_ms(flops, nbytes, hardware), TIME_DIGITS)  # noqa: E731
    g = lambda nbytes: round(nbytes / GIB, MEMORY_DIGITS)  # noqa: E731
    split = layout.backward == "split"
    p2p = p2p_ms(model, hardware, par)
    memory = memory_breakdown(model, hardware, layout, costs, placement)
    data = {
        "format": PROBLEM_FORMAT,
        "name": f"{model.name} on {layout.devices}x {hardware.gpu.name}, {layout.placement} v{layout.chunks}, "
                f"m{layout.microbatches}, partition {partition}"
                + ("" if par == Parallelism() else f", {par.describe()}"),
        "devices": layout.devices, "microbatches": layout.microbatches, "chunks": layout.chunks,
        "placement": layout.placement, "backward": layout.backward,
        "time": {"forward": [t(c.forward, c.forward_bytes) for c in costs],
                 "backward_input": [t(c.backward_input, c.backward_bytes) for c in costs],
                 "backward_weight": [t(c.backward_weight) for c in costs],
                 "p2p": round(p2p, TIME_DIGITS)},
        "memory": {"activation": [g(c.activation) for c in costs],
                   "weight_hold": [g(c.weight_hold) if split else 0 for c in costs],
                   "capacity": _capacity(layout, hardware, memory, placement)},
    }
    if model.recompute == "decide":
        data["recompute"] = {"keep": [g(c.keep) for c in costs],
                             "time": [t(c.recompute, c.forward_bytes) for c in costs]}
    if layout.offload:
        bandwidth = gib_per_ms(hardware.gpu.host_link_gbps)
        bandwidth = round(bandwidth, 6) if bandwidth >= 1e-3 else float(f"{bandwidth:.6g}")  # a slow link: not 0
        data["offload"] = {"fraction": 1, "bandwidth": {"d2h": bandwidth, "h2d": bandwidth}}
        links = _links(layout, hardware)
        if links:
            data["offload"]["links"] = links
    data[ANNOTATION] = partition.annotation()
    data[UNITS_ANNOTATION] = file_units()
    data["x-costmodel"] = {
        "model": model.to_dict(), "gpu": hardware.gpu.name, "p2p_link": hardware.p2p,
        "parallel": par.to_dict(), "memory": memory,
        "sources": _sources(model, hardware, layout),
    }
    return data


def _sources(model: Transformer, hardware: Hardware, layout: Layout) -> dict:
    gpu, par = hardware.gpu, layout.parallel
    sources = {
        "time": f"FLOPs of formulas.py (zero-bubble paper Table 1, after Korthikanti et al.: F = 24bsh^2 + 4bs^2h, "
                f"B = 24bsh^2 + 8bs^2h, W = 24bsh^2 per classic block; LM head 2bshV each), split over "
                f"{par.tensor} TP x {par.context} CP GPUs, at {gpu.tflops:g} sustained TFLOP/s "
                f"({hardware.source_of('tflops')})",
        "time.p2p": f"hidden states s*b*h*e bytes (/c, /t with SP) over {hardware.p2p} at {hardware.p2p_gbps:g} "
                    f"GB/s ({hardware.source_of(hardware.p2p + '_gbps')}) + {hardware.p2p_latency_ms:g} ms per "
                    "message (assumed)",
        "memory.activation": "Korthikanti et al. (2022) Table 2 per block: sbh(34 + 5as/h) alone, "
                             "sbh(10 + 24/t + 5as/(ht)) with TP, sbh/t (34 + 5as/h) with TP + SP (the s^2 term only "
                             "without flash attention; dropped by selective recompute), 2sbh with full recompute; "
                             "s/c with context parallelism; embedding sbh, head 4sbh + fp32 logits 4sbV/t",
        "memory.weight_hold": "zero-bubble paper Table 1: 32sbh of the 34sbh is held until W (the same share here)",
    }
    if par.gpus_per_stage_rank > 1:
        sources["time.communication"] = (f"per block: TP all-reduces 2 (t-1)/t x 2 s/c b h e bytes in F and in B, "
                                         f"CP key/value exchange (c-1)/c x 2 s b k e / t bytes in F, twice that in "
                                         f"B; over NVLink at {gpu.nvlink_gbps:g} GB/s per direction "
                                         f"({hardware.source_of('nvlink_gbps')}), not overlapped with compute")
    if model.recompute == "decide":
        sources["recompute"] = ("Megatron's full recompute of the transformer blocks: keep = each block's input 2sbh "
                                "+ the embedding's and the LM head's activations (not recomputed); time = the "
                                "blocks' forward (not the head's GEMM); the other figures are those of no recompute")
    w, gr, o = par.bytes_per_param(model.dtype)
    sources["x-costmodel.memory"] = (f"{model.dtype} mixed precision (Megatron's distributed-optimizer guide): "
                                     f"{w:g} + {gr:g} + {o:g} bytes per parameter (weights + gradients + optimizer "
                                     f"states) with optimizer sharding {par.sharding} over {par.shards} data x "
                                     f"context parallel ranks; reserve {layout.reserve} (CUDA context, NCCL buffers, "
                                     "allocator fragmentation: assumed)")
    if layout.capacity == "hbm":
        sources["memory.capacity"] = (f"{gpu.hbm_gib:g} GiB GPU memory ({hardware.source_of('hbm_gib')}) less the "
                                      "static memory of the device's stages and the reserve (x-costmodel.memory)")
    if layout.offload:
        sources["offload.bandwidth"] = (f"{gpu.host_link_gbps:g} GB/s per direction "
                                        f"({hardware.source_of('host_link_gbps')})")
        sources["offload.links"] = (f"shared PCIe switch: {gpu.shared_pcie_switch} "
                                    f"({hardware.source_of('shared_pcie_switch')})")
    return sources


def build_problem(model: Transformer, hardware: Hardware, layout: Layout, partition: Partition) -> Problem:
    """The validated problem of ``model`` cut by ``partition`` on ``hardware``."""
    check_layout(model, layout)
    data = problem_data(model, hardware, layout, partition)
    try:
        return problem_from_dict(data)
    except InputError as error:  # a generated figure out of ppsolve's range: name the input behind it
        behind = _input_behind(error, data, hardware)
        if behind is None:
            raise
        raise InputError(behind, f"out of range for the problem it makes ({error})") from None


def check_layout(model: Transformer, layout: Layout) -> None:
    """Refuse a backward mode, or a recompute with it, that no problem file can express, and a parallel layout
    that does not divide the model or whose static memory does not fit the GPU."""
    if layout.backward not in ("split", "fused"):
        raise InputError("layout.backward", f"must be split or fused, got {layout.backward!r}")
    if model.recompute == "full" and layout.backward == "split":
        raise InputError("recompute", "full recompute with a split backward cannot be written: W needs the "
                                      "recomputed GEMM inputs from B to W, more than the checkpoint F keeps "
                                      "(weight_hold > activation); use `recompute` decide or `layout.backward` "
                                      "fused")
    layout.parallel.check_fits(model)


def _input_behind(error: InputError, data: dict, hardware: Hardware) -> str | None:
    """The hardware figure that made the generated time ``error`` names (the p2p latency or link, the
    host link, the GPU's FLOP rate), or None when the error names no generated time."""
    text = f"{error.field} {error.message}"
    gpu_figure = lambda name: f"hardware.{name}" if name in hardware.overridden else "gpu"  # noqa: E731
    if "time.p2p" in text:
        if hardware.p2p_latency_ms >= data["time"]["p2p"] / 2:
            return "hardware.p2p_latency_ms"
        return gpu_figure(f"{hardware.p2p}_gbps")
    if "bandwidth" in text or "offload" in text:
        return gpu_figure("host_link_gbps")
    if "time." in text:
        return gpu_figure("tflops")
    return None
