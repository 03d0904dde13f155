"""Run every case of the reference folder and write the per-method comparison into BENCHMARKS.md.

    python -m benchmarks.reports.reference --reference DIR [--methods zb-h1,block:8]
        [--section docs/bench/sections/30-reference.md] [--benchmarks BENCHMARKS.md]

The reference folder (``shared/reference`` beside the repository, not part of it) is named
explicitly. Each case runs ppsolve's method of the same name (greedy for the building-block
search ``block:L``) within the case's capacity (the reference's own peak); the
output must pass the checker. The section is written to ``--section`` and
replaces (or is inserted as) the section of the same title in ``--benchmarks``.
"""

from __future__ import annotations

import time
from pathlib import Path

from benchmarks import harness
from benchmarks.reports.refcases import load_cases, run_case, summary_markdown
from ppsolve.jsonio import write_text_atomic

TITLE = "## Against the reference implementation"


def section(text: str, cases: int, seconds: float) -> str:
    return "\n".join([
        TITLE, "",
        f"Every case of `shared/reference` ({cases} cases: problems and schedules of the published reference "
        "implementation, capacity = the reference schedule's own peak), run with "
        f"`{harness.command(__spec__, '--reference', 'DIR')}` "
        f"({seconds:.0f} s in all). `ours` is ppsolve's method of the same name (greedy for the building-block "
        "search `block:L`); every output passed the checker within the case's capacity. `at or below` counts "
        "the cases whose makespan is at most the reference's.", "",
        text])


def splice(document: str, new_section: str) -> str:
    """Replace the section titled TITLE in ``document`` (up to the next ``## ``), or insert it before "## All runs"."""
    lines = document.splitlines()
    if TITLE in lines:
        start = lines.index(TITLE)
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        lines[start:end] = new_section.rstrip().splitlines() + [""]
    else:
        at = lines.index("## All runs") if "## All runs" in lines else len(lines)
        lines[at:at] = new_section.rstrip().splitlines() + [""]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__, section=harness.ROOT / "docs/bench/sections/30-reference.md")
    parser.add_argument("--reference", type=Path, required=True, help="the reference folder")
    parser.add_argument("--methods", help="comma-separated reference methods to run (default: all)")
    parser.add_argument("--benchmarks", default="BENCHMARKS.md", help="splice the section in here ('' to skip)")
    args = parser.parse_args(argv)
    if not (args.reference / "reference.csv").is_file():
        parser.error(f"--reference: no reference.csv in {args.reference}")
    cases = load_cases(args.reference)
    if args.methods:
        wanted = set(args.methods.split(","))
        cases = [c for c in cases if c.method in wanted]
    started = time.perf_counter()
    results = [run_case(case) for case in cases]
    text = summary_markdown(results)
    print(text)
    if not args.methods:
        new_section = section(text, len(cases), time.perf_counter() - started)
        harness.write_section(args.section, new_section)
        if args.benchmarks and Path(args.benchmarks).exists():
            write_text_atomic(args.benchmarks, splice(Path(args.benchmarks).read_text(encoding="utf-8"),
                                                      new_section))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
