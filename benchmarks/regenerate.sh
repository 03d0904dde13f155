#!/usr/bin/env bash
# Regenerates BENCHMARKS.md, its plots, the two frontier images and the README's Gantt chart.
# Run from the repository root; PYTHON defaults to python. Takes about (problems x solver methods x 20 s).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
$PY benchmarks/make_suite.py
$PY -m ppsolve bench instances/*.json instances/suite --methods all --time-limit 5 --out docs/bench
$PY -m ppsolve frontier instances/suite/lin-d4-m16-split-cap1_3-k1.json --time-limit 5 -o docs/images/frontier-lin-d4-m16-k1.png
$PY -m ppsolve frontier instances/suite/vsh2-d4-m16-split-uneven-cap1_2.json --time-limit 5 -o docs/images/frontier-vsh2-d4-m16-uneven.png
$PY -m ppsolve bench instances/suite/vsh2-d8-m16-split-cap1.json --methods zb-v --save-schedules --no-plots --quiet --out docs/example
$PY -m ppsolve plot docs/example/schedules/vsh2-d8-m16-split-cap1/zb-v.json -o docs/images/gantt-zb-v-d8-m16.png
$PY -m ppsolve solve instances/example.json -o docs/example/example-cpsat.json --time-limit 30 --threads 1 --seed 0 --quiet
$PY -m ppsolve plot docs/example/example-cpsat.json -o docs/images/gantt-example-cpsat.png
$PY benchmarks/make_paper_instances.py
$PY benchmarks/costmodel_bench.py --time-limit 10 --paper-time-limit 30 --json docs/bench/costmodel.json
$PY benchmarks/offload_table.py --section docs/bench/sections/30-pipeoffload-table.md
$PY benchmarks/reference.py --reference ../shared/reference --benchmarks ""
$PY benchmarks/solver_compare.py --time-limit 20 --out docs/bench/solver_compare.md
$PY benchmarks/time_limit.py --time-limit 10 --threads all --threads 1 --large --section docs/bench/sections/25-time-limit.md instances
$PY benchmarks/time_limit.py --time-limit 5 --threads all --section docs/bench/sections/26-time-limit-suite.md --heading "The time limit on instances/suite" instances/suite
$PY benchmarks/scale_bench.py --time-limit 300 --section docs/bench/sections/40-scale.md --json docs/bench/scale.json
$PY benchmarks/warm_start_coverage.py --time-limit 300 --section docs/bench/sections/40a-warm-start-coverage.md > docs/bench/warm_start_coverage.txt
# its table goes into docs/bench/sections/42-bound-tightness.md, with that section's prose
$PY benchmarks/bound_tightness.py --time-limit 150
$PY benchmarks/split_bench.py --seconds 300 --section docs/bench/sections/44-split-bound.md
$PY benchmarks/make_realistic.py
$PY -m ppsolve frontier instances/realistic/llama8b-like-8x32-cap20-decide.json --capacities 14,20,27,inf --time-limit 20 --threads 2 -o docs/images/frontier-llama8b-levers.png
$PY benchmarks/recompute_bench.py --time-limit 300 --threads 2 --section docs/bench/sections/50-recompute.md --json docs/bench/recompute.json
$PY benchmarks/write_benchmarks_md.py --results docs/bench/results.csv --instances instances --frontier docs/images/frontier-lin-d4-m16-k1.png --frontier docs/images/frontier-vsh2-d4-m16-uneven.png --frontier docs/images/frontier-llama8b-levers.png --out BENCHMARKS.md
