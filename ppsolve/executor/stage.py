"""One stage on one rank: F, R (recompute), B (input gradient), W (weight gradients),
fused B, and the byte accounting and offload of the activations F saves.

Accounting: every tensor autograd saves during F passes a saved-tensor hook that
records its storage, once per storage (views share one), skipping parameters and
storages another live microbatch already owns. The bytes of those storages are
the microbatch's activation on this rank. Offload copies each storage into a
separate host buffer and frees the original (the storage is resized to zero, so
every tensor and view keeps pointing at it); reload allocates it again and copies
the bytes back. The copies are the ``Device``'s: synchronous on CPU; on CUDA issued on
the lane the runtime selected, with ``copied(j)`` the event that a RELOAD (after an
OFFLOAD) or a B (after a RELOAD) waits for. Split backward (see ``split``): B takes the input gradient and
records the gradients reaching the parameter branches; W runs only those branches.
Every saved
tensor the weight gradients still need is held until W: B drops the output side
of the graph, and what stays alive is measured as the microbatch's weight hold.

Recompute (contract version 3): F of a recomputed microbatch runs without autograd
and keeps only its input (the checkpoint: its storage is what the microbatch holds
until R, the measured ``keep``) and the random state. R replays the forward from
the checkpoint with autograd on and that random state; from then on the microbatch
is exactly a kept one (same saved tensors, same B and W), the checkpoint's storage
counted among its saved tensors again when the forward saves it.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import torch
from torch import nn

from ppsolve.executor import split
from ppsolve.executor.device import CpuDevice, Device
from ppsolve.tolerance import EPS


def offload_choice(sizes: list[int], fraction: float) -> list[int]:
    """Which saved storages an offload of ``fraction`` of a microbatch moves: the largest first,
    each whole, while the total stays within the share (all of them at fraction >= 1)."""
    total = sum(sizes)
    budget = total if fraction >= 1 - EPS else int(fraction * total)
    chosen, moved = [], 0
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        if moved + sizes[i] <= budget:
            chosen.append(i)
            moved += sizes[i]
    return chosen


def move_to_host(record, fraction: float, device, ledger) -> int:
    """Copy the storages :func:`offload_choice` picks of ``record`` (a microbatch's saved tensors:
    ``sizes``, ``storages``, ``ptrs``, ``host``) to host and free them on the device; returns the
    bytes moved, also recorded in ``record.moved`` (``record.copied``: the event after the copy).

    A share too small for any whole storage moves nothing: the offload is a no-op (0 bytes in the
    ledger), ``record.offloaded`` is still set, and its reload is a no-op too."""
    moved = 0
    for i in offload_choice(record.sizes, fraction):
        record.host[i] = device.to_host(record.storages[i])
        ledger.owner.pop(record.ptrs[i], None)  # the address may be reused while on host
        moved += record.sizes[i]
    record.moved = moved
    record.offloaded = True
    record.copied = device.mark()
    ledger.held -= moved
    return moved


def move_to_device(record, owner, device, ledger) -> int:
    """Copy ``record``'s storages on host back into device storages (their owner in the ledger:
    ``owner``); returns the bytes moved."""
    for i, host in enumerate(record.host):
        if host is None:
            continue
        storage = record.storages[i]
        device.to_device(storage, host)
        record.ptrs[i] = storage.data_ptr()
        ledger.owner[record.ptrs[i]] = owner
        record.host[i] = None
    moved, record.moved = record.moved, 0
    record.offloaded = False
    record.copied = device.mark()
    ledger.held += moved
    return moved


class SavedBytes:
    """The storages saved by autograd on one rank, by owner (stage, microbatch)."""

    def __init__(self, params: list[torch.Tensor]):
        self.param_ptrs = {p.untyped_storage().data_ptr() for p in params}
        self.owner: dict[int, tuple[int, int]] = {}
        self.held = 0

    def claim(self, tensor: torch.Tensor, found: dict[int, torch.UntypedStorage]) -> int | None:
        """Index of ``tensor``'s storage among ``found`` (added if new); None when not counted."""
        storage = tensor.untyped_storage()
        ptr = storage.data_ptr()
        if ptr == 0 or storage.nbytes() == 0 or ptr in self.param_ptrs or ptr in self.owner:
            return None
        if ptr not in found:
            found[ptr] = storage
        return list(found).index(ptr)

    def register(self, key: tuple[int, int], found: dict[int, torch.UntypedStorage]) -> int:
        for ptr in found:
            self.owner[ptr] = key
        nbytes = sum(s.nbytes() for s in found.values())
        self.held += nbytes
        return nbytes

    def release(self, ptrs: list[int], nbytes: int) -> None:
        for ptr in ptrs:
            self.owner.pop(ptr, None)
        self.held -= nbytes


