"""The solver backends by name, each a module that satisfies :class:`~ppsolve.solvers.api.Backend`.

A backend is imported only when chosen (OR-Tools and highspy are heavy, and may
not both load into one process); the backends import :mod:`ppsolve.solvers.api`,
never this registry.
"""

from __future__ import annotations

import importlib

from ppsolve.errors import InputError, NotApplicableError
from ppsolve.solvers.api import Backend

# The backends, by name: the module that holds each one (a :class:`Backend`).
BACKENDS = {
    "cpsat": "ppsolve.solvers.cpsat.backend",
    "milp": "ppsolve.solvers.milp.backend",
}


def load_backend(name: str) -> Backend:
    """The backend named ``name``; a clear refusal when unknown or not installed."""
    try:
        module = importlib.import_module(BACKENDS[name])
    except KeyError:
        raise InputError("solver", f"must be one of {', '.join(BACKENDS)}, got {name!r}") from None
    except ImportError as exc:  # e.g. OR-Tools after highspy was loaded (see ppsolve.solvers.milp)
        clash = " (highspy was loaded into this process first; OR-Tools and highspy bundle incompatible " \
                "HiGHS libraries)" if "Highs" in str(exc) else ""
        raise NotApplicableError(f"solver {name} is not available: {exc}{clash}") from None
    if not isinstance(module, Backend):
        missing = [n for n in ("NAME", "CONTINUOUS_AMOUNTS", "WHOLE_SHARES", "WINDOWS", "why_not", "engine",
                               "run_phase") if not hasattr(module, n)]
        raise TypeError(f"{BACKENDS[name]} is not a solver backend: it lacks {', '.join(missing)}")
    reason = module.why_not()
    if reason is not None:
        raise NotApplicableError(f"solver {name} is not available: {reason}")
    return module
