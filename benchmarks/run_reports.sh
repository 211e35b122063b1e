#!/usr/bin/env bash
# Reproduce the committed benchmark report: bash benchmarks/run_reports.sh [OUT_DIR]
# Runs sequentially (timings are only compared within one bench run); a finished step is skipped
# and `mlx-ssbd bench` resumes per item, so an interrupted run can simply be started again.
# Needs the models prepared (`mlx-ssbd models prepare qwen2.5-coder-1.5b` / `qwen2.5-coder-0.5b`)
# and the extras: pip install -e ".[semsim,plots,ja,serve,test]". About 2.5 hours on a 2-core x86 CPU
# for steps 1-8, 1.5 hours more for step 9 (its real-time replays take as long as the speech, or
# longer), 1.5 hours for steps 10-11 and 1.5 hours for step 13.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-benchmarks/results/$(date +%F)-$(uname -s | tr A-Z a-z)-$(uname -m)-$(nproc)cpu}
DATA=benchmarks/data
mkdir -p "$OUT"
ROOT=$(pwd) PY=$(command -v python) ABS_OUT=$(realpath "$OUT")
run() { echo "== $*" >&2; "$@"; }
once() { local marker=$1; shift; [ -e "$marker" ] || run "$@"; }
bench() { run mlx-ssbd bench "$@" > /dev/null; }

# 1. What one verify pass costs against one decode step (decode steps through sgemv; see step 13).
once "$OUT/verify-cost-0.5b/verify_cost.json" python benchmarks/verify_cost.py --model qwen2.5-coder-0.5b --out "$OUT/verify-cost-0.5b"
once "$OUT/verify-cost-1.5b/verify_cost.json" python benchmarks/verify_cost.py --model qwen2.5-coder-1.5b --out "$OUT/verify-cost-1.5b"

# 2. The default model (1.5B), en-de, RT vs SSBD (the paper's beta) vs CD.
bench --data $DATA/udhr/en-de.jsonl -m qwen2.5-coder-1.5b -t de --methods rt,ssbd,cd --beta 0.2 --limit 5 --semsim \
    --out "$OUT/en-de-1.5b"

# 3. The beta sweep on one pair (0.5B: a sweep costs about three RT runs).
bench --data $DATA/udhr/en-de.jsonl -m qwen2.5-coder-0.5b -t de --methods rt,ssbd,cd --beta 0,0.1,0.2,0.3,0.5,1 \
    --limit 5 --semsim --out "$OUT/en-de-0.5b-sweep"

# 4. Chinese and Japanese targets.
for tgt in zh ja; do
  bench --data $DATA/udhr/en-$tgt.jsonl -m qwen2.5-coder-0.5b -t $tgt --methods rt,ssbd,cd --beta 0.2 --limit 5 \
      --semsim --out "$OUT/en-$tgt-0.5b"
done

# 5. Talk-style ASR partials (no references: speed and flicker only), display mask-k 2.
bench --data $DATA/talks/talk-partials.jsonl -m qwen2.5-coder-0.5b -t de --methods rt,ssbd,cd --beta 0.2 \
    --display-mask-k 2 --out "$OUT/talks-de-0.5b" --data-note "talk-style ASR partials written for the project"

# 6. Beyond the paper on the 0.5B: lookahead drafts against SSBD and RT in one run; the scaling of
#    batched streams (1-8); long-session memory.
bench --data $DATA/udhr/en-de.jsonl -m qwen2.5-coder-0.5b -t de --methods rt,ssbd,ssbd-resync,ssbd-ngram,ssbd-plus \
    --beta 0.2 --limit 5 --semsim --out "$OUT/en-de-0.5b-lookahead"
once "$OUT/multistream/multistream.json" python benchmarks/multistream.py --model qwen2.5-coder-0.5b --methods ssbd \
    --streams 1,2,4,8 --items 8 --out "$OUT/multistream"
once "$OUT/longform/longform_memory.json" python benchmarks/longform_memory.py --model qwen2.5-coder-0.5b --updates 1000 \
    --out "$OUT/longform"
