"""ppsolve's benchmarks: the shared harness, the instance makers (makers/), the report scripts (reports/).

Run them from the repository root as modules; benchmarks/README.md lists each one.
"""
