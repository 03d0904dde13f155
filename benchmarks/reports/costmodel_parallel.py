"""The parallelism table of docs/costmodel.md: static memory, activation and capacity per stage,
and the schedule ``ppsolve problem --partition auto`` picks, for GPT-3-175B-like and 70B-like setups.

    python -m benchmarks.reports.costmodel_parallel [--time-limit 10] [--top 2]

CP-SAT, one thread, seed 0, ``--time-limit`` seconds on each of the ``--top`` best partitions.
Prints the markdown table.
"""

from __future__ import annotations

from benchmarks import harness
from benchmarks.harness import ROOT
from ppsolve.costmodel import Layout, build_problem, even_partition, hardware_of_gpu, load_transformer
from ppsolve.costmodel.parallel import Parallelism
from ppsolve.costmodel.search import search_partition

GPT3 = ROOT / "models/transformers/gpt-3-175b-like.json"
LLAMA70B = ROOT / "models/transformers/llama-3-70b-like.json"

# (model, GPU, t, pipeline stages p, D, optimizer sharding, microbatches)
CASES = [(GPT3, "A100", 8, 8, 1, "none", 64), (GPT3, "A100", 8, 16, 1, "none", 64)]
CASES += [(LLAMA70B, "H100", t, 8, d, "optimizer", 64) for t in (4, 8) for d in (8, 16, 32, 64)]


def row(case, time_limit: float, top: int) -> str:
    path, gpu, t, p, d, sharding, m = case
    model = load_transformer(path)
    layout = Layout(devices=p, microbatches=m, parallel=Parallelism(tensor=t, sequence=True, data=d,
                                                                    sharding=sharding))
    make = lambda part: build_problem(model, hardware_of_gpu(gpu), layout, part)  # noqa: E731
    result = search_partition(make, even_partition(model.layers, p), top=top, time_limit=time_limit, threads=1)
    problem, schedule = result.best.candidate.problem, result.best.schedule
    memory = problem.annotations["x-costmodel"]["memory"]
    static = [dev["static"] for dev in memory["devices"]]
    first, middle, last = 0, p // 2, p - 1
    trio = lambda xs, f="{:.1f}": " / ".join(f.format(xs[i]) for i in (first, middle, last))  # noqa: E731
    return (f"| {model.name} | {gpu} | {t} | {p} | {d} | {sharding} | {m} | {trio(static)} | "
            f"{trio(problem.activation, '{:.2f}')} | {trio(problem.capacity)} | {result.best.candidate.partition} | "
            f"{schedule.makespan:.0f} | {schedule.method.status} | {schedule.bubble_ratio:.1%} | "
            f"{trio(schedule.peak_memory)} |")


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__, time_limit=10.0)
    parser.add_argument("--top", type=int, default=2)
    args = parser.parse_args(argv)
    print("| model | GPU | t (SP) | p | D | sharding | m | static GiB (first / middle / last stage) | "
          "activation GiB per microbatch | capacity left GiB | partition (auto) | makespan ms | status | bubble | "
          "peak GiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for case in CASES:
        print(row(case, args.time_limit, args.top), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
