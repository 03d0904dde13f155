"""The problem: devices, stages and their placement, costs, memory and host link.

Plain data, validated once when built; everything derived from it (per-stage
durations, placement, link lanes) is computed here and nowhere else.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ppsolve.costs import Grid, PerMicrobatchError, parse_grid, parse_per_microbatch
from ppsolve.errors import InputError
from ppsolve.jsonio import read_json
from ppsolve.limits import check_counts, check_time_range, check_transfer_time
from ppsolve.ops import Op, OpKind
from ppsolve.schemas import validate

PROBLEM_FORMAT = "ppsolve/problem@1"
PLACEMENTS = ("linear", "interleaved", "vshape")


def expand_placement(spec: str | Sequence[int], devices: int, chunks: int, where: str = "placement") -> tuple[int, ...]:
    """The device of every stage for a placement name or an explicit list."""
    stages = devices * chunks
    if isinstance(spec, str):
        if spec == "linear":
            if chunks != 1:
                raise InputError(where, f"'linear' needs chunks = 1, got {chunks} (use 'interleaved' or 'vshape')")
            return tuple(range(devices))
        if spec == "interleaved":
            return tuple(s % devices for s in range(stages))
        if spec == "vshape":
            if chunks % 2:
                raise InputError(where, f"'vshape' needs an even number of chunks, got {chunks}")
            return tuple(s % devices if (s // devices) % 2 == 0 else devices - 1 - s % devices
                         for s in range(stages))
        raise InputError(where, f"must be one of {', '.join(PLACEMENTS)} or a list, got {spec!r}")
    spec = list(spec)
    if len(spec) != stages:
        raise InputError(where, f"must list {stages} devices (devices x chunks), got {len(spec)}")
    for index, device in enumerate(spec):
        if not 0 <= device < devices:
            raise InputError(f"{where}[{index}]", f"device must be in 0..{devices - 1}, got {device}")
    return tuple(int(d) for d in spec)


def _per(value: Any, count: int, where: str, what: str) -> tuple[float, ...]:
    """Broadcast a number to ``count`` entries or check a list has exactly ``count``."""
    if isinstance(value, list):
        if len(value) != count:
            raise InputError(where, f"must have {count} entries (one per {what}), got {len(value)}")
        return tuple(float(v) for v in value)
    return (float(value),) * count


@dataclass(frozen=True)
class OffloadConfig:
    """Which share of each stage's activation may go to host memory, and over which links."""

    fraction: tuple[float, ...]
    d2h: float
    h2d: float
    links: tuple[tuple[int, ...], ...]
    duplex: bool = True
    links_given: bool = False

    @cached_property
    def link_of_device(self) -> dict[int, int]:
        return {device: index for index, link in enumerate(self.links) for device in link}


@dataclass(frozen=True)
class RecomputeConfig:
    """Contract version 3: what a recomputed forward keeps until its recompute, and how long R lasts
    (per stage, or per stage and microbatch)."""

    keep: Grid
    time: Grid
    time_given: bool = False


