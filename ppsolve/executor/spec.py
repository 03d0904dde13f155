"""Model description files, read and validated without torch.

The executor runs the transformer description the cost model reads
(``ppsolve/transformer@1``: GPT-style or Llama-style layers, see
``costmodel.descriptions``); a former ``ppsolve/model@1`` GPT file is folded into
one, and that format's ``mlp`` kind stays as a toy for tests. A model is a chain of
parts: an embedding (or input layer), ``layers`` blocks and a head with its loss.
Cut into S stages, the blocks are spread as the problem file's ``x-partition``
says, else evenly (``layers`` must then be a multiple of S); the embedding joins
stage 0 and the head the last stage. The executor computes in fp32 whatever the
description's ``dtype``, and runs one GPU per pipeline rank (no tensor parallelism).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ppsolve.costmodel.descriptions import Transformer, is_old_format, transformer_from_dict
from ppsolve.costmodel.partition import recorded_partition
from ppsolve.errors import InputError
from ppsolve.jsonio import read_json

MODEL_FORMAT = "ppsolve/model@1"
_FIELDS = {"mlp": {"width": 1, "layers": 1}}
_LAYER_FIELDS = ("layers", "hidden", "heads", "kv_groups", "ffn", "sequence", "vocabulary", "gated_mlp", "norm",
                 "position", "bias")
_COMMON = {"format", "name", "kind", "micro_batch_size", "seed"}


@dataclass(frozen=True)
class ModelSpec:
    """A validated model description: kind ``transformer`` (``dims`` holds its sizes and layer types)
    or ``mlp``. ``source`` is the description it was read from (a transformer's, with every field)."""

    kind: str
    name: str
    dims: dict
    micro_batch_size: int = 2
    seed: int = 0
    source: dict | None = None

    @property
    def layers(self) -> int:
        return int(self.dims["layers"])

    def with_micro_batch_size(self, size: int | None) -> "ModelSpec":
        if size is None:
            return self
        if size < 1:
            raise InputError("micro_batch_size", f"must be >= 1, got {size}")
        source = None if self.source is None else {**self.source, "micro_batch_size": size}
        return ModelSpec(self.kind, self.name, self.dims, size, self.seed, source)

    def layers_of_stages(self, stages: int, where: str = "model.layers") -> list[range]:
        """The block indices of each stage; refuses a split that is not even."""
        if self.layers < stages:
            raise InputError(where, f"{self.layers} layers cannot be cut into {stages} stages (need >= 1 per stage)")
        if self.layers % stages:
            raise InputError(where, f"{self.layers} layers cannot be spread evenly over {stages} stages "
                                    f"(use a multiple of {stages})")
        per = self.layers // stages
        return [range(s * per, (s + 1) * per) for s in range(stages)]

    def blocks_of_stages(self, stages: int, annotations: dict | None = None,
                         where: str = "problem.x-partition") -> list[range]:
        """The block indices of each stage: the partition a problem file records
        (``x-partition``, see :mod:`ppsolve.costmodel.partition`), else an even split."""
        partition = recorded_partition(annotations or {}, self.layers, stages, where)
        if partition is None:
            return self.layers_of_stages(stages, where=f"model {self.name}: layers")
        return partition.blocks()

    def to_dict(self) -> dict:
        if self.source is not None:
            return dict(self.source)
        return {"format": MODEL_FORMAT, "name": self.name, "kind": self.kind, **self.dims,
                "micro_batch_size": self.micro_batch_size, "seed": self.seed}


def spec_of_transformer(model: Transformer) -> ModelSpec:
    """The executor's view of a transformer description."""
    return ModelSpec(kind="transformer", name=model.name, dims={k: getattr(model, k) for k in _LAYER_FIELDS},
                     micro_batch_size=model.micro_batch_size, seed=model.seed, source=model.to_dict())


def model_from_dict(data: Any, where: str = "model") -> ModelSpec:
    """Validate a model description (a transformer description, or the former format's GPT, folded in,
    or MLP); InputError names the bad field."""
    if not isinstance(data, dict):
        raise InputError(where, "must be a JSON object")
    if not is_old_format(data) or data.get("kind") == "gpt":
        return spec_of_transformer(transformer_from_dict(data, where))
    if data.get("format", MODEL_FORMAT) != MODEL_FORMAT:
        raise InputError(f"{where}.format", f"must be {MODEL_FORMAT!r}, got {data.get('format')!r}")
    kind = data.get("kind")
    if kind not in _FIELDS:
        raise InputError(f"{where}.kind", f"must be gpt or mlp in a {MODEL_FORMAT} file, got {kind!r}; describe a "
                                          "transformer as ppsolve/transformer@1 (ppsolve schema transformer)")
    fields = _FIELDS[kind]
    unknown = sorted(set(data) - _COMMON - set(fields))
    if unknown:
        raise InputError(f"{where}.{unknown[0]}", f"unknown field for a {kind!r} model")
    dims = {}
    for key, least in fields.items():
        if key not in data:
            raise InputError(f"{where}.{key}", f"is required for a {kind!r} model")
        dims[key] = _int(data[key], least, f"{where}.{key}")
    return ModelSpec(kind=kind, name=str(data.get("name", kind)), dims=dims,
                     micro_batch_size=_int(data.get("micro_batch_size", 2), 1, f"{where}.micro_batch_size"),
                     seed=_int(data.get("seed", 0), 0, f"{where}.seed"))


def refuse_too_big(spec: ModelSpec) -> None:
    """Refuse a transformer whose fp32 weights alone would take half this machine's memory (a check's
    reference run builds the whole model): a full-size description needs shrinking (``descriptions.shrink``)."""
    import os

    from ppsolve.costmodel.build import stage_costs
    from ppsolve.costmodel.partition import Partition

    if spec.kind != "transformer":
        return
    described = transformer_from_dict(spec.to_dict())
    params = sum(c.params for c in stage_costs(described, Partition((described.layers,))))
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if 4 * params > memory / 2:
        raise InputError("model", f"{spec.name} has {params / 1e9:.1f}e9 parameters, {4 * params / 2**30:.0f} GiB "
                                  f"in fp32, more than half of this machine's {memory / 2**30:.0f} GiB: run a "
                                  "smaller model of the same layer types with `shrink` (e.g. "
                                  "hidden=64,layers=8,sequence=16,vocabulary=256)")


def _int(value: Any, least: int, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(where, f"must be an integer, got {value!r}")
    if value < least:
        raise InputError(where, f"must be >= {least}, got {value}")
    return value


def load_model_spec(path: str | Path) -> ModelSpec:
    return model_from_dict(read_json(path, "model"))
