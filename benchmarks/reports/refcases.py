"""Cases of the published reference implementation, and how ppsolve compares on them.

A reference folder (``shared/reference`` beside the repository) holds one row per
case in ``reference.csv``: the method, the problem file (capacity = the reference
schedule's own peak) and the reference makespan. :func:`run_case` runs ppsolve's
method of the same name (``greedy`` for the building-block search ``block:L``),
checks the output and compares makespans; :func:`summary` makes the per-method table.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from ppsolve.methods import RunOptions, get_method, run_and_check
from ppsolve.problem import load_problem

# relative tolerance when comparing makespans (the reference times are integers)
TOLERANCE = 1e-9


@dataclass(frozen=True)
class ReferenceCase:
    """One row of ``reference.csv``."""

    case: str
    method: str
    devices: int
    microbatches: int
    ref_makespan: float
    problem_file: Path

    @property
    def ours(self) -> str:
        """The ppsolve method that answers this case."""
        return "greedy" if self.method.startswith("block:") else self.method


@dataclass(frozen=True)
class CaseResult:
    case: ReferenceCase
    makespan: float | None  # None: refused or invalid
    note: str = ""

    @property
    def ratio(self) -> float | None:
        return None if self.makespan is None else self.makespan / self.case.ref_makespan

    @property
    def at_or_below(self) -> bool:
        return self.makespan is not None and self.makespan <= self.case.ref_makespan * (1 + TOLERANCE)


def load_cases(folder: str | Path) -> list[ReferenceCase]:
    """Every case of a reference folder, in file order."""
    folder = Path(folder)
    with open(folder / "reference.csv", newline="", encoding="utf-8") as f:
        return [ReferenceCase(case=row["case"], method=row["method"], devices=int(row["d"]),
                              microbatches=int(row["m"]), ref_makespan=float(row["ref_makespan"]),
                              problem_file=folder / row["problem_file"]) for row in csv.DictReader(f)]


def run_case(case: ReferenceCase) -> CaseResult:
    """Run ppsolve's method on the case's problem (within its capacity) and check the schedule."""
    outcome = run_and_check(get_method(case.ours), load_problem(case.problem_file), RunOptions())
    if outcome.schedule is None:
        return CaseResult(case, None, f"refused: {outcome.note}")
    if not outcome.valid:
        return CaseResult(case, None, f"invalid: {outcome.report.violations[0].render()}")
    return CaseResult(case, outcome.schedule.makespan)


@dataclass(frozen=True)
class MethodSummary:
    method: str
    cases: int
    at_or_below: int
    geomean: float | None  # of ours/reference over the cases ppsolve answered
    worst: float | None
    unanswered: int


# the order methods are listed in: the published schedules, then the building-block search by limit
_ORDER = ("1f1b", "zb-h1", "zb-h2", "zb-v", "v-half", "v-min")


def _method_key(method: str) -> tuple:
    if method.startswith("block:"):
        return (len(_ORDER), int(method.split(":")[1]))
    return (_ORDER.index(method) if method in _ORDER else len(_ORDER) + 1, 0)


def summary(results: list[CaseResult]) -> list[MethodSummary]:
    """Per reference method: the published schedules, then block:L by L."""
    out = []
    for method in sorted(dict.fromkeys(r.case.method for r in results), key=_method_key):
        rows = [r for r in results if r.case.method == method]
        ratios = [r.ratio for r in rows if r.ratio is not None]
        geomean = math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if ratios else None
        out.append(MethodSummary(method, len(rows), sum(r.at_or_below for r in rows), geomean,
                                 max(ratios) if ratios else None, len(rows) - len(ratios)))
    return out


def summary_markdown(results: list[CaseResult]) -> str:
    """The per-method table, a total row, and every case not at or below the reference."""
    lines = ["| reference method | ours | cases | at or below | geomean ours/reference | worst | refused or invalid |",
             "|---|---|---|---|---|---|---|"]
    for s in summary(results):
        ours = "greedy" if s.method.startswith("block:") else s.method
        lines.append(f"| {s.method} | {ours} | {s.cases} | {s.at_or_below} ({100 * s.at_or_below / s.cases:.0f}%) | "
                     f"{_fmt(s.geomean)} | {_fmt(s.worst)} | {s.unanswered} |")
    total = sum(r.at_or_below for r in results)
    lines.append(f"| all | | {len(results)} | {total} ({100 * total / max(1, len(results)):.0f}%) | | | "
                 f"{sum(r.makespan is None for r in results)} |")
    misses = [r for r in results if not r.at_or_below]
    if misses:
        lines += ["", "Cases not at or below the reference:", ""]
        for r in misses:
            what = r.note or f"{r.makespan:g} against {r.case.ref_makespan:g} ({r.ratio:.3f})"
            lines.append(f"- `{r.case.case}`: {what}")
    return "\n".join(lines) + "\n"


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"
