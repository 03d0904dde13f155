"""Model and hardware descriptions: read, validated against their JSON Schemas, typed.

A transformer description (``ppsolve/transformer@1``) gives the sizes the cost
formulas need; a hardware description (``ppsolve/hardware@1``) names a bundled
GPU profile (``data/gpus.json``) and overrides any of its figures. Their schemas
live with the others in ``ppsolve/schemas/`` (``ppsolve schema transformer``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from ppsolve.errors import InputError
from ppsolve.jsonio import read_json
from ppsolve.schemas import validate

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


@dataclass(frozen=True)
class Transformer:
    """A decoder-only transformer: sizes (h, s, b, V, ...), precision, recomputation, and the layer
    types the executor builds (GPT-style: LayerNorm, learned positions, biases; Llama-style:
    RMSNorm, rotary positions, a gated MLP, GQA)."""

    layers: int
    hidden: int
    heads: int
    sequence: int
    micro_batch_size: int
    vocabulary: int
    ffn: int
    kv_groups: int
    dtype: str = "bf16"
    gated_mlp: bool = False
    flash_attention: bool = True
    recompute: str = "none"
    name: str = "transformer"
    norm: str = "layernorm"
    position: str = "learned"
    bias: bool = False
    seed: int = 0

    @property
    def norm_params(self) -> int:
        """Parameters of one norm: LayerNorm's weight and bias, RMSNorm's weight."""
        return 2 * self.hidden if self.norm == "layernorm" else self.hidden

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def kv_width(self) -> int:
        """Width of the keys (and of the values): kv_groups x head size."""
        return self.kv_groups * (self.hidden // self.heads)

    def with_micro_batch_size(self, size: int | None) -> "Transformer":
        if size is None:
            return self
        if size < 1:
            raise InputError("micro_batch_size", f"must be >= 1, got {size}")
        return replace(self, micro_batch_size=size)

    def to_dict(self) -> dict:
        return {"format": "ppsolve/transformer@1", **{f.name: getattr(self, f.name) for f in fields(self)}}


OLD_FORMAT = "ppsolve/model@1"
TRANSFORMER_FORMAT = "ppsolve/transformer@1"


def is_old_format(data: Any) -> bool:
    """Whether ``data`` is the executor's former model format (``ppsolve/model@1``, with ``kind``)."""
    return isinstance(data, dict) and (data.get("format") == OLD_FORMAT or ("format" not in data and "kind" in data))


