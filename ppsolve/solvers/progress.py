"""The live progress of a solve on stderr: phase, elapsed and remaining time, incumbent, bound, gap.

Backends report in model units (:meth:`Progress.update`); the line shows the
user's units (each phase says how to convert). On a terminal a rich live line
is refreshed several times a second (a ticker thread, so the clock moves even
while the solver reports nothing); otherwise one line is printed when a phase
starts and one when it ends. The least-offload phase reads
``offloaded X (at makespan Y)`` and shows a bound only when it is above zero,
since "at least 0" is no news and a 100 % gap would read as a failure. The
large-neighbourhood phase reads ``neighbourhoods ... makespan X (N windows, K better)``.
"""

from __future__ import annotations

import sys
import threading
from typing import Callable, TextIO

from ppsolve.solvers.budget import Budget

REFRESH_PER_SECOND = 4


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:g}"


class Progress:
    """One per solve; ``phase()`` starts a phase, backends call ``update()`` from any thread."""

    def __init__(self, budget: Budget, label: str, quiet: bool = True, stream: TextIO | None = None):
        self.budget = budget
        self.label = label
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._lock = threading.Lock()
        self._name = ""
        self._quantity = ""
        self._to_user: Callable[[float], float] = float
        self._at: str = ""
        self._gap = True
        self.incumbent: float | None = None
        self.bound: float | None = None
        self._live = None
        self._ticker: threading.Thread | None = None
        self._stop = threading.Event()

    # ----- what backends call -----

    def update(self, incumbent: float | None = None, bound: float | None = None) -> None:
        """A new incumbent and/or bound, in model units of the phase's quantity."""
        with self._lock:
            if incumbent is not None:
                self.incumbent = self._to_user(incumbent)
            if bound is not None:
                self.bound = self._to_user(bound)

    def detail(self, at: str) -> None:
        """Replace the phase's note after the quantity (e.g. how many windows a search has tried)."""
        with self._lock:
            self._at = at

    # ----- what the solve calls -----

    def phase(self, name: str, quantity: str, to_user: Callable[[float], float], incumbent: float | None = None,
              at: str = "", gap: bool = True, bound: float | None = None) -> None:
        """Start a phase; ``incumbent`` (user units) is what it starts from, ``bound`` (user units)
        what is known to hold already, ``at`` a note such as ``(at makespan 90)``; ``gap=False`` hides the gap."""
        self.end_phase()
        with self._lock:
            self._name, self._quantity, self._to_user = name, quantity, to_user
            self._at, self._gap = at, gap
            self.incumbent, self.bound = incumbent, bound
        if self.quiet:
            return
        if self.tty:
            self._start_live()
        else:
            self._print(self.line())

    def end_phase(self) -> None:
        if not self._name or self.quiet:
            self._name = ""
            return
        if self.tty:
            self._stop_live()
        else:
            self._print(self.line())
        self._name = ""

    def message(self, text: str) -> None:
        """A line of its own (e.g. which warm start was chosen)."""
        if not self.quiet:
            self._print(f"{self.label}  {self.budget.elapsed():5.1f}s  {text}")

    # ----- the line -----

    def line(self) -> str:
        with self._lock:
            inc, bnd = self.incumbent, self.bound
        elapsed, left = self.budget.elapsed(), self.budget.remaining()
        parts = [f"{self.label} {self._name}", f"{elapsed:5.1f}s elapsed, {left:5.1f}s left",
                 f"{self._quantity} {_fmt(inc)}" + (f" {self._at}" if self._at else "")]
        if self._gap:
            parts.append(f"bound {_fmt(bnd)}")
            gap = "-"
            if inc and bnd is not None:
                gap = f"{max(0.0, (inc - bnd) / abs(inc)):.2%}"
            parts.append(f"gap {gap}")
        elif bnd:
            parts.append(f"at least {_fmt(bnd)}")
        return "  ".join(parts)

    def _print(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    def _start_live(self) -> None:
        from rich.console import Console
        from rich.live import Live
        from rich.text import Text

        console = Console(file=self.stream, force_terminal=True)
        self._live = Live(Text(self.line()), console=console, auto_refresh=False, transient=False)
        self._live.start()
        self._stop.clear()

        def tick() -> None:
            while not self._stop.wait(1 / REFRESH_PER_SECOND):
                self._live.update(Text(self.line()), refresh=True)

        self._ticker = threading.Thread(target=tick, daemon=True)
        self._ticker.start()

    def _stop_live(self) -> None:
        if self._live is None:
            return
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        from rich.text import Text

        self._live.update(Text(self.line()), refresh=True)
        self._live.stop()
        self._live = None