@dataclass
class Pending:
    """What F of one microbatch leaves for its backward."""

    inputs: torch.Tensor | None
    outputs: torch.Tensor
    storages: list[torch.UntypedStorage | None]
    ptrs: list[int]
    sizes: list[int]
    nbytes: int
    saved: list[tuple[weakref.ref, int]] = field(default_factory=list)  # saved tensors and their storage index
    grad: torch.Tensor | None = None
    host: list[torch.Tensor | None] = field(default_factory=list)
    moved: int = 0  # bytes on the host now
    offloaded: bool = False  # between its OFFLOAD and its RELOAD (also when the share moved nothing)
    plan: split.WeightPlan | None = None
    hold: int = 0  # bytes still held between B and W
    input_done: bool = False  # B of split backward has run
    copied: object = None  # the device event after the last OFFLOAD/RELOAD copy (None on CPU)


@dataclass
class Checkpoint:
    """What F of a recomputed microbatch keeps for its R."""

    inputs: torch.Tensor
    target: torch.Tensor | None
    rng: object  # the device's random state before F (``Device.rng_state``)
    ptrs: list[int]  # the counted storages (the input's, unless a parameter or already counted)
    nbytes: int
    context: dict = field(default_factory=dict)  # the module's keyword arguments for this microbatch


