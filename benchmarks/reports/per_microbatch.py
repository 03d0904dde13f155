"""Per-microbatch costs measured in one run: the solver against every published schedule in data order,
the microbatch-order heuristics, random 1F1B orders and the bound.

    python -m benchmarks.reports.per_microbatch [--time-limit 60] [--threads 2] [--random 3000]
        [--section docs/bench/sections/60-per-microbatch.md] [--table docs/bench/per_microbatch.md]
        [--json docs/bench/per_microbatch.json] [--render JSON] [problem.json ...]

By default the DynaPipe-like problems of instances/per-microbatch/ with 8 stages and 32 microbatches
(sigma 0.1 to 3.2, seed 0), 8 x 16 and 16 x 32 at sigma 0.8, and the two long-context batches
(``python -m benchmarks.makers.varied`` writes them; their cap is data-order 1F1B's peak). For each
problem, one after another:

* every published schedule in data order (microbatch j = 0..m-1), within the cap;
* each of them in the orders practitioners try (``NAME@longest-first``, ``NAME@shortest-first``, and the
  DynaPipe-like ``NAME@search``), within the cap;
* ``--random N`` random microbatch orders of 1F1B (seeded): the best that fits the cap;
* one solve of ``--time-limit`` seconds (CP-SAT, ``--threads``, seed 0) and its lower bound.

Every schedule is checked (``run_and_check``). The ratios are to data-order 1F1B's makespan.
"""

from __future__ import annotations

import json
import os
import random
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks import harness
from benchmarks.harness import ROOT, fmt
from ppsolve.baselines.microbatch_order import ORDERS, in_order, ordered_method
from ppsolve.jsonio import write_json_atomic
from ppsolve.methods import RunOptions, get_method, published_methods, run_and_check
from ppsolve.problem import load_problem
from ppsolve.tolerance import exceeds

FOLDER = ROOT / "instances" / "per-microbatch"
DEFAULT = ([f"dynapipe-d8-m32-s{s}-k0" for s in ("0.1", "0.4", "0.8", "1.6", "3.2")]
           + ["dynapipe-d8-m16-s0.8-k0", "dynapipe-d16-m32-s0.8-k0", "longctx-d8-m32-k0", "longctx-d8-m32-k1"])


@dataclass
class Row:
    """The figures of one problem."""

    problem: str
    onef1b: float | None = None
    best_published: tuple[str, float] | None = None
    best_ordered: tuple[str, float] | None = None
    best_random: float | None = None
    random_fitting: int = 0
    solve: float | None = None
    status: str = ""
    bound: float | None = None
    refused: list[str] = field(default_factory=list)


def _best(outcomes) -> tuple[str, float] | None:
    fitting = [(o.schedule.makespan, o.method.name) for o in outcomes if o.schedule is not None and o.valid]
    return (min(fitting)[1], min(fitting)[0]) if fitting else None


def measure(path, time_limit: float, threads: int | None, draws: int) -> Row:
    problem = load_problem(path)
    row = Row(path.stem)
    options = RunOptions(time_limit=time_limit, threads=threads, seed=0)
    published = [run_and_check(m, problem, options, record_bugs=True) for m in published_methods()]
    row.refused = sorted(o.method.name for o in published if o.schedule is None or not o.valid)
    row.best_published = _best(published)
    onef1b = next(o for o in published if o.method.name == "1f1b")
    row.onef1b = onef1b.schedule.makespan if onef1b.schedule is not None else None
    ordered = [run_and_check(ordered_method(m, order), problem, options, record_bugs=True)
               for m in published_methods() for order in ORDERS]
    row.best_ordered = _best(ordered)
    rng, base = random.Random(0), get_method("1f1b")
    makespans = []
    for _ in range(draws):
        order = list(range(problem.microbatches))
        rng.shuffle(order)
        schedule = in_order(base, problem, order, RunOptions(ignore_capacity=True))
        if not any(exceeds(p, c) for p, c in zip(schedule.peak_memory, problem.capacity)):
            makespans.append(schedule.makespan)
    row.best_random, row.random_fitting = (min(makespans) if makespans else None), len(makespans)
    solved = run_and_check(get_method("cpsat"), problem, options, record_bugs=True)
    if solved.schedule is not None and solved.valid:
        row.solve, row.status, row.bound = solved.schedule.makespan, solved.status, solved.schedule.method.lower_bound
    return row


def _ratio(x: float | None, base: float | None) -> str:
    return "-" if x is None or not base else f"{x / base:.3f}"


