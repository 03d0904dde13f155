"""Long-context study: a plan per training step against packing in data order and the published schedules.

    python -m benchmarks.reports.long_context [--batches 20] [--plan-time 0.25] [--solve-time 60]
        [--solve-batches 4] [--lengths 32768,65536,131072] [--section FILE] [--table FILE] [--json FILE]
        [--render FILE] [--add FILE]

A Llama-3-8B-like model (models/transformers/llama-3-8b-like.json) on 8 H100s, one GPU per pipeline rank,
split backward, memory not capped (at 128K tokens one microbatch's activations on a stage exceed an
H100's memory less its weights; the study compares time). For each token budget per microbatch, batch k
draws documents from ``random.Random(k)``: lengths lognormal with median 2048 tokens and sigma 1.5 (the
long-tailed distribution of ``benchmarks.makers.varied``), clipped to 64 tokens below and to the budget
above, until ``--microbatches`` (32) microbatches are filled in the loader's order. Attention is causal and
document-masked (flash attention: a microbatch's attention costs the sum of L (L + 1) / 2 over its
documents). The layers per stage are those ``--partition auto``'s bound search ranks first on batch 0
(``costmodel.search.rank_partitions``), for the linear and for the interleaved (v = 2) pipeline.

Each batch is packed three ways, ``sequential`` (data order), ``balance`` (the same count of microbatches,
balanced critical cost) and ``balance, documents split`` (``--pack balance --split-documents``: as many
microbatches as data order with documents split, so nearly full ones, and the documents that balancing
needs cut), each by ``costmodel.batch.form_microbatches``, what ``ppsolve problem --pack`` runs. Each
packing is scheduled by 1F1B, ZB-H1 and interleaved 1F1B (microbatches in data order), by
``ppsolve.solve(problem, time_limit=--plan-time, threads=1)`` (the per-step plan), by a ``--solve-time``
solve (1 thread, from the plan) on the first ``--solve-batches`` batches of the whole-document packings,
and bounded by ``makespan_lower_bound`` (or the solve's bound, when higher). Every schedule is checked.
Ratios are per batch, to data-order packing with data-order 1F1B, then averaged. ``--add FILE`` measures
only the packings that ``--json FILE``'s rows lack, on its setups, batches and time options, and writes
them into it.
"""

from __future__ import annotations

import json
import math
import os
import random
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import ppsolve
from benchmarks import harness
from benchmarks.harness import ROOT
from ppsolve.bounds import makespan_lower_bound
from ppsolve.costmodel import Layout, Partition, even_partition, hardware_of_gpu, load_transformer
from ppsolve.costmodel.batch import Formed, form_microbatches
from ppsolve.costmodel.documents import Batch, build_documents_problem, microbatch_time
from ppsolve.costmodel.packing import pack_sequential
from ppsolve.costmodel.search import rank_partitions
from ppsolve.jsonio import write_json_atomic
from ppsolve.methods import RunOptions, get_method, run_and_check

MODEL = ROOT / "models" / "transformers" / "llama-3-8b-like.json"
GPU = "H100"
DEVICES = 8
LENGTHS = (32768, 65536, 131072)
MEDIAN, SIGMA, SHORTEST = 2048, 1.5, 64  # document lengths: lognormal, clipped to SHORTEST..budget
SPLIT = "balance, documents split"
PACKINGS = ("sequential", "balance", SPLIT)
FORMS = {"sequential": ("sequential", False), "balance": ("balance", False), SPLIT: ("balance", True)}  # pack, split
LINEAR = ("1f1b", "zb-h1")  # on the linear pipeline
INTERLEAVED = "interleaved-1f1b"  # on the interleaved one (v = 2)
BASE = "1f1b"  # the ratios' reference, with sequential packing