def fold_old_format(data: dict, where: str = "model") -> dict:
    """A ``ppsolve/model@1`` GPT file as the transformer description it always meant: LayerNorm, learned
    positions, biases, a GeLU MLP of 4h, full attention heads. Its MLP kind has no transformer to fold into."""
    if data.get("kind") != "gpt":
        raise InputError(f"{where}.kind", f"a {OLD_FORMAT} model of kind {data.get('kind')!r} is no transformer: "
                                          f"only the executor's toy MLP (kind mlp) and GPT files of that format are "
                                          f"read; describe the model as {TRANSFORMER_FORMAT} (ppsolve schema "
                                          "transformer)")
    renamed = {"vocab": "vocabulary", "seq_len": "sequence"}
    known = {"format", "name", "kind", "micro_batch_size", "seed", "vocab", "hidden", "heads", "layers", "seq_len"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise InputError(f"{where}.{unknown[0]}", f"unknown field for a {OLD_FORMAT} 'gpt' model")
    out = {renamed.get(k, k): v for k, v in data.items() if k not in ("format", "kind")}
    out.setdefault("micro_batch_size", 2)
    return {"format": TRANSFORMER_FORMAT, **out, "norm": "layernorm", "position": "learned", "bias": True}


def transformer_from_dict(data: Any, where: str = "model") -> Transformer:
    """Validate a transformer description (a ``ppsolve/model@1`` GPT file is folded in first);
    InputError names the bad field."""
    if is_old_format(data):
        data = fold_old_format(data, where)
    validate(data, "transformer", where)
    hidden, heads = data["hidden"], data["heads"]
    if hidden % heads:
        raise InputError(f"{where}.heads", f"must divide hidden ({hidden}), got {heads}")
    kv_groups = data.get("kv_groups", heads)
    if heads % kv_groups:
        raise InputError(f"{where}.kv_groups", f"must divide heads ({heads}), got {kv_groups}")
    known = {f.name for f in fields(Transformer)}
    given = {k: v for k, v in data.items() if k in known}
    return Transformer(**{**given, "ffn": data.get("ffn", 4 * hidden), "kv_groups": kv_groups,
                          "name": data.get("name", "transformer")})


def load_transformer(path: str | Path) -> Transformer:
    return transformer_from_dict(read_json(path, "model"))


SHRINKABLE = ("layers", "hidden", "heads", "kv_groups", "ffn", "sequence", "vocabulary")


def shrink(model: Transformer, text: str, where: str = "shrink") -> Transformer:
    """``model`` with the sizes ``text`` gives (``hidden=64,layers=8,sequence=16,vocabulary=256``): the
    layer types stay; heads, key/value groups and the MLP width follow the hidden size unless given
    (head size at least 16, the GQA ratio and ffn / hidden kept)."""
    sizes: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, _, value = item.partition("=")
        if key not in SHRINKABLE:
            raise InputError(where, f"unknown size {key!r}; give any of {', '.join(SHRINKABLE)} as KEY=N")
        if not value.isdigit() or int(value) < 1:
            raise InputError(f"{where}.{key}", f"must be an integer >= 1, got {value!r}")
        sizes[key] = int(value)
    hidden = sizes.get("hidden", model.hidden)
    ratio = model.heads // model.kv_groups
    if "heads" in sizes:
        heads = sizes["heads"]
    else:
        kv = max(1, min(model.kv_groups, hidden // 16 // ratio))
        heads = kv * ratio
    kv_groups = sizes.get("kv_groups", max(1, heads // ratio))
    ffn = sizes.get("ffn", max(1, round(model.ffn * hidden / model.hidden)))
    data = {**model.to_dict(), **sizes, "hidden": hidden, "heads": heads, "kv_groups": kv_groups, "ffn": ffn,
            "name": f"{model.name} shrunk"}
    return transformer_from_dict(data, where)


@dataclass(frozen=True)
class Gpu:
    """One GPU's sustained figures (GB/s are 1e9 bytes per second per direction)."""

    name: str
    tflops: float
    hbm_gib: float
    host_link_gbps: float
    shared_pcie_switch: bool
    nvlink_gbps: float
    infiniband_gbps: float
    sources: dict = field(default_factory=dict, compare=False)


_GPU_FIGURES = ("tflops", "hbm_gib", "host_link_gbps", "shared_pcie_switch", "nvlink_gbps", "infiniband_gbps")


@lru_cache(maxsize=None)
def bundled_gpus() -> dict[str, Gpu]:
    """The bundled GPU profiles by upper-case name (validated against ``gpus.schema.json``)."""
    data = json.loads(resources.files(__package__).joinpath("data/gpus.json").read_text(encoding="utf-8"))
    validate(data, "gpus", "gpus.json")
    return {name.upper(): Gpu(name=name, **{k: entry[k] for k in _GPU_FIGURES}, sources=entry.get("x-sources", {}))
            for name, entry in data["gpus"].items()}


def gpu_named(name: str, where: str = "hardware.gpu", hint: str | None = None) -> Gpu:
    """A bundled GPU profile, case-insensitively; a miss lists the known ones and says how to describe another."""
    try:
        return bundled_gpus()[name.upper()]
    except KeyError:
        how = hint or ("for another GPU describe it with all its figures in a hardware file (`hardware`; its "
                       "schema: ppsolve schema hardware)")
        raise InputError(where, f"unknown GPU {name!r}; bundled profiles: {', '.join(bundled_gpus())}; "
                                f"{how}") from None


@dataclass(frozen=True)
class Hardware:
    """The GPU every rank has, and the p2p link between consecutive ranks."""

    gpu: Gpu
    p2p: str = "nvlink"
    p2p_latency_ms: float = 0.01
    overridden: tuple[str, ...] = ()

    @property
    def p2p_gbps(self) -> float:
        return self.gpu.nvlink_gbps if self.p2p == "nvlink" else self.gpu.infiniband_gbps

    def source_of(self, figure: str) -> str:
        if figure in self.overridden:
            return "the hardware description"
        return self.gpu.sources.get(figure, f"bundled {self.gpu.name} profile")


def hardware_from_dict(data: Any, where: str = "hardware") -> Hardware:
    """Validate a hardware description; InputError names the bad field."""
    validate(data, "hardware", where)
    overrides = {k: data[k] for k in _GPU_FIGURES if k in data}
    if data["gpu"].upper() not in bundled_gpus() and len(overrides) == len(_GPU_FIGURES):
        gpu = Gpu(name=data["gpu"], **overrides)  # a GPU of its own: every figure given
    else:
        missing = [k for k in _GPU_FIGURES if k not in overrides]
        gpu = gpu_named(data["gpu"], f"{where}.gpu", hint=f"or give all its figures (missing: {', '.join(missing)})")
    return Hardware(gpu=replace(gpu, **overrides), p2p=data.get("p2p", "nvlink"),
                    p2p_latency_ms=float(data.get("p2p_latency_ms", 0.01)), overridden=tuple(sorted(overrides)))


def hardware_of_gpu(name: str, where: str = "gpu") -> Hardware:
    """A bundled GPU profile as it is, ranks linked by NVLink."""
    return Hardware(gpu=gpu_named(name, where))


def load_hardware(path: str | Path) -> Hardware:
    return hardware_from_dict(read_json(path, "hardware"))