# 7. Every feature of #6 on the default model in one run (4 paragraphs: RT on the 1.5B is slow here):
#    the lookahead variants, each greedy and sampled (T 0.7, top-p 0.9) against RT at the same temperature.
bench --data $DATA/udhr/en-de.jsonl -m qwen2.5-coder-1.5b -t de --methods rt,ssbd,ssbd-resync,ssbd-ngram,ssbd-plus \
    --beta 0.2 --temperature 0,0.7 --top-p 0.9 --limit 4 --semsim --out "$OUT/en-de-1.5b-beyond"
#    Many streams on the default model: RT and SSBD, 2 streams (one paragraph each; RT is slow here)
#    run one after the other against one batched forward per step.
once "$OUT/multistream-1.5b/multistream.json" python benchmarks/multistream.py --model qwen2.5-coder-1.5b \
    --methods rt,ssbd --streams 2 --items 2 --out "$OUT/multistream-1.5b"
#    Sampling against temperature and beta (0.5B, 3 paragraphs), each against RT sampling at the same temperature.
bench --data $DATA/udhr/en-de.jsonl -m qwen2.5-coder-0.5b -t de --methods rt,ssbd --beta 0.2,0.5 --temperature 0,0.3,0.7 \
    --top-p 0.9 --limit 3 --semsim --out "$OUT/en-de-0.5b-sampling"
# 8. Commit exactly what RT would (final update at beta 0) where a weak model locks in a bad draft.
bench --data $DATA/udhr/en-ja.jsonl -m qwen2.5-coder-0.5b -t ja --methods rt,ssbd,ssbd-final0 --beta 0.2 --limit 5 \
    --semsim --out "$OUT/en-ja-0.5b-final0"
# 9. Live input: a 10-minute ASR-like stream replayed in real time (latest partial wins, automatic
#    segments), RT against SSBD on both models; a 5,000-word never-final stream; what viewers see
#    (display mask-k 2 against agreement-2 stable text) and context across sentences, each in one run.
once "$OUT/live-replay-0.5b/summary.json" python benchmarks/live_replay.py --model qwen2.5-coder-0.5b --minutes 10 \
    --methods rt,ssbd --out "$OUT/live-replay-0.5b"
once "$OUT/live-replay-1.5b/summary.json" python benchmarks/live_replay.py --model qwen2.5-coder-1.5b --minutes 10 \
    --methods rt,ssbd --out "$OUT/live-replay-1.5b"
once "$OUT/never-final-0.5b/summary.json" python benchmarks/live_replay.py --never-final --words 5000 --stride 6 \
    --model qwen2.5-coder-0.5b --methods ssbd --out "$OUT/never-final-0.5b"
bench --data $DATA/udhr-sentences/en-de.jsonl -m qwen2.5-coder-1.5b -t de --methods ssbd --beta 0.2 --agree 0,2 \
    --display-mask-k 2 --limit 12 --out "$OUT/en-de-1.5b-viewers"
bench --data $DATA/udhr-sentences/en-de.jsonl -m qwen2.5-coder-1.5b -t de --methods ssbd --beta 0.2 --context 0,256 \
    --limit 6 --semsim --out "$OUT/en-de-1.5b-context"
# 10. One engine: the old revision (44de22a) against this tree in one run, streams one
#     after another and batched; the machinery alone on identical token work (3 alternating runs);
#     the prompt-boundary change: quality (0.5B all 50 UDHR paragraphs a pair, 1.5B the first 4) and cost.
once "$OUT/engine-before-after-0.5b/engine_before_after.json" python benchmarks/engine_before_after.py \
    --before 44de22a --model qwen2.5-coder-0.5b --out "$OUT/engine-before-after-0.5b"
if [ ! -f "$OUT/engine-overhead-0.5b/engine_overhead.md" ]; then
    mkdir -p "$OUT/engine-overhead-0.5b"
    OLD=$(mktemp -d)/before && git worktree add --detach "$OLD" 44de22a -q
    for i in 1 2 3; do
        (cd /tmp && PYTHONPATH="$OLD" "$PY" "$ROOT/benchmarks/engine_overhead.py" --tree-label before \
            --out "$ABS_OUT/engine-overhead-0.5b/before-$i.json")
        (cd /tmp && PYTHONPATH="$ROOT" "$PY" "$ROOT/benchmarks/engine_overhead.py" --tree-label after \
            --out "$ABS_OUT/engine-overhead-0.5b/after-$i.json")
    done
    git worktree remove --force "$OLD"
    run python benchmarks/engine_overhead.py --summarize "$OUT/engine-overhead-0.5b"
