"""Running a schedule for real with torch: the only package of ppsolve that imports torch.

Modules: ``spec`` (model description files, no torch), ``models`` (layers, stage
split, data, loss), ``stage`` (F/B/W of one stage with saved-tensor accounting and
offload), ``runtime`` (one rank walking its action list), ``launch`` (processes,
watchdog), ``reference`` (single-process gradients), ``report`` (measured against
predicted, Chrome trace), ``profiler`` (problem files from measurements) and
``torch_runtime`` (the same schedule through ``torch.distributed.pipelining``).
Import the submodules explicitly; this package does not import torch by itself.
"""