def draw_documents(budget: int, microbatches: int, seed: int) -> list[int]:
    """The documents of batch ``seed``: lognormal lengths (module doc) in the loader's order, as many as fill
    ``microbatches`` microbatches of ``budget`` tokens in data order."""
    rng, stream = random.Random(seed), []
    while sum(stream) < 2 * microbatches * budget:  # more than enough: a microbatch is at least half full
        stream.append(int(min(budget, max(SHORTEST, rng.lognormvariate(math.log(MEDIAN), SIGMA)))))
    return [n for mb in pack_sequential(stream, budget)[:microbatches] for n in mb]


@dataclass
class Setup:
    """One token budget's pipeline: the model, GPU, layouts and partitions every batch of it uses."""

    budget: int
    microbatches: int
    model: object = field(repr=False)
    hardware: object = field(repr=False)
    linear: Layout
    interleaved: Layout
    partitions: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @classmethod
    def make(cls, budget: int, microbatches: int, partitions: dict | None = None) -> "Setup":
        """The setup of ``budget``; ``partitions`` (as ``Setup.partitions``) skips the partition search."""
        model, hardware = load_transformer(MODEL), hardware_of_gpu(GPU)
        linear = Layout(devices=DEVICES, microbatches=microbatches, capacity=None)
        setup = cls(budget, microbatches, model, hardware, linear,
                    replace(linear, chunks=2, placement="interleaved"),
                    {name: tuple(layers) for name, layers in (partitions or {}).items()})
        first = pack_sequential(draw_documents(budget, microbatches, 0), budget)
        for name, layout in (("linear", setup.linear), ("interleaved", setup.interleaved)):
            if name in setup.partitions:
                continue
            ranked, _ = rank_partitions(lambda part, layout=layout: build_documents_problem(
                model, hardware, layout, part, first), even_partition(model.layers, layout.stages))
            setup.partitions[name] = ranked[0].partition.layers
        return setup

    def partition(self, name: str) -> Partition:
        return Partition(self.partitions[name])

    def cost(self):
        """The critical cost of a microbatch on the linear pipeline (what ``balance`` balances)."""
        return microbatch_time(self.model, self.hardware, self.linear, self.partition("linear"))

    def problem(self, name: str, microbatches):
        layout = self.linear if name == "linear" else self.interleaved
        return build_documents_problem(self.model, self.hardware, layout, self.partition(name), microbatches)


@dataclass
class Row:
    """One batch packed one way: its figures (step times in ms; None where a schedule does not apply)."""

    budget: int
    batch: int
    packing: str
    documents: int
    microbatches: int
    imbalance: float
    floor: float  # the costliest document (or piece) x microbatches / total: no packing of them goes below it
    pack_s: float
    build_s: float
    schedules: dict[str, float | None] = field(default_factory=dict)
    plan: float | None = None
    plan_s: float | None = None
    solve: float | None = None
    solve_status: str = ""
    bound: float | None = None
    cut: int = 0  # documents cut
    work: float | None = None  # the critical ms of every microbatch together


def _form(setup: Setup, documents: list[int], packing: str, cost) -> Formed:
    """``documents`` packed the way ``packing`` names, as ``ppsolve problem --pack`` packs them."""
    pack, split = FORMS[packing]
    return form_microbatches(Batch(tuple(documents), None, setup.budget), setup.budget, pack, split, cost)[-1]


def _makespan(method: str, problem) -> float | None:
    outcome = run_and_check(get_method(method), problem, RunOptions(threads=1, seed=0))
    return outcome.schedule.makespan if outcome.schedule is not None and outcome.valid else None


