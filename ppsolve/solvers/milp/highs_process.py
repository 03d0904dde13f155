"""HiGHS in a child process (``highs_worker.py``): the PuLP model goes over as arrays, improving
solutions and bounds come back while it searches, and the parent can stop it or kill it.

OR-Tools and highspy bundle incompatible copies of ``libhighs.so.1`` and a process
can load only one of them (whichever comes first wins; the other fails to import),
so highspy is never imported here: ``bench`` and ``frontier`` run CP-SAT and the
MILP in one process, and so do the tests.
"""

from __future__ import annotations

import importlib.util
import pickle
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pulp

from ppsolve.errors import PpsolveError

WORKER = Path(__file__).with_name("highs_worker.py")
# run the worker by path, without the script's folder (or the working directory) on sys.path
_BOOT = "import runpy, sys; sys.path.pop(0); runpy.run_path(sys.argv[1], run_name='__main__')"
_STDERR_KEPT = 4000  # characters of the worker's stderr kept for an error message


def available() -> bool:
    """Whether highspy is installed (found without importing it)."""
    return importlib.util.find_spec("highspy") is not None


@dataclass
class Outcome:
    """How a HiGHS run ended: HiGHS' model status name, the final objective, dual bound and values
    (None without a solution), what stopped it early ("work", "stop", or None) and the work done."""

    status: str
    objective: float | None
    bound: float | None
    values: list[float] | None
    stopped_by: str | None
    work: int


def lp_arrays(lp: pulp.LpProblem) -> tuple[dict, list[str]]:
    """The model as HiGHS' arrays (rows as a row-wise matrix) and the column names, in order."""
    variables = lp.variables()
    index = {var.name: i for i, var in enumerate(variables)}
    inf = float("inf")
    sense = -1 if lp.sense == pulp.LpMaximize else 1
    cost = [0.0] * len(variables)
    for var, coefficient in lp.objective.items():
        cost[index[var.name]] = sense * coefficient
    start, col, value, low, high = [0], [], [], [], []
    for constraint in lp.constraints():
        for var, coefficient in constraint.items():
            if coefficient:
                col.append(index[var.name])
                value.append(float(coefficient))
        start.append(len(col))
        lb, ub = constraint.getLb(), constraint.getUb()
        low.append(-inf if lb is None else float(lb))
        high.append(inf if ub is None else float(ub))
    arrays = {
        "col_cost": cost,
        "col_lower": [-inf if v.lowBound is None else float(v.lowBound) for v in variables],
        "col_upper": [inf if v.upBound is None else float(v.upBound) for v in variables],
        "integer": [i for i, v in enumerate(variables) if v.cat == pulp.LpInteger],
        "row_lower": low, "row_upper": high, "start": start, "index": col, "value": value,
        "offset": sense * (lp.objective.constant or 0.0),
    }
    return arrays, [var.name for var in variables]


class HighsRun:
    """One search in a child process. ``on_solution(values, objective, bound)`` and ``on_bound(bound)``
    are called from a reader thread as the messages arrive."""

    def __init__(self, request: dict, on_solution: Callable, on_bound: Callable[[float], None]):
        self.on_solution, self.on_bound = on_solution, on_bound
        self.outcome: Outcome | None = None
        self._stderr: list[str] = []
        self.proc = subprocess.Popen([sys.executable, "-c", _BOOT, str(WORKER)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        threading.Thread(target=self._read_stderr, daemon=True).start()
        try:
            pickle.dump(request, self.proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the worker died; wait() says why

    def _read(self) -> None:
        while True:
            try:
                message = pickle.load(self.proc.stdout)
            except (EOFError, pickle.UnpicklingError, OSError):
                return
            kind = message[0]
            if kind == "solution":
                self.on_solution(*message[1:])
            elif kind == "bound":
                self.on_bound(message[1])
            elif kind == "done":
                self.outcome = Outcome(*message[1:])

    def _read_stderr(self) -> None:
        for line in iter(self.proc.stderr.readline, b""):
            self._stderr.append(line.decode(errors="replace"))
            if sum(map(len, self._stderr)) > 4 * _STDERR_KEPT:
                del self._stderr[: len(self._stderr) // 2]

    def wait(self) -> Outcome:
        """Wait for the search to end; a worker that died without an answer raises PpsolveError."""
        self._reader.join()
        self.proc.wait()
        if self.outcome is None:
            tail = "".join(self._stderr)[-_STDERR_KEPT:].strip()
            raise PpsolveError(f"the HiGHS worker ended without an answer (exit {self.proc.returncode})"
                               + (f": {tail.splitlines()[-1]}" if tail else ""))
        return self.outcome

    def stop(self) -> None:
        """Ask the search to stop (it ends at HiGHS' next interrupt check, with what it has)."""
        try:
            self.proc.stdin.write(b"stop\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass

    def kill(self) -> None:
        """End the worker now (when it does not answer a stop in time)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
