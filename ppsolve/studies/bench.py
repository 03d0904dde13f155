"""The benchmark: every chosen method on every problem, each schedule checked, results tabled.

:func:`collect_problems` finds problem files (directories recursively),
:func:`run_bench` runs the matrix and returns one :class:`BenchRow` per
(problem, method), and :func:`write_csv` / :func:`write_markdown` write them.
A method that does not apply is listed as skipped with its reason; one that
fails is listed with its error, and the run goes on.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Callable, Iterable, Sequence

from ppsolve.bounds import makespan_lower_bound, min_capacity
from ppsolve.errors import InputError
from ppsolve.jsonio import write_text_atomic
from ppsolve.methods import ERROR, INFEASIBLE, SKIPPED, Method, RunOptions, run_and_check
from ppsolve.problem import Problem, load_problem
from ppsolve.tolerance import EPS

# Statuses a row can have besides a method's own ("optimal", "feasible", "heuristic"): SKIPPED,
# INFEASIBLE, ERROR (ppsolve.methods).


@dataclass
class BenchRow:
    """One method on one problem. Figures are None when no schedule came out."""

    problem: str
    method: str
    family: str
    status: str
    makespan: float | None = None
    lower_bound: float | None = None
    ratio: float | None = None
    bubble_ratio: float | None = None
    peak_memory: float | None = None
    offloaded: float | None = None
    seconds: float | None = None
    valid: bool | None = None
    note: str = ""
    method_bound: float | None = None
    reference_memory: float | None = None

    @property
    def has_schedule(self) -> bool:
        return self.makespan is not None


CSV_HEADER = {
    "problem": "problem", "method": "method", "family": "family", "status": "status", "makespan": "makespan",
    "lower_bound": "lower_bound", "ratio": "makespan/bound", "bubble_ratio": "bubble_ratio",
    "peak_memory": "max_peak_memory", "offloaded": "offloaded", "seconds": "seconds", "valid": "valid",
    "note": "note", "method_bound": "method_bound", "reference_memory": "one_microbatch_memory",
}


@dataclass(frozen=True)
class BenchProblem:
    """A problem file and the label it gets in the tables (its path relative to what was given)."""

    label: str
    path: Path
    problem: Problem


def collect_problems(paths: Sequence[str | Path]) -> list[BenchProblem]:
    """Problem files given directly, and every ``*.json`` under given directories (recursively)."""
    found: list[tuple[str, Path]] = []
    for given in paths:
        given = Path(given)
        if given.is_dir():
            files = sorted(p for p in given.rglob("*.json") if p.is_file() and not _other_ppsolve_file(p))
            if not files:
                raise InputError(str(given), "directory holds no *.json problem files")
            found += [(str(p.relative_to(given).with_suffix("")), p) for p in files]
        elif given.exists():
            found.append((given.stem, given))
        else:
            raise InputError(str(given), "no such file or directory")
    labels: dict[str, int] = {}
    out = []
    for label, path in found:
        if label in labels:  # the same name from two places: keep both apart
            labels[label] += 1
            label = f"{label}#{labels[label]}"
        else:
            labels[label] = 1
        try:
            problem = load_problem(path)
        except InputError as exc:
            raise InputError(f"{path}: {exc.field}", exc.message) from None
        out.append(BenchProblem(label.replace("\\", "/"), path, problem))
    return out


def _other_ppsolve_file(path: Path) -> bool:
    """A ppsolve file that is not a problem (a schedule kept beside the problems): skipped in directories."""
    try:
        head = path.read_text(encoding="utf-8")[:400]
    except (OSError, UnicodeDecodeError):
        return False
    return '"ppsolve/' in head and '"ppsolve/problem@' not in head


def run_one(problem: Problem, method: Method, options: RunOptions) -> tuple[BenchRow, object | None]:
    """Run one method on one problem and check its schedule; never raises a PpsolveError."""
    outcome = run_and_check(method, problem, options, record_bugs=True)
    row = BenchRow(problem="", method=method.name, family=method.family, status=outcome.status,
                   seconds=outcome.seconds, note=outcome.note)
    schedule = outcome.schedule
    if schedule is not None:
        row.makespan = schedule.makespan
        row.bubble_ratio = schedule.bubble_ratio
        row.peak_memory = max(schedule.peak_memory, default=0.0)
        row.offloaded = schedule.offloaded
        row.valid = outcome.valid
        row.method_bound = None if schedule.method.lower_bound is None else float(schedule.method.lower_bound)
    return row, schedule


ProgressHook = Callable[[str, str], None]


def run_bench(problems: Sequence[BenchProblem], methods: Sequence[Method], options: RunOptions,
              on_start: ProgressHook | None = None, on_done: Callable[[BenchRow], None] | None = None,
              on_schedule: Callable[[BenchRow, object], None] | None = None) -> list[BenchRow]:
    """Every method on every problem. Each problem's bound is the best one known: the analytic
    bound or a bound a method proved with a valid schedule, so ratios compare across methods."""
    rows: list[BenchRow] = []
    for item in problems:
        analytic = makespan_lower_bound(item.problem).value
        reference = max(min_capacity(item.problem, offload=False), default=0.0)
        mine: list[BenchRow] = []
        for method in methods:
            if on_start:
                on_start(item.label, method.name)
            row, schedule = run_one(item.problem, method, options)
            row.problem = item.label
            row.reference_memory = reference
            mine.append(row)
            if on_schedule and schedule is not None:
                on_schedule(row, schedule)
            if on_done:
                on_done(row)
        proved = [r.method_bound for r in mine if r.valid and r.method_bound is not None]
        bound = max([analytic, *proved])
        for row in mine:
            row.lower_bound = bound
            if row.makespan is not None and bound > 0:
                row.ratio = row.makespan / bound
        rows += mine
    return rows


# ----- writing and reading results -----

def _cell(value) -> str:
    """A CSV cell."""
    return _text(value, "", ("yes", "no"), 6)


def _text(value, none: str, yes_no: tuple[str, str], digits: int) -> str:
    """``value`` as text: ``none`` for None, ``yes_no`` for a bool, ``digits`` significant digits."""
    if value is None:
        return none
    if isinstance(value, bool):
        return yes_no[0] if value else yes_no[1]
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def rows_to_csv(rows: Iterable[BenchRow]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_HEADER.values())
    for row in rows:
        writer.writerow(_cell(getattr(row, key)) for key in CSV_HEADER)
    return buffer.getvalue()


def write_csv(rows: Iterable[BenchRow], path: str | Path) -> None:
    write_text_atomic(path, rows_to_csv(rows))


def read_csv(path: str | Path) -> list[BenchRow]:
    """Rows back from a results.csv written by :func:`write_csv`."""
    by_title = {title: key for key, title in CSV_HEADER.items()}
    types = {f.name: f.type for f in fields(BenchRow)}
    rows = []
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            for record in csv.DictReader(handle):
                values = {}
                for title, text in record.items():
                    key = by_title.get(title)
                    if key is None:
                        continue
                    kind = str(types[key])
                    if text == "":
                        values[key] = "" if kind == "str" else None
                    elif "bool" in kind:
                        values[key] = text == "yes"
                    elif "float" in kind:
                        values[key] = float(text)
                    else:
                        values[key] = text
                rows.append(BenchRow(**values))
    except FileNotFoundError:
        raise InputError(str(path), "file not found") from None
    except (TypeError, ValueError) as exc:
        raise InputError(str(path), f"not a ppsolve bench results.csv: {exc}") from None
    return rows


def _md(value, digits: int = 4) -> str:
    """A Markdown table cell."""
    return _text(value, "-", ("yes", "**NO**"), digits).replace("|", "\\|")


def markdown_table(rows: Sequence[BenchRow]) -> str:
    """The results as a Markdown table, then the skipped/failed rows with their reasons."""
    head = ["problem", "method", "status", "makespan", "bound", "makespan/bound", "bubble", "peak mem",
            "offloaded", "seconds", "valid"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for row in rows:
        if not row.has_schedule:
            continue
        ratio = "-" if row.ratio is None else f"{row.ratio:.3f}"
        bubble = "-" if row.bubble_ratio is None else f"{row.bubble_ratio:.1%}"
        lines.append("| " + " | ".join([
            row.problem, row.method, row.status, _md(row.makespan), _md(row.lower_bound), ratio, bubble,
            _md(row.peak_memory), _md(row.offloaded), "-" if row.seconds is None else f"{row.seconds:.2f}",
            _md(row.valid)]) + " |")
    others = [row for row in rows if not row.has_schedule]
    if others:
        lines += ["", "| problem | method | status | reason |", "|---|---|---|---|"]
        lines += [f"| {r.problem} | {r.method} | {r.status} | {_md(r.note)} |" for r in others]
    return "\n".join(lines) + "\n"


def summary_rows(rows: Sequence[BenchRow]) -> list[dict]:
    """Per method: problems run, valid, skipped, refused over the memory cap, failed (errors and
    invalid schedules), geometric mean of makespan/bound, wins."""
    methods = list(dict.fromkeys(row.method for row in rows))
    best: dict[str, float] = {}
    for row in rows:
        if row.valid and row.makespan is not None:
            best[row.problem] = min(best.get(row.problem, math.inf), row.makespan)
    out = []
    for name in methods:
        mine = [r for r in rows if r.method == name]
        ok = [r for r in mine if r.valid and r.ratio is not None]
        geo = math.exp(sum(math.log(r.ratio) for r in ok) / len(ok)) if ok else None
        out.append({
            "method": name, "family": mine[0].family, "ran": sum(r.has_schedule for r in mine),
            "valid": len(ok), "skipped": sum(r.status == SKIPPED for r in mine),
            "over_cap": sum(r.status == INFEASIBLE for r in mine),
            "failed": sum(r.status == ERROR or r.valid is False for r in mine),
            "geomean_ratio": geo, "best": sum(1 for r in ok if r.makespan <= best[r.problem] + EPS),
            "worst_ratio": max((r.ratio for r in ok), default=None),
        })
    return out


def summary_markdown(rows: Sequence[BenchRow]) -> str:
    lines = ["| method | family | valid schedules | skipped (does not apply) | refused (over the memory cap) "
             "| errors or invalid | geo-mean makespan/bound | worst makespan/bound | best on |",
             "|---|---|---|---|---|---|---|---|---|"]
    for s in summary_rows(rows):
        geo = "-" if s["geomean_ratio"] is None else f"{s['geomean_ratio']:.3f}"
        worst = "-" if s["worst_ratio"] is None else f"{s['worst_ratio']:.3f}"
        lines.append(f"| {s['method']} | {s['family']} | {s['valid']} | {s['skipped']} | {s['over_cap']} "
                     f"| {s['failed']} | {geo} "
                     f"| {worst} | {s['best']} |")
    return "\n".join(lines) + "\n"


def write_markdown(rows: Sequence[BenchRow], path: str | Path, title: str = "ppsolve bench results") -> None:
    text = f"# {title}\n\n## Summary\n\n{summary_markdown(rows)}\n## All runs\n\n{markdown_table(rows)}"
    write_text_atomic(path, text)


def as_dicts(rows: Iterable[BenchRow]) -> list[dict]:
    return [asdict(row) for row in rows]
