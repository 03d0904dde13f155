"""Every published pipeline schedule as a baseline, listed in ``METHODS`` for :mod:`ppsolve.methods`.

One module per family (``families/``), built on the timing engines of ``engines/``; this
package lists each method (family "baseline") with its requirements, so the CLI, the benchmark
and the tests all read one list. Every method here is a published schedule except ``greedy`` (ours). Each one also runs
in another microbatch order as ``NAME@ORDER`` (:mod:`ppsolve.baselines.microbatch_order`),
made on demand by :func:`get_baseline`, not listed.
"""

from __future__ import annotations

from ppsolve.baselines.common import Requirement
from ppsolve.baselines.families import greedy, interleaved, offload, onef1b, recompute, vshape, zero_bubble
from ppsolve.baselines.microbatch_order import ORDERS, ordered_method, split_name
from ppsolve.errors import NotApplicableError
from ppsolve.gcpause import without_gc
from ppsolve.method_types import Method

_ANY = Requirement()


def _method(name: str, build, requirement: Requirement, description: str, why_not=None,
            requirements: str | None = None, published: bool = True) -> Method:
    return Method(name=name, family="baseline", description=description,
                  requirements=requirements or requirement.text(), why_not=why_not or requirement.why_not,
                  build=without_gc(build), published=published)


METHODS: tuple[Method, ...] = (
    _method("gpipe", onef1b.build_gpipe, onef1b.LINEAR,
            "all forwards, then all backwards (W right after its B); holds every microbatch"),
    _method("1f1b", onef1b.build_1f1b, onef1b.LINEAR,
            "warm-up d-1-i forwards, then one forward one backward; d-i activations on device i"),
    _method("interleaved-1f1b", interleaved.build_interleaved, interleaved.INTERLEAVED,
            "Megatron's virtual-pipeline 1F1B, microbatch groups of d, any m and v"),
    _method("zb-h1", zero_bubble.build_zb_h1, zero_bubble.LINEAR_SPLIT,
            "zero-bubble H1: the zero-bubble heuristic on real costs, every device within d microbatches"),
    _method("zb-h1-handcrafted", zero_bubble.build_zb_h1_handcrafted, zero_bubble.LINEAR_SPLIT,
            "the zero-bubble paper's handcrafted ZB-H1: 1F1B with device i's W(j) after B(j+i)"),
    _method("zb-h2", zero_bubble.build_zb_h2, zero_bubble.LINEAR_SPLIT,
            "zero-bubble H2: the zero-bubble heuristic on real costs, every device within 2d microbatches"),
    _method("zb-v", vshape.build_zb_v, vshape.VSHAPE_SPLIT,
            "zero-bubble V: the V-shape heuristic on real costs, every device within d microbatches"),
    _method("v-half", vshape.build_v_half, vshape.VSHAPE_SPLIT,
            "V-Half: the published building block, squeezed; about half of 1F1B's memory"),
    _method("v-min", vshape.build_v_min, vshape.VSHAPE_SPLIT,
            "V-Min: the published building block, squeezed; about a third of 1F1B's memory"),
    _method("dualpipe-v", vshape.build_dualpipe_v, vshape.VSHAPE,
            "DeepSeek's DualPipeV order run without F&B overlap (m >= 2d)",
            why_not=vshape.dualpipe_v_why_not, requirements="vshape (v=2), split or fused backward, m >= 2d"),
    _method("gis", offload.build_gis, offload.INTERLEAVED_SPLIT,
            "PipeOffload's grouped interleaving, groups of d: warm-up (v-1)d + (d-1-i), d*v stage activations"),
    _method("gis-h", offload.build_gis_h, offload.INTERLEAVED_SPLIT,
            "GIS with the least group g (ceil(d/2) on even costs): g(v-1) + d stage activations"),
    _method("po-h", offload.build_po_h, offload.INTERLEAVED_SPLIT_OFFLOAD,
            "PipeOffload half: GIS-H's spacing, groups of 1, the first half of the chunks offloaded by the reference's pass"),
    _method("po-f", offload.build_po_f, offload.INTERLEAVED_SPLIT_OFFLOAD,
            "PipeOffload full: GIS, every chunk offloaded by the reference's pass (where the link has room)"),
    _method("1f1b-offload", offload.build_1f1b_offload, offload.LINEAR_OFFLOAD,
            "1F1B with full offload (PipeOffload Fig. 1): all but the last stage to host, forwards wait for offloads"),
    _method("1f1b-recompute", recompute.build_1f1b_recompute, recompute.LINEAR_RECOMPUTE,
            "1F1B with Megatron's full recompute: every forward keeps only its checkpoint, R right before B"),
    _method("interleaved-1f1b-recompute", recompute.build_interleaved_recompute, recompute.INTERLEAVED_RECOMPUTE,
            "interleaved 1F1B with Megatron's full recompute: every forward keeps only its checkpoint, "
            "R right before B"),
    _method("1f1b-adapipe", recompute.build_1f1b_adapipe, recompute.LINEAR_RECOMPUTE,
            "1F1B recomputing whole stages as AdaPipe does, per device over the cap, least recompute time per "
            "memory saved first"),
    _method("interleaved-1f1b-adapipe", recompute.build_interleaved_adapipe, recompute.INTERLEAVED_RECOMPUTE,
            "interleaved 1F1B recomputing whole stages as AdaPipe does, per device over the cap, least recompute "
            "time per memory saved first"),
    _method("greedy", greedy.build_greedy, _ANY,
            "list scheduler within the memory cap, offloading long waits; on capped V-shapes also the "
            "published V orders and the building-block search (solver warm start, fallback)",
            published=False),
)


def get_baseline(name: str) -> Method:
    """A baseline by name, case-insensitively, or ``NAME@ORDER`` (a baseline in a microbatch order of
    ``ORDERS``); a miss lists the baselines (NotApplicableError)."""
    for method in METHODS:
        if method.name.lower() == name.lower():
            return method
    parts = split_name(name)
    if parts is not None and any(m.name.lower() == parts[0].lower() for m in METHODS):
        return ordered_method(get_baseline(parts[0]), parts[1])
    raise NotApplicableError(f"unknown baseline {name!r}; baselines: {', '.join(m.name for m in METHODS)} "
                             f"(each also as NAME@ORDER, orders: {', '.join(ORDERS)})")