fi
once "$OUT/prompt-boundary-0.5b/prompt_boundary.json" python benchmarks/prompt_boundary.py \
    --model qwen2.5-coder-0.5b --items 50 --out "$OUT/prompt-boundary-0.5b"
once "$OUT/prompt-boundary-0.5b/prompt_speed.json" python benchmarks/prompt_boundary.py --speed \
    --model qwen2.5-coder-0.5b --items 8 --rounds 2 --out "$OUT/prompt-boundary-0.5b"
once "$OUT/prompt-boundary-1.5b/prompt_boundary.json" python benchmarks/prompt_boundary.py \
    --model qwen2.5-coder-1.5b --items 4 --out "$OUT/prompt-boundary-1.5b"
# 11. The caption service: concurrent sessions at speaking rate, and faults.
once "$OUT/service-load-0.5b/service_load.json" python benchmarks/service_load.py --model qwen2.5-coder-0.5b \
    --sessions 1,2,4,8 --seconds 90 --out "$OUT/service-load-0.5b"
once "$OUT/service-faults-0.5b/service_faults.json" python benchmarks/service_faults.py \
    --model qwen2.5-coder-0.5b --seconds 60 --out "$OUT/service-faults-0.5b"
# 12. Which BLAS pip should bring. cmeel-openblas is measured only when BLAS_CMEEL names its
#     libopenblas.so.0 (`pip download cmeel-openblas`, unzip: cmeel.prefix/lib/).
CHOICES="openblas,mkl,none" LABELS="Debian OpenBLAS,MKL (pip),reference"
if [ -n "${BLAS_CMEEL:-}" ]; then CHOICES="$CHOICES,$BLAS_CMEEL" LABELS="$LABELS,cmeel-openblas"; fi
once "$OUT/blas-probe/blas_probe.json" python benchmarks/blas_probe.py --choices "$CHOICES" --labels "$LABELS" \
    --rounds 3 --out "$OUT/blas-probe"
# 13. Ordinary sentences: UDHR sentences of 10-25 words, lag 3, the default model with
#     and without the 0.5B guessing the tail, and the 0.5B. Decode steps go through sgemv (the
#     default); the -sgemm runs are the same without it (MLX_SSBD_GEMV=0). Where a pass's time goes.
once "$OUT/matmul-rows/matmul_rows.json" python benchmarks/matmul_rows.py --out "$OUT/matmul-rows"
for m in 0.5b 1.5b; do
  once "$OUT/verify-cost-$m-sgemm/verify_cost.json" env MLX_SSBD_GEMV=0 python benchmarks/verify_cost.py \
      --model qwen2.5-coder-$m --out "$OUT/verify-cost-$m-sgemm"
done
SENTENCES="--data $DATA/udhr-sentences/en-de.jsonl --words 10-25 --limit 12 -t de --semsim"
bench $SENTENCES -m qwen2.5-coder-1.5b --draft-model qwen2.5-coder-0.5b --methods rt,ssbd,ssbd-plus,ssbd-tail \
    --out "$OUT/sentences-1.5b"
run env MLX_SSBD_GEMV=0 mlx-ssbd bench $SENTENCES -m qwen2.5-coder-1.5b --methods rt,ssbd \
    --out "$OUT/sentences-1.5b-sgemm" > /dev/null
bench $SENTENCES -m qwen2.5-coder-0.5b --methods rt,ssbd,ssbd-plus --out "$OUT/sentences-0.5b"
# The service load of step 11 again, now that decode steps go through sgemv.
once "$OUT/service-load-0.5b-sgemv/service_load.json" python benchmarks/service_load.py --model qwen2.5-coder-0.5b \
    --sessions 1,2,4,8 --seconds 90 --out "$OUT/service-load-0.5b-sgemv"
