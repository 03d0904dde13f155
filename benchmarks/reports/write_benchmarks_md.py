"""Assemble BENCHMARKS.md from the outputs of ``ppsolve bench``, ``ppsolve frontier`` and the
benchmark scripts' sections.

    python -m benchmarks.reports.write_benchmarks_md --results docs/bench/results.csv \
        --frontier docs/frontier-a.png --frontier docs/frontier-b.png --out BENCHMARKS.md

It writes nothing it did not read: the tables come from results.csv, the frontier figures from the
CSV beside each image, the sections from docs/bench/sections/*.md, and the commands from
benchmarks/regenerate.sh, which is what produced them. BENCHMARKS.md is a summary: a table of more
than ``MAX_INLINE_ROWS`` rows is replaced by a link to a file of the tables folder that holds its
whole section (``docs/bench/tables/``; the folder is this script's output alone).
"""

from __future__ import annotations

import csv
import os
import platform
import re
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from benchmarks import harness
from benchmarks.harness import ROOT
from ppsolve import __version__
from ppsolve.jsonio import write_text_atomic
from ppsolve.methods import all_methods
from ppsolve.problem import load_problem
from ppsolve.studies.bench import markdown_table, read_csv, summary_markdown
from ppsolve.studies.frontier import CURVE_LABELS, LEGACY_CURVES

REGENERATE = ROOT / "benchmarks" / "regenerate.sh"
MAX_INLINE_ROWS = 15  # a longer table moves to a file of the tables folder, which BENCHMARKS.md links


def _rel(path: Path, base: Path) -> str:
    return Path(os.path.relpath(path.resolve(), base.resolve())).as_posix()


def commands() -> str:
    """The commands of regenerate.sh (its lines that run ``$PY``)."""
    return "\n".join(line.strip() for line in REGENERATE.read_text().splitlines() if "$PY " in line)


def environment() -> str:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"ppsolve {__version__} (commit {commit}), Python {platform.python_version()}, "
            f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPU(s); generated {now}.")


def methods_table() -> str:
    lines = ["| method | family | what it is | applies to |", "|---|---|---|---|"]
    for m in all_methods():
        lines.append(f"| {m.name} | {m.family} | {m.description} | {m.requirements} |")
    return "\n".join(lines) + "\n"


def problems_table(labels: list[str], instances: Path) -> str:
    lines = ["| problem | d | m | v | placement | backward | capacity | offload |", "|---|---|---|---|---|---|---|---|"]
    for label in labels:
        path = instances / f"{label}.json"
        if not path.exists():
            lines.append(f"| {label} | | | | | | | |")
            continue
        p = load_problem(path)
        caps = sorted({c for c in p.capacity}, key=lambda c: (c is None, c or 0))
        cap = ", ".join("unbounded" if c is None else f"{c:g}" for c in caps)
        if p.offload is None:
            off = "-"
        else:
            k = p.annotations.get("x-suite", {}).get("k")
            shared = any(len(link) > 1 for link in p.offload.links)
            off = (f"k={k:g}" if k is not None else f"d2h {p.offload.d2h:g}, h2d {p.offload.h2d:g}") + \
                (", shared links" if shared else "") + ("" if p.offload.duplex else ", half duplex")
        lines.append(f"| {label} | {p.devices} | {p.microbatches} | {p.chunks} | {p.placement_name} "
                     f"| {p.backward_mode} | {cap} | {off} |")
    return "\n".join(lines) + "\n"


def frontier_section(image: Path, base: Path) -> str:
    out = [f"![memory/time frontier]({_rel(image, base)})", ""]
    table = image.with_suffix(".csv")
    if not table.exists():
        return "\n".join(out) + "\n"
    with open(table, newline="", encoding="utf-8") as handle:
        rows = [{**r, "curve": LEGACY_CURVES.get(r["curve"], r["curve"])} for r in csv.DictReader(handle)]
    curves = [c for c in reversed(CURVE_LABELS) if any(r["curve"] == c for r in rows)]  # most levers first
    caps = list(dict.fromkeys(r["capacity"] for r in rows if r["curve"] in curves))
    caps.sort(key=lambda c: float("inf") if c == "unbounded" else float(c))
    head = ["capacity"] + [f"makespan {'without a memory lever' if c == 'no-lever' else 'with ' + CURVE_LABELS[c]}"
                           for c in curves]
    out += ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for cap in caps:
        cells = [cap]
        for curve in curves:
            hit = [r for r in rows if r["curve"] == curve and r["capacity"] == cap]
            if not hit:
                cells.append("")
            elif hit[0]["best_makespan"]:
                mark = " (optimal)" if hit[0]["status"] == "optimal" and hit[0]["makespan"] == hit[0]["best_makespan"] \
                    else ""
                cells.append(hit[0]["best_makespan"] + mark)
            else:
                cells.append(hit[0]["status"])
        out.append("| " + " | ".join(cells) + " |")
    base_rows = [r for r in rows if r["curve"] == "baseline" and r["makespan"]]
    if base_rows:
        out += ["", "Baselines (unbounded memory, their own peak): " + ", ".join(
            f"{r['method']} {r['makespan']} at peak {r['peak_memory']}" for r in base_rows) + "."]
    return "\n".join(out) + "\n"


