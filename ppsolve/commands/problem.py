"""``ppsolve problem MODEL.json --gpu H100 --devices D --microbatches M -o PROBLEM.json``.

Costs from the transformer formulas and a GPU profile; the layer partition given
(``even``, ``3,5,5,3``, ``Et*3|t*5|t*5|t*3L``) or chosen (``auto``: ranked by the
lower bound, then the solver on the best few). ``--recompute decide`` writes the
costs of no recompute and a ``recompute`` block (what full recompute of the blocks
keeps, and their forward as R's time): which microbatches to recompute is then the
schedule's choice (contract version 3). ``--tensor-parallel``, ``--sequence-parallel``,
``--context-parallel``, ``--data-parallel`` and ``--optimizer-sharding`` describe the GPUs
around each pipeline rank: every figure is then that of one of its GPUs, and the activation
capacity is what its memory leaves after weights, gradients, optimizer states and a reserve.
``--documents FILE`` writes a version-4 problem with costs per microbatch from the document lengths of one
step (``costmodel.documents``), packed as they are, in the loader's order or balanced (``--pack``).
"""

from __future__ import annotations

import argparse

from ppsolve.commands.layout_args import add_layout_arguments


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "problem", help="write a problem file from a transformer description and a GPU (cost model)",
        description="Times in ms, memory in GiB. Exit 0: written; 2: bad input. The x-costmodel annotation of "
                    "the file says where every number came from; x-partition records the layers per stage.")
    parser.add_argument("model", help="transformer description (ppsolve/transformer@1; `ppsolve schema transformer`)")
    hw = parser.add_mutually_exclusive_group(required=True)
    hw.add_argument("--gpu", help="a bundled GPU profile (A100, H100, H200, GH200, B200, MI300X, L40S, A10G)")
    hw.add_argument("--hardware", help="hardware description (ppsolve/hardware@1): a profile and overrides")
    parser.add_argument("--p2p", choices=("nvlink", "infiniband"), help="link between ranks (default nvlink)")
    add_layout_arguments(parser, microbatches_required=False)
    parser.add_argument("--offload", action="store_true", help="allow offload over the GPU's host link")
    parser.add_argument("--recompute", choices=("none", "selective", "full", "decide"),
                        help="override the model file's recompute: none, selective, full (fixed, every microbatch; "
                             "full needs --backward fused) or decide (a recompute block: the schedule chooses)")
    parser.add_argument("--capacity", default="hbm", metavar="hbm|none|GIB",
                        help="activation cap per device: hbm (default: GPU memory less weights, gradients, "
                             "optimizer states and --reserve), none, or GiB")
    parser.add_argument("--reserve", default="10%", metavar="GIB|N%",
                        help="memory kept for the runtime (CUDA context, NCCL buffers, fragmentation): GiB or a "
                             "share of the GPU's memory (default 10%%)")
    par = parser.add_argument_group("parallelism around each pipeline rank")
    par.add_argument("--tensor-parallel", type=int, default=1, metavar="T", help="tensor-parallel ranks (default 1)")
    par.add_argument("--sequence-parallel", action="store_true",
                     help="Megatron's sequence parallelism over the tensor-parallel ranks")
    par.add_argument("--context-parallel", type=int, default=1, metavar="C", help="context-parallel ranks (default 1)")
    par.add_argument("--data-parallel", type=int, default=1, metavar="D", help="data-parallel ranks (default 1)")
    par.add_argument("--optimizer-sharding", choices=("none", "optimizer", "gradients", "full"), default="none",
                     help="over the D x C data-parallel ranks: none, optimizer (ZeRO-1, Megatron's distributed "
                          "optimizer), gradients (ZeRO-2), full (ZeRO-3 / FSDP)")
    docs = parser.add_argument_group("documents: costs per microbatch from one step's document lengths")
    docs.add_argument("--documents", metavar="FILE",
                      help="JSON: a list of microbatches, each a list of document lengths in tokens, or "
                           '{"documents": [lengths, in the loader\'s order], "tokens_per_microbatch": N}; '
                           "replaces --microbatches and --micro-batch-size")
    docs.add_argument("--tokens-per-microbatch", type=int, metavar="N",
                      help="token budget of a microbatch (default: the file's tokens_per_microbatch, else the "
                           "model's sequence x micro_batch_size)")
    docs.add_argument("--pack", choices=("sequential", "balance"),
                      help="form the microbatches: sequential (the loader's order: fill each to the budget; the "
                           "default for a list of documents) or balance (the same count, balanced critical cost); "
                           "default for microbatches given: as given")
    docs.add_argument("--split-documents", action="store_true",
                      help="let packing cut documents (default: never): sequential fills each microbatch to "
                           "the budget; balance cuts the documents that balancing needs (the summary counts "
                           "them). A cut document's pieces do not attend to each other: this changes what the "
                           "model trains on")
    parser.add_argument("--partition", default="even", metavar="even|auto|LAYOUT",
                        help="layers per stage: even (default), auto, '3,5,5,3' or 'Et*3|t*5|t*5|t*3L'")
    parser.add_argument("--top", type=int, default=3, metavar="K", help="auto: partitions the solver runs on (3)")
    parser.add_argument("--time-limit", type=float, default=10.0, metavar="S",
                        help="auto: solver seconds per partition (default 10)")
    parser.add_argument("--threads", type=int, default=None, metavar="N", help="auto: CP-SAT workers")
    parser.add_argument("-o", "--output", required=True, help="problem file to write")
    return parser