# Memory over a 30-minute service run: 2 SSBD sessions replaying speech for 30 minutes.
once "$OUT/service-memory-0.5b/service_load.json" python benchmarks/service_load.py --model qwen2.5-coder-0.5b \
    --methods ssbd --sessions 2 --seconds 1800 --out "$OUT/service-memory-0.5b"
# 14. Speech in: espeak-ng speech of 6 UDHR paragraphs through Whisper tiny.en into the
#     translator, replayed in real time (RT and SSBD), then as fast as possible (commits only).
for m in 0.5b 1.5b; do
  once "$OUT/speech-$m/speech-qwen2.5-coder-$m.json" python benchmarks/speech_chain.py --model qwen2.5-coder-$m \
      --paragraphs 6 --methods rt,ssbd --out "$OUT/speech-$m"
done
# 15. The service after continuous batching: load on the default model (lag bound 5 s),
#     re-translation through the OpenAI endpoint with and without Predicted Outputs. Before/after
#     comparisons of the server (step 17) run service_load.py with a git worktree of the older
#     commit on PYTHONPATH; service_load.py starts the server outside the checkout so that the
#     worktree's code is what runs, and names the server's commit in its report.
once "$OUT/service-load-1.5b/service_load.json" python benchmarks/service_load.py --model qwen2.5-coder-1.5b \
    --sessions 1,2 --seconds 90 --target-p95 5 --out "$OUT/service-load-1.5b"
once "$OUT/chat-predicted-0.5b/chat_predicted.json" python benchmarks/chat_predicted.py --model qwen2.5-coder-0.5b \
    --limit 8 --out "$OUT/chat-predicted-0.5b"
# The shim's few-rows kernel (2-8 rows: a batched decode step): one product, and batched streams
# with the kernel off (MLX_SSBD_FEW_ROWS=1) and on.
once "$OUT/matmul-rows-few/matmul_rows.json" python benchmarks/matmul_rows.py --out "$OUT/matmul-rows-few"
once "$OUT/multistream-0.5b-rows-sgemm/multistream.json" env MLX_SSBD_FEW_ROWS=1 python benchmarks/multistream.py \
    --model qwen2.5-coder-0.5b --methods ssbd --streams 1,2,4 --items 4 --out "$OUT/multistream-0.5b-rows-sgemm"
once "$OUT/multistream-0.5b-rows-kernel/multistream.json" python benchmarks/multistream.py \
    --model qwen2.5-coder-0.5b --methods ssbd --streams 1,2,4 --items 4 --out "$OUT/multistream-0.5b-rows-kernel"
# ...and ordinary sentences (step 13's 0.5B run) with the kernel off and on.
run env MLX_SSBD_FEW_ROWS=1 mlx-ssbd bench --data $DATA/udhr-sentences/en-de.jsonl --words 10-25 --limit 12 -t de \
    -m qwen2.5-coder-0.5b --methods rt,ssbd,ssbd-plus --out "$OUT/sentences-0.5b-rows-sgemm" > /dev/null
bench --data $DATA/udhr-sentences/en-de.jsonl --words 10-25 --limit 12 -t de \
    -m qwen2.5-coder-0.5b --methods rt,ssbd,ssbd-plus --out "$OUT/sentences-0.5b-rows-kernel"
# 16. What guessing the new tail could give: pass costs with the few-rows kernel (2-64
#     tokens), then the 1.5B's (step 13) and the 0.5B's (step 15) sentence runs priced with them.
for m in 0.5b 1.5b; do
  once "$OUT/verify-cost-$m-kernel/verify_cost.json" python benchmarks/verify_cost.py --model qwen2.5-coder-$m \
      --sizes 1,2,3,4,6,8,16,24,32,40,48,64 --out "$OUT/verify-cost-$m-kernel"
done
run python benchmarks/tail_ceiling.py "$OUT/sentences-1.5b" --model qwen2.5-coder-1.5b \
    --costs "$OUT/verify-cost-1.5b-kernel/verify_cost.json" > /dev/null
run python benchmarks/tail_ceiling.py "$OUT/sentences-0.5b-rows-kernel" --model qwen2.5-coder-0.5b \
    --costs "$OUT/verify-cost-0.5b-kernel/verify_cost.json" > /dev/null