def measure_batch(setup: Setup, k: int, plan_time: float, solve_time: float | None,
                  packings: tuple[str, ...] = PACKINGS) -> list[Row]:
    """Batch ``k`` of ``setup`` packed each way of ``packings``, scheduled each way (module doc)."""
    documents = draw_documents(setup.budget, setup.microbatches, k)
    cost = setup.cost()
    rows = []
    for packing in packings:
        split = FORMS[packing][1]
        began = time.perf_counter()
        formed = _form(setup, documents, packing, cost)
        pack_s = time.perf_counter() - began
        problem = setup.problem("linear", formed.microbatches)
        build_s = time.perf_counter() - began - pack_s
        costliest = max(cost.of_documents([n]) for lengths in formed.microbatches for n in lengths)
        floor = costliest * len(formed.costs) / sum(formed.costs)
        row = Row(setup.budget, k, packing, len(documents), len(formed.microbatches), formed.imbalance, floor,
                  pack_s, build_s, cut=formed.cut, work=sum(formed.costs))
        row.schedules = {m: _makespan(m, problem) for m in LINEAR}
        row.schedules[INTERLEAVED] = _makespan(INTERLEAVED, setup.problem("interleaved", formed.microbatches))
        row.bound = makespan_lower_bound(problem).value
        began = time.perf_counter()
        plan = ppsolve.solve(problem, time_limit=plan_time, threads=1)
        row.plan_s, row.plan = time.perf_counter() - began, plan.makespan
        if solve_time and not split:
            solved = ppsolve.solve(problem, time_limit=solve_time, threads=1, warm_start=plan)
            row.solve, row.solve_status = solved.makespan, solved.method.status
            row.bound = max(row.bound, solved.method.lower_bound or 0.0)
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------------------------- the report

def _ratios(rows: list[Row], pick) -> list[float]:
    """pick(row) over data-order 1F1B of the same batch, for the rows where both exist."""
    base = {(r.budget, r.batch): r.schedules.get(BASE) for r in rows if r.packing == "sequential"}
    return [pick(r) / base[r.budget, r.batch] for r in rows
            if pick(r) is not None and base.get((r.budget, r.batch))]


def _cell(rows: list[Row], pick) -> str:
    """Mean step time in s, its standard deviation, and the mean ratio to data-order 1F1B."""
    values = [pick(r) / 1000 for r in rows if pick(r) is not None]
    if not values:
        return "-"
    spread = statistics.pstdev(values)
    return f"{statistics.fmean(values):.1f} ±{spread:.1f} ({statistics.fmean(_ratios(rows, pick)):.3f})"


def _range(values: list[float], spec: str = ".3f") -> str:
    return f"{statistics.fmean(values):{spec}} ({min(values):{spec}}-{max(values):{spec}})" if values else "-"


COLUMNS = [("1F1B", lambda r: r.schedules.get("1f1b")), ("ZB-H1", lambda r: r.schedules.get("zb-h1")),
           ("interleaved 1F1B (v=2)", lambda r: r.schedules.get(INTERLEAVED))]