def table(rows: list[Row], command: str) -> str:
    """The whole table, one row a problem."""
    lines = ["# Per-microbatch costs: the solver against data order, order heuristics and the bound", "",
             f"`{command}` (caps at data-order 1F1B's peak; ratios to data-order 1F1B).", ""]
    lines += harness.table(["problem", "1F1B data order", "best published (data order)", "best order heuristic",
                            "best random 1F1B order", "solve", "solve / 1F1B", "bound", "gap"])
    for r in rows:
        pub = f"{r.best_published[0]} {fmt(r.best_published[1])} ({_ratio(r.best_published[1], r.onef1b)})" \
            if r.best_published else "-"
        ordered = f"{r.best_ordered[0]} {fmt(r.best_ordered[1])} ({_ratio(r.best_ordered[1], r.onef1b)})" \
            if r.best_ordered else "-"
        rand = f"{fmt(r.best_random)} ({_ratio(r.best_random, r.onef1b)}, {r.random_fitting} fit)" \
            if r.best_random else "-"
        lines.append(harness.row([r.problem, fmt(r.onef1b), pub, ordered, rand,
                                  f"{fmt(r.solve)} {r.status}", _ratio(r.solve, r.onef1b), fmt(r.bound), _gap(r)]))
    return "\n".join(lines)


def _gap(r: Row) -> str:
    return "-" if r.solve is None or r.bound is None else f"{(r.solve - r.bound) / r.solve:.1%}"


def _span(values: list[float]) -> str:
    return f"{min(values):.3f}-{max(values):.3f}" if values else "-"


def section(rows: list[Row], command: str, table_link: str | None, seconds: float) -> str:
    """BENCHMARKS.md's summary: the ranges over the problems, and the link to the whole table."""
    solved = [r for r in rows if r.solve is not None and r.onef1b]
    ratio = lambda pick: [pick(r) / r.onef1b for r in solved if pick(r)]  # noqa: E731
    gaps = [(r.solve - r.bound) / r.solve for r in solved if r.bound is not None]
    lines = ["## Per-microbatch costs: the solver against data order, order heuristics and the bound", "",
             f"`{command}`, one run: {len(rows)} problems (DynaPipe-like and long-context batches, caps at "
             f"data-order 1F1B's peak), every schedule checked. Makespan over data-order 1F1B: the {seconds:g} s solve "
             f"{_span(ratio(lambda r: r.solve))}; the best order heuristic "
             f"{_span(ratio(lambda r: r.best_ordered and r.best_ordered[1]))}; the best random 1F1B order that "
             f"fits {_span(ratio(lambda r: r.best_random))}; the best published schedule in data order "
             f"{_span(ratio(lambda r: r.best_published and r.best_published[1]))}. Gap of the solve to the "
             f"bound: {min(gaps):.1%}-{max(gaps):.1%}." if solved and gaps else f"`{command}`: no solve."]
    if table_link:
        lines += ["", f"Every problem: [{table_link}]({table_link})."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__, problems=True, time_limit=60.0, threads=None, section=None, json=None,
                            render=None)
    parser.add_argument("--random", type=int, default=3000, help="random 1F1B orders tried (default %(default)s)")
    parser.add_argument("--table", type=Path, help="write the whole table (Markdown) here; the section links it")
    args = parser.parse_args(argv)
    paths = list(args.problems) or [FOLDER / f"{name}.json" for name in DEFAULT]
    rows = render(args.render) if args.render else []
    for path in [] if args.render else paths:
        rows.append(measure(path, args.time_limit, args.threads, args.random))
        print(json.dumps(asdict(rows[-1])), flush=True)
    given = list(sys.argv[1:] if argv is None else argv)
    if args.render:  # the command that measured them
        at = given.index("--render")
        given[at:at + 2] = ["--json", str(args.render)] if "--json" not in given else []
    command = harness.command(__spec__, *given)
    print(table(rows, command))
    if args.table:
        harness.write_section(args.table, table(rows, command))
    if args.section:
        link = None if args.table is None else os.path.relpath(args.table, ROOT)
        harness.write_section(args.section, section(rows, command, link, args.time_limit))
    if args.json:
        write_json_atomic(args.json, [asdict(r) for r in rows])
    return 0


def render(path: Path) -> list[Row]:
    """The rows of an earlier run's ``--json``."""
    return [Row(**{**r, "best_published": r["best_published"] and tuple(r["best_published"]),
                   "best_ordered": r["best_ordered"] and tuple(r["best_ordered"])})
            for r in json.loads(path.read_text())]


if __name__ == "__main__":
    raise SystemExit(main())
