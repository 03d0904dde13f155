"""Writes instances/papers/: problems built from published configurations.

- Zero-bubble paper (Qi et al., 2023), A100, sequence 1024: the 1.5B, 6.2B, 14.6B and
  28.3B models on 8-32 GPUs with the paper's profiled per-stage T_F, T_B, T_W and
  T_comm, at m = 3p (the first column of its Table 5), and the published bubble rates
  where we have them. Memory from the cost model (M_B = sb(34h + 5as) per layer,
  32sbh held for W: its Table 1), no cap.
- PipeOffload (2025), A100, GQA with 8 groups: GPT-3-like models, sequence 4k-32k,
  every cost from the cost model (selective recomputation: the 20sbh activation of
  its k formula), full offload allowed over A100's shared PCIe links, cap = HBM less
  weights and Adam state.

    python -m benchmarks.makers.papers [--out instances/papers]
"""

from __future__ import annotations

import sys

from benchmarks import harness
from ppsolve.costmodel import Layout, even_partition, hardware_from_dict, problem_data, transformer_from_dict
from ppsolve.costmodel.build import GIB, MEMORY_DIGITS
from ppsolve.costmodel.formulas import block
from ppsolve.problem import PROBLEM_FORMAT, problem_from_dict

ZB_SOURCE = "Qi et al., Zero Bubble Pipeline Parallelism (ICLR 2024), section 5 and Table 5, A100 cluster"
PO_SOURCE = "PipeOffload (2025): GPT-3-like configurations, A100, GQA with 8 groups, sequence 4k-32k"

# name: (layers, hidden, heads, p, b, T_F, T_B, T_W, T_comm ms, published Table 5 rates at m = 3p)
ZERO_BUBBLE = {
    "1.5b": (22, 2304, 24, 8, 6, 18.5, 18.1, 9.3, 0.6,
             {"1f1b": 0.2431, "interleaved-1f1b": 0.1055, "zb-h1": 0.1585, "zb-h2": 0.1083}),
    "6.2b": (30, 4096, 32, 8, 3, 29.8, 29.5, 19.6, 0.55, {}),
    "14.6b": (46, 5120, 40, 16, 1, 11.3, 11.3, 8.1, 0.38, {}),
    "28.3b": (62, 6144, 48, 32, 1, 10.4, 10.2, 7.7, 0.43,
              {"1f1b": 0.2646, "interleaved-1f1b": 0.1493, "zb-h1": 0.1421, "zb-h2": 0.0641}),
}

# name: (layers, hidden, sequence, devices, microbatches)
PIPE_OFFLOAD = {
    "5.8b-s4k": (32, 4096, 4096, 8, 32),
    "5.8b-s32k": (32, 4096, 32768, 8, 32),
    "10.5b-s16k": (38, 5120, 16384, 8, 16),
    "18.1b-s8k": (46, 6144, 8192, 16, 32),
}


def zero_bubble(name: str, spec: tuple) -> dict:
    layers, hidden, heads, p, b, t_f, t_b, t_w, t_comm, published = spec
    model = transformer_from_dict({"name": f"zb-{name}", "layers": layers, "hidden": hidden, "heads": heads,
                                   "sequence": 1024, "micro_batch_size": b, "vocabulary": 50257,
                                   "flash_attention": False})
    partition = even_partition(layers, p)
    part = block(model)
    m = 3 * p
    return {
        "format": PROBLEM_FORMAT, "name": f"zero-bubble paper {name.upper()}, p = {p}, m = {m}",
        "devices": p, "microbatches": m, "chunks": 1, "placement": "linear", "backward": "split",
        "time": {"forward": t_f, "backward_input": t_b, "backward_weight": t_w, "p2p": t_comm},
        "memory": {"activation": [round(n * part.activation / GIB, MEMORY_DIGITS) for n in partition.layers],
                   "weight_hold": [round(n * part.weight_hold / GIB, MEMORY_DIGITS) for n in partition.layers],
                   "capacity": None},
        "x-partition": partition.annotation(),
        "x-published": {"bubble_rate": published, "bubble_rate_definition":
                        "1 - m (T_F + T_B + T_W) / makespan; 1F1B runs B and W as one backward (fused here)"},
        "x-sources": {
            "model": f"{ZB_SOURCE}: {layers} layers, hidden {hidden}, {heads} heads, sequence 1024, "
                     f"micro-batch {b}, {p} pipeline stages",
            "time": f"{ZB_SOURCE}: profiled per-stage T_F {t_f}, T_B {t_b}, T_W {t_w}, T_comm {t_comm} ms",
            "memory": "cost model: M_B = sb(34h + 5as) bytes per layer, 32sbh held for W (the paper's Table 1), "
                      "in GiB, layers per stage as x-partition",
            "microbatches": "m = 3p, the first setting of the paper's Table 5",
        },
    }


def pipe_offload(name: str, spec: tuple) -> dict:
    layers, hidden, sequence, devices, m = spec
    model = transformer_from_dict({"name": f"po-{name}", "layers": layers, "hidden": hidden,
                                   "heads": hidden // 128, "kv_groups": 8, "sequence": sequence,
                                   "micro_batch_size": 1, "vocabulary": 50257, "recompute": "selective"})
    layout = Layout(devices=devices, microbatches=m, chunks=2, placement="interleaved", offload=True)
    data = problem_data(model, hardware_from_dict({"gpu": "A100"}), layout,
                        even_partition(layers, layout.stages))
    data["name"] = f"PipeOffload {name}, {devices} GPUs, interleaved v2, m = {m}"
    data["x-sources"] = {"model": f"{PO_SOURCE}: {layers} layers, hidden {hidden}, sequence {sequence}; "
                                  "head size 128, vocabulary 50257 and micro-batch 1 assumed",
                         "costs": "cost model (x-costmodel.sources)"}
    return data


def main(argv: list[str] | None = None) -> int:
    args = harness.parser(__doc__, out=harness.ROOT / "instances" / "papers").parse_args(argv)
    files = {f"zb-{name}-p{spec[3]}-m{3 * spec[3]}.json": zero_bubble(name, spec) for name, spec in ZERO_BUBBLE.items()}
    files |= {f"po-{name}-d{spec[3]}-m{spec[4]}.json": pipe_offload(name, spec) for name, spec in PIPE_OFFLOAD.items()}
    for data in files.values():
        problem_from_dict(data)  # each is a valid problem
    harness.write_problems(args.out, files)
    return 0


if __name__ == "__main__":
    sys.exit(main())