def report(rows: list[Row], setups: list[Setup], command: str, plan_time: float, solve_time: float | None,
           solve_batches: int, added: str | None = None) -> str:
    """The whole report (``--table``): one table of step times, one of packing and planning time, the targets."""
    batches = len({r.batch for r in rows})
    lines = ["# Long context: a plan per step against packing in data order", "",
             f"`{command}`, one run on the shared 2-core build machine (other jobs running: wall times are "
             "upper bounds). Llama-3-8B-like on 8 H100s (one GPU per pipeline rank, split backward, memory not "
             f"capped), {batches} batches per token budget, each 32 microbatches in data order; document lengths "
             f"lognormal (median {MEDIAN}, sigma {SIGMA}) clipped to {SHORTEST}..budget tokens; causal "
             "document-masked attention. Step time: mean over the batches in s, ±standard deviation, (mean "
             "ratio to data-order packing with data-order 1F1B of the same batch). "
             f"Plan = `ppsolve.solve(problem, time_limit={plan_time:g}, threads=1)`; the {solve_time:g} s solve "
             f"(1 thread, started from the plan) ran on the first {solve_batches} batches of each budget only, "
             f"whole documents only; bound = the best lower bound known (the analytic bound, or the solve's). "
             f"{SPLIT!r}: `--pack balance --split-documents`, as many microbatches as data order with documents "
             "split (nearly full ones); a cut document's pieces do not attend to each other."
             + (f" Its rows were added by `{added}`." if added else ""), ""]
    heads = ["tokens/microbatch", "packing", *(c for c, _ in COLUMNS), f"plan {plan_time:g} s",
             f"{solve_time:g} s solve ({solve_batches} batches)", "bound"]
    lines += harness.table(heads)
    for setup in setups:
        for packing in PACKINGS:
            mine = [r for r in rows if r.budget == setup.budget]
            solved = [r for r in mine if r.batch < solve_batches]
            cells = [_cell_of(mine, packing, pick) for _, pick in COLUMNS]
            cells += [_cell_of(mine, packing, lambda r: r.plan),
                      _solved_cell(solved, packing), _cell_of(mine, packing, lambda r: r.bound)]
            lines.append(harness.row([f"{setup.budget // 1024}K", packing, *cells]))
    lines += ["", "Packing and planning: imbalance = costliest microbatch x count / total critical cost (floor: "
              "the costliest single document's, which no packing without splitting goes below); split: "
              f"{SPLIT}'s microbatches, imbalance, documents cut, and its work (the critical ms of all its microbatches) "
              "over balance's; times per step in s, mean (least-most).", ""]
    lines += harness.table(["tokens/microbatch", "partition (linear; interleaved)", "documents",
                            "imbalance data order", "imbalance balance", "floor", "split microbatches",
                            "split imbalance", "split documents cut", "split work / balance's",
                            "balance packing s", "split packing s",
                            "problem build s", f"plan s (limit {plan_time:g})"])
    for setup in setups:
        mine = [r for r in rows if r.budget == setup.budget]
        by = {p: [r for r in mine if r.packing == p] for p in PACKINGS}
        lines.append(harness.row([f"{setup.budget // 1024}K", f"{_layers(setup.partitions['linear'])}; "
                                  f"{_layers(setup.partitions['interleaved'])}",
                                  _range([r.documents for r in by["sequential"]], ".0f"),
                                  _range([r.imbalance for r in by["sequential"]]),
                                  _range([r.imbalance for r in by["balance"]]),
                                  _range([r.floor for r in by["balance"]]),
                                  _range([r.microbatches for r in by[SPLIT]], ".1f"),
                                  _range([r.imbalance for r in by[SPLIT]]),
                                  _range([r.cut for r in by[SPLIT]], ".1f"), f"{_work_ratio(mine):.3f}",
                                  _range([r.pack_s for r in by["balance"]]),
                                  _range([r.pack_s for r in by[SPLIT]]),
                                  _range([r.build_s for r in mine]), _range([r.plan_s for r in mine])]))
    return "\n".join(lines + ["", targets(rows)])


def section(rows: list[Row], command: str, table_link: str | None, added: str | None = None) -> str:
    """BENCHMARKS.md's summary: the mean ratios per budget, the targets, the link to the whole report."""
    budgets = sorted({r.budget for r in rows})

    def means(packing: str, pick) -> str:
        mine = lambda r: pick(r) if r.packing == packing else None  # noqa: E731
        return "/".join(f"{statistics.fmean(_ratios([r for r in rows if r.budget == b], mine)):.3f}" for b in budgets)

    lines = ["## Long context: a plan per step against packing in data order", "",
             f"`{command}`, one run on the shared 2-core machine: Llama-3-8B-like on 8 H100s, "
             f"{'/'.join(f'{b // 1024}K' for b in budgets)} tokens per microbatch, long-tailed documents, "
             "document-masked attention. Mean step time over data-order packing with data-order 1F1B: "
             f"balanced packing with 1F1B {means('balance', lambda r: r.schedules.get(BASE))}, with ZB-H1 "
             f"{means('balance', lambda r: r.schedules.get('zb-h1'))}; the per-step plan with data-order packing "
             f"{means('sequential', lambda r: r.plan)}, with balanced packing {means('balance', lambda r: r.plan)}; "
             f"the bound {means('sequential', lambda r: r.bound)} (data order), "
             f"{means('balance', lambda r: r.bound)} (balanced)."
             + ("" if not any(r.packing == SPLIT for r in rows) else
                " With documents split where balancing needs (`--pack balance --split-documents`"
                + (f"; rows added by `{added}`" if added else "") + "): 1F1B "
                f"{means(SPLIT, lambda r: r.schedules.get(BASE))}, the per-step plan {means(SPLIT, lambda r: r.plan)}, "
                f"the bound {means(SPLIT, lambda r: r.bound)}."), "", targets(rows)]
    if table_link:
        lines += ["", f"Every figure, and the imbalance and time to plan per budget: [{table_link}]({table_link})."]
    return "\n".join(lines)


