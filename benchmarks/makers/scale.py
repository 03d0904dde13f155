"""Write the problems at the sizes users run to instances/scale/ (deterministic).

    python -m benchmarks.makers.scale [--out instances/scale]

The grid of issue 12: d in {8, 16, 32}; m in {2d, 4d, 8d}; v = 1 (linear) and v = 2
(V-shape without offload, interleaved with offload, where PipeOffload's schedules apply);
uneven transformer-like stages (a light embedding stage, an LM-head stage 1.6x the work and
1.5x the activation), p2p latency 5% of a stage's F; caps at 1/2, 3/4 and 1 of 1F1B's peak (M);
without offload, and with offload at k = 0.5 and 1.5 (PipeOffload's k: the round trip of the
heaviest stage's activation over its F + B), on private links and on links shared by two devices.
Each file's ``x-suite`` says how it was made; ``x-suite.tags`` has "core" on the few problems
a quick benchmark runs (``ppsolve bench`` over ``--tag core`` files; see benchmarks/reports/scale_bench.py).
"""

from __future__ import annotations

import sys
from fractions import Fraction

from benchmarks import harness
from benchmarks.makers import suite
from benchmarks.makers.suite import Spec

CAPS = (Fraction(1, 2), Fraction(3, 4), Fraction(1))
OFFLOAD = ((None, 1), (0.5, 1), (1.5, 1), (0.5, 2), (1.5, 2))  # (k, devices per link)


def specs() -> list:
    out = []
    for d in (8, 16, 32):
        for m in (2 * d, 4 * d, 8 * d):
            for cap in CAPS:
                for k, link in OFFLOAD:
                    layouts = [("linear", 1), ("vshape", 2)] if k is None else [("linear", 1), ("interleaved", 2)]
                    for placement, chunks in layouts:
                        core = m == 4 * d and cap == Fraction(1, 2) and (k is None or (k == 1.5 and link == 2))
                        out.append(Spec(d, m, placement, chunks, "split", suite.TRANSFORMER, uneven=True, cap=cap,
                                        p2p=0.5, k=k, link_size=link, k_basis="FB",
                                        tags=("scale",) + (("core",) if core else ())))
    return out


def main(argv: list[str] | None = None) -> int:
    args = harness.parser(__doc__, out=harness.ROOT / "instances" / "scale").parse_args(argv)
    return suite.write_problems(specs(), args.out)


if __name__ == "__main__":
    sys.exit(main())
