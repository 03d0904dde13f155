"""A longer fuzz campaign than CI's: damaged problems and schedules through the real CLI in subprocesses.

    python -m benchmarks.reports.fuzz_campaign --problems 300 --schedules 150 --loads 5000

Each subprocess runs under a 3 GiB address-space limit and a 60 s timeout. Prints
counts of tracebacks, hangs, out-of-memory ends, multi-line errors and
non-finite numbers in JSON output; exits 1 if any.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from hypothesis import strategies as st

from benchmarks import harness
from ppsolve.errors import PpsolveError
from ppsolve.problem import load_problem
from ppsolve.schedule import load_schedule
from tests.core.mutations import PROBLEM_FILES, SCHEDULE_FILES, damaged_text, load


def _examples(files: tuple[str, ...], count: int) -> list[str]:
    """``count`` damaged files (hypothesis's ``example()``: fresh randomness, not repeatable)."""
    strategy = st.sampled_from(files).flatmap(lambda f: damaged_text(load(f)))
    return [strategy.example() for _ in range(count)]


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (3 * 1024 ** 3, 3 * 1024 ** 3))


def _run(argv: list[str], outcome: Counter) -> None:
    try:
        done = subprocess.run([sys.executable, "-m", "ppsolve", *argv], capture_output=True, text=True,
                              timeout=60, preexec_fn=_limit)
    except subprocess.TimeoutExpired:
        outcome["hang > 60 s"] += 1
        return
    err = done.stderr
    if "Traceback" in err:
        outcome["traceback"] += 1
        print("TRACEBACK", argv[0], err.strip().splitlines()[-1], file=sys.stderr)
    elif "MemoryError" in err or done.returncode in (-9, 137):
        outcome["out of memory"] += 1
    elif done.returncode not in (0, 1, 2, 3, 4):
        outcome[f"exit {done.returncode}"] += 1
    elif err.count("\n") > 1:
        outcome["several error lines"] += 1
        print("LINES", argv[0], err[:300], file=sys.stderr)
    elif "--json" in argv and done.returncode == 0 and any(t in done.stdout for t in ("NaN", "Infinity")):
        outcome["non-finite JSON"] += 1
    else:
        outcome[f"exit {done.returncode}"] += 1


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__)
    parser.add_argument("--problems", type=int, default=300)
    parser.add_argument("--schedules", type=int, default=150)
    parser.add_argument("--loads", type=int, default=5000, help="in-process loads of each kind")
    args = parser.parse_args(argv)

    bad = Counter()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "in.json"
        for what, files, loader in (("problem", PROBLEM_FILES, load_problem),
                                    ("schedule", SCHEDULE_FILES, load_schedule)):
            loads = Counter()
            for text in _examples(files, args.loads):
                path.write_text(text)
                try:
                    loader(path)
                    loads["valid"] += 1
                except PpsolveError:
                    loads["input error"] += 1
                except Exception as exc:  # noqa: BLE001 - the campaign counts what escapes
                    loads[f"CRASH {type(exc).__name__}"] += 1
                    bad["crash"] += 1
            print(f"in-process loads of damaged {what}s: {dict(loads)}")

        outcome = Counter()
        for index, text in enumerate(_examples(PROBLEM_FILES, args.problems)):
            path.write_text(text)
            _run(["bound", str(path), "--json"], outcome)
            method = ("1f1b", "zb-h1", "greedy", "gpipe", "po-f", "interleaved-1f1b")[index % 6]
            _run(["baseline", str(path), "--method", method, "-o", f"{folder}/s.json", "--json"], outcome)
        for text in _examples(SCHEDULE_FILES, args.schedules):
            path.write_text(text)
            _run(["check", str(path), "--json"], outcome)
            _run(["plot", str(path), "-o", f"{folder}/g.png"], outcome)
        print(f"subprocess runs ({args.problems} problems x bound, baseline; "
              f"{args.schedules} schedules x check, plot): {dict(outcome)}")
        bad.update({k: v for k, v in outcome.items() if k not in ("exit 0", "exit 1", "exit 2", "exit 3", "exit 4")})
    print("problems found:", dict(bad) if bad else "none")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