@dataclass(frozen=True)
class Problem:
    """A validated ppsolve problem (see SPEC.md).

    Times and memory sizes are :class:`~ppsolve.costs.Grid` tables of every (stage, microbatch); read
    them per op (``duration(kind, s, j)``, ``activation.at(s, j)``). Given per stage, they also read as
    tuples of S values (``activation[s]``); given per microbatch, that reading raises
    :class:`~ppsolve.costs.PerMicrobatchError`. ``p2p_times`` holds the latency of each microbatch.
    """

    devices: int
    microbatches: int
    chunks: int
    placement_spec: str | tuple[int, ...]
    split_backward: bool
    forward: Grid
    backward_input: Grid
    backward_weight: Grid
    p2p_times: tuple[float, ...]
    activation: Grid
    weight_hold: Grid
    capacity: tuple[float | None, ...]
    offload: OffloadConfig | None = None
    recompute: RecomputeConfig | None = None
    name: str | None = None
    annotations: dict = field(default_factory=dict, compare=False, hash=False)
    source: dict | None = field(default=None, compare=False, hash=False, repr=False)

    # ----- derived, computed once -----
    @property
    def num_stages(self) -> int:
        return self.devices * self.chunks

    @cached_property
    def placement(self) -> tuple[int, ...]:
        """Device of each stage."""
        return expand_placement(self.placement_spec, self.devices, self.chunks)

    @cached_property
    def stages_of_device(self) -> tuple[tuple[int, ...], ...]:
        out: list[list[int]] = [[] for _ in range(self.devices)]
        for stage, device in enumerate(self.placement):
            out[device].append(stage)
        return tuple(tuple(s) for s in out)

    @cached_property
    def placement_name(self) -> str:
        """'linear', 'interleaved', 'vshape', or 'custom' for a list that is none of these."""
        if isinstance(self.placement_spec, str):
            return self.placement_spec
        for name in PLACEMENTS:
            try:
                if expand_placement(name, self.devices, self.chunks) == self.placement:
                    return name
            except InputError:
                pass
        return "custom"

    @cached_property
    def units(self) -> tuple[str, str]:
        """The time and memory units, from the ``x-units`` annotation (``{"time": "ms", "memory": "GiB"}``)
        or the ``units`` of a profile's ``x-profile`` or the cost model's ``x-costmodel``; else generic words.
        Only pictures and reports use them."""
        made = [self.annotations.get(key) for key in ("x-profile", "x-costmodel")]
        units = self.annotations.get("x-units") or next((m["units"] for m in made if isinstance(m, dict)
                                                         and "units" in m), None)
        if not isinstance(units, dict):
            units = {}
        return str(units.get("time", "problem's time unit")), str(units.get("memory", "problem's memory unit"))

    @property
    def backward_mode(self) -> str:
        return "split" if self.split_backward else "fused"

    @cached_property
    def kinds(self) -> tuple[OpKind, ...]:
        """Compute kinds every (stage, microbatch) has."""
        return (OpKind.F, OpKind.B, OpKind.W) if self.split_backward else (OpKind.F, OpKind.B)

    @cached_property
    def per_microbatch(self) -> bool:
        """Whether some cost differs between microbatches of one stage (contract version 4)."""
        grids = [self.forward, self.backward_input, self.backward_weight, self.activation, self.weight_hold]
        if self.recompute is not None:
            grids += [self.recompute.keep, self.recompute.time]
        return any(g.varies for g in grids) or len(set(self.p2p_times)) > 1

    @property
    def p2p(self) -> float:
        """The p2p latency, when every microbatch has the same (else PerMicrobatchError)."""
        if len(set(self.p2p_times)) > 1:
            raise PerMicrobatchError("time.p2p")
        return self.p2p_times[0]

    @cached_property
    def durations(self) -> dict[OpKind, Grid]:
        """The duration of every compute op, per kind (fused B lasts backward_input + backward_weight)."""
        backward = self.backward_input if self.split_backward else self.backward_input.combine(
            "time.backward_input", self.backward_weight, lambda b, w: b + w)
        recompute = self.recompute.time if self.recompute is not None else self.forward.map(
            "recompute.time", lambda _: 0.0)
        return {OpKind.F: self.forward, OpKind.B: backward, OpKind.W: self.backward_weight, OpKind.R: recompute}

    def duration(self, kind: OpKind, stage: int, microbatch: int | None = None, *, amount: float = 0.0) -> float:
        """Duration of a compute op of (stage, microbatch), or of a transfer moving ``amount``.

        Without ``microbatch``, the stage's one duration (PerMicrobatchError when it differs per microbatch).
        """
        if kind is OpKind.OFFLOAD:
            return amount / self.offload.d2h
        if kind is OpKind.RELOAD:
            return amount / self.offload.h2d
        grid = self.durations[kind]
        return grid[stage] if microbatch is None else grid.at(stage, microbatch)

    def latency(self, a: int, b: int, microbatch: int | None = None) -> float:
        """p2p latency between stages a and b (of ``microbatch``): 0 on the same device."""
        if self.placement[a] == self.placement[b]:
            return 0.0
        return self.p2p if microbatch is None else self.p2p_times[microbatch]

    def released_by(self, kind: OpKind, stage: int, microbatch: int | None = None) -> float:
        """Memory released at the end of a B or W of ``stage`` (of ``microbatch``)."""
        at = (lambda grid: grid[stage]) if microbatch is None else (lambda grid: grid.at(stage, microbatch))
        if kind is OpKind.B:
            return at(self.activation) - (at(self.weight_hold) if self.split_backward else 0.0)
        if kind is OpKind.W:
            return at(self.weight_hold)
        raise ValueError(f"only B and W release memory at their end, not {kind!r}")

    def max_offload(self, stage: int, microbatch: int | None = None) -> float:
        """The most of one activation of ``stage`` (of ``microbatch``) that may go to host memory."""
        if self.offload is None:
            return 0.0
        act = self.activation[stage] if microbatch is None else self.activation.at(stage, microbatch)
        return self.offload.fraction[stage] * act

    def recompute_saving(self, stage: int, microbatch: int | None = None) -> float:
        """What recomputing one activation of ``stage`` (of ``microbatch``) saves between its F and its R
        (0 without recompute)."""
        if self.recompute is None:
            return 0.0
        if microbatch is None:
            return self.activation[stage] - self.recompute.keep[stage]
        return self.activation.at(stage, microbatch) - self.recompute.keep.at(stage, microbatch)

    @property
    def can_recompute(self) -> bool:
        return self.recompute is not None and bool(
            (self.activation.array - self.recompute.keep.array > 0).any())

    @property
    def can_offload(self) -> bool:
        return self.offload is not None and any(
            f > 0 and self.activation.high(s) > 0 for s, f in enumerate(self.offload.fraction))

    def lane(self, device: int, kind: OpKind) -> int:
        """Index of the host-link lane a transfer of ``device`` uses.

        Duplex links have lanes 2*link (d2h) and 2*link+1 (h2d); half-duplex
        links have one lane, 2*link, for both directions.
        """
        link = self.offload.link_of_device[device]
        if self.offload.duplex and kind is OpKind.RELOAD:
            return 2 * link + 1
        return 2 * link

    @property
    def link_lanes(self) -> tuple[str, ...]:
        """The names of a device's host-link lanes: d2h and h2d, or one ``link`` lane when not duplex."""
        return ("link",) if self.offload is not None and not self.offload.duplex else ("d2h", "h2d")

    def lane_name(self, kind: OpKind) -> str:
        """The lane an op of ``kind`` runs on: ``compute``, or its host-link lane (see :attr:`link_lanes`)."""
        if kind.is_compute:
            return "compute"
        lanes = self.link_lanes
        return lanes[0] if len(lanes) == 1 or kind is OpKind.OFFLOAD else lanes[1]

    def compute_ops(self) -> list[Op]:
        """Every compute op of one iteration."""
        return [Op(kind, s, j) for s in range(self.num_stages) for j in range(self.microbatches) for kind in self.kinds]

    def stage_load(self, stage: int) -> float:
        """Total compute time of one stage's F, B (and W) over all microbatches."""
        return sum(self.durations[k].total(stage) for k in self.kinds)

    def device_load(self, device: int) -> float:
        """Total compute time of one device."""
        return sum(self.stage_load(s) for s in self.stages_of_device[device])

    @cached_property
    def microbatch_work(self) -> tuple[float, ...]:
        """Per microbatch, the compute time of its F, B (and W) over every stage: its critical cost."""
        work = sum(self.durations[k].array.sum(axis=0) for k in self.kinds)
        return tuple(float(w) for w in work)

    @cached_property
    def microbatch_signatures(self) -> tuple[tuple, ...]:
        """Per microbatch, every cost it has (each grid's column and its p2p latency): two microbatches with
        equal signatures are interchangeable (swapping their labels changes no schedule's times or memory)."""
        grids = [self.forward, self.backward_input, self.backward_weight, self.activation, self.weight_hold]
        if self.recompute is not None:
            grids += [self.recompute.keep, self.recompute.time]
        return tuple(tuple(tuple(g.array[:, j].tolist()) for g in grids) + (self.p2p_times[j],)
                     for j in range(self.microbatches))

    @cached_property
    def canonical(self) -> "Problem":
        """This problem with its microbatches renumbered in the order of their signatures: every renumbering
        of one batch has the same canonical problem, and the same optimum (itself when costs do not differ)."""
        if not self.per_microbatch:
            return self
        signatures = self.microbatch_signatures
        return self.with_microbatches(sorted(range(self.microbatches), key=lambda j: (signatures[j], j)))

    @cached_property
    def total_compute(self) -> float:
        return sum(self.device_load(d) for d in range(self.devices))

    def with_microbatches(self, microbatches: list[int] | range) -> "Problem":
        """The same pipeline with only these microbatches (renumbered 0..), e.g. a smaller problem whose
        optimum bounds this one's."""
        columns = list(microbatches)
        pick = lambda grid: grid.columns(columns)  # noqa: E731
        recompute = None if self.recompute is None else dataclasses.replace(
            self.recompute, keep=pick(self.recompute.keep), time=pick(self.recompute.time))
        return dataclasses.replace(
            self, microbatches=len(columns), forward=pick(self.forward), backward_input=pick(self.backward_input),
            backward_weight=pick(self.backward_weight), activation=pick(self.activation),
            weight_hold=pick(self.weight_hold), p2p_times=tuple(self.p2p_times[j] for j in columns),
            recompute=recompute, source=None)

    # ----- conversion -----
    def to_dict(self) -> dict:
        """The problem file this problem came from (or an equivalent one)."""
        if self.source is not None:
            return copy.deepcopy(self.source)
        data: dict[str, Any] = {"format": PROBLEM_FORMAT}
        if self.name is not None:
            data["name"] = self.name
        data.update({
            "devices": self.devices,
            "microbatches": self.microbatches,
            "chunks": self.chunks,
            "placement": self.placement_spec if isinstance(self.placement_spec, str) else list(self.placement_spec),
            "backward": self.backward_mode,
            "time": {"forward": self.forward.to_json(), "backward_input": self.backward_input.to_json(),
                     "backward_weight": self.backward_weight.to_json(), "p2p": _compact(self.p2p_times)},
            "memory": {"activation": self.activation.to_json(), "weight_hold": self.weight_hold.to_json(),
                       "capacity": _compact(self.capacity)},
        })
        if self.offload is not None:
            data["offload"] = _offload_section(self.offload)
        if self.recompute is not None:
            data["recompute"] = _recompute_section(self.recompute)
        data.update(self.annotations)
        return data

    def replace(self, **changes: Any) -> "Problem":
        """A copy with some of ``capacity``, ``offload``, ``recompute`` (None, a file's section or a
        config) and ``name`` changed, built directly (the rest was validated when this one was loaded);
        a bad capacity, offload or recompute value is an InputError naming the field."""
        data = self.to_dict()  # the new problem's file: what to_dict() gives for it
        fields: dict[str, Any] = {}
        for key, value in changes.items():
            if key == "capacity":
                value = list(value) if isinstance(value, tuple) else value
                data["memory"]["capacity"] = value
                fields["capacity"] = _capacity(value, self.devices, "capacity")
            elif key in ("offload", "recompute"):
                parse, section = ((lambda v: _offload_config(v, self.devices, self.activation, "offload"),
                                   _offload_section) if key == "offload" else
                                  (lambda v: _recompute_config(v, self.activation, self.forward, "recompute"),
                                   _recompute_section))
                data.pop(key, None)
                config = parse(value) if isinstance(value, dict) else value
                if config is not None:
                    data[key] = value if isinstance(value, dict) else section(config)
                fields[key] = config
            elif key == "name":
                data["name"] = value
                fields["name"] = value
            else:
                raise TypeError(f"replace() does not support {key!r}")
        if data.get("name") is None:
            data.pop("name", None)
        return dataclasses.replace(self, source=data, **fields)


