"""Write the paper-shaped benchmark problems to instances/suite/ (deterministic).

    python -m benchmarks.makers.suite [--out instances/suite]

Every problem states in ``x-suite`` how it was made: the memory reference M
(the peak activation memory 1F1B would hold: on device i, min(m, d - i)
microbatches of all its stages' activations; max over devices), the cap as a
multiple of M, and for offload k = (time to move one full activation of a
stage to host and back) / (that stage's F + B + W time), as in PipeOffload.
Sizes stay small enough for every baseline to run in well under a second, so
that the solver's time limit is what governs a benchmark run.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

from benchmarks import harness
from ppsolve.bounds import require_feasible_capacity
from ppsolve.problem import expand_placement, problem_from_dict

UNIFORM = (10.0, 10.0, 10.0)  # F, B (input gradient), W (weight gradient)
TRANSFORMER = (10.0, 12.0, 8.0)


@dataclass(frozen=True)
class Spec:
    """One suite problem. ``cap`` is a multiple of M (None: unbounded); ``k`` enables offload."""

    devices: int
    microbatches: int
    placement: str = "linear"
    chunks: int = 1
    backward: str = "split"
    costs: tuple[float, float, float] = UNIFORM
    uneven: bool = False
    cap: Fraction | None = Fraction(1)
    p2p: float = 0.0
    k: float | None = None
    fraction: float = 1.0
    link_size: int = 1
    duplex: bool = True
    tags: tuple[str, ...] = field(default_factory=tuple)
    k_basis: str = "FBW"  # k's denominator: the stage's F+B+W (this suite) or F+B (PipeOffload's k)

    @property
    def name(self) -> str:
        short = {"linear": "lin", "interleaved": f"int{self.chunks}", "vshape": f"vsh{self.chunks}"}[self.placement]
        parts = [short, f"d{self.devices}", f"m{self.microbatches}", self.backward]
        if self.uneven:
            parts.append("uneven")
        parts.append("capinf" if self.cap is None else f"cap{_ratio(self.cap)}")
        if self.k is not None:
            parts.append(f"k{self.k:g}")
            if self.fraction < 1:
                parts.append(f"f{self.fraction:g}")
            if self.link_size > 1:
                parts.append(f"shared{self.link_size}")
            if not self.duplex:
                parts.append("half")
        return "-".join(parts)


def _ratio(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}_{value.denominator}"


def _per_stage(spec: Spec) -> dict[str, list[float]]:
    """Stage costs and activations; each device's stages sum to one 'layer block' of activation 1."""
    stages = spec.devices * spec.chunks
    f, b, w = spec.costs
    scale = [1.0 / spec.chunks] * stages
    act = [1.0 / spec.chunks] * stages
    if spec.uneven:
        # A light embedding on the first stage, a heavy LM head (and its logits) on the last.
        scale[0] *= 0.7
        scale[-1] *= 1.6
        act[-1] *= 1.5
    return {"forward": [round(f * s, 6) for s in scale], "backward_input": [round(b * s, 6) for s in scale],
            "backward_weight": [round(w * s, 6) for s in scale], "activation": [round(a, 6) for a in act]}


def reference_memory(spec: Spec, activation: list[float]) -> float:
    """M: the peak 1F1B would hold, min(m, d - i) microbatches of device i's stages, max over devices."""
    placement = expand_placement(spec.placement, spec.devices, spec.chunks)
    per_device = [0.0] * spec.devices
    for stage, device in enumerate(placement):
        per_device[device] += activation[stage]
    return max(min(spec.microbatches, spec.devices - i) * per_device[i] for i in range(spec.devices))


