"""A problem file from a transformer, a hardware description, a layout and a partition.

Units of the problem: milliseconds and GiB (bandwidths in GiB per ms). Times are
rounded to 0.01 ms and memory to 1 MiB, which keeps the solver's integer scaling
exact. The file records the model, the hardware, the partition and where every
number came from in ``x-`` annotations.
"""

from __future__ import annotations

from dataclasses import dataclass

from ppsolve.costmodel import formulas
from ppsolve.costmodel.descriptions import Hardware, Transformer
from ppsolve.costmodel.partition import ANNOTATION, Partition
from ppsolve.errors import InputError
from ppsolve.problem import PROBLEM_FORMAT, Problem, expand_placement, problem_from_dict

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
    capacity: str | float | None = "hbm"  # "hbm": device memory less weights and optimizer state; None: no cap

    @property
    def stages(self) -> int:
        return self.devices * self.chunks


def ms(flops: float, tflops: float) -> float:
    return flops / (tflops * 1e12) * 1e3


def gib_per_ms(gbps: float) -> float:
    return gbps * 1e9 / GIB / 1e3


def stage_costs(model: Transformer, partition: Partition) -> list[formulas.PartCost]:
    """Per-stage costs for one microbatch: the blocks, the embedding on the first, the head on the last."""
    last = partition.num_stages - 1
    block = formulas.block(model)
    return [block * count + (formulas.embedding(model) if s == 0 else formulas.PartCost())
            + (formulas.head(model) if s == last else formulas.PartCost())
            for s, count in enumerate(partition.layers)]


def _capacity(layout: Layout, hardware: Hardware, costs: list[formulas.PartCost],
              placement: tuple[int, ...]) -> list[float] | float | None:
    if layout.capacity is None:
        return None
    if layout.capacity != "hbm":
        return float(layout.capacity)
    caps = []
    for device in range(layout.devices):
        params = sum(c.params for s, c in enumerate(costs) if placement[s] == device)
        room = hardware.gpu.hbm_gib - params * formulas.STATIC_BYTES_PER_PARAM / GIB
        if room <= 0:
            raise InputError("--capacity", f"device {device}'s weights and optimizer state "
                                           f"({params * formulas.STATIC_BYTES_PER_PARAM / GIB:.1f} GiB) do not fit "
                                           f"in {hardware.gpu.hbm_gib:g} GiB: use more devices or --capacity none")
        caps.append(round(room, MEMORY_DIGITS))
    return caps


def _links(layout: Layout, hardware: Hardware) -> list[list[int]] | None:
    if not hardware.gpu.shared_pcie_switch or layout.devices < 2:
        return None
    return [list(range(d, min(d + 2, layout.devices))) for d in range(0, layout.devices, 2)]


def problem_data(model: Transformer, hardware: Hardware, layout: Layout, partition: Partition) -> dict:
    """The problem file's content (not yet validated)."""
    placement = expand_placement(layout.placement, layout.devices, layout.chunks, "--placement")
    costs = stage_costs(model, partition)
    tflops = hardware.gpu.tflops
    t = lambda flops: round(ms(flops, tflops), TIME_DIGITS)  # noqa: E731
    g = lambda nbytes: round(nbytes / GIB, MEMORY_DIGITS)  # noqa: E731
    split = layout.backward == "split"
    p2p = formulas.boundary_bytes(model) / (hardware.p2p_gbps * 1e9) * 1e3 + hardware.p2p_latency_ms
    data = {
        "format": PROBLEM_FORMAT,
        "name": f"{model.name} on {layout.devices}x {hardware.gpu.name}, {layout.placement} v{layout.chunks}, "
                f"m{layout.microbatches}, partition {partition}",
        "devices": layout.devices, "microbatches": layout.microbatches, "chunks": layout.chunks,
        "placement": layout.placement, "backward": layout.backward,
        "time": {"forward": [t(c.forward) for c in costs],
                 "backward_input": [t(c.backward_input) for c in costs],
                 "backward_weight": [t(c.backward_weight) for c in costs],
                 "p2p": round(p2p, TIME_DIGITS)},
        "memory": {"activation": [g(c.activation) for c in costs],
                   "weight_hold": [g(c.weight_hold) if split else 0 for c in costs],
                   "capacity": _capacity(layout, hardware, costs, placement)},
    }
    if model.recompute == "decide":
        data["recompute"] = {"keep": [g(c.keep) for c in costs], "time": [t(c.recompute) for c in costs]}
    if layout.offload:
        bandwidth = gib_per_ms(hardware.gpu.host_link_gbps)
        bandwidth = round(bandwidth, 6) if bandwidth >= 1e-3 else float(f"{bandwidth:.6g}")  # a slow link: not 0
        data["offload"] = {"fraction": 1, "bandwidth": {"d2h": bandwidth, "h2d": bandwidth}}
        links = _links(layout, hardware)
        if links:
            data["offload"]["links"] = links
    data[ANNOTATION] = partition.annotation()
    data["x-costmodel"] = {
        "model": model.to_dict(), "gpu": hardware.gpu.name, "p2p_link": hardware.p2p,
        "units": {"time": "ms", "memory": "GiB", "bandwidth": "GiB/ms"},
        "sources": _sources(model, hardware, layout),
    }
    return data