def _offload_section(config: OffloadConfig) -> dict:
    """The problem file's ``offload`` section of ``config``."""
    off: dict[str, Any] = {"fraction": _compact(config.fraction),
                           "bandwidth": {"d2h": config.d2h, "h2d": config.h2d}, "duplex": config.duplex}
    if config.links_given:
        off["links"] = [list(link) for link in config.links]
    return off


def _recompute_section(config: RecomputeConfig) -> dict:
    """The problem file's ``recompute`` section of ``config``."""
    rec: dict[str, Any] = {"keep": config.keep.to_json()}
    if config.time_given:
        rec["time"] = config.time.to_json()
    return rec


def _compact(values: tuple) -> Any:
    """A tuple of equal values back to one number (or null); else a list."""
    if values and all(v == values[0] for v in values):
        return values[0]
    return list(values)


def _capacity(raw: Any, devices: int, where: str) -> tuple[float | None, ...]:
    """Per device capacity from a file's ``memory.capacity`` (null: unbounded)."""
    if raw is None:
        return (None,) * devices
    capacity = _per(raw, devices, where, "device")
    for d, cap in enumerate(capacity):
        if not cap >= 0:
            raise InputError(f"{where}[{d}]" if isinstance(raw, list) else where, f"must be >= 0, got {cap:g}")
    return capacity


