"""``ppsolve run SCHEDULE.json --model models/NAME.json``: run a schedule for real with torch.

One process per device (gloo on CPU, NCCL on CUDA, ``--device``); under ``torchrun``
this process is one rank.
Prints per rank the measured activation peak beside the predicted one and the
median wall time of each op kind (R included), and what each recomputed forward kept;
for a problem profiled here, each (stage, microbatch)'s activation bytes beside the
problem's (microbatches of different lengths: ``x-microbatch-tokens``);
``--check`` compares the loss and every gradient with a single-process run;
``--trace`` writes the measured ops as a Chrome trace.
"""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "run", help="execute a schedule with torch (one process per device) and measure it",
        description="Exit 0: ran (and --check passed); 1: a rank failed or the check failed; 2: bad input.")
    parser.add_argument("schedule", help="schedule file (ppsolve/schedule@1)")
    parser.add_argument("--model", required=True,
                        help="the transformer description the problem was built from (ppsolve/transformer@1, as "
                             "for ppsolve problem), or a model of models/")
    parser.add_argument("--shrink", metavar="KEY=N,...",
                        help="run a smaller model of the same layer types: sizes among layers, hidden, heads, "
                             "kv_groups, ffn, sequence, vocabulary (e.g. hidden=64,layers=8,sequence=16,"
                             "vocabulary=256); the schedule's partition is scaled to the new depth")
    parser.add_argument("--steps", type=int, default=2,
                        help="iterations to run (default 2): the last one is measured; with 2 or more the first is "
                             "a warm-up, excluded from the figures and reported apart")
    parser.add_argument("--check", action="store_true",
                        help="compare loss and every gradient with a single-process run (fails above 1e-5)")
    parser.add_argument("--trace", metavar="OUT.json", help="write the measured ops as a Chrome trace")
    parser.add_argument("--runtime", choices=("ppsolve", "torch", "torchtitan"), default="ppsolve",
                        help="ppsolve's executor, or PyTorch's pipelining runtime fed the exported compute_comms CSV "
                             "and side file (offload and recompute through ppsolve.executor.torch_plan.attach), or "
                             "torchtitan's schedule builder fed export --to torchtitan's files (needs torchtitan)")
    parser.add_argument("--micro-batch-size", type=int, help="override the model file's micro_batch_size")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds any wait may take before the run fails")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="auto (default): cuda:LOCAL_RANK with NCCL when there is one GPU per local rank, "
                             "else CPU with gloo; cuda is refused where CUDA is not available")
    return parser


def shrunk(path: str, sizes: str, schedule):
    """The executor's model of the description at ``path`` shrunk by ``sizes``, and ``schedule`` with its
    recorded partition scaled to the shrunk depth (the same stages hold the same share of blocks)."""
    from ppsolve.costmodel.descriptions import shrink, transformer_from_dict
    from ppsolve.costmodel.partition import ANNOTATION, recorded_partition, scale_partition
    from ppsolve.errors import InputError
    from ppsolve.executor.spec import spec_of_transformer
    from ppsolve.jsonio import read_json
    from ppsolve.schedule import schedule_from_dict

    data = read_json(path, "model")
    if isinstance(data, dict) and data.get("kind") == "mlp":
        raise InputError("--shrink", "applies to a transformer description, not to the MLP of models/mlp-tiny.json")
    full = transformer_from_dict(data)
    model = shrink(full, sizes)
    problem = schedule.problem
    recorded = recorded_partition(problem.annotations, full.layers, problem.num_stages)
    if recorded is not None and model.layers != full.layers:
        raw = schedule.to_dict()
        raw["problem"][ANNOTATION] = scale_partition(recorded, model.layers).annotation()
        schedule = schedule_from_dict(raw)
    return spec_of_transformer(model), schedule


def run(args: argparse.Namespace) -> int:
    from ppsolve.jsonio import require_directory, write_json_atomic
    from ppsolve.executor.spec import load_model_spec, refuse_too_big
    from ppsolve.schedule import load_schedule

    if args.trace:
        require_directory(args.trace)
    schedule = load_schedule(args.schedule)  # bad input is answered before torch is imported
    if args.shrink is None:
        model = load_model_spec(args.model)
    else:
        model, schedule = shrunk(args.model, args.shrink, schedule)
    refuse_too_big(model)

    from ppsolve.executor.api import TOLERANCE, execute
    from ppsolve.executor.launch import ExecutionError
    from ppsolve.executor.report import chrome_trace, keep_by_microbatch, render
    outcome = execute(schedule, model, steps=args.steps, check=args.check, runtime=args.runtime,
                      timeout_s=args.timeout, micro_batch_size=args.micro_batch_size, device=args.device)
    if outcome.results is None:
        return 0  # a torchrun rank other than 0: rank 0 reports
    problem = schedule.problem
    where = "" if outcome.results[0].device == "cpu" else f" on {outcome.results[0].device} (nccl)"
    print(f"ran {schedule.method.name} ({problem.devices} ranks, {problem.num_stages} stages, "
          f"{problem.microbatches} microbatches, {problem.backward_mode} backward) on {outcome.spec.name} "
          f"with the {args.runtime} runtime{where}, {args.steps} step(s); loss {outcome.loss:.6f}")
    if outcome.figures:
        print(render(outcome.figures))
    if outcome.activations is not None:
        print(outcome.activations.render())
    if args.runtime == "torch":
        print("executed: every rank ran exactly its row of the exported compute_comms CSV"
              + (" with the side file's offloads and recomputes where the plan puts them"
                 if schedule.recomputed or schedule.offloaded else ""))
    if schedule.recomputed:
        kept = keep_by_microbatch(schedule, outcome.results)
        size = lambda k: f"{min(x for x in k if x)}-{max(k)}" if isinstance(k, list) else str(k)  # noqa: E731
        print(f"recompute: {schedule.recomputed} R ops ({schedule.describe_recompute()}); each recomputed "
              "forward kept until its R: " + ", ".join(f"stage {s} {size(kept[s])} B" for s in sorted(kept)))
    warmups = [r.warmup_span for r in outcome.results if r.warmup_span is not None]
    if warmups:
        print(f"warm-up step (excluded from the figures above): span {max(warmups) * 1e3:.3f} ms measured")
    if args.trace:
        write_json_atomic(args.trace, chrome_trace(schedule, outcome.results))
        print(f"trace written to {args.trace}")
    if args.check:
        c = outcome.comparison
        verdict = "OK" if c.ok(TOLERANCE) else "FAILED"
        print(f"check: loss {c.loss:.8f} vs reference {c.reference_loss:.8f}; largest absolute error "
              f"{c.max_error:.3g} ({c.worst}) over {c.tensors} gradient tensors: {verdict}")
        if c.missing:
            print("missing gradients: " + ", ".join(c.missing[:5]))
        if verdict != "OK":
            raise ExecutionError(f"check failed: largest absolute error {c.max_error:.3g} > {TOLERANCE:g}")
    return 0
