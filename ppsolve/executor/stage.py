"""One stage on one rank: F, B (input gradient), W (weight gradients), fused B,
and the byte accounting and offload of the activations F saves.

Accounting: every tensor autograd saves during F passes a saved-tensor hook that
records its storage, once per storage (views share one), skipping parameters and
storages another live microbatch already owns. The bytes of those storages are
the microbatch's activation on this rank. Offload copies each storage into a
separate host buffer and frees the original (the storage is resized to zero, so
every tensor and view keeps pointing at it); reload allocates it again and copies
the bytes back. Split backward (see ``split``): B takes the input gradient and
records the gradients reaching the parameter branches; W runs only those branches.
Every saved
tensor the weight gradients still need is held until W: B drops the output side
of the graph, and what stays alive is measured as the microbatch's weight hold.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import torch
from torch import nn

from ppsolve.executor import split


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
    moved: int = 0
    plan: split.WeightPlan | None = None
    hold: int = 0  # bytes still held between B and W
    input_done: bool = False  # B of split backward has run


class Stage:
    """Stage ``index`` of ``num_stages`` with its module and its microbatches in flight."""

    def __init__(self, index: int, num_stages: int, module: nn.Module, loss_fn, microbatches: int,
                 ledger: SavedBytes):
        self.index = index
        self.is_first = index == 0
        self.is_last = index == num_stages - 1
        self.module = module
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.loss_fn = loss_fn
        self.microbatches = microbatches
        self.ledger = ledger
        self.pending: dict[int, Pending] = {}
        self.losses: dict[int, float] = {}
        self.bytes_of: dict[int, int] = {}
        self.hold_of: dict[int, int] = {}

    # ----- forward -----
    def forward(self, j: int, x: torch.Tensor, target: torch.Tensor | None) -> torch.Tensor | None:
        """Run F(index, j); return the tensor for the next stage (None on the last stage)."""
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
            out = self.module(x if inputs is None else inputs)
            if self.is_last:
                loss = self.loss_fn(out, target)
                self.losses[j] = float(loss.detach())
                out = loss / self.microbatches
        nbytes = self.ledger.register(key, found)
        self.bytes_of[j] = nbytes
        storages = list(found.values())
        self.pending[j] = Pending(inputs, out, storages, list(found), [s.nbytes() for s in storages], nbytes,
                                  saved=saved, host=[None] * len(storages))
        return None if self.is_last else out.detach()

    # ----- backward -----
    def backward_input(self, j: int, grad: torch.Tensor | None) -> torch.Tensor | None:
        """B of split backward: the input gradient only; the graph stays for W."""
        state = self._ready(j)
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
        state = self._ready(j)
        if state.plan is None:
            grads = torch.autograd.grad(state.outputs, self.params, state.grad, allow_unused=True)
        else:
            grads = split.backward_weight(state.plan, self.params)
        self._accumulate(grads)
        state.plan = None
        self._release(j)

    def backward_full(self, j: int, grad: torch.Tensor | None) -> torch.Tensor | None:
        """Fused B: input and weight gradients in one pass; frees the graph."""
        state = self._ready(j)
        wanted = ([] if state.inputs is None else [state.inputs]) + self.params
        grads = torch.autograd.grad(state.outputs, wanted, grad, allow_unused=True)
        grad_in = None if state.inputs is None else grads[0]
        self._accumulate(grads[0 if state.inputs is None else 1:])
        self._release(j)
        return grad_in

    def _ready(self, j: int) -> Pending:
        state = self.pending.get(j)
        if state is None:
            raise RuntimeError(f"stage {self.index}: backward of microbatch {j} before its forward")
        if state.moved:
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
        state = self.pending.get(j)
        if state is None or state.moved:
            raise RuntimeError(f"stage {self.index}: OFFLOAD of microbatch {j} without its activations on device")
        budget = state.nbytes if fraction >= 1 - 1e-9 else int(fraction * state.nbytes)
        moved = 0
        for i in sorted(range(len(state.storages)), key=lambda i: -state.sizes[i]):
            size = state.sizes[i]
            if moved + size > budget:
                continue
            storage = state.storages[i]
            host = torch.empty(size, dtype=torch.uint8, device="cpu")
            host.copy_(_bytes_view(storage))
            self.ledger.owner.pop(state.ptrs[i], None)  # the address may be reused while on host
            storage.resize_(0)
            state.host[i] = host
            moved += size
        state.moved = moved
        self.ledger.held -= moved
        return moved

    def reload(self, j: int) -> int:
        """Bring microbatch j's offloaded storages back; returns bytes moved."""
        state = self.pending.get(j)
        if state is None or not state.moved:
            raise RuntimeError(f"stage {self.index}: RELOAD of microbatch {j} that is not offloaded")
        for i, host in enumerate(state.host):
            if host is None:
                continue
            storage = state.storages[i]
            storage.resize_(state.sizes[i])
            _bytes_view(storage).copy_(host)
            state.ptrs[i] = storage.data_ptr()
            self.ledger.owner[state.ptrs[i]] = (self.index, j)
            state.host[i] = None
        moved, state.moved = state.moved, 0
        self.ledger.held += moved
        return moved


def _bytes_view(storage: torch.UntypedStorage) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)
