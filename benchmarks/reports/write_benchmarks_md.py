"""Assemble BENCHMARKS.md from the outputs of ``ppsolve bench`` and ``ppsolve frontier``.

    python -m benchmarks.reports.write_benchmarks_md --results docs/bench/results.csv \
        --frontier docs/frontier-a.png --frontier docs/frontier-b.png --out BENCHMARKS.md

It writes nothing it did not read: the tables come from results.csv, the frontier
figures from the CSV beside each image, and the commands from
benchmarks/regenerate.sh, which is what produced them.
"""

from __future__ import annotations

import csv
import os
import platform
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


def extra_sections(folder: Path) -> list[str]:
    """Sections written by other benchmark scripts (``docs/bench/sections/*.md``), in name order."""
    if not folder.is_dir():
        return []
    return [path.read_text(encoding="utf-8").rstrip() + "\n" for path in sorted(folder.glob("*.md"))]



SOLVER_COMPARE_INTRO = (
    "Both solver backends on every problem of `instances/`, one after the other in one run of "
    "`benchmarks.reports.solver_compare` (the same warm start, phases and checks through "
    "`ppsolve.solvers.solve`). *proof s*: the wall time of a run that ended proven optimal (the "
    "least-offload phase included), else -; *gap*: against the reported lower bound at the limit; "
    "*offloaded*: marked (least) when proven the least at that makespan; *engine*: what searched "
    "(HiGHS runs in a child process: OR-Tools bundles its own libhighs, and before that change the "
    "MILP column of a run after CP-SAT was CBC's). The makespan is proven at once where the warm "
    "start meets the lower bound (proof 0.0 s).")


def solver_compare_section(table: Path) -> list[str]:
    """The CP-SAT/MILP table written by benchmarks.reports.solver_compare, with its command."""
    limit = next((line.split("--time-limit")[1].split()[0] for line in REGENERATE.read_text().splitlines()
                  if "reports.solver_compare" in line and "--time-limit" in line), "?")
    return ["## CP-SAT against the MILP", "", SOLVER_COMPARE_INTRO + f" Time limit {limit} s per run.", "",
            table.read_text().strip(), ""]


def build(results: Path, frontiers: list[Path], out: Path, instances: Path,
          sections: Path = Path("docs/bench/sections"), solver_compare: Path | None = None) -> str:
    rows = read_csv(results)
    base = out.parent
    labels = list(dict.fromkeys(r.problem for r in rows))
    parts = [
        "# ppsolve benchmarks",
        "",
        "Generated by the tool; do not edit by hand. To regenerate (from the repository root):",
        "",
        "```sh",
        commands(),
        "```",
        "",
        environment(),
        "",
        "Each method ran on each problem with the time limit above; every schedule was checked with "
        "`ppsolve check`'s checker (valid = complete, obeys every rule, and re-times to itself within capacity). "
        "`makespan/bound` divides by the best lower bound known for the problem: the analytic bound of "
        "`ppsolve bound` or a tighter one a solver proved.",
        "",
        "## Methods",
        "",
        methods_table(),
        "## Summary",
        "",
        summary_markdown(rows),
        f"![makespan over bound per method and problem]({_rel(results.parent / 'ratio.png', base)})",
        "",
        f"![peak memory against makespan]({_rel(results.parent / 'memory_vs_makespan.png', base)})",
        "",
    ]
    if frontiers:
        parts += ["## Memory/time frontiers", ""]
        for image in frontiers:
            parts += [f"### {image.stem}", "", frontier_section(image, base)]
    if solver_compare is not None and solver_compare.exists():
        parts += solver_compare_section(solver_compare)
    parts += extra_sections(sections)
    parts += ["## All runs", "", markdown_table(rows), "## Problems", "", problems_table(labels, instances)]
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
    parser.add_argument("--out", default="BENCHMARKS.md")
    args = parser.parse_args(argv)
    out = Path(args.out)
    text = build(Path(args.results), [Path(f) for f in args.frontier], out, Path(args.instances),
                 Path(args.sections), Path(args.solver_compare))
    write_text_atomic(out, text)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