def _offload_config(raw: dict | None, devices: int, activation: Grid, where: str) -> OffloadConfig | None:
    """The offload link of a file's ``offload`` section (None: no link)."""
    if raw is None:
        return None
    stages = len(activation)
    fraction = _per(raw.get("fraction", 1.0), stages, f"{where}.fraction", "stage")
    links_given = "links" in raw
    links = raw.get("links") or [[d] for d in range(devices)]
    seen: dict[int, int] = {}
    for li, link in enumerate(links):
        for di, device in enumerate(link):
            if device >= devices:
                raise InputError(f"{where}.links[{li}][{di}]", f"unknown device {device} (devices are 0..{devices - 1})")
            if device in seen:
                raise InputError(f"{where}.links[{li}][{di}]", f"device {device} is already on link {seen[device]}")
            seen[device] = li
    links = [list(link) for link in links] + [[d] for d in range(devices) if d not in seen]
    largest = max(f * activation.high(s) for s, f in enumerate(fraction))
    for direction in ("d2h", "h2d"):
        check_transfer_time(largest, float(raw["bandwidth"][direction]), f"{where}.bandwidth.{direction}")
    return OffloadConfig(fraction=fraction, d2h=float(raw["bandwidth"]["d2h"]), h2d=float(raw["bandwidth"]["h2d"]),
                         links=tuple(tuple(int(d) for d in link) for link in links),
                         duplex=bool(raw.get("duplex", True)), links_given=links_given)


