"""Run a ppsolve plan's offloads and recomputes inside PyTorch's ``_PipelineScheduleRuntime``.

``attach(runtime, plan)`` registers custom functions for F, I, B and W
(``register_custom_function``) on a runtime that has loaded the plan's
compute_comms CSV. Each does what the runtime's own action does (wait for its
receive, ``forward_one_chunk``/``backward_one_chunk``/``backward_weight_one_chunk``,
the loss, the hand-over to a stage on the same rank) and adds:

- a saved-tensors hook around F that records the storages autograd saves for the
  microbatch (parameters and storages another live microbatch owns excepted): the
  activation bytes this rank holds, counted as ppsolve's own executor counts them
  (:class:`ppsolve.executor.stage.SavedBytes`), released at the end of a fused B or of
  W, and down to what W still needs at the end of I;
- the side file's extra actions (``<out>.plan.json``, :mod:`ppsolve.export.torch_levers`),
  issued at the start of the compute action they precede: OFFLOAD copies the chosen
  saved storages of (s,j) to host buffers and frees them (on CUDA on a side stream, the
  lane the plan gives it), RELOAD copies them back, and I/B of (s,j) waits for that
  copy; R reruns the forward of a recomputed (s,j);
- a microbatch's input (and target) that is a slice of the whole batch is copied first, so
  that it owns its storage (``step`` splits the batch into views of one storage);
- for a recomputed (s,j), F keeps only its input: every other saved tensor is packed as
  an empty slot that R fills by rerunning the stage (and the loss on the last stage)
  with F's random state, so the backward uses the graph F built; until R the
  microbatch holds only its input's bytes;
- contract version 2's waits (the plan's ``waits``): before an action starts, the
  device events of the actions on other lanes it waits for (no-ops on CPU, where
  every copy is synchronous and the actions run in the plan's order).

The runtime's bookkeeping it reads or writes (private API, torch 2.13):
``schedule._stages``, ``fwd_recv_ops``/``bwd_recv_ops``, ``backward_counter``,
``_internal_losses``, ``_maybe_compute_loss``, ``_compute_loss``, ``_loss_fn``,
``_n_microbatches``, ``_assert_unsharded``, ``pipeline_order_with_comms``,
``_prepare_schedule_with_comms`` and ``schedules._Action.from_str`` (:func:`load_actions`), and
``schedules._wait_batch_p2p``; the stage's ``forward_one_chunk``,
``backward_one_chunk``, ``backward_weight_one_chunk``, ``set_local_fwd_input``,
``set_local_bwd_input``, ``get_local_bwd_output``.
"""

from __future__ import annotations

import csv
import io
import json
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import torch
from torch.distributed.pipelining import schedules as _torch

from ppsolve.executor.device import CpuDevice
from ppsolve.executor.stage import SavedBytes, move_to_device, move_to_host

FORMAT = "ppsolve/torch-plan@1"
COMPUTE_KINDS = (_torch.FORWARD, _torch.BACKWARD_INPUT, _torch.FULL_BACKWARD, _torch.BACKWARD_WEIGHT)


class Slot:
    """What F of a recomputed microbatch saves in place of a tensor; R puts the tensor in."""

    __slots__ = ("tensor", "__weakref__")

    def __init__(self) -> None:
        self.tensor: torch.Tensor | None = None


@dataclass
class Saved:
    """What F of one (stage, microbatch) left for its backward, as the ledger counts it."""

    storages: list = field(default_factory=list)
    ptrs: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    refs: list[tuple[weakref.ref, int]] = field(default_factory=list)  # packed objects and their storage index
    host: list = field(default_factory=list)
    moved: int = 0  # bytes on the host now
    offloaded: bool = False  # between its OFFLOAD and its RELOAD (also when the share moved nothing)
    copied: object = None  # the device event after the last OFFLOAD/RELOAD copy
    hold: int | None = None  # bytes kept from I to W
    # recompute: F's packed objects in pack order (a Slot, or the input F kept), args for R, random state
    packed: list = field(default_factory=list)
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    rng: object = None
    keep: int = 0
    target: object = None
    awaiting_r: bool = False  # a recomputed microbatch between its F and its R

    @property
    def nbytes(self) -> int:
        return sum(self.sizes)


