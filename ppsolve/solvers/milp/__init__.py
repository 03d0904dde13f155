"""The MILP backend (PuLP + HiGHS, CBC when highspy is missing): ``variables``, ``constraints``
(one function per family), ``objective`` and ``backend`` (``run_phase``); HiGHS runs in a child
process (``highs_process``, ``highs_worker``). Chosen with ``SolveOptions(solver="milp")``; the
entry point is ``ppsolve.solvers.solve`` (in ``ppsolve.solvers.phases``).

OR-Tools and highspy bundle incompatible copies of ``libhighs.so.1``, and a process can load only
one: whichever comes first, the other fails to import. PuLP 3 loads highspy when it is imported,
so this package imports PuLP with highspy hidden (PuLP then has no HiGHS of its own, which this
backend does not use), and CP-SAT keeps working in the same process.
"""

from __future__ import annotations

import sys


class _HideHighspy:
    """A meta path finder that makes ``highspy`` look absent (while PuLP is first imported)."""

    def find_spec(self, name, path=None, target=None):
        if name == "highspy" or name.startswith("highspy."):
            raise ModuleNotFoundError(f"highspy is hidden from PuLP in this process (see {__name__})")
        return None


def _import_pulp() -> None:
    if "pulp" in sys.modules:
        return
    hide = _HideHighspy()
    sys.meta_path.insert(0, hide)
    try:
        import pulp  # noqa: F401
    finally:
        sys.meta_path.remove(hide)


_import_pulp()
