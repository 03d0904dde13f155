"""Running a schedule for real with torch: the only package of ppsolve that imports torch.

Modules: ``spec`` (model description files, no torch), ``models`` (layers, stage
split, data, loss), ``stage`` (F/B/W of one stage with saved-tensor accounting and
offload), ``runtime`` (one rank walking its action list), ``device`` (CPU/gloo or
CUDA/NCCL: placement, transfer copies, streams and events, timers), ``comm``
(point-to-point messages: tagged on gloo, ordered channels on NCCL), ``launch`` (processes,
watchdog), ``reference`` (single-process gradients), ``report`` (measured against
predicted, Chrome trace), ``profiler`` (problem files from measurements),
``torch_runtime`` (the same schedule through ``torch.distributed.pipelining``) and
``training`` (a plan per training step: packed documents, any schedule handed over in memory).
Import the submodules explicitly; this package does not import torch by itself.
"""