def extra_sections(folder: Path) -> list[tuple[str, str]]:
    """The sections of ``docs/bench/sections/*.md`` (written by the benchmark scripts, or by hand where
    a benchmark has no script of its own), in name order, as (name without its order prefix, text)."""
    if not folder.is_dir():
        return []
    return [(re.sub(r"^\d+[a-z]?-", "", path.stem), path.read_text(encoding="utf-8").rstrip() + "\n")
            for path in sorted(folder.glob("*.md"))]


def _table_ranges(lines: list[str]) -> list[tuple[int, int]]:
    """(first, end) line ranges of the markdown tables in ``lines``."""
    ranges, start = [], None
    for i, line in enumerate([*lines, ""]):
        if line.startswith("|") and start is None:
            start = i
        elif not line.startswith("|") and start is not None:
            ranges.append((start, i))
            start = None
    return ranges


def summarise(text: str, link: str, limit: int = MAX_INLINE_ROWS) -> tuple[str, bool]:
    """``text`` with every table of more than ``limit`` rows replaced by one line linking ``link``
    (tables next to each other share the line), and whether any was replaced."""
    lines = text.rstrip("\n").split("\n")
    out: list[str] = []
    moved: list[int] = []  # rows of the tables replaced by the line out[-1] stands for
    last = 0
    for first, end in _table_ranges(lines):
        rows = end - first - 2  # less the header and the separator
        if rows <= limit:
            continue
        between = lines[last:first]
        if moved and not any(line.strip() for line in between):
            moved.append(rows)
        else:
            if moved:
                out.append(_link_line(moved, link))
            out += between
            moved = [rows]
        last = end
    if moved:
        out.append(_link_line(moved, link))
    out += lines[last:]
    return "\n".join(out) + "\n", last > 0


def _link_line(rows: list[int], link: str) -> str:
    counts = " and ".join(str(r) for r in rows)
    return f"{'Tables' if len(rows) > 1 else 'Table'} of {counts} rows: [{link}]({link})."


class Tables:
    """The tables folder: the whole sections whose long tables BENCHMARKS.md links."""

    def __init__(self, folder: Path, base: Path):
        self.folder, self.base, self.written = folder, base, set()

    def place(self, name: str, text: str) -> str:
        """``text`` as it goes into BENCHMARKS.md; the whole of it into ``folder/name.md`` when a
        table is too long to stay inline."""
        path = self.folder / f"{name}.md"
        summary, moved = summarise(text, _rel(path, self.base))
        if moved:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, f"<!-- The whole section of BENCHMARKS.md, written by "
                                    f"benchmarks/write_benchmarks_md.py. -->\n\n{text.rstrip()}\n")
            self.written.add(path.name)
        return summary

    def prune(self) -> None:
        """Remove the files of the folder that this run did not write (sections now short or gone)."""
        if self.folder.is_dir():
            for path in self.folder.glob("*.md"):
                if path.name not in self.written:
                    path.unlink()


SOLVER_COMPARE_INTRO = (
    "Both solver backends on every problem of `instances/`, one after the other in one run of "
    "`benchmarks.reports.solver_compare` (the same warm start, phases and checks through "
    "`ppsolve.solvers.solve`). *proof s*: the wall time of a run that ended proven optimal (the "
    "least-overhead phase included), else -; *gap*: against the reported lower bound at the limit; "
    "*offloaded*: marked (least) when proven the least at that makespan; *engine*: what searched. "
    "The makespan is proven at once where the warm start meets the lower bound (proof 0.0 s).")


def solver_compare_counts(table: str) -> str:
    """How many problems each backend proved optimal, read from the solver_compare table."""
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in table.splitlines()
            if line.startswith("|") and not line.startswith("|---")]
    if len(rows) < 2:
        return ""
    head, body = rows[0], rows[1:]
    counts = [f"{head[i].split()[0]} proves {sum(r[i] == 'optimal' for r in body if i < len(r))}"
              for i, name in enumerate(head) if name.endswith("status")]
    return f"Of the {len(body)} problems, " + " and ".join(counts) + " optimal."