# 17. Before/after runs of the server, each on a git worktree of its commit (wt below): continuous
#     batching (a75cffc, one batched step per update, against 5aa40f3 with the few-rows kernel off),
#     and a chat client beside one live SSBD session, the chat run to its end (5aa40f3) against
#     interleaved round by round (this commit), twice; then the session alone.
WT=${TMPDIR:-/tmp}/mlx-ssbd-wt
wt() { [ -d "$WT-$1" ] || git worktree add --detach "$WT-$1" "$1" > /dev/null; echo "$WT-$1"; }
LOAD="python benchmarks/service_load.py --model qwen2.5-coder-0.5b --seconds 60 --target-p95 5"
B="$OUT/service-batching-0.5b-rerun"
once "$B/before/service_load.json" env PYTHONPATH="$(wt a75cffc)" $LOAD --methods rt,ssbd --sessions 1,2,4 --out "$B/before"
once "$B/after/service_load.json" env PYTHONPATH="$(wt 5aa40f3)" MLX_SSBD_FEW_ROWS=1 $LOAD --methods rt,ssbd \
    --sessions 1,2,4 --out "$B/after"
run python benchmarks/compare_load.py "$B/before" "$B/after" --before-label "step batching" --after-label continuous \
    --title "The service scheduler before and after continuous batching (0.5B), re-run" --out "$B" > /dev/null
C="$OUT/service-chat-0.5b"
for r in 1 2; do
  once "$C/before-$r/service_load.json" env PYTHONPATH="$(wt 5aa40f3)" $LOAD --methods ssbd --sessions 1 \
      --chat-tokens 200 --out "$C/before-$r"
  once "$C/after-$r/service_load.json" $LOAD --methods ssbd --sessions 1 --chat-tokens 200 --caption-rounds 1 \
      --out "$C/after-$r"
  run python benchmarks/compare_load.py "$C/before-$r" "$C/after-$r" --before-label "chat to its end" \
      --after-label "chat interleaved" --title "A 200-token chat client beside one live session (0.5B), run $r" \
      --name "service_chat-$r.md" --out "$C" > /dev/null
done
once "$C/alone/service_load.json" $LOAD --methods ssbd --sessions 1 --out "$C/alone"
for w in a75cffc 5aa40f3; do [ ! -d "$WT-$w" ] || git worktree remove --force "$WT-$w"; done
# 18. N-gram pools built (ssbd-pool: 2-token guesses from the source and the session's
#     earlier outputs, the pools tail_ceiling.py prices best): step 13's sentences on both models.
#     First as built at 955fe1c, the guesses checked with the update's beta (0.2), with RT, SSBD and
#     ssbd-plus in the same run; then as now, checked at beta 0 (lossless).
for m in 1.5b 0.5b; do
  run env PYTHONPATH="$(wt 955fe1c)" mlx-ssbd bench $SENTENCES -m qwen2.5-coder-$m \
      --methods rt,ssbd,ssbd-plus,ssbd-pool --out "$OUT/sentences-pool-biased-$m" > /dev/null
  bench $SENTENCES -m qwen2.5-coder-$m --methods rt,ssbd,ssbd-pool --out "$OUT/sentences-pool-$m"
done
[ ! -d "$WT-955fe1c" ] || git worktree remove --force "$WT-955fe1c"
# 19. ...and on step 5's talk-style ASR partials (short, unpunctuated, revised), both models.
for m in 0.5b 1.5b; do
  bench --data $DATA/talks/talk-partials.jsonl -m qwen2.5-coder-$m -t de --methods rt,ssbd,ssbd-pool --display-mask-k 2 \
      --out "$OUT/talks-pool-$m" --data-note "talk-style ASR partials written for the project"
done
# 20. Captions first: the chat client of step 17 beside one session, `serve --caption-rounds` 1, 4, 2, 1, 4.
C="$OUT/service-chat-rounds-0.5b"
for spec in 1-1 4-1 2-1 1-2 4-2; do
  once "$C/rounds-$spec/service_load.json" $LOAD --methods ssbd --sessions 1 --chat-tokens 200 \
      --caption-rounds "${spec%-*}" --out "$C/rounds-$spec"