def build(spec: Spec) -> dict:
    costs = _per_stage(spec)
    act = costs.pop("activation")
    m_ref = reference_memory(spec, act)
    capacity = None if spec.cap is None else round(float(spec.cap) * m_ref, 6)
    data = {
        "format": "ppsolve/problem@1", "name": spec.name, "devices": spec.devices,
        "microbatches": spec.microbatches, "chunks": spec.chunks, "placement": spec.placement,
        "backward": spec.backward,
        "time": {**{k: _compact(v) for k, v in costs.items()}, "p2p": spec.p2p},
        "memory": {"activation": _compact(act), "weight_hold": _compact([round(a / 4, 6) for a in act]),
                   "capacity": capacity},
    }
    note = {"memory_reference_M": m_ref, "cap_over_M": None if spec.cap is None else _ratio(spec.cap),
            "costs": "uniform F=B=W" if spec.costs == UNIFORM else "transformer-like F:B:W = 10:12:8",
            "uneven": spec.uneven, "tags": list(spec.tags)}
    if spec.k is not None:
        # Slowest stage sets the link speed: k = (a/d2h + a/h2d) / (F+B+W) with d2h = h2d.
        heavy = max(range(len(act)), key=lambda s: act[s])
        work = costs["forward"][heavy] + costs["backward_input"][heavy]
        if spec.k_basis == "FBW":
            work += costs["backward_weight"][heavy]
        bandwidth = round(2 * act[heavy] / (spec.k * work), 6)
        offload = {"fraction": spec.fraction, "bandwidth": {"d2h": bandwidth, "h2d": bandwidth},
                   "duplex": spec.duplex}
        if spec.link_size > 1:
            offload["links"] = [list(range(i, min(i + spec.link_size, spec.devices)))
                                for i in range(0, spec.devices, spec.link_size)]
        data["offload"] = offload
        note["k"] = spec.k
        if spec.k_basis != "FBW":
            note["k_basis"] = spec.k_basis
    data["x-suite"] = note
    return data


def _compact(values: list[float]):
    return values[0] if all(v == values[0] for v in values) else values


def specs() -> list[Spec]:
    third, half, one, two = Fraction(1, 3), Fraction(1, 2), Fraction(1), Fraction(2)
    out: list[Spec] = []
    # Depths and microbatch counts (m = d, 2d, 4d), linear, 1F1B's memory.
    for d in (4, 8, 16):
        for m in (d, 2 * d, 4 * d):
            out.append(Spec(d, m, tags=("depth", "microbatches")))
    # Placements and backward modes.
    out += [
        Spec(8, 16, "interleaved", 2, tags=("placement",)),
        Spec(8, 16, "vshape", 2, tags=("placement",)),
        Spec(16, 32, "vshape", 2, p2p=1.0, tags=("placement", "p2p")),
        Spec(4, 8, "vshape", 2, "fused", TRANSFORMER, tags=("placement", "fused")),
        Spec(4, 8, "interleaved", 2, "fused", TRANSFORMER, tags=("placement", "fused")),
        Spec(8, 16, backward="fused", costs=TRANSFORMER, p2p=1.0, tags=("fused", "p2p")),
    ]
    # Uneven first/last stages (embedding, LM head).
    out += [
        Spec(8, 32, costs=TRANSFORMER, uneven=True, tags=("uneven",)),
        Spec(4, 16, "vshape", 2, costs=TRANSFORMER, uneven=True, cap=half, tags=("uneven", "memory")),
        Spec(8, 16, "interleaved", 2, "fused", TRANSFORMER, uneven=True, cap=two, tags=("uneven",)),
    ]
    # Memory caps from 1/3 to 2x of 1F1B's.
    out += [Spec(8, 32, cap=c, tags=("memory",)) for c in (third, half, two)]
    out += [Spec(8, 32, "vshape", 2, cap=c, tags=("memory",)) for c in (third, half)]
    # Offload: k = 0.25, 0.5, 1, 2 at a third of 1F1B's memory; shared links; partial fraction.
    out += [Spec(4, 16, cap=third, k=k, tags=("offload",)) for k in (0.25, 0.5, 1.0, 2.0)]
    out += [
        Spec(8, 32, cap=half, k=1.0, link_size=2, tags=("offload", "shared-link")),
        Spec(8, 16, "vshape", 2, cap=third, k=0.5, link_size=2, duplex=False, tags=("offload", "shared-link")),
        Spec(4, 8, "interleaved", 2, "fused", TRANSFORMER, cap=half, k=2.0, fraction=0.5, tags=("offload",)),
        Spec(16, 32, cap=third, k=0.5, link_size=4, tags=("offload", "shared-link")),
    ]
    return out


def write_problems(all_specs: list[Spec], out: Path) -> int:
    """Write each spec's problem to ``out`` (checked feasible), remove files no spec writes."""
    files = {}
    for spec in all_specs:
        data = build(spec)
        require_feasible_capacity(problem_from_dict(data))
        assert f"{spec.name}.json" not in files, f"duplicate name {spec.name}"
        files[f"{spec.name}.json"] = data
    harness.write_problems(out, files)
    stale = [p for p in out.glob("*.json") if p.name not in files]
    for path in stale:
        path.unlink()
    if stale:
        print(f"removed {len(stale)} stale problem files")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = harness.parser(__doc__, out=harness.ROOT / "instances" / "suite").parse_args(argv)
    return write_problems(specs(), args.out)


if __name__ == "__main__":
    sys.exit(main())
