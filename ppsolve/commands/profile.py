"""``ppsolve profile --model MODEL.json ...``: measure the stages here, write a problem file (ms, GiB).

The model is the transformer description ``ppsolve problem`` reads (or a model of
``models/``); ``--shrink`` measures a smaller model of the same layer types. ``--lengths`` also measures
the stages at two or three tokens per microbatch and says how far the cost model's per-microbatch scaling
(the one ``ppsolve problem --documents`` uses) is from the measurement (``executor.scaling``).
"""

from __future__ import annotations

import argparse

from ppsolve.commands.layout_args import add_layout_arguments


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "profile", help="measure each stage's F, B, W times and activation bytes; write a problem file",
        description="Times in ms, memory in GiB (bandwidth in GiB/ms), measured with one thread on this machine.")
    parser.add_argument("--model", required=True,
                        help="transformer description (ppsolve/transformer@1, as for ppsolve problem) or a model "
                             "of models/")
    parser.add_argument("--shrink", metavar="KEY=N,...",
                        help="measure a smaller model of the same layer types: sizes among layers, hidden, heads, "
                             "kv_groups, ffn, sequence, vocabulary (e.g. hidden=64,layers=8)")
    add_layout_arguments(parser)
    parser.add_argument("--offload", action="store_true", help="allow offload, with the measured host-copy bandwidth")
    parser.add_argument("--recompute", action="store_true",
                        help="allow recompute: a recompute block with what a recomputed forward keeps (the stage "
                             "input, measured) and R's measured time")
    parser.add_argument("--p2p", type=float, default=0.0, help="p2p latency between devices, ms (default 0)")
    parser.add_argument("--capacity", type=float, help="activation memory cap per device, GiB (default none)")
    parser.add_argument("--partition", default="even", metavar="even|LAYOUT",
                        help="blocks per stage: even (default), '1,3' or 'Et*1|t*3L'; recorded in the file")
    parser.add_argument("--microbatch-tokens", metavar="N,N,...",
                        help="the real tokens of each microbatch (one count per microbatch, at most the model's "
                             "sequence): costs per microbatch, recorded as x-microbatch-tokens")
    parser.add_argument("--token-budget", type=int, metavar="N",
                        help="with --microbatch-tokens: pad every microbatch to N tokens (one shape, as --runtime "
                             "torch needs): times of the real tokens, memory of the padded shape")
    parser.add_argument("--lengths", metavar="T1,T2[,T3]",
                        help="also measure the stages at these tokens per microbatch (one document each) and "
                             "print how far the cost model's scaling is from it; recorded under x-scaling")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per op (median)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="auto (default): cuda:0 when CUDA is available, else CPU; cuda is refused without CUDA")
    parser.add_argument("-o", "--output", required=True, help="problem file to write")
    return parser


def parse_lengths(text: str) -> tuple[int, ...]:
    """``--lengths``: two or three increasing token counts, ``64,128,256``."""
    from ppsolve.errors import InputError
    from ppsolve.executor.scaling import check_lengths

    parts = [p.strip() for p in text.split(",")]
    if not all(p.isdigit() for p in parts):
        raise InputError("--lengths", f"must be whole token counts >= 1 separated by commas, got {text!r}")
    return check_lengths(int(p) for p in parts)