done
for r in 1 2; do
  run python benchmarks/compare_load.py "$C/rounds-1-$r" "$C/rounds-4-$r" --before-label "alternate (1 round)" \
      --after-label "captions first (4 rounds)" --name "caption_rounds-$r.md" --out "$C" \
      --title "A 200-token chat client beside one live session (0.5B): --caption-rounds 1 against 4, run $r" > /dev/null
done
# 21. ssbd-pool in the service: SSBD and ssbd-pool, 1, 2 and 4 sessions, 60 s of speech each.
once "$OUT/service-pool-0.5b/service_load.json" $LOAD --methods ssbd,ssbd-pool --sessions 1,2,4 \
    --out "$OUT/service-pool-0.5b"
# 22. Hostile clients beside 2 real-time sessions: junk floods, slow readers, 500 idle sockets, 200 viewers.
once "$OUT/service-abuse-0.5b/service_abuse.json" python benchmarks/service_abuse.py --model qwen2.5-coder-0.5b \
    --out "$OUT/service-abuse-0.5b"
# 23. The decode kernel built at import (before) and by the command line (now): decode speed, in turn.
once "$OUT/kernel-before-after-0.5b/kernel_before_after.json" python benchmarks/kernel_before_after.py \
    --before 8f72d1e --runs 3 --out "$OUT/kernel-before-after-0.5b"
# 24. Replicas on one PostgreSQL behind HAProxy: one killed mid-talk; resume, commits and viewer events lost.
once "$OUT/service-failover-0.5b/service_failover.json" python benchmarks/service_failover.py \
    --model qwen2.5-coder-0.5b --seconds 60 --kill-after 25 --out "$OUT/service-failover-0.5b"
# 25. Several caption languages from one stream: 1-4 languages, wall time and lag, 0.5B and 1.5B.
once "$OUT/targets/targets.json" python benchmarks/targets.py --out "$OUT/targets"
# 26. A glossary's terms in live captions: term accuracy and chrF++ with and without it.
once "$OUT/glossary-terms/glossary_terms.json" python benchmarks/glossary_terms.py --out "$OUT/glossary-terms"
# 27. Where the bias's quality goes: every draft token kept only because of the bias (0.5B, the dev talk).
once "$OUT/acceptance-analysis-0.5b/acceptance_analysis.json" python benchmarks/acceptance_analysis.py \
    --model qwen2.5-coder-0.5b --data $DATA/talk-sentences/en-de.dev.jsonl --out "$OUT/acceptance-analysis-0.5b"
# 28. Acceptance rules, speed against quality: choose on the dev talk (16 sentences), report on the test talk.
RULES="python benchmarks/accept_rules.py"
once "$OUT/rules-dev-0.5b/rules.md" $RULES --model qwen2.5-coder-0.5b --data $DATA/talk-sentences/en-de.dev.jsonl \
    --limit 16 --configs rt,ssbd-b0,ssbd-b0.1,ssbd-b0.2,ssbd-ratio-b0.4,ssbd-ratio-b0.6,ssbd-ratio-b0.8,ssbd-b0.2-exact2,ssbd-final0-b0.2 \
    --out "$OUT/rules-dev-0.5b"
once "$OUT/rules-dev-1.5b/rules.md" $RULES --model qwen2.5-coder-1.5b --data $DATA/talk-sentences/en-de.dev.jsonl \
    --limit 16 --configs rt,ssbd-b0,ssbd-b0.1,ssbd-b0.2,ssbd-ratio-b0.6,ssbd-ratio-b0.8,ssbd-b0.2-exact2 --out "$OUT/rules-dev-1.5b"
once "$OUT/rules-dev-1.5b-final/rules.md" $RULES --model qwen2.5-coder-1.5b --data $DATA/talk-sentences/en-de.dev.jsonl \
    --limit 16 --configs rt,ssbd-b0.2,ssbd-final0-b0.2,ssbd-resync-b0.2-final0,ssbd-b0.2-final0.05,ssbd-ratio-b0.6-final0.2 \
    --out "$OUT/rules-dev-1.5b-final"
