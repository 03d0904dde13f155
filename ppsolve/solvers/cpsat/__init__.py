"""The CP-SAT backend: ``variables``, ``constraints`` (one function per family), ``objective`` and
``backend`` (``run_phase``). Chosen with ``SolveOptions(solver="cpsat")``; the entry point is
``ppsolve.solvers.solve`` (in ``ppsolve.solvers.phases``)."""
