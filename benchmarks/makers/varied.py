"""Write per-microbatch problems (contract version 4) to instances/per-microbatch/ (deterministic).

    python -m benchmarks.makers.varied [--out instances/per-microbatch]

- ``dynapipe-dD-mM-sSIGMA-kSEED``: DynaPipe's generator (EuroSys'24) as issue 40 states it: each microbatch
  has a multiplier clip(N(1, sigma), 0.1, 10), normalised to mean 1; on every stage F = 40 x multiplier,
  B = 2F (fused backward), activation = multiplier; the cap is the peak of 1F1B in data order (so data-order
  1F1B fits exactly and any other order or schedule must fit the same memory).
- ``longctx-dD-mM-kSEED``: a long-context batch: documents drawn from a long-tailed length distribution
  (lognormal, median 2048 tokens, sigma 1.5, clipped to 64..32768) packed in data order into microbatches
  of 32768 tokens (documents not split; one longer than the budget is cut to it). Per microbatch, half of
  a single-document microbatch's forward is attention (document-masked causal attention costs the sum of
  squared document lengths), the other half scales with tokens; F = 40 for a full single document,
  B = 2F fused, activations scale with tokens (flash attention keeps no score matrix), cap = data-order
  1F1B's peak.
- ``example``: the README's example (instances/example.json) with 8 packed microbatches of given multipliers.
"""

from __future__ import annotations

import math
import random

from benchmarks import harness
from ppsolve.baselines.families.onef1b import onef1b_orders
from ppsolve.problem import problem_from_dict
from ppsolve.schedule import make_schedule
from ppsolve.simulator import simulate

TOKENS = 32768
EXAMPLE_MULTIPLIERS = [1.6, 0.5, 1.0, 2.2, 0.7, 0.4, 1.2, 0.4]


def dynapipe_multipliers(m: int, sigma: float, seed: int) -> list[float]:
    """m multipliers clip(N(1, sigma), 0.1, 10), normalised to mean 1 (rounded to 4 digits)."""
    rng = random.Random(seed)
    raw = [min(10.0, max(0.1, rng.gauss(1.0, sigma))) for _ in range(m)]
    mean = sum(raw) / m
    return [round(x / mean, 4) for x in raw]


def pack_in_order(lengths: list[int], budget: int) -> list[list[int]]:
    """Documents into microbatches of at most ``budget`` tokens in data order (a new one when the next
    document does not fit); a document longer than the budget is cut to it."""
    batches: list[list[int]] = [[]]
    for length in lengths:
        length = min(length, budget)
        if sum(batches[-1]) + length > budget:
            batches.append([])
        batches[-1].append(length)
    return [b for b in batches if b]


def long_context_batches(m: int, seed: int) -> list[list[int]]:
    """m microbatches of packed long-tailed documents (see the module docstring)."""
    rng = random.Random(seed)
    lengths: list[int] = []
    while True:
        lengths.append(int(min(TOKENS, max(64, rng.lognormvariate(math.log(2048), 1.5)))))
        batches = pack_in_order(lengths, TOKENS)
        if len(batches) > m:
            return batches[:m]


def long_context_costs(batches: list[list[int]]) -> tuple[list[float], list[float]]:
    """(forward multiplier, activation multiplier) per microbatch: half tokens, half sum of squares."""
    forward = [0.5 * sum(b) / TOKENS + 0.5 * sum(x * x for x in b) / TOKENS ** 2 for b in batches]
    activation = [sum(b) / TOKENS for b in batches]
    return [round(f, 4) for f in forward], [round(a, 4) for a in activation]


def problem(name: str, d: int, forward: list[float], activation: list[float], note: str, *,
            extra: dict | None = None) -> dict:
    """A linear, fused-backward problem with F = 40 x forward[j], B = 2F and the given activations on every
    stage, its cap the peak of data-order 1F1B."""
    m = len(forward)
    data = {"format": "ppsolve/problem@1", "name": name, "devices": d, "microbatches": m, "chunks": 1,
            "placement": "linear", "backward": "fused",
            "time": {"forward": [[round(40 * f, 4) for f in forward]] * d,
                     "backward_input": [[round(80 * f, 4) for f in forward]] * d, "backward_weight": 0, "p2p": 0},
            "memory": {"activation": [list(activation)] * d, "capacity": None},
            "x-note": note, "x-units": {"time": "ms", "memory": "activations"}, **(extra or {})}
    loose = problem_from_dict(data)
    peak = max(make_schedule(loose, simulate(loose, onef1b_orders(loose)), "1f1b").peak_memory)
    data["memory"]["capacity"] = round(peak, 6)
    return data


def example() -> dict:
    """instances/example.json's pipeline with 8 packed microbatches: microbatch j costs mult[j] x the stage's
    times and holds mult[j] activations (a quarter after B until W; an eighth when recomputed)."""
    mult = EXAMPLE_MULTIPLIERS
    base = {"forward": [8, 10, 10, 14], "backward_input": [8, 10, 10, 16], "backward_weight": [6, 8, 8, 12]}
    return {"format": "ppsolve/problem@1",
            "name": "per-microbatch example: 4 GPUs, 8 packed microbatches of different lengths, memory cap, "
                    "PCIe offload",
            "devices": 4, "microbatches": 8, "chunks": 1, "placement": "linear", "backward": "split",
            "time": {**{key: [[round(t * x, 2) for x in mult] for t in times] for key, times in base.items()},
                     "p2p": 1},
            "memory": {"activation": [mult] * 4, "weight_hold": [[round(x / 4, 2) for x in mult]] * 4, "capacity": 3},
            "offload": {"fraction": 1, "bandwidth": {"d2h": 0.2, "h2d": 0.2}},
            "recompute": {"keep": [[round(x / 8, 2) for x in mult]] * 4},
            "x-note": f"microbatch j costs mult[j] x the stage's time and holds mult[j] activations; mult = {mult}",
            "x-units": {"time": "ms", "memory": "activations"}}


def files() -> dict[str, dict]:
    out: dict[str, dict] = {"example": example()}
    for d, m in ((8, 16), (8, 32), (16, 32)):
        for sigma in (0.1, 0.4, 0.8, 1.6, 3.2):
            for seed in (0, 1):
                mult = dynapipe_multipliers(m, sigma, seed)
                name = f"dynapipe-d{d}-m{m}-s{sigma:g}-k{seed}"
                out[name] = problem(name, d, mult, mult, f"DynaPipe's generator: sigma {sigma:g}, seed {seed}; "
                                                         f"cap = data-order 1F1B's peak")
    for seed in (0, 1):
        batches = long_context_batches(32, seed)
        forward, activation = long_context_costs(batches)
        name = f"longctx-d8-m32-k{seed}"
        out[name] = problem(name, 8, forward, activation,
                            "long-context batch: lognormal documents (median 2048, sigma 1.5) packed into 32768 "
                            "tokens; attention half of a single-document forward", extra={"x-documents": batches})
    return out


def main(argv: list[str] | None = None) -> int:
    args = harness.parser(__doc__, out=harness.ROOT / "instances" / "per-microbatch").parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    harness.write_problems(args.out, {f"{name}.json": data for name, data in files().items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