for model in 1.5b 0.5b; do
  once "$OUT/rules-test-$model/rules.md" $RULES --model qwen2.5-coder-$model --data $DATA/talk-sentences/en-de.test.jsonl \
      --configs rt,ssbd-b0,ssbd-b0.2,ssbd-ratio-b0.8,ssbd-b0.2-final0.05,ssbd-resync-b0.2-final0 --semsim \
      --out "$OUT/rules-test-$model"
done
# 29. The talks as live speech: real-time replay of their ASR-like partials, RT against SSBD and ssbd-ratio (0.5B).
once "$OUT/live-replay-talk-0.5b/summary.json" python benchmarks/live_replay.py --model qwen2.5-coder-0.5b --minutes 3 \
    --methods rt,ssbd,ssbd-ratio --data $DATA/talk-sentences/en-de.dev.jsonl --data $DATA/talk-sentences/en-de.test.jsonl \
    --out "$OUT/live-replay-talk-0.5b"
# 30. The SSBD paper's grid (mlx-ssbd reproduce) on what is reachable here: our two PyPI models in place of
#     Tower+ 2B and Qwen3-4B, UDHR sentences of 8-20 words instead of FLORES, no COMET.
once "$OUT/paper-preset/paper.md" mlx-ssbd reproduce --models qwen2.5-coder-0.5b,qwen2.5-coder-1.5b \
    --data "$DATA/udhr-sentences/{pair}.jsonl" --words 8-20 --limit 10 --out "$OUT/paper-preset"
# 31. Quantized weights as they ship: one product through the CPU kernel, MLX's quantized_matmul and
#     fp32 BLAS; then each model's quantized and dense paths (load, memory, passes, chrF++, the
#     peak RSS of translate --stream); llama.cpp on the same GGUF files (needs llama-cpp-python).
once "$OUT/quantized-kernel/quantized_kernel.json" python benchmarks/quantized_kernel.py --out "$OUT/quantized-kernel"
once "$OUT/quantized-weights/quantized_weights.json" python benchmarks/quantized_weights.py \
    --models qwen2.5-coder-0.5b,qwen2.5-coder-1.5b --out "$OUT/quantized-weights"
if python -c "import llama_cpp" 2>/dev/null; then
  once "$OUT/llama-cpp/llama_cpp.json" python benchmarks/llama_cpp_peer.py --out "$OUT/llama-cpp"
fi
# 32. The default model (quantized) on the talks as live speech, and with several caption languages.
once "$OUT/live-replay-talk-1.5b/summary.json" python benchmarks/live_replay.py --model qwen2.5-coder-1.5b --minutes 3 \
    --methods rt,ssbd --data $DATA/talk-sentences/en-de.dev.jsonl --data $DATA/talk-sentences/en-de.test.jsonl \
    --out "$OUT/live-replay-talk-1.5b"
once "$OUT/targets-1.5b/targets.json" python benchmarks/targets.py --models qwen2.5-coder-1.5b --out "$OUT/targets-1.5b"
# 33. Hybrid models (recurrent layers, sliding windows): tokens fed, model calls and wall time per update
#     with checkpoints against rebuilding, random-weight models of each cache kind (about 15 minutes).
once "$OUT/hybrid-reuse/hybrid_reuse.json" python benchmarks/hybrid_reuse.py --limit 6 --out "$OUT/hybrid-reuse"
once "$OUT/hybrid-reuse-1024x24/hybrid_reuse.json" python benchmarks/hybrid_reuse.py --archs qwen2,qwen3_5 \
    --width 1024 --layers 24 --limit 3 --out "$OUT/hybrid-reuse-1024x24"
# 34. Attacks that once held the model: a glossary flood beside a reference session, SIGTERM during
#     it, a client gone mid-work, a resume by id alone, slow-header sockets (about 6 minutes).
once "$OUT/service-attacks/service_attacks.json" python benchmarks/service_attacks.py --model qwen2.5-coder-0.5b \
    --out "$OUT/service-attacks"
run python benchmarks/collect.py "$OUT" > /dev/null
echo "done: $OUT" >&2