def targets(rows: list[Row]) -> str:
    """Issue 41's packing targets at the largest budget, with the figures that bound them."""
    top = max(r.budget for r in rows)
    mine = [r for r in rows if r.budget == top]
    balanced = [r for r in mine if r.packing == "balance"]
    ratio = lambda pick: _ratios(mine, lambda r: pick(r) if r.packing == "balance" else None)  # noqa: E731
    plan, bound, onef1b = ratio(lambda r: r.plan), ratio(lambda r: r.bound), ratio(lambda r: r.schedules.get(BASE))
    imbalance = [r.imbalance for r in balanced]
    floor = [r.floor for r in balanced]
    split = [r for r in mine if r.packing == SPLIT]
    split_text = "" if not split else (
        f" With `--split-documents` (a cut document's pieces do not attend to each other) `--pack balance` "
        f"reaches {statistics.fmean(r.imbalance for r in split):.3f} (most {max(r.imbalance for r in split):.3f}), "
        f"cutting {statistics.fmean(r.cut for r in split):.1f} documents a batch ({min(r.cut for r in split)}-"
        f"{max(r.cut for r in split)}); the per-step plan on it "
        f"{statistics.fmean(_ratios(mine, lambda r: r.plan if r.packing == SPLIT else None)):.3f}, mostly because "
        f"the batch's critical work drops to {_work_ratio(mine):.3f} of whole-document packing's (no attention "
        "between the pieces of a cut document).")
    return (f"Targets at {top // 1024}K tokens per microbatch ({len(balanced)} batches): imbalance after `--pack "
            f"balance` {statistics.fmean(imbalance):.3f} (most {max(imbalance):.3f}; target at most 1.05), where "
            f"the costliest single document alone gives {statistics.fmean(floor):.3f} (least {min(floor):.3f}): "
            "whole documents cannot be balanced below that floor. Planned step time with balanced packing over "
            f"data-order packing with data-order 1F1B: the per-step plan {statistics.fmean(plan):.3f} "
            f"(most {max(plan):.3f}; target at most 0.85), 1F1B {statistics.fmean(onef1b):.3f}, the bound "
            f"{statistics.fmean(bound):.3f}." + split_text)


def _work_ratio(rows: list[Row]) -> float:
    """The mean over batches of the split packing's work over the whole-document balance's."""
    whole = {(r.budget, r.batch): r.work for r in rows if r.packing == "balance"}
    ratios = [r.work / whole[r.budget, r.batch] for r in rows
              if r.packing == SPLIT and r.work and whole.get((r.budget, r.batch))]
    return statistics.fmean(ratios) if ratios else math.nan


def _cell_of(rows: list[Row], packing: str, pick) -> str:
    """:func:`_cell` of ``packing``'s rows, its ratios to the sequential rows' 1F1B."""
    return _cell(rows, lambda r: pick(r) if r.packing == packing else None)


def _solved_cell(rows: list[Row], packing: str) -> str:
    """:func:`_cell_of` the long solve, with the plan's and the bound's mean ratios on the same batches."""
    cell = _cell_of(rows, packing, lambda r: r.solve)
    solved = [r for r in rows if r.packing == packing and r.solve is not None]
    if not solved:
        return cell

    def mean(pick) -> float:
        return statistics.fmean(_ratios(rows, lambda r: pick(r) if r.packing == packing else None))

    proven = sum(r.solve_status == "optimal" for r in solved)
    return (f"{cell[:-1]}; plan {mean(lambda r: r.plan):.3f}, bound {mean(lambda r: r.bound):.3f} on these; "
            f"{proven} of {len(solved)} proven)")