def run(args: argparse.Namespace) -> int:
    from ppsolve.costmodel.partition import parse_partition
    from ppsolve.errors import InputError
    from ppsolve.executor.device import select_device
    from ppsolve.executor.profiler import profile
    from ppsolve.executor.spec import load_model_spec, refuse_too_big
    from ppsolve.jsonio import require_directory, write_json_atomic
    from ppsolve.units import warn

    require_directory(args.output)
    if args.lengths is not None:
        lengths = parse_lengths(args.lengths)
    for name in ("devices", "chunks", "microbatches", "repeats"):
        if getattr(args, name) < 1:
            raise InputError(f"--{name}", f"must be >= 1, got {getattr(args, name)}")
    if args.capacity is not None and not args.capacity > 0:
        raise InputError("--capacity", f"must be > 0 GiB, got {args.capacity:g}")
    if args.shrink is not None:
        from ppsolve.costmodel.descriptions import load_transformer, shrink
        from ppsolve.executor.spec import spec_of_transformer

        spec = spec_of_transformer(shrink(load_transformer(args.model), args.shrink))
    else:
        spec = load_model_spec(args.model)
    spec = spec.with_micro_batch_size(args.micro_batch_size)
    refuse_too_big(spec)
    stages = args.devices * args.chunks
    partition = None if args.partition == "even" else parse_partition(args.partition, spec.layers, stages)
    tokens = _microbatch_tokens(args, spec)
    device = select_device(args.device, 1)
    problem = profile(spec, args.devices, args.chunks, args.placement, args.microbatches,
                      split=args.backward == "split", offload=args.offload, p2p=args.p2p, capacity=args.capacity,
                      repeats=args.repeats, device=device, partition=partition, recompute=args.recompute,
                      lengths=tokens)
    data = problem.to_dict()
    if args.lengths is not None:
        from ppsolve.costmodel.descriptions import load_transformer, shrink
        from ppsolve.costmodel.partition import Partition
        from ppsolve.executor.scaling import measure_scaling, render_scaling

        model = load_transformer(args.model)
        model = shrink(model, args.shrink) if args.shrink is not None else model
        scaling = measure_scaling(model.with_micro_batch_size(args.micro_batch_size), lengths,
                                  Partition(tuple(data["x-partition"]["layers"])), args.repeats, device)
        data["x-scaling"] = scaling.to_dict()
    write_json_atomic(args.output, data)
    warn(problem)
    per = lambda grid: _row(grid, "{:.3f}")  # noqa: E731
    gib = lambda grid: _row(grid, "{:.3g}")  # noqa: E731
    where = "" if device == "cpu" else f", measured on {device}"
    print(f"profiled {spec.name}: {problem.num_stages} stages on {problem.devices} devices ({args.placement}){where}")
    print(f"  partition:          {problem.annotations['x-partition']['layout']}")
    if tokens is not None:
        padded = "" if tokens.budget is None else f", padded to {tokens.budget}"
        print(f"  microbatch tokens:  {' '.join(map(str, tokens.tokens))}{padded} (per stage below: least-most "
              "over microbatches)")
    print(f"  forward ms:         {per(problem.forward)}")
    print(f"  backward_input ms:  {per(problem.backward_input)}")
    print(f"  backward_weight ms: {per(problem.backward_weight)}")
    print(f"  activation GiB:     {gib(problem.activation)}")
    if problem.split_backward:
        print(f"  weight_hold GiB:    {gib(problem.weight_hold)}")
    if problem.recompute is not None:
        print(f"  recompute keep GiB: {gib(problem.recompute.keep)}")
        print(f"  recompute ms:       {per(problem.recompute.time)}")
    if problem.offload is not None and problem.offload.d2h == problem.offload.h2d:
        print(f"  host copy GiB/ms:   {problem.offload.d2h:.3g}")
    elif problem.offload is not None:
        print(f"  host copy GiB/ms:   d2h {problem.offload.d2h:.3g}  h2d {problem.offload.h2d:.3g}")
    if args.lengths is not None:
        print(render_scaling(scaling))
    print(f"wrote {args.output}")
    return 0


def _microbatch_tokens(args, spec):
    """``--microbatch-tokens`` and ``--token-budget`` as :class:`ppsolve.executor.tokens.Lengths` (or None)."""
    from ppsolve.errors import InputError
    from ppsolve.executor.tokens import BUDGET, TOKENS, lengths_of

    if args.microbatch_tokens is None and args.token_budget is None:
        return None
    try:
        tokens = None if args.microbatch_tokens is None else [int(t) for t in args.microbatch_tokens.split(",")]
    except ValueError:
        raise InputError("--microbatch-tokens", f"must be integers separated by commas, got "
                                                f"{args.microbatch_tokens!r}") from None
    annotations = {k: v for k, v in ((TOKENS, tokens), (BUDGET, args.token_budget)) if v is not None}
    sequence = spec.dims["sequence"] if spec.kind == "transformer" else None
    return lengths_of(annotations, args.microbatches, sequence, ("--microbatch-tokens", "--token-budget"))


def _row(grid, form: str) -> str:
    """A cost's value per stage, or its least-most over microbatches where they differ."""
    cells = []
    for s in range(grid.stages):
        low, high = grid.low(s), grid.high(s)
        cells.append(form.format(low) if low == high else f"{form.format(low)}-{form.format(high)}")
    return " ".join(cells)