@dataclass
class Record:
    """One action this rank ran: its label, stage, microbatch, and device stamps around it."""

    action: str
    kind: str
    stage: int
    microbatch: int
    start: object
    end: object
    held: int
    moved: int = 0


def load_plan(plan) -> dict | None:
    """The side file as a dict (a path is read); None stays None (no offload, no recompute)."""
    if plan is None or isinstance(plan, dict):
        data = plan
    else:
        data = json.loads(Path(plan).read_text())
    if data is not None and data.get("format") != FORMAT:
        raise ValueError(f"plan: format must be {FORMAT!r}, got {data.get('format')!r}")
    return data


class PlanRun:
    """The custom functions of one rank and what they measured in the last step."""

    def __init__(self, runtime, plan: dict | None, device=None):
        self.runtime = runtime
        self.device = device or CpuDevice()
        self.stages = {stage.stage_index: stage for stage in runtime._stages}
        self.rank = runtime.rank
        _check_fits(runtime, plan)
        mine = (plan or {}).get("ranks", [])
        rank_plan = next((r for r in mine if r["rank"] == self.rank), {"extra": [], "waits": {}})
        self.extra_before: dict[str, list[dict]] = {}
        for entry in rank_plan["extra"]:
            self.extra_before.setdefault(entry["before"], []).append(entry)
        self.waits: dict[str, list[str]] = dict(rank_plan.get("waits", {}))
        self.waits.update({e["action"]: e["waits"] for e in rank_plan["extra"]})
        self.recomputed = {tuple(x) for x in (plan or {}).get("recomputed", []) if x[0] in self.stages}
        self.params = [p for stage in self.stages.values() for p in stage.submod.parameters()]
        self.per_step = sum(1 for a in runtime.pipeline_order_with_comms[self.rank]
                            if a.computation_type in COMPUTE_KINDS)
        self.calls = 0
        self.log: list | None = None  # when a list: every compute and extra action's label as it ends
        self._captured: tuple = ((), {})
        self.device.begin()
        for stage in self.stages.values():
            stage.submod.register_forward_pre_hook(self._capture, with_kwargs=True)
        self._new_step()

    # ----- per step -----
    def _new_step(self) -> None:
        self.ledger = SavedBytes(self.params)
        self.saved: dict[tuple[int, int], Saved] = {}
        self.events: dict[str, object] = {}
        self.records: list[Record] = []
        self.executed: list[str] = []  # compute and extra actions, in the order they ran
        self.peak = 0
        self.activation_bytes: dict[int, dict[int, int]] = {s: {} for s in self.stages}
        self.hold_bytes: dict[int, dict[int, int]] = {s: {} for s in self.stages}
        self.keep_bytes: dict[int, dict[int, int]] = {s: {} for s in self.stages}
        self.losses: dict[int, torch.Tensor] = {}
        self.origin = self.device.stamp()  # no ``begin`` here: on CUDA it synchronizes, with receives posted

    def _capture(self, module, args, kwargs):
        self._captured = (args, kwargs)

    # ----- the custom functions -----
    def run(self, action, ctx) -> None:
        """The custom function registered for F, I, B and W."""
        if self.calls == self.per_step:
            self.calls = 0
        if self.calls == 0:
            self._new_step()
        self.calls += 1
        label = str(action)
        for entry in self.extra_before.get(label, ()):
            self._extra(entry, ctx)
        sched = ctx.schedule_ref
        stage = self.stages[action.stage_index]
        sched._assert_unsharded(stage)
        kind = action.computation_type
        if kind == _torch.FORWARD:
            self._timed(label, "F", action, lambda: self._forward(sched, stage, action.microbatch_index, ctx))
        elif kind == _torch.BACKWARD_WEIGHT:
            self._timed(label, "W", action, lambda: self._weight(sched, stage, action.microbatch_index))
        else:
            full = kind == _torch.FULL_BACKWARD
            self._timed(label, "B", action, lambda: self._backward(sched, stage, action.microbatch_index, full))

    def _timed(self, label: str, kind: str, action, fn) -> int:
        dev = self.device
        for awaited in self.waits.get(label, ()):
            dev.wait(self.events[awaited])  # planned to end before: it ran earlier in this step
        start = dev.stamp()
        moved = fn() or 0
        end = dev.stamp()
        self.events[label] = dev.mark()
        self.executed.append(label)
        if self.log is not None:
            self.log.append(label)
        self.peak = max(self.peak, self.ledger.held)
        self.records.append(Record(label, kind, action.stage_index, action.microbatch_index, start, end,
                                   self.ledger.held, moved))
        return moved

    def _forward(self, sched, stage, j: int, ctx) -> None:
        s = stage.stage_index
        if not stage.is_first and s - 1 not in self.stages:
            _torch._wait_batch_p2p(sched.fwd_recv_ops.pop((s, j)))
        record = Saved()
        self.saved[(s, j)] = record
        found: dict[int, torch.UntypedStorage] = {}
        recompute = (s, j) in self.recomputed
        if recompute:
            record.rng = self.device.rng_state()
            record.awaiting_r = True
        targets = None
        if ctx.target_mbs is not None:
            targets = list(ctx.target_mbs)
            targets[j] = record.target = _own(targets[j])
        with torch.autograd.graph.saved_tensors_hooks(self._packer(record, found, recompute), _unpack):
            output = stage.forward_one_chunk(j, _own(ctx.arg_mbs[j]), ctx.kwarg_mbs[j])
            sched._maybe_compute_loss(stage, output, targets, j)
        if stage.is_last and sched._loss_fn is not None:
            self.losses[j] = sched._internal_losses[-1]
            _in_microbatch_order(sched._internal_losses, self.losses)
        if recompute:
            record.args, record.kwargs = self._captured
            for t in _tensors(record.args, record.kwargs):
                self.ledger.claim(t, found)
            record.keep = self.ledger.register((s, j), found)
            record.ptrs = list(found)
            self.keep_bytes[s][j] = record.keep
        else:
            self._register(s, j, record, found)
        if s + 1 in self.stages:
            self.stages[s + 1].set_local_fwd_input(output, j)

    def _packer(self, record: Saved, found: dict, recompute: bool):
        ledger = self.ledger

        def pack(t: torch.Tensor):
            kept = t.detach()  # no grad_fn: no reference cycle through saved outputs
            if recompute:  # the stage's inputs are what its module was called with (the pre-hook)
                inputs = {x.untyped_storage().data_ptr() for x in _tensors(*self._captured)}
                ptr = t.untyped_storage().data_ptr()
                keep = ptr in ledger.param_ptrs or ptr in inputs or ptr == 0
                obj = kept if keep else Slot()
                record.packed.append(obj)
                return obj
            index = ledger.claim(t, found)
            if index is not None:
                record.refs.append((weakref.ref(kept), index))
            return kept

        return pack

    def _register(self, s: int, j: int, record: Saved, found: dict) -> None:
        record.storages = list(found.values())
        record.ptrs = list(found)
        record.sizes = [st.nbytes() for st in record.storages]
        record.host = [None] * len(record.storages)
        self.activation_bytes[s][j] = self.ledger.register((s, j), found)

    def _backward(self, sched, stage, j: int, full: bool) -> None:
        s = stage.stage_index
        if not stage.is_last and s + 1 not in self.stages:
            _torch._wait_batch_p2p(sched.bwd_recv_ops.pop((s, j)))
        record = self._ready(s, j, "B" if full else "I")
        self.device.wait(record.copied)
        loss = self.losses.get(j) if stage.is_last else None
        last = False
        if full:
            sched.backward_counter[s] += 1
            last = sched.backward_counter[s] == sched._n_microbatches
        stage.backward_one_chunk(j, loss=loss, full_backward=full, last_backward=last)
        if s - 1 in self.stages:
            self.stages[s - 1].set_local_bwd_input(stage.get_local_bwd_output(j), j)
        if full:
            self._release(s, j)
            return
        alive = {index for ref, index in record.refs if ref() is not None}
        record.hold = sum(record.sizes[i] for i in alive)
        self.hold_bytes[s][j] = record.hold
        for i in set(range(len(record.storages))) - alive:
            self.ledger.owner.pop(record.ptrs[i], None)
            record.storages[i] = None
        self.ledger.held -= record.nbytes - record.hold

    def _weight(self, sched, stage, j: int) -> None:
        s = stage.stage_index
        sched.backward_counter[s] += 1
        stage.backward_weight_one_chunk(j, last_backward=sched.backward_counter[s] == sched._n_microbatches)
        self._release(s, j)

    def _ready(self, s: int, j: int, what: str) -> Saved:
        record = self.saved.get((s, j))
        if record is None:
            raise RuntimeError(f"{what}({s},{j}) before its forward")
        if record.awaiting_r:
            raise RuntimeError(f"{what}({s},{j}) of a recomputed microbatch before its R({s},{j})")
        if record.offloaded:
            raise RuntimeError(f"{what}({s},{j}) while its activations are on the host (RELOAD missing)")
        return record

    def _release(self, s: int, j: int) -> None:
        record = self.saved.pop((s, j))
        self.ledger.release(record.ptrs, record.nbytes if record.hold is None else record.hold)

    # ----- the side file's actions -----
    def _extra(self, entry: dict, ctx) -> None:
        kind, s, j = entry["kind"], entry["stage"], entry["microbatch"]
        if entry["after"] is not None and entry["after"] not in self.events:
            raise RuntimeError(f"{entry['action']}: planned after {entry['after']}, which has not run on rank "
                               f"{self.rank} (the plan does not belong to this CSV)")

        at = _At(s, j)
        lane = entry["lane"]
        with self.device.lane(lane) if lane != "compute" else _no_lane():
            if kind == "OFFLOAD":
                self._timed(entry["action"], kind, at, lambda: self._offload(s, j, entry["share"]))
            elif kind == "RELOAD":
                self._timed(entry["action"], kind, at, lambda: self.reload(s, j))
            elif kind == "R":
                self._timed(entry["action"], kind, at, lambda: self.recompute(s, j, ctx))
            else:
                raise ValueError(f"plan: unknown action kind {kind!r}")

    def _offload(self, s: int, j: int, share: float) -> int:
        record = self.saved.get((s, j))
        if record is None or record.offloaded or (s, j) in self.recomputed:
            raise RuntimeError(f"OFFLOAD({s},{j}) without its activations on the device")
        self.device.wait(record.copied)
        return move_to_host(record, share, self.device, self.ledger)

    def reload(self, s: int, j: int) -> int:
        """RELOAD(s, j): the offloaded share back onto the device; the bytes moved."""
        record = self.saved.get((s, j))
        if record is None or not record.offloaded:
            raise RuntimeError(f"RELOAD({s},{j}) of a microbatch that is not offloaded")
        self.device.wait(record.copied)
        return move_to_device(record, (s, j), self.device, self.ledger)

    def recompute(self, s: int, j: int, ctx) -> None:
        """R(s, j): the forward run again from its checkpoint, its activations saved for the backward."""
        record = self.saved.get((s, j))
        if record is None or not record.awaiting_r:
            raise RuntimeError(f"R({s},{j}) without a forward that kept its checkpoint")
        self.ledger.release(record.ptrs, record.keep)
        stage, sched = self.stages[s], ctx.schedule_ref
        found: dict[int, torch.UntypedStorage] = {}
        order = iter(record.packed)

        def pack(t: torch.Tensor):
            obj = next(order)
            index = self.ledger.claim(t, found)
            if isinstance(obj, Slot):
                obj.tensor = t.detach()
            if index is not None:
                record.refs.append((weakref.ref(obj), index))
            return None  # the rerun's own graph is dropped

        with self.device.replay_rng(record.rng), torch.enable_grad(), \
                torch.autograd.graph.saved_tensors_hooks(pack, lambda _: None):
            out = stage.submod(*record.args, **record.kwargs)
            if stage.is_last and sched._loss_fn is not None:
                sched._compute_loss(out, record.target)
        del out
        record.packed, record.args, record.kwargs, record.awaiting_r = [], (), {}, False  # the graph holds the slots
        self._register(s, j, record, found)

    # ----- results -----
    def seconds(self, stamp) -> float:
        """A record's stamp as seconds from the start of its step (on CUDA: after a synchronize)."""
        return self.device.seconds(stamp) - self.device.seconds(self.origin)

    def bytes_by_stage(self, what: str) -> dict[int, list[int]]:
        """Per stage, the bytes of each microbatch (``activation_bytes``, ``hold_bytes``, ``keep_bytes``)."""
        table = getattr(self, what)
        return {s: [by_mb[j] for j in sorted(by_mb)] for s, by_mb in table.items()}