def _layers(layers) -> str:
    return ",".join(map(str, layers))


def figures_of(setups: list[Setup], rows: list[Row], command: str, options: dict) -> dict:
    """What ``--json`` writes and ``--render`` reads: the command that measured them, its time options, the
    setups and the rows."""
    return {"command": command, "options": options, "rows": [asdict(r) for r in rows],
            "setups": [{"budget": s.budget, "microbatches": s.microbatches, "partitions": s.partitions}
                       for s in setups]}


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__, section=None, json=None, render=None)
    parser.add_argument("--batches", type=int, default=20, help="batches per token budget (default %(default)s)")
    parser.add_argument("--microbatches", type=int, default=32, help="microbatches per batch in data order")
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)), help="token budgets per microbatch")
    parser.add_argument("--plan-time", type=float, default=0.25, help="the per-step plan's time limit, s")
    parser.add_argument("--solve-time", type=float, default=60.0, help="the long solve's time limit, s (0: none)")
    parser.add_argument("--solve-batches", type=int, default=4, help="batches per budget the long solve runs on")
    parser.add_argument("--table", type=Path, help="write the whole report (Markdown) here; the section links it")
    parser.add_argument("--add", type=Path, metavar="FILE",
                        help="measure only the packings FILE's rows lack (FILE: --json's), on its setups, batches "
                             "and time options, write them into it and report it all")
    args = parser.parse_args(argv)
    command = harness.command(__spec__, *(sys.argv[1:] if argv is None else argv))
    options = {"plan_time": args.plan_time, "solve_time": args.solve_time, "solve_batches": args.solve_batches}
    if args.render or args.add:
        figures = json.loads((args.render or args.add).read_text())
        setups = [Setup.make(x["budget"], x["microbatches"], x["partitions"]) for x in figures["setups"]]
        rows, options = [Row(**r) for r in figures["rows"]], figures["options"]
        if args.add:
            rows, options = _add(args.add, figures, setups, rows, command, options)
        command = figures["command"]
    else:
        setups = [Setup.make(int(n), args.microbatches) for n in args.lengths.split(",")]
        rows = []
        for setup in setups:
            for k in range(args.batches):
                solve = args.solve_time if k < args.solve_batches else None
                rows += measure_batch(setup, k, args.plan_time, solve)
                print(*(json.dumps(asdict(r)) for r in rows[-len(PACKINGS):]), sep="\n", flush=True)
                if args.json:
                    write_json_atomic(args.json, figures_of(setups, rows, command, options))
    text = report(rows, setups, command, **options)
    print(text)
    if args.table:
        harness.write_section(args.table, text)
    if args.section:
        link = None if args.table is None else os.path.relpath(args.table, ROOT)
        harness.write_section(args.section, section(rows, command, link, options.get("added")))
    return 0


def _add(path: Path, figures: dict, setups: list[Setup], rows: list[Row], command: str,
         options: dict) -> tuple[list[Row], dict]:
    """``--add``: the rows of the packings ``figures`` lacks, measured with its options, and the rows' work
    where they lack it, written into ``path`` with the command that added them."""
    missing = tuple(p for p in PACKINGS if all(r.packing != p for r in rows))
    options = {**options, "added": command}
    by_budget = {s.budget: s for s in setups}
    for r in rows:  # packing again is deterministic and fast
        if r.work is None:
            setup = by_budget[r.budget]
            r.work = sum(_form(setup, draw_documents(r.budget, setup.microbatches, r.batch), r.packing,
                               setup.cost()).costs)
    solved = {(r.budget, r.batch) for r in rows if r.solve is not None}
    for setup in setups:
        for k in sorted({r.batch for r in rows if r.budget == setup.budget}):
            solve = options["solve_time"] if (setup.budget, k) in solved else None
            rows += measure_batch(setup, k, options["plan_time"], solve, missing)
            write_json_atomic(path, figures_of(setups, rows, figures["command"], options))
    return rows, options


if __name__ == "__main__":
    raise SystemExit(main())
