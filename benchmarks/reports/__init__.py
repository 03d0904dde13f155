"""The scripts that measure ppsolve and write the sections of BENCHMARKS.md."""
