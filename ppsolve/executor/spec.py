"""Model description files (``models/*.json``), read and validated without torch.

A model is a chain of parts: an embedding (or input layer), ``layers`` blocks and a
head with its loss. Cut into S stages, the blocks are spread as the problem file's
``x-partition`` says, else evenly (``layers`` must then be a multiple of S); the
embedding joins stage 0 and the head the last stage.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ppsolve.costmodel.partition import recorded_partition
from ppsolve.errors import InputError
from ppsolve.jsonio import read_json

MODEL_FORMAT = "ppsolve/model@1"
_FIELDS = {
    "gpt": {"vocab": 2, "hidden": 1, "heads": 1, "layers": 1, "seq_len": 1},
    "mlp": {"width": 1, "layers": 1},
}
_COMMON = {"format", "name", "kind", "micro_batch_size", "seed"}


@dataclass(frozen=True)
class ModelSpec:
    """A validated model description. ``dims`` holds the kind's own sizes."""

    kind: str
    name: str
    dims: dict
    micro_batch_size: int = 2
    seed: int = 0

    @property
    def layers(self) -> int:
        return int(self.dims["layers"])

    def with_micro_batch_size(self, size: int | None) -> "ModelSpec":
        if size is None:
            return self
        if size < 1:
            raise InputError("--micro-batch-size", f"must be >= 1, got {size}")
        return ModelSpec(self.kind, self.name, self.dims, size, self.seed)

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
        return {"format": MODEL_FORMAT, "name": self.name, "kind": self.kind, **self.dims,
                "micro_batch_size": self.micro_batch_size, "seed": self.seed}


def model_from_dict(data: Any, where: str = "model") -> ModelSpec:
    """Validate a model description; InputError names the bad field."""
    if not isinstance(data, dict):
        raise InputError(where, "must be a JSON object")
    if data.get("format", MODEL_FORMAT) != MODEL_FORMAT:
        raise InputError(f"{where}.format", f"must be {MODEL_FORMAT!r}, got {data.get('format')!r}")
    kind = data.get("kind")
    if kind not in _FIELDS:
        raise InputError(f"{where}.kind", f"must be one of {', '.join(sorted(_FIELDS))}, got {kind!r}")
    fields = _FIELDS[kind]
    unknown = sorted(set(data) - _COMMON - set(fields))
    if unknown:
        raise InputError(f"{where}.{unknown[0]}", f"unknown field for a {kind!r} model")
    dims = {}
    for key, least in fields.items():
        if key not in data:
            raise InputError(f"{where}.{key}", f"is required for a {kind!r} model")
        dims[key] = _int(data[key], least, f"{where}.{key}")
    if kind == "gpt" and dims["hidden"] % dims["heads"]:
        raise InputError(f"{where}.heads", f"must divide hidden ({dims['hidden']}), got {dims['heads']}")
    return ModelSpec(kind=kind, name=str(data.get("name", kind)), dims=dims,
                     micro_batch_size=_int(data.get("micro_batch_size", 2), 1, f"{where}.micro_batch_size"),
                     seed=_int(data.get("seed", 0), 0, f"{where}.seed"))


def _int(value: Any, least: int, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(where, f"must be an integer, got {value!r}")
    if value < least:
        raise InputError(where, f"must be >= {least}, got {value}")
    return value


def load_model_spec(path: str | Path) -> ModelSpec:
    return model_from_dict(read_json(path, "model"))