def solver_compare_section(table: Path) -> str:
    """The CP-SAT/MILP table written by benchmarks.reports.solver_compare, with its command and counts."""
    limit = next((line.split("--time-limit")[1].split()[0] for line in REGENERATE.read_text().splitlines()
                  if "reports.solver_compare" in line and "--time-limit" in line), "?")
    body = table.read_text(encoding="utf-8").strip()
    intro = f"{SOLVER_COMPARE_INTRO} Time limit {limit} s per run. {solver_compare_counts(body)}"
    return "\n".join(["## CP-SAT against the MILP", "", intro, "", body, ""])


def compact(placed: list[str]) -> list[str]:
    """Sections that are only a heading and a link become one list item each."""
    items = []
    for text in placed:
        lines = [line for line in text.splitlines() if line.strip()]
        if len(lines) != 2 or not lines[0].startswith("#"):
            return placed
        items.append(f"- {lines[0].lstrip('# ')}: {lines[1][0].lower()}{lines[1][1:]}")
    return ["\n".join(items) + "\n"]


BENCH_INTRO = (
    "`ppsolve bench` ran each method on each problem with the time limit of its command above; every "
    "schedule was checked with `ppsolve check`'s checker (valid = complete, obeys every rule, and re-times "
    "to itself within capacity). `makespan/bound` divides by the best lower bound known for the problem: "
    "the analytic bound of `ppsolve bound` or a tighter one a solver proved.")


def build(results: Path, frontiers: list[Path], out: Path, instances: Path,
          sections: Path = Path("docs/bench/sections"), solver_compare: Path | None = None,
          tables: Path | None = None) -> str:
    """The text of BENCHMARKS.md; long tables are written to ``tables`` (default: beside ``results``)."""
    rows = read_csv(results)
    base = out.parent
    place = Tables(tables if tables is not None else results.parent / "tables", base)
    labels = list(dict.fromkeys(r.problem for r in rows))
    parts = [
        "# ppsolve benchmarks",
        "",
        "Generated by `benchmarks/write_benchmarks_md.py`; do not edit by hand. Each section says what a "
        "benchmark measures, with its command and its headline figures; long tables are in the files it "
        "links. To regenerate everything (from the repository root):",
        "",
        "```sh",
        commands(),
        "```",
        "",
        environment(),
        "",
        "## Every method on every bundled problem",
        "",
        BENCH_INTRO,
        "",
        summary_markdown(rows),
        f"![makespan over bound per method and problem]({_rel(results.parent / 'ratio.png', base)})",
        "",
        f"![peak memory against makespan]({_rel(results.parent / 'memory_vs_makespan.png', base)})",
        "",
        place.place("methods", "### Methods\n\n" + methods_table()),
        place.place("all-runs", "### All runs\n\n" + markdown_table(rows)),
        place.place("problems", "### Problems\n\n" + problems_table(labels, instances)),
    ]
    parts[-3:] = compact(parts[-3:])
    if frontiers:
        parts += ["## Memory/time frontiers", ""]
        for image in frontiers:
            parts += [f"### {image.stem}", "", frontier_section(image, base)]
    if solver_compare is not None and solver_compare.exists():
        parts.append(place.place("solver-compare", solver_compare_section(solver_compare)))
    parts += [place.place(name, text) for name, text in extra_sections(sections)]
    place.prune()
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__)
    parser.add_argument("--results", default="docs/bench/results.csv")
    parser.add_argument("--frontier", action="append", default=[], help="a frontier image (its CSV beside it)")
    parser.add_argument("--instances", default="instances", help="the directory that was benchmarked")
    parser.add_argument("--sections", default="docs/bench/sections",
                        help="folder of markdown sections written by other benchmark scripts")
    parser.add_argument("--solver-compare", default="docs/bench/solver_compare.md",
                        help="the table of benchmarks.reports.solver_compare (skipped when missing)")
    parser.add_argument("--tables", help="folder for the whole sections of long tables (default: tables/ "
                                         "beside --results; this script's output alone)")
    parser.add_argument("--out", default="BENCHMARKS.md")
    args = parser.parse_args(argv)
    out = Path(args.out)
    text = build(Path(args.results), [Path(f) for f in args.frontier], out, Path(args.instances),
                 Path(args.sections), Path(args.solver_compare), Path(args.tables) if args.tables else None)
    write_text_atomic(out, text)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