def _recompute_config(raw: dict | None, activation: Grid, forward: Grid, where: str) -> RecomputeConfig | None:
    """The recompute block of a file's ``recompute`` section (None: none); R lasts as F unless timed."""
    if raw is None:
        return None
    stages, microbatches = activation.stages, activation.microbatches
    keep = parse_grid(raw["keep"], stages, microbatches, f"{where}.keep", "recompute.keep")
    _check_within(keep, raw["keep"], activation, f"{where}.keep")
    time_given = "time" in raw
    recompute_time = (parse_grid(raw["time"], stages, microbatches, f"{where}.time", "recompute.time")
                      if time_given else forward)
    return RecomputeConfig(keep=keep, time=recompute_time, time_given=time_given)


def _check_within(part: Grid, raw: Any, activation: Grid, where: str) -> None:
    """Refuse a part (weight hold, recompute keep) above its activation, naming the entry."""
    over = np.argwhere(part.array > activation.array)
    if not len(over):
        return
    s, j = (int(x) for x in over[0])
    index = f"[{s}][{j}]" if part.per_microbatch else f"[{s}]" if isinstance(raw, list) else ""
    of = f"stage {s}, microbatch {j}" if part.per_microbatch or activation.per_microbatch else f"stage {s}"
    raise InputError(f"{where}{index}", f"must be <= activation ({activation.at(s, j):g}) of {of}, "
                                        f"got {part.at(s, j):g}")