def _documents(args: argparse.Namespace, model, hardware, layout, given):
    """The layout with the packed microbatches' count, the problem builder of a partition, and the packing
    summary (its 1F1B step times at the partition ``given``)."""
    from dataclasses import replace

    from ppsolve.costmodel.batch import form_microbatches, render_formed, step_1f1b, token_budget
    from ppsolve.costmodel.documents import build_documents_problem, microbatch_time, read_batch

    batch = read_batch(args.documents)
    budget = token_budget(batch, args.tokens_per_microbatch, model)
    formed = form_microbatches(batch, budget, args.pack, args.split_documents,
                               microbatch_time(model, hardware, layout, given))
    layout = replace(layout, microbatches=len(formed[-1].microbatches))
    make = lambda partition, mbs=formed[-1].microbatches: build_documents_problem(  # noqa: E731
        model, hardware, layout, partition, mbs)
    plan = lambda f: step_1f1b(make(given, f.microbatches))  # noqa: E731
    return layout, make, render_formed(formed, len(batch.documents), budget, plan)


def _check_documents_flags(args: argparse.Namespace) -> None:
    """--documents replaces --microbatches and --micro-batch-size; the packing flags need it."""
    from ppsolve.errors import InputError

    if args.documents is None:
        if args.microbatches is None:
            raise InputError("--microbatches", "required (or give --documents)")
        for flag, value in (("--tokens-per-microbatch", args.tokens_per_microbatch), ("--pack", args.pack),
                            ("--split-documents", args.split_documents or None)):
            if value is not None:
                raise InputError(flag, "needs --documents")
        return
    for flag, value in (("--microbatches", args.microbatches), ("--micro-batch-size", args.micro_batch_size)):
        if value is not None:
            raise InputError(flag, "with --documents the microbatches are the file's (one packed sequence each); "
                                   "leave it out")
    if args.partition.strip() == "auto":
        raise InputError("--partition", "auto is not offered with --documents: the partition search scores "
                                        "partitions by bounds that read one value per stage; give the partition")


def _capacity(text: str):
    from ppsolve.commands.flags import positive_number

    if text in ("hbm", "none"):
        return None if text == "none" else "hbm"
    return positive_number(text, "--capacity", "hbm, none or a number of GiB")


def _reserve(text: str):
    from ppsolve.errors import InputError

    share = text.endswith("%")
    try:
        value = float(text[:-1] if share else text)
    except ValueError:
        raise InputError("--reserve", f"must be GiB or a share like 10%, got {text!r}") from None
    if not 0 <= value < (100 if share else float("inf")):
        raise InputError("--reserve", f"must be >= 0{' and < 100%' if share else ''}, got {text}")
    return text if share else value


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from ppsolve.costmodel import (Layout, build_problem, hardware_of_gpu, load_hardware, load_transformer,
                                   parse_partition)
    from ppsolve.costmodel.parallel import Parallelism
    from ppsolve.costmodel.partition import even_partition
    from ppsolve.costmodel.report import render_k_table, render_stages, render_trials
    from ppsolve.errors import InputError
    from ppsolve.jsonio import write_json_atomic
    from ppsolve.units import warn

    _check_documents_flags(args)
    for name in ("devices", "chunks", "microbatches", "top"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise InputError(f"--{name.replace('_', '-')}", f"must be >= 1, got {getattr(args, name)}")
    model = load_transformer(args.model).with_micro_batch_size(args.micro_batch_size)
    if args.recompute:
        model = replace(model, recompute=args.recompute)
    hardware = hardware_of_gpu(args.gpu) if args.gpu is not None else load_hardware(args.hardware)
    if args.p2p:
        hardware = replace(hardware, p2p=args.p2p)
    layout = Layout(devices=args.devices, microbatches=args.microbatches or 1, chunks=args.chunks,
                    placement=args.placement, backward=args.backward, offload=args.offload,
                    capacity=_capacity(args.capacity), reserve=_reserve(args.reserve),
                    parallel=Parallelism(tensor=args.tensor_parallel, sequence=args.sequence_parallel,
                                         context=args.context_parallel, data=args.data_parallel,
                                         sharding=args.optimizer_sharding))
    auto = args.partition.strip() == "auto"
    given = even_partition(model.layers, layout.stages) if auto else parse_partition(args.partition, model.layers,
                                                                                     layout.stages)
    make = lambda partition: build_problem(model, hardware, layout, partition)  # noqa: E731
    if args.documents:
        layout, make, summary = _documents(args, model, hardware, layout, given)
    if auto:
        from ppsolve.costmodel.search import search_partition

        result = search_partition(make, given, top=args.top, time_limit=args.time_limit, threads=args.threads)
        problem = result.best.candidate.problem
        print(f"auto partition: {result.scored} partitions ranked by lower bound, the solver on the best "
              f"{len(result.trials)} ({args.time_limit:g} s each)")
        print(render_trials(result.trials, result.best))
    else:
        problem = make(given)
    data = problem.to_dict()
    write_json_atomic(args.output, data)
    print(f"{model.name} on {layout.devices} x {hardware.gpu.name} ({hardware.p2p}), {layout.stages} stages "
          f"{layout.placement}, {layout.microbatches} microbatches, {layout.backward} backward; "
          f"{layout.parallel.describe()} (figures per GPU)")
    if args.documents:
        from ppsolve.costmodel.batch import render_microbatch_stages

        print(summary)
        print(render_microbatch_stages(data))
    else:
        print(render_stages(problem))
    print(render_k_table(model, hardware))
    if not args.documents:  # the plausibility warnings read one value per stage
        warn(problem, hardware.gpu.hbm_gib)
    print(f"wrote {args.output}")
    return 0
