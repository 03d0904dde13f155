#!/usr/bin/env bash
# Regenerates the bundled problems, BENCHMARKS.md, its sections and plots, the frontier images and the
# README's Gantt charts, from the repository alone. Usage: benchmarks/regenerate.sh [--reference DIR]
# (DIR: the published reference implementation's cases, outside the repository; without it the committed
# reference section stays as it is). PYTHON defaults to python. Takes hours: benchmarks/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
REFERENCE=""
case "${1:-}" in
    "") ;;
    --reference) REFERENCE="${2:?--reference needs a folder}" ;;
    *) echo "usage: benchmarks/regenerate.sh [--reference DIR]" >&2; exit 2 ;;
esac
$PY -m benchmarks.makers.instances
$PY -m benchmarks.makers.suite
$PY -m benchmarks.makers.scale
$PY -m benchmarks.makers.papers
$PY -m benchmarks.makers.realistic
$PY -m ppsolve bench instances/*.json instances/suite --methods all --time-limit 5 --out docs/bench
$PY -m ppsolve frontier instances/suite/lin-d4-m16-split-cap1_3-k1.json --time-limit 5 -o docs/images/frontier-lin-d4-m16-k1.png
$PY -m ppsolve frontier instances/suite/vsh2-d4-m16-split-uneven-cap1_2.json --time-limit 5 -o docs/images/frontier-vsh2-d4-m16-uneven.png
$PY -m ppsolve bench instances/suite/vsh2-d8-m16-split-cap1.json --methods zb-v --save-schedules --no-plots --quiet --out docs/example
$PY -m ppsolve plot docs/example/schedules/vsh2-d8-m16-split-cap1/zb-v.json -o docs/images/gantt-zb-v-d8-m16.png
$PY -m ppsolve solve instances/example.json -o docs/example/example-cpsat.json --time-limit 30 --threads 1 --seed 0 --quiet
$PY -m ppsolve plot docs/example/example-cpsat.json -o docs/images/gantt-example-cpsat.png
$PY -m benchmarks.reports.costmodel_bench --time-limit 10 --paper-time-limit 30 --json docs/bench/costmodel.json
$PY -m benchmarks.reports.offload_table --section docs/bench/sections/30-pipeoffload-table.md
if [ -n "$REFERENCE" ]; then $PY -m benchmarks.reports.reference --reference "$REFERENCE" --benchmarks ""; fi
$PY -m benchmarks.reports.solver_compare --time-limit 20 --out docs/bench/solver_compare.md
$PY -m benchmarks.reports.time_limit --time-limit 10 --threads all --threads 1 --large --section docs/bench/sections/25-time-limit.md instances
$PY -m benchmarks.reports.time_limit --time-limit 5 --threads all --section docs/bench/sections/26-time-limit-suite.md --heading "The time limit on instances/suite" instances/suite
$PY -m benchmarks.reports.scale_bench --time-limit 300 --section docs/bench/sections/40-scale.md --json docs/bench/scale.json
$PY -m benchmarks.reports.warm_start_coverage --time-limit 300 --section docs/bench/sections/40a-warm-start-coverage.md > docs/bench/warm_start_coverage.txt
# its table goes into docs/bench/sections/42-bound-tightness.md, with that section's prose
$PY -m benchmarks.reports.bound_tightness --time-limit 150
$PY -m benchmarks.reports.split_bench --seconds 300 --section docs/bench/sections/44-split-bound.md
$PY -m ppsolve frontier instances/realistic/llama8b-like-8x32-cap20-decide.json --capacities 14,20,27,inf --time-limit 20 --threads 2 -o docs/images/frontier-llama8b-levers.png
$PY -m benchmarks.reports.recompute_bench --time-limit 300 --threads 2 --section docs/bench/sections/50-recompute.md --json docs/bench/recompute.json
$PY -m benchmarks.reports.realistic_gaps --time-limit 300 --threads 2 --section docs/bench/sections/52-realistic-gaps.md --json docs/bench/realistic_gaps.json
$PY -m benchmarks.reports.pair_relaxation --time-limit 600 --threads 2 --seed 2 --section docs/bench/sections/52a-pair-relaxation.md
$PY -m benchmarks.reports.device_configurations --step 0.5 --section docs/bench/sections/52b-device-configurations.md
$PY -m benchmarks.makers.varied
$PY -m benchmarks.reports.per_microbatch --time-limit 60 --threads 2 --random 3000 --section docs/bench/sections/60-per-microbatch.md --table docs/bench/per_microbatch.md --json docs/bench/per_microbatch.json
$PY -m benchmarks.reports.long_context --batches 20 --plan-time 0.25 --solve-time 60 --solve-batches 4 --section docs/bench/sections/65-long-context.md --table docs/bench/long_context.md --json docs/bench/long_context.json
$PY -m benchmarks.reports.write_benchmarks_md --results docs/bench/results.csv --instances instances --frontier docs/images/frontier-lin-d4-m16-k1.png --frontier docs/images/frontier-vsh2-d4-m16-uneven.png --frontier docs/images/frontier-llama8b-levers.png --out BENCHMARKS.md
