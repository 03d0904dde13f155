"""What the benchmark scripts share: the repository root, the common options, the files they write.

Every script runs from the repository root as a module, ``python -m benchmarks.reports.NAME`` or
``python -m benchmarks.makers.NAME``: Python then puts the root on ``sys.path`` (so the
repository's ``ppsolve`` is the one measured) and no script touches ``sys.path`` itself.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

from ppsolve.jsonio import write_json_atomic, write_text_atomic

ROOT = Path(__file__).resolve().parent.parent

# the options several scripts take: name -> (flag, what argparse is told besides the default)
_OPTIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "time_limit": ("--time-limit", {"type": float, "help": "seconds per solve (default %(default)s)"}),
    "seconds": ("--seconds", {"type": float, "help": "seconds per problem (default %(default)s)"}),
    "threads": ("--threads", {"type": int, "help": "solver threads (default: all cores)"}),
    "jobs": ("--jobs", {"type": int, "help": "problems at a time (default %(default)s)"}),
    "section": ("--section", {"type": Path, "help": "write the BENCHMARKS.md section (Markdown) here"}),
    "json": ("--json", {"type": Path, "help": "also write the raw figures here (JSON)"}),
    "render": ("--render", {"type": Path, "help": "write the section from an earlier run's figures; run nothing"}),
    "out": ("--out", {"type": Path, "help": "the folder to write (default %(default)s)"}),
}


def parser(doc: str, problems: bool = False, **defaults: Any) -> argparse.ArgumentParser:
    """An argument parser described by the first line of ``doc``, with the common options named in
    ``defaults`` (``time_limit=300.0`` adds ``--time-limit`` with that default) and, with ``problems``,
    problem files as positional arguments."""
    out = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    if problems:
        out.add_argument("problems", nargs="*", type=Path, help="problem files (default: see above)")
    for name, default in defaults.items():
        flag, settings = _OPTIONS[name]
        out.add_argument(flag, default=default, **settings)
    return out


def problem_paths(given: list[Path], folder: Path) -> list[Path]:
    """The problem files given, or else every ``*.json`` of ``folder``, in name order."""
    return list(given) or sorted(folder.glob("*.json"))


def command(spec: Any, *args: str) -> str:
    """The command that runs the module of ``spec`` (a script's ``__spec__``) with ``args``."""
    return shlex.join(["python", "-m", spec.name, *args])


def write_section(path: Path, text: str) -> None:
    """Write a Markdown section atomically (its folder made if missing), ending in one newline."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, text.rstrip("\n") + "\n")


def publish(text: str, section: Path | None = None, json_path: Path | None = None, rows: list | None = None) -> int:
    """The end of a report: its figures to ``json_path`` (when given with ``rows``), its section to ``section``,
    the section on stdout; exit status 0."""
    if json_path is not None and rows is not None:
        write_json_atomic(json_path, rows)
    if section is not None:
        write_section(section, text)
    print(text)
    return 0


def write_problems(folder: Path, files: dict[str, dict]) -> None:
    """Write each problem (file name -> its JSON data) into ``folder`` atomically."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        write_json_atomic(folder / name, data)
    print(f"wrote {len(files)} problem files to {folder}")


def fmt(value: float | None, spec: str = "g") -> str:
    """``value`` in a table cell: formatted by ``spec``, or "-" when there is none."""
    return "-" if value is None else format(value, spec)


def table(head: list[str]) -> list[str]:
    """A Markdown table's heading and rule."""
    return [row(head), "|" + "---|" * len(head)]


def row(cells: list[Any]) -> str:
    """One Markdown table row."""
    return "| " + " | ".join(str(c) for c in cells) + " |"
