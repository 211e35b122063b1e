#!/usr/bin/env bash
# Reproduce the committed benchmark report: bash benchmarks/run_reports.sh [OUT_DIR]
# Runs sequentially (timings are only compared within one bench run). Needs the models prepared
# (`mlx-ssbd models prepare qwen2.5-coder-1.5b` / `qwen2.5-coder-0.5b`) and the [semsim,plots,ja] extras.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-benchmarks/results/$(date +%F)-$(uname -s | tr A-Z a-z)-$(uname -m)-$(nproc)cpu}
DATA=benchmarks/data
mkdir -p "$OUT"
run() { echo "== $*" >&2; "$@"; }

# 1. What one verify pass costs against one decode step.
run python benchmarks/verify_cost.py --model qwen2.5-coder-0.5b --out "$OUT/verify-cost-0.5b"
run python benchmarks/verify_cost.py --model qwen2.5-coder-1.5b --out "$OUT/verify-cost-1.5b"

# 2. The default model (1.5B), en-de, RT vs SSBD (paper default beta) vs CD.
run mlx-ssbd bench --data $DATA/udhr/en-de.jsonl -m qwen2.5-coder-1.5b -t de --methods rt,ssbd,cd \
    --beta 0.2 --limit 5 --semsim --out "$OUT/en-de-1.5b" > /dev/null

# 3. The beta sweep on one pair (0.5B: the sweep costs about three RT runs).
run mlx-ssbd bench --data $DATA/udhr/en-de.jsonl -m qwen2.5-coder-0.5b -t de --methods rt,ssbd,cd,rt-nocache \
    --beta 0,0.1,0.2,0.3,0.5,1 --limit 10 --semsim --out "$OUT/en-de-0.5b-sweep" > /dev/null

# 4. Chinese and Japanese targets.
for tgt in zh ja; do
  run mlx-ssbd bench --data $DATA/udhr/en-$tgt.jsonl -m qwen2.5-coder-0.5b -t $tgt --methods rt,ssbd,cd \
      --beta 0.2 --limit 10 --semsim --out "$OUT/en-$tgt-0.5b" > /dev/null
done

# 5. Talk-style ASR partials (no references: speed and flicker only), display mask-k 2.
run mlx-ssbd bench --data $DATA/talks/talk-partials.jsonl -m qwen2.5-coder-0.5b -t de --methods rt,ssbd,cd \
    --beta 0.2 --display-mask-k 2 --out "$OUT/talks-de-0.5b" \
    --data-note "talk-style ASR partials written for the project" > /dev/null
echo "done: $OUT" >&2