class Stage:
    """Stage ``index`` of ``num_stages`` with its module and its microbatches in flight."""

    def __init__(self, index: int, num_stages: int, module: nn.Module, loss_fn, microbatches: int,
                 ledger: SavedBytes, device: Device | None = None):
        self.index = index
        self.device = device or CpuDevice()
        self.is_first = index == 0
        self.is_last = index == num_stages - 1
        self.module = module
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.loss_fn = loss_fn
        self.microbatches = microbatches
        self.ledger = ledger
        self.pending: dict[int, Pending] = {}
        self.losses: dict[int, torch.Tensor] = {}  # read with float() after the walk (no sync per F)
        self.bytes_of: dict[int, int] = {}
        self.hold_of: dict[int, int] = {}
        self.checkpoints: dict[int, Checkpoint] = {}  # recomputed microbatches between F and R
        self.keep_of: dict[int, int] = {}  # bytes a recomputed microbatch's F kept

    # ----- forward -----
    def forward(self, j: int, x: torch.Tensor, target: torch.Tensor | None,
                recompute: bool = False, context: dict | None = None) -> torch.Tensor | None:
        """Run F(index, j); return the tensor for the next stage (None on the last stage).
        ``recompute``: the schedule recomputes (index, j): keep only the checkpoint for R.
        ``context``: keyword arguments of the module for this microbatch (its document ids)."""
        context = context or {}
        out = self._checkpoint(j, x, target, context) if recompute else self._build(j, x, target, context)
        return None if self.is_last else out.detach()

    def recompute(self, j: int) -> None:
        """R(index, j): rerun the forward from its checkpoint with autograd on and F's random
        state; the graph and saved tensors it builds are what B and W use."""
        point = self.checkpoints.pop(j, None)
        if point is None:
            done = "already ran" if j in self.pending else "did not keep a checkpoint (F missing or not recomputed)"
            raise RuntimeError(f"R({self.index},{j}) without its forward: F({self.index},{j}) {done}")
        self.ledger.release(point.ptrs, point.nbytes)
        with self.device.replay_rng(point.rng):
            self._build(j, point.inputs, point.target, point.context)

    def _checkpoint(self, j: int, x: torch.Tensor, target: torch.Tensor | None, context: dict) -> torch.Tensor:
        """F of a recomputed microbatch: no autograd graph; keeps the input, counted as its bytes."""
        found: dict[int, torch.UntypedStorage] = {}
        self.ledger.claim(x, found)
        rng = self.device.rng_state()
        with torch.no_grad():
            out = self.module(x, **context)
            if self.is_last:
                self.losses[j] = self.loss_fn(out, target).detach()
        nbytes = self.ledger.register((self.index, j), found)
        self.keep_of[j] = nbytes
        self.checkpoints[j] = Checkpoint(x.detach(), target, rng, list(found), nbytes, context)
        return out

    def _build(self, j: int, x: torch.Tensor, target: torch.Tensor | None, context: dict) -> torch.Tensor:
        """The forward with autograd on, its saved storages counted as microbatch j's activation;
        returns the stage output (the scaled loss on the last stage)."""
        key = (self.index, j)
        inputs = None if self.is_first else x.detach().requires_grad_(True)
        found: dict[int, torch.UntypedStorage] = {}
        saved: list[tuple[weakref.ref, int]] = []

        def pack(t: torch.Tensor) -> torch.Tensor:
            kept = t.detach()  # no grad_fn: no reference cycle through saved outputs
            index = self.ledger.claim(t, found)
            if index is not None:
                saved.append((weakref.ref(kept), index))
            return kept

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = self.module(x if inputs is None else inputs, **context)
            if self.is_last:
                loss = self.loss_fn(out, target)
                self.losses[j] = loss.detach()
                out = loss / self.microbatches
        nbytes = self.ledger.register(key, found)
        self.bytes_of[j] = nbytes
        storages = list(found.values())
        self.pending[j] = Pending(inputs, out, storages, list(found), [s.nbytes() for s in storages], nbytes,
                                  saved=saved, host=[None] * len(storages))
        return out

    # ----- backward -----
    def backward_input(self, j: int, grad: torch.Tensor | None) -> torch.Tensor | None:
        """B of split backward: the input gradient only; the graph stays for W."""
        state = self._ready(j, "B")
        state.grad = grad
        state.input_done = True
        if state.inputs is not None:
            state.plan = split.plan_split(state.outputs, state.inputs, self.params)
        if state.plan is None:
            # stage 0 (no input gradient): W does the whole backward, everything stays
            state.hold = state.nbytes
            self.hold_of[j] = state.hold
            return None
        grad_in = split.backward_input(state.outputs, state.inputs, grad, state.plan)
        state.outputs = state.inputs = state.grad = None  # frees the output side of the graph
        alive = {index for ref, index in state.saved if ref() is not None}
        state.hold = sum(state.sizes[i] for i in alive)
        self.hold_of[j] = state.hold
        for i in set(range(len(state.storages))) - alive:
            self.ledger.owner.pop(state.ptrs[i], None)
            state.storages[i] = None  # let the freed activation go
        self.ledger.held -= state.nbytes - state.hold
        return grad_in

    def backward_weight(self, j: int) -> None:
        """W: the weight gradients of microbatch j, accumulated into ``.grad``; frees the graph."""
        state = self._ready(j, "W")
        if state.plan is None:
            grads = torch.autograd.grad(state.outputs, self.params, state.grad, allow_unused=True)
        else:
            grads = split.backward_weight(state.plan, self.params)
        self._accumulate(grads)
        state.plan = None
        self._release(j)

    def backward_full(self, j: int, grad: torch.Tensor | None) -> torch.Tensor | None:
        """Fused B: input and weight gradients in one pass; frees the graph."""
        state = self._ready(j, "B")
        wanted = ([] if state.inputs is None else [state.inputs]) + self.params
        grads = torch.autograd.grad(state.outputs, wanted, grad, allow_unused=True)
        grad_in = None if state.inputs is None else grads[0]
        self._accumulate(grads[0 if state.inputs is None else 1:])
        self._release(j)
        return grad_in

    def _ready(self, j: int, kind: str) -> Pending:
        if j in self.checkpoints:
            raise RuntimeError(f"{kind}({self.index},{j}) of a recomputed microbatch before its R({self.index},{j})")
        state = self.pending.get(j)
        if state is None:
            raise RuntimeError(f"stage {self.index}: backward of microbatch {j} before its forward")
        if state.offloaded:
            raise RuntimeError(f"stage {self.index}: backward of microbatch {j} while its activations are "
                               "on the host (RELOAD missing)")
        return state

    def _accumulate(self, grads) -> None:
        with torch.no_grad():
            for p, g in zip(self.params, grads):
                if g is None:
                    continue
                if p.grad is None:
                    p.grad = g.clone()
                else:
                    p.grad.add_(g)

    def _release(self, j: int) -> None:
        state = self.pending.pop(j)
        self.ledger.release(state.ptrs, state.hold if state.input_done else state.nbytes)

    # ----- offload -----
    def offload(self, j: int, fraction: float) -> int:
        """Move saved storages of microbatch j to host buffers (largest first, up to
        ``fraction`` of its bytes; all of them at fraction >= 1). Returns bytes moved."""
        if j in self.checkpoints:
            raise RuntimeError(f"OFFLOAD({self.index},{j}) of a recomputed microbatch (rule 10)")
        state = self.pending.get(j)
        if state is None or state.offloaded:
            raise RuntimeError(f"stage {self.index}: OFFLOAD of microbatch {j} without its activations on device")
        return move_to_host(state, fraction, self.device, self.ledger)

    def reload(self, j: int) -> int:
        """Bring microbatch j's offloaded storages back; returns bytes moved."""
        state = self.pending.get(j)
        if state is None or not state.offloaded:
            raise RuntimeError(f"stage {self.index}: RELOAD of microbatch {j} that is not offloaded")
        return move_to_device(state, (self.index, j), self.device, self.ledger)

    def copied(self, j: int):
        """The event after microbatch j's last transfer (what its RELOAD or B waits for), or None."""
        state = self.pending.get(j)
        return None if state is None else state.copied