def problem_from_dict(data: Any, where: str = "problem") -> Problem:
    """Validate a problem file's content and build the Problem; InputError names the bad field."""
    validate(data, "problem", where)
    check_counts(data, where)
    devices, microbatches = int(data["devices"]), int(data["microbatches"])
    chunks = int(data.get("chunks", 1))
    stages = devices * chunks
    spec = data.get("placement", "linear")
    placement_spec = spec if isinstance(spec, str) else tuple(int(d) for d in spec)
    expand_placement(placement_spec, devices, chunks, f"{where}.placement")

    time, memory = data["time"], data["memory"]
    grid = lambda raw, field: parse_grid(raw, stages, microbatches, f"{where}.{field}", field)  # noqa: E731
    per_stage = {key: grid(time[key], f"time.{key}") for key in ("forward", "backward_input", "backward_weight")}
    p2p = parse_per_microbatch(time.get("p2p", 0.0), microbatches, f"{where}.time.p2p")
    activation = grid(memory["activation"], "memory.activation")
    weight_hold = grid(memory.get("weight_hold", 0), "memory.weight_hold")
    _check_within(weight_hold, memory.get("weight_hold"), activation, f"{where}.memory.weight_hold")
    capacity = _capacity(memory.get("capacity"), devices, f"{where}.memory.capacity")

    offload = _offload_config(data.get("offload"), devices, activation, f"{where}.offload")
    recompute = _recompute_config(data.get("recompute"), activation, per_stage["forward"], f"{where}.recompute")

    check_time_range(_durations(per_stage, p2p, activation, offload, recompute), where)
    return Problem(
        devices=devices, microbatches=microbatches, chunks=chunks, placement_spec=placement_spec,
        split_backward=data.get("backward", "split") == "split",
        forward=per_stage["forward"], backward_input=per_stage["backward_input"],
        backward_weight=per_stage["backward_weight"], p2p_times=p2p,
        activation=activation, weight_hold=weight_hold, capacity=capacity, offload=offload,
        recompute=recompute, name=data.get("name"), annotations={k: v for k, v in data.items() if k.startswith("x-")},
        source=copy.deepcopy(data),
    )


def _durations(per_stage: dict[str, Grid], p2p: tuple[float, ...], activation: Grid,
               offload: "OffloadConfig | None", recompute: "RecomputeConfig | None") -> list[tuple[float, str]]:
    """Every duration a problem sets, with its field: compute ops, the latency, whole-share transfers."""
    grids = list(per_stage.values()) + ([recompute.time] if recompute is not None else [])
    out = [(v, f"{g.field}{_index(g, s, j)}") for g in grids for s, j, v in _extremes(g)]
    out += [(v, f"time.p2p[{j}]" if len(set(p2p)) > 1 else "time.p2p") for j, v in enumerate(p2p[:1] if
                                                                                        len(set(p2p)) == 1 else p2p)]
    if offload is not None:
        for s, f in enumerate(offload.fraction):
            a = activation.high(s)
            out += [(f * a / offload.d2h, f"offload of stage {s} at bandwidth.d2h"),
                    (f * a / offload.h2d, f"reload of stage {s} at bandwidth.h2d")]
    return out


def _extremes(grid: Grid):
    """(stage, microbatch, value) of every per-stage value, or of each stage's least non-zero and largest."""
    for s in range(grid.stages):
        if not grid.per_microbatch:
            yield s, 0, grid.at(s, 0)
            continue
        row = grid.row(s)
        positive = [j for j, v in enumerate(row) if v > 0]
        for j in {min(positive, key=row.__getitem__), max(positive, key=row.__getitem__)} if positive else {0}:
            yield s, j, row[j]


def _index(grid: Grid, s: int, j: int) -> str:
    return f"[{s}][{j}]" if grid.per_microbatch else f"[{s}]"


def load_problem(path: str | Path) -> Problem:
    """Read and validate a problem file."""
    return problem_from_dict(read_json(path, "problem"))
