"""The timing engines the schedule families build on: ``listsched`` (the memory-aware list
scheduler), ``placer`` (timing ops one at a time as a heuristic places them) and ``offload_pass``
(where OFFLOAD and RELOAD go in an order, and what waits for them)."""