def attach(runtime, plan=None, device=None) -> PlanRun:
    """Register the custom functions on ``runtime`` (a ``_PipelineScheduleRuntime`` that has
    loaded the compute_comms CSV, from a file or with :func:`load_actions`); ``plan``: the side
    file (dict or path), None when the plan neither offloads nor recomputes. Returns the
    :class:`PlanRun`, whose ``peak``, ``executed`` and ``*_bytes`` describe the last step."""
    run = PlanRun(runtime, load_plan(plan), device)
    for kind in COMPUTE_KINDS:
        runtime.register_custom_function(kind, run.run)
    return run


def load_actions(runtime, csv_text: str) -> None:
    """What ``runtime._load_csv(path, "compute_comms")`` does, from the CSV's text in memory
    (:func:`ppsolve.export.torch_csv.to_compute_comms_csv`): no file."""
    rows = csv.reader(io.StringIO(csv_text))
    runtime._prepare_schedule_with_comms({rank: [_torch._Action.from_str(a) for a in row]
                                          for rank, row in enumerate(rows)}, format="compute_comms")


def _check_fits(runtime, plan: dict | None) -> None:
    """The runtime has loaded a compute_comms CSV, and the plan is for its pipeline."""
    if getattr(runtime, "pipeline_order_with_comms", None) is None:
        raise ValueError("attach: load the CSV first: runtime._load_csv(path, \"compute_comms\")")
    if plan is None:
        return
    have = {"devices": runtime.pp_group_size, "stages": runtime._num_stages, "microbatches": runtime._n_microbatches}
    for key, value in have.items():
        if plan.get(key) != value:
            raise ValueError(f"plan: {key} is {plan.get(key)}, the runtime has {value}")


def _unpack(obj):
    if isinstance(obj, Slot):
        if obj.tensor is None:
            raise RuntimeError("a saved tensor of a recomputed microbatch is needed before its R")
        return obj.tensor
    return obj


def _own(value):
    """A microbatch's own copy of a tensor that is a slice of a larger one (``step`` splits the
    whole batch into views), so that what autograd saves for it is its own storage; tuples
    element-wise; anything else as it is."""
    if isinstance(value, tuple):
        return tuple(_own(v) for v in value)
    if isinstance(value, torch.Tensor) and value.untyped_storage().nbytes() > value.numel() * value.element_size():
        return value.clone()
    return value


def _tensors(args, kwargs=None) -> list[torch.Tensor]:
    values = list(args) + list((kwargs or {}).values())
    return [v for v in values if isinstance(v, torch.Tensor)]


def _in_microbatch_order(internal: list, losses: dict) -> None:
    """Keep the runtime's loss list in microbatch order (it appends in forward order; its
    backward and ``losses`` index it by microbatch)."""
    internal[:] = [losses[j] for j in sorted(losses)]


class _At(NamedTuple):
    """What ``_timed`` reads of an action, for the side file's actions."""

    stage_index: int
    microbatch_index: int


class _no_lane:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
