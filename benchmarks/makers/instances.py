"""Write the hand-picked problem files of instances/ (deterministic; re-run to regenerate).

    python -m benchmarks.makers.instances [--out instances]

Times are in ms and memory in GiB. Uneven stages model a light embedding on the
first stage and a heavy LM head plus loss on the last one.
"""

from __future__ import annotations

import sys

from benchmarks import harness


def problem(name, d, m, *, chunks=1, placement="linear", backward="split", forward=10, backward_input=10,
            backward_weight=10, p2p=0, activation=1, weight_hold=None, capacity=None, offload=None, note="",
            units=None):
    data = {"format": "ppsolve/problem@1", "name": name, "devices": d, "microbatches": m, "chunks": chunks,
            "placement": placement, "backward": backward,
            "time": {"forward": forward, "backward_input": backward_input, "backward_weight": backward_weight,
                     "p2p": p2p},
            "memory": {"activation": activation, "capacity": capacity}}
    if weight_hold is not None:
        data["memory"]["weight_hold"] = weight_hold
    if offload is not None:
        data["offload"] = offload
    if note:
        data["x-note"] = note
    if units:
        data["x-units"] = units  # the axes' units in pictures
    return data


def uneven(S, base, first, last):
    """Per-stage list: ``base`` everywhere, ``first`` and ``last`` at the ends."""
    values = [base] * S
    values[0], values[-1] = first, last
    return values


def vshape_uneven(d, base, first, last):
    """V-shape stages: stage 0 (embedding) light, stage 2d-1 (LM head) heavy."""
    return uneven(2 * d, base, first, last)


def main(argv: list[str] | None = None) -> int:
    args = harness.parser(__doc__, out=harness.ROOT / "instances").parse_args(argv)
    files = {
        "example": problem(
            "example: 4 GPUs, 8 microbatches, heavy LM head, memory cap at 2 activations, PCIe offload", 4, 8,
            forward=uneven(4, 10, 8, 14), backward_input=uneven(4, 10, 8, 16), backward_weight=uneven(4, 8, 6, 12),
            p2p=1, activation=1, weight_hold=0.25, capacity=2,
            offload={"fraction": 1, "bandwidth": {"d2h": 0.2, "h2d": 0.2}},
            note="moving one activation takes 5 ms each way; 1F1B needs 4 activations on device 0, the best schedule without offload takes 440 ms",
            units={"time": "ms", "memory": "activations"}),
        "linear-uniform-split-4x8": problem("linear, F=B=W, unbounded memory", 4, 8),
        "linear-uniform-fused-4x8-1f1bcap": problem("linear, fused backward, capacity of 1F1B", 4, 8,
                                                     backward="fused", capacity=4),
        "linear-uneven-split-4x8-p2p": problem(
            "linear, heavier first and last stages, p2p latency", 4, 8, forward=uneven(4, 10, 12, 16),
            backward_input=uneven(4, 10, 12, 18), backward_weight=uneven(4, 8, 10, 14), p2p=2,
            activation=uneven(4, 1, 1.5, 1.25), weight_hold=0.5, capacity=6),
        "linear-tight-split-4x8": problem("linear, F=B=W, half of 1F1B's memory", 4, 8, capacity=2),
        "interleaved-v2-split-4x8": problem("interleaved v=2, split backward", 4, 8, chunks=2,
                                            placement="interleaved", forward=5, backward_input=5,
                                            backward_weight=5, activation=0.5, capacity=3),
        "interleaved-v2-fused-4x8-p2p": problem("interleaved v=2, fused backward, p2p latency", 4, 8, chunks=2,
                                                placement="interleaved", backward="fused", forward=5,
                                                backward_input=5, backward_weight=5, p2p=1, activation=0.5),
        "vshape-uniform-4x8-1f1bcap": problem("vshape v=2, F=B=W, capacity of 1F1B", 4, 8, chunks=2,
                                              placement="vshape", forward=5, backward_input=5, backward_weight=5,
                                              activation=0.5, capacity=2),
        "vshape-uneven-4x8": problem(
            "vshape v=2, light embedding chunk and heavy LM-head chunk on device 0", 4, 8, chunks=2,
            placement="vshape", forward=vshape_uneven(4, 5, 3, 9), backward_input=vshape_uneven(4, 5, 3, 10),
            backward_weight=vshape_uneven(4, 4, 2, 8), activation=vshape_uneven(4, 0.5, 0.25, 0.75), capacity=3),
        "linear-offload-private-4x8": problem(
            "linear, 3/8 of 1F1B's memory, with offload over private PCIe links (k=0.5)", 4, 8, capacity=1.5,
            offload={"fraction": 1, "bandwidth": {"d2h": 0.2, "h2d": 0.2}}),
        "linear-offload-shared-4x8": problem(
            "linear, half of 1F1B's memory, pairs of GPUs share a PCIe switch", 4, 8, capacity=2,
            offload={"fraction": 0.75, "bandwidth": {"d2h": 0.2, "h2d": 0.2}, "links": [[0, 1], [2, 3]]}),
        "vshape-offload-halfduplex-4x8": problem(
            "vshape v=2, tight memory, half-duplex host link", 4, 8, chunks=2, placement="vshape", forward=5,
            backward_input=5, backward_weight=5, activation=0.5, capacity=1,
            offload={"fraction": 1, "bandwidth": {"d2h": 0.2, "h2d": 0.2}, "duplex": False}),
        "interleaved-offload-shared-8x16": problem(
            "interleaved v=2 on 8 GPUs, links shared by 4 GPUs each", 8, 16, chunks=2, placement="interleaved",
            forward=5, backward_input=5, backward_weight=5, activation=0.5, capacity=4,
            offload={"fraction": 1, "bandwidth": {"d2h": 0.25, "h2d": 0.25}, "links": [[0, 1, 2, 3], [4, 5, 6, 7]]}),
        "linear-uniform-8x32-1f1bcap": problem("linear, 8 GPUs x 32 microbatches, capacity of 1F1B", 8, 32,
                                               capacity=8),
        "vshape-uniform-8x32-1f1bcap": problem("vshape v=2, 8 GPUs x 32 microbatches, capacity of 1F1B", 8, 32,
                                               chunks=2, placement="vshape", forward=5, backward_input=5,
                                               backward_weight=5, activation=0.5, capacity=8),
        "linear-fused-uneven-p2p-6x12": problem(
            "linear fused, 6 GPUs, embedding-light and head-heavy, per-device caps", 6, 12, backward="fused",
            forward=uneven(6, 10, 6, 15), backward_input=uneven(6, 10, 6, 16), backward_weight=uneven(6, 10, 6, 14),
            p2p=1, activation=1, capacity=[6, 5, 4, 3, 2, 2]),
    }
    harness.write_problems(args.out, {f"{name}.json": data for name, data in files.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
