"""The cost model's section of BENCHMARKS.md: ``--partition auto`` against the even
partition, and every instance of instances/papers solved beside the published schedules.

    python -m benchmarks.reports.costmodel_bench [--time-limit 10] [--paper-time-limit 30] [--json ROWS.json]

Every run uses CP-SAT with one thread and seed 0. Auto and even get the same solver
and the same time limit per solve (auto solves its ``--top`` best partitions).
It writes ``docs/bench/sections/30-costmodel.md``, which
``benchmarks.reports.write_benchmarks_md`` puts into BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import harness
from benchmarks.harness import ROOT, fmt
from ppsolve.costmodel import Layout, build_problem, even_partition, hardware_from_dict, transformer_from_dict
from ppsolve.costmodel.search import search_partition
from ppsolve.jsonio import write_json_atomic
from ppsolve.methods import RunOptions, get_method
from ppsolve.problem import Problem, load_problem, problem_from_dict
from ppsolve.studies.bench import run_one

SECTION = ROOT / "docs/bench/sections/30-costmodel.md"
LLAMA_1B = json.loads((ROOT / "models/transformers/llama-1b-like.json").read_text())
LLAMA_3B = {"name": "llama-3b-like", "layers": 28, "hidden": 3072, "ffn": 8192, "heads": 24, "kv_groups": 8,
            "sequence": 4096, "micro_batch_size": 1, "vocabulary": 128256, "gated_mlp": True}
GPT_2B = {"name": "gpt-2b-128k", "layers": 24, "hidden": 2560, "heads": 20, "sequence": 2048,
          "micro_batch_size": 2, "vocabulary": 128000}


@dataclass(frozen=True)
class Case:
    model: dict
    gpu: str
    layout: Layout


CASES = [
    Case(LLAMA_1B, "H100", Layout(devices=4, microbatches=8)),
    Case(LLAMA_3B, "A100", Layout(devices=8, microbatches=16)),
    Case(GPT_2B, "H100", Layout(devices=4, microbatches=8, chunks=2, placement="vshape")),
    Case(LLAMA_1B, "GH200", Layout(devices=4, microbatches=8, chunks=2, placement="interleaved")),
]


def auto_vs_even(case: Case, time_limit: float, top: int) -> dict:
    model = transformer_from_dict(case.model)
    hardware = hardware_from_dict({"gpu": case.gpu})
    make = lambda p: build_problem(model, hardware, case.layout, p)  # noqa: E731
    even = even_partition(model.layers, case.layout.stages)
    options = RunOptions(time_limit=time_limit, threads=1, seed=0)
    row, _ = run_one(make(even), get_method("cpsat"), options)
    began = time.perf_counter()
    result = search_partition(make, even, top=top, time_limit=time_limit, threads=1)
    auto = result.best.schedule
    return {"case": f"{model.name}, {case.gpu}, d{case.layout.devices} {case.layout.placement} "
                    f"v{case.layout.chunks}, m{case.layout.microbatches}",
            "even": even.layout, "even_makespan": row.makespan, "even_status": row.status,
            "even_bound": row.method_bound,
            "auto": result.best.candidate.partition.layout, "auto_makespan": auto.makespan,
            "auto_status": auto.method.status, "ranked": result.scored, "solved": len(result.trials),
            "seconds": time.perf_counter() - began}


def interleaved_variant(problem: Problem, chunks: int = 2) -> Problem:
    """A linear problem as the zero-bubble paper's 1F1B-interleaved runs it: each stage cut into
    ``chunks`` chunks of an equal share of its times and activation, fused backward."""
    data = {k: v for k, v in problem.to_dict().items() if k != "x-partition"}
    d = problem.devices
    share = lambda values: [values[s % d] / chunks for s in range(chunks * d)]  # noqa: E731
    data.update(chunks=chunks, placement="interleaved", backward="fused",
                time={"forward": share(problem.forward), "backward_input": share(problem.backward_input),
                      "backward_weight": share(problem.backward_weight), "p2p": problem.p2p},
                memory={"activation": share(problem.activation), "weight_hold": 0,
                        "capacity": data["memory"]["capacity"]})
    return problem_from_dict(data)


def paper_rows(path: Path, time_limit: float) -> list[dict]:
    """The published schedules as each paper runs them, and CP-SAT on the instance itself.

    Linear instances (zero-bubble paper): 1F1B with B and W fused, the paper's handcrafted ZB-H1 (the
    schedule behind its Table 5 rate) and our heuristic ZB-H1, ZB-H2, and 1F1B-interleaved on two
    chunks per device. Interleaved instances (PipeOffload): interleaved 1F1B, GIS, PO-H, PO-F."""
    problem = load_problem(path)
    published = problem.annotations.get("x-published", {}).get("bubble_rate", {})
    if problem.chunks == 1:
        runs = [("1f1b (fused)", problem_from_dict({**problem.to_dict(), "backward": "fused"}), "1f1b", "1f1b"),
                ("zb-h1-handcrafted", problem, "zb-h1-handcrafted", "zb-h1"), ("zb-h1", problem, "zb-h1", None),
                ("zb-h2", problem, "zb-h2", "zb-h2"),
                ("interleaved-1f1b (v2, fused)", interleaved_variant(problem), "interleaved-1f1b",
                 "interleaved-1f1b"),
                ("interleaved-1f1b (v3, fused)", interleaved_variant(problem, 3), "interleaved-1f1b", None)]
    else:
        runs = [(m, problem, m, None) for m in ("interleaved-1f1b", "gis", "po-h", "po-f")]
    runs.append(("cpsat", problem, "cpsat", None))
    rows = []
    for label, prob, name, key in runs:
        method = get_method(name)
        limit = time_limit if name == "cpsat" else None
        row, schedule = run_one(prob, method, RunOptions(time_limit=limit, threads=1, seed=0))
        rows.append({"instance": path.stem, "method": label, "status": row.status, "makespan": row.makespan,
                     "bubble": row.bubble_ratio, "published": published.get(key) if key else None,
                     "peak": row.peak_memory,
                     "offloaded": row.offloaded, "valid": row.valid, "seconds": row.seconds,
                     "bound": schedule.method.lower_bound if schedule is not None else None,
                     "note": row.note})
    return rows


def _code(layout: str) -> str:
    return "`" + layout.replace("|", "\\|") + "`"  # a bare | would split the table cell


def section(auto_rows: list[dict], paper: list[dict], args: argparse.Namespace) -> str:
    lines = ["## Cost model: partition search and paper instances", "",
             "Written by `" + harness.command(__spec__, "--time-limit", f"{args.time_limit:g}", "--paper-time-limit",
                                             f"{args.paper_time_limit:g}", "--top", str(args.top)) + "` "
             "(CP-SAT, 1 thread, seed 0, on the shared 2-core build machine). Problems from `ppsolve problem` "
             "(times in ms, memory in GiB; capacity = HBM less weights and Adam state).", "",
             "### `--partition auto` against the even partition", "",
             f"Same solver, same {args.time_limit:g} s limit per solve; auto ranks partitions by the makespan lower "
             f"bound and solves the best {args.top}. E = embedding, L = LM head with the loss.", "",
             "`even bound` is the solver's proven lower bound on the even partition's optimum: auto below it beats "
             "that optimum whatever the solver's status.", "",
             "| case | even partition | even makespan | even bound | auto partition | auto makespan | auto vs even | "
             "ranked / solved | search s |", "|---|---|---|---|---|---|---|---|---|"]
    for r in auto_rows:
        gain = 1 - r["auto_makespan"] / r["even_makespan"]
        lines.append(f"| {r['case']} | {_code(r['even'])} | {fmt(r['even_makespan'], '.2f')} ({r['even_status']}) | "
                     f"{fmt(r.get('even_bound'), '.2f')} | "
                     f"{_code(r['auto'])} | {fmt(r['auto_makespan'], '.2f')} ({r['auto_status']}) | "
                     f"{gain:+.1%} faster | "
                     f"{r['ranked']} / {r['solved']} | {r['seconds']:.0f} |")
    lines += ["", "### Paper instances (`instances/papers/`)", "",
              f"Published schedules beside CP-SAT ({args.paper_time_limit:g} s). `published` is the zero-bubble "
              "paper's Table 5 bubble rate where one exists; bubble = 1 - m(F+B+W) / makespan. 1F1B runs B and W as "
              "one backward, as in the paper. All schedules pass the checker unless the note says otherwise.", "",
              "| instance | method | status | makespan | bubble | published | peak GiB | offloaded GiB | note |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in paper:
        note = r["note"] or ("" if r["valid"] in (True, None) else "INVALID")
        lines.append(f"| {r['instance']} | {r['method']} | {r['status']} | {fmt(r['makespan'], '.2f')} | "
                     f"{fmt(r['bubble'], '.4f')} | {fmt(r['published'], '.4f')} | {fmt(r['peak'], '.2f')} | "
                     f"{fmt(r['offloaded'], '.2f')} | "
                     f"{note} |")
    lines += ["", "The zb-* instances have no memory cap, so an optimal CP-SAT row is the least makespan any "
              "schedule reaches with the paper's timings under SPEC.md's rules: a published rate below that "
              "bubble cannot come from these timings.", "",
              "The paper's ZB-H1 rates are its handcrafted ZB-H1 (1F1B with device i's W(j) after B(j+i)) timed "
              "on these costs: `zb-h1-handcrafted` reproduces both; our `zb-h1` (the zero-bubble heuristic at "
              "ZB-H1's memory, as the reference implementation runs it) is at least as fast. The 28.3B ZB-H2 rate "
              "0.0641 equals the closed form (p-1)(F+B-2W) + 2(p-1)T_comm (0.0647), which assumes B >= 2W; here "
              "B = 10.2 < 2W = 15.4, and CP-SAT proves that no schedule under SPEC.md's rules beats bubble "
              "0.1100 (the last device cannot start before (p-1)(F+T_comm)). The 1.5B 1F1B-interleaved rate "
              "depends on the chunk count, which the paper does not state for it: the v2 row is the one compared, "
              "the v3 row (not compared) shows what three chunks give.", "",
              "Published bubble rates against ours (reproduced: within 0.005):", "",
              "| instance | schedule | published | ours | difference | reproduced |", "|---|---|---|---|---|---|"]
    for r in paper:
        if r["published"] is not None:
            ours = r["bubble"]
            diff = None if ours is None else ours - r["published"]
            verdict = "no" if diff is None or abs(diff) > 0.005 else "yes"
            lines.append(f"| {r['instance']} | {r['method']} | {r['published']:.4f} | {fmt(ours, '.4f')} | "
                         f"{'-' if diff is None else f'{diff:+.4f}'} | {verdict} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__, time_limit=10.0, section=SECTION, json=None, render=None)
    parser.add_argument("--paper-time-limit", type=float, default=30.0)
    parser.add_argument("--top", type=int, default=3)
    parser.add_argument("--papers", type=Path, default=ROOT / "instances/papers")
    parser.add_argument("--only", choices=("auto", "papers"),
                        help="run one part; the other's rows come from the --json file of an earlier run")
    args = parser.parse_args(argv)
    if args.render:
        saved = json.loads(args.render.read_text())
        harness.write_section(args.section, section(saved["auto"], saved["papers"], args))
        print(f"wrote {args.section} from {args.render}")
        return 0
    earlier = json.loads(args.json.read_text()) if args.only and args.json else {"auto": [], "papers": []}
    auto_rows = earlier["auto"] if args.only == "papers" else []
    paper = earlier["papers"] if args.only == "auto" else []
    if args.only != "papers":
        for case in CASES:
            auto_rows.append(auto_vs_even(case, args.time_limit, args.top))
            print(json.dumps(auto_rows[-1]), flush=True)
    if args.only != "auto":
        for path in sorted(args.papers.glob("*.json")):
            rows = paper_rows(path, args.paper_time_limit)
            paper += rows
            for r in rows:
                print(json.dumps(r), flush=True)
    if args.json:
        write_json_atomic(args.json, {"auto": auto_rows, "papers": paper})
    harness.write_section(args.section, section(auto_rows, paper, args))
    print(f"wrote {args.section}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
