"""Splitting one stage's backward into B (input gradient) and W (weight gradients)
so that W does not repeat B's work.

Walk the autograd graph from the stage output. Nodes that lead to the stage input
form the input path; B runs only along it. A path node with a child outside the
path that leads to parameters is an *intermediate*: during B a pre-hook records the
gradient it receives. W starts from those recorded gradients at the intermediates
and runs only the parameter branches. Intermediates whose branches share a
parameter are handled in one call, with their recorded gradients pinned so that
nothing is counted twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.autograd.graph import GradientEdge, Node


def grad_node(t: torch.Tensor) -> Node:
    """The node that receives ``t``'s gradient (its grad_fn, or a leaf's accumulator)."""
    if t.grad_fn is not None:
        return t.grad_fn
    return t.view_as(t).grad_fn.next_functions[0][0]


@dataclass
class WeightPlan:
    """Intermediate nodes grouped by the parameters below them, and what B recorded there."""

    groups: list[tuple[list[Node], list[int]]]
    captured: dict[Node, tuple] = field(default_factory=dict)


def plan_split(outputs: torch.Tensor, inputs: torch.Tensor, params: list[torch.Tensor]) -> WeightPlan | None:
    """The W plan of one microbatch's graph; None when the output does not reach the input."""
    root, target = outputs.grad_fn, grad_node(inputs)
    param_index = {grad_node(p): i for i, p in enumerate(params)}
    children: dict[Node, list[Node]] = {}
    postorder: list[Node] = []
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            postorder.append(node)
            continue
        if node in children:
            continue
        kids = [child for child, _ in node.next_functions if child is not None]
        children[node] = kids
        stack.append((node, True))
        stack.extend((child, False) for child in kids if child not in children)
    on_path: set[Node] = set()
    below: dict[Node, frozenset[int]] = {}
    for node in postorder:  # children first
        kids = children[node]
        if node is target or any(k in on_path for k in kids):
            on_path.add(node)
        found = {param_index[node]} if node in param_index else set()
        for kid in kids:
            found |= below.get(kid, frozenset())
        below[node] = frozenset(found)
    if root not in on_path:
        return None
    branches = {}
    for node in on_path:
        branch = frozenset().union(*(below[k] for k in children[node] if k not in on_path))
        if branch:
            branches[node] = branch
    groups: list[tuple[list[Node], set[int]]] = []
    for node, branch in branches.items():
        merged = ([node], set(branch))
        for group in [g for g in groups if g[1] & branch]:
            groups.remove(group)
            merged[0].extend(group[0])
            merged[1].update(group[1])
        groups.append(merged)
    return WeightPlan([(nodes, sorted(ps)) for nodes, ps in groups])


def backward_input(outputs: torch.Tensor, inputs: torch.Tensor, grad: torch.Tensor | None,
                   plan: WeightPlan) -> torch.Tensor:
    """B: the input gradient, recording the gradients that reach the intermediates."""
    handles = []
    for nodes, _ in plan.groups:
        for node in nodes:
            handles.append(node.register_prehook(lambda grads, node=node: plan.captured.__setitem__(node, grads)))
    try:
        (grad_in,) = torch.autograd.grad(outputs, [inputs], grad, retain_graph=True)
    finally:
        for handle in handles:
            handle.remove()
    return grad_in


def backward_weight(plan: WeightPlan, params: list[torch.Tensor]) -> list[torch.Tensor | None]:
    """W: the gradient of every parameter, from the recorded intermediate gradients."""
    out: list[torch.Tensor | None] = [None] * len(params)
    for nodes, indices in plan.groups:
        edges, grads = [], []
        for node in nodes:
            for i, g in enumerate(plan.captured.get(node, ())):
                if g is not None:
                    edges.append(GradientEdge(node, i))
                    grads.append(g)
        if not edges:
            continue
        pins = [node.register_prehook(lambda _, pinned=plan.captured[node]: pinned)
                for node in nodes if len(nodes) > 1 and node in plan.captured]
        try:
            result = torch.autograd.grad(edges, [params[i] for i in indices], grads, retain_graph=True,
                                         allow_unused=True)
        finally:
            for pin in pins:
                pin.remove()
        for i, g in zip(indices, result):
            out[i] = g
    plan.captured.clear()
    plan.groups.clear()
    return out
