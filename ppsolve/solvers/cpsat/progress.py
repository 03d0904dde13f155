"""A live progress line on stderr while CP-SAT searches: elapsed, incumbent, bound, gap."""

from __future__ import annotations

import sys
import threading
import time
from typing import Callable, TextIO

from ortools.sat.python import cp_model


class Progress(cp_model.CpSolverSolutionCallback):
    """Records every incumbent and bound; prints one line per change unless quiet.

    ``to_user`` maps the model's objective value to what the line shows
    (e.g. scaled time back to the user's unit). On a terminal the line is
    rewritten in place; otherwise a line is printed at most every
    ``every`` seconds (and always for a new incumbent).
    """

    def __init__(self, label: str, to_user: Callable[[float], float], quiet: bool = True,
                 stream: TextIO | None = None, every: float = 1.0, t0: float | None = None,
                 quantity: str = "incumbent"):
        super().__init__()
        self.label = label
        self.to_user = to_user
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.every = every
        self.t0 = time.monotonic() if t0 is None else t0  # elapsed counts from the solve's start
        self.quantity = quantity  # what the objective is: "incumbent" makespan, "offloaded", "peak"
        self.incumbent: float | None = None
        self.bound: float | None = None
        self.solutions = 0
        self._last_print = 0.0
        self._lock = threading.Lock()
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._dirty_line = False

    def on_solution_callback(self) -> None:
        with self._lock:
            self.solutions += 1
            self.incumbent = self.to_user(self.ObjectiveValue())
            self.bound = self.to_user(self.BestObjectiveBound())
        self.show(force=True)

    def on_bound(self, bound: float) -> None:
        with self._lock:
            self.bound = self.to_user(bound)
        self.show()

    def line(self) -> str:
        elapsed = time.monotonic() - self.t0
        inc = "-" if self.incumbent is None else f"{self.incumbent:g}"
        bnd = "-" if self.bound is None else f"{self.bound:g}"
        gap = "-"
        if self.incumbent and self.bound is not None:
            gap = f"{max(0.0, (self.incumbent - self.bound) / self.incumbent):.2%}"
        return f"{self.label}  {elapsed:6.1f}s  {self.quantity} {inc}  bound {bnd}  gap {gap}"

    def show(self, force: bool = False) -> None:
        if self.quiet:
            return
        now = time.monotonic()
        if not force and now - self._last_print < self.every:
            return
        self._last_print = now
        if self._tty:
            self.stream.write("\r\x1b[K" + self.line())
            self._dirty_line = True
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()

    def finish(self) -> None:
        """End the in-place line so later output starts on a fresh line."""
        if not self.quiet and self._dirty_line:
            self.stream.write("\n")
            self.stream.flush()
            self._dirty_line = False
