"""From a model description and a GPU to a problem file: the cost model.

Modules: ``descriptions`` (transformer and hardware files, bundled GPU profiles,
their JSON Schemas in ``ppsolve/schemas/``, the shrink of a model), ``parallel`` (tensor,
sequence, context and data parallelism, optimizer sharding, bytes per parameter),
``formulas`` (FLOPs and bytes per part of the model on one GPU), ``partition`` (blocks per stage, as text and as the ``x-partition``
annotation), ``build`` (the problem of one partition), ``search`` (the
partition as a decision), ``documents`` (costs per microbatch from document lengths),
``packing`` (documents into microbatches) and ``batch`` (``--documents``: packing and its
summary; ``problem_for_batch``, one step's problem from its documents, for a training loop). Imports no
solver until a search runs, and never torch.
"""

from ppsolve.costmodel.batch import problem_for_batch
from ppsolve.costmodel.build import Layout, build_problem, problem_data
from ppsolve.costmodel.descriptions import (Hardware, Transformer, bundled_gpus, hardware_from_dict, hardware_of_gpu,
                                            load_hardware, load_transformer, transformer_from_dict)
from ppsolve.costmodel.formulas import offload_k
from ppsolve.costmodel.parallel import Parallelism
from ppsolve.costmodel.partition import Partition, even_partition, parse_partition, recorded_partition

__all__ = ["Hardware", "Layout", "Parallelism", "Partition", "Transformer", "build_problem", "bundled_gpus", "even_partition",
           "hardware_from_dict", "hardware_of_gpu", "load_hardware", "load_transformer", "offload_k",
           "parse_partition", "problem_data", "problem_for_batch", "recorded_partition", "transformer_from_dict"]