def _sources(model: Transformer, hardware: Hardware, layout: Layout) -> dict:
    gpu = hardware.gpu
    sources = {
        "time": f"FLOPs of formulas.py (zero-bubble paper Table 1, after Korthikanti et al.: F = 24bsh^2 + 4bs^2h, "
                f"B = 24bsh^2 + 8bs^2h, W = 24bsh^2 per classic block; LM head 2bshV each) at {gpu.tflops:g} "
                f"sustained TFLOP/s ({hardware.source_of('tflops')})",
        "time.p2p": f"hidden states s*b*h*e bytes over {hardware.p2p} at {hardware.p2p_gbps:g} GB/s "
                    f"({hardware.source_of(hardware.p2p + '_gbps')}) + {hardware.p2p_latency_ms:g} ms per message "
                    "(assumed)",
        "memory.activation": "Korthikanti et al.: 34sbh + 5as^2b bytes per block without recomputation (the s^2 "
                             "term only without flash attention), 20sbh with selective recomputation (PipeOffload), "
                             "2sbh with full; embedding sbh, head 4sbh + fp32 logits 4sbV",
        "memory.weight_hold": "zero-bubble paper Table 1: 32sbh of the 34sbh is held until W (the same share here)",
    }
    if model.recompute == "decide":
        sources["recompute"] = ("Megatron's full recompute of the transformer blocks: keep = each block's input 2sbh "
                                "+ the embedding's and the LM head's activations (not recomputed); time = the "
                                "blocks' forward (not the head's GEMM); the other figures are those of no recompute")
    if layout.capacity == "hbm":
        sources["memory.capacity"] = (f"{gpu.hbm_gib:g} GiB HBM ({hardware.source_of('hbm_gib')}) less "
                                      f"{formulas.STATIC_BYTES_PER_PARAM} bytes per parameter of the device's stages "
                                      "(mixed-precision Adam, ZeRO paper)")
    if layout.offload:
        sources["offload.bandwidth"] = (f"{gpu.host_link_gbps:g} GB/s per direction "
                                        f"({hardware.source_of('host_link_gbps')})")
        sources["offload.links"] = (f"shared PCIe switch: {gpu.shared_pcie_switch} "
                                    f"({hardware.source_of('shared_pcie_switch')})")
    return sources


def build_problem(model: Transformer, hardware: Hardware, layout: Layout, partition: Partition) -> Problem:
    """The validated problem of ``model`` cut by ``partition`` on ``hardware``."""
    if layout.backward not in ("split", "fused"):
        raise InputError("--backward", f"must be split or fused, got {layout.backward!r}")
    if model.recompute == "full" and layout.backward == "split":
        raise InputError("--recompute", "full recompute with a split backward cannot be written: W needs the "
                                        "recomputed GEMM inputs from B to W, more than the checkpoint F keeps "
                                        "(weight_hold > activation); use --recompute decide or --backward fused")
    return problem_from_dict(problem_data(model, hardware, layout, partition))
