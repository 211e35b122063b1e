"""Regenerate every current result from the current commit: one command, one results folder.

    python -m benchmarks.run                 # the current results, into benchmarks/results/DATE-KIND
    python -m benchmarks.run --long          # every step, at the larger sizes
    python -m benchmarks.run --list          # the steps, each with its time estimate
    python -m benchmarks.run --quick         # every step at a small size (a smoke run, not a result)
    python -m benchmarks.run --only service  # one group (engine, quality, live, service) or step
    python -m benchmarks.run --out DIR --label quiet

A run (about 2 hours on 2 cores) refreshes the main results at sizes that fit that: the
kernel and a verify pass, a busy machine, the engine's capacity, SSBD against RT, live lag, the
service under load, attack and a store outage, push targets; ``--long`` (about 10 hours) runs
every step, some at larger sizes (more streams, configurations, minutes of speech), among them the
steps only it runs (the weights against fp32 and llama.cpp, the memory of a long session, more
quality sets and the paper's grid, speech, caption languages, glossaries, the other service
runs). A long run into a folder that a run of the same day filled keeps the reports already there
(``--out`` for a new one).
Steps run one after another (timings are only compared within one step), all from one commit: a
working tree with uncommitted changes is refused (except with ``--quick``). A step whose report is
already in the folder is skipped, so an interrupted run is simply started again. At the end the
folder's reports are collected into its ``RESULTS.md`` (``tools.collect``) and the results page is
written again (``tools.results_page``: each step's newest run on each kind of machine, so this
run's on this one; with ``--quick`` it is not). Needs the models prepared
(``mlx-ssbd models prepare qwen2.5-coder-1.5b``, ``qwen2.5-coder-0.5b``) and the extras
``.[test,serve,asr,semsim,postgres,plots,ja]``; the llama.cpp step runs only where
``llama-cpp-python`` is installed. Estimates are minutes on the 2-core development VM (the engine
group's from a run of its default sizes: 30 minutes in all).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import platform
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common import DATA, REPO, RESULTS, relative

DEFAULT = "qwen2.5-coder-1.5b"
SMALL = "qwen2.5-coder-0.5b"
SENTENCES = str(DATA / "udhr-sentences" / "en-de.jsonl")
TALK_DEV, TALK_TEST = (str(DATA / "talk-sentences" / f"en-de.{part}.jsonl") for part in ("dev", "test"))
# the same talks with Chinese and Japanese references
TALK_ZH_JA = {
    (lang, part): str(DATA / "talk-sentences" / f"en-{lang}.{part}.jsonl")
    for lang in ("zh", "ja")
    for part in ("test", "dev")
}
PARTIALS = str(DATA / "talks" / "talk-partials.jsonl")
ASR_PARTIALS = {  # each talk's real ASR partials and their references (benchmarks/tools/asr_partials.py)
    part: (
        str(DATA / "asr-partials" / f"en-de.{part}.jsonl"),
        str(DATA / "asr-partials" / f"en-de.{part}.refs.jsonl"),
    )
    for part in ("dev", "test")
}
EXAMPLES = str(DATA / "talk-sentences" / "en-de.examples.tsv")  # four sentences of the dev talk

# Other machines' pass costs (committed reports), for the work model's step
XEON_COSTS = RESULTS / "2026-11-26-linux-x86_64-2cpu-vnni" / "verify-cost-1.5b" / "verify_cost.json"
AVX2_EPYC_COSTS = (
    RESULTS / "2026-11-28-linux-x86_64-2cpu-epyc-decision" / "verify-cost-1.5b" / "verify_cost.json"
)
H100_STEP = RESULTS / "2026-11-25-linux-x86_64-h100" / "decode-step" / "decode_step.json"
WORK_MODEL = (  # the runs and this machine's costs: steps of the same results folder
    "--runs", "commit-beta-test-1.5b,commit-beta-dev-1.5b",
    "--pass-costs", "this machine=verify-cost-1.5b/verify_cost.json",
    "--pass-costs", f"Intel Xeon (AVX-512 VNNI)={XEON_COSTS}",
    "--pass-costs", f"AMD EPYC (AVX2)={AVX2_EPYC_COSTS}",
    "--pass-costs", f"H100, fp16={H100_STEP}#dense float16",
    "--pass-costs", f"H100, 4-bit={H100_STEP}#4bit",
    "--pieces", "4,8",  # ... and had each draft been verified a few tokens a pass
)  # fmt: skip


@dataclass(frozen=True)
class Step:
    """One result: ``python -m MODULE ARGS --out OUT/NAME``. ``quick`` replaces ARGS in a smoke run
    (``--quick``), ``long`` in a long run (``--long``: the larger sizes); ``long_only``: the step is
    in the long run only."""

    name: str
    group: str
    minutes: float
    module: str
    args: tuple[str, ...]
    quick: tuple[str, ...] | None = None
    quick_minutes: float = 2.0
    needs: str | None = None  # a module that must be importable, else the step is skipped
    gpu: bool = False  # a measurement of a GPU: skipped on a CPU
    report: str = "*.json"  # the file whose presence means the step is done
    long: tuple[str, ...] | None = None
    long_minutes: float | None = None
    long_only: bool = False

    def sized(self, size: str) -> tuple[tuple[str, ...], float] | None:
        """``(ARGS, minutes)`` in a run of ``size`` (``quick``, ``default``, ``long``); None: not in such a run."""
        if size == "quick":
            return self.quick or self.args, self.quick_minutes
        if size == "long":
            return self.long or self.args, self.long_minutes or self.minutes
        return None if self.long_only else (self.args, self.minutes)


BENCH = "mlx_ssbd_cli"
STEPS = (
    # engine: what the weights, a pass and a batch cost
    Step("blas-probe", "engine", 1, "benchmarks.engine.blas_probe", (), ("--rounds", "1"), 1),
    Step("matmul-rows", "engine", 1, "benchmarks.engine.matmul_rows", (), ("--rows", "1,4", "--rounds", "1"), 1),
    Step("decode-step", "engine", 5, "benchmarks.engine.decode_step", (),
         ("--layers", "2", "--repeats", "2"), 1, gpu=True),
    Step("quantized-kernel", "engine", 2, "benchmarks.engine.quantized_kernel", (),
         ("--rows", "1,16", "--bits", "4", "--repeats", "3"), 1),
    Step("quantized-weights", "engine", 30, "benchmarks.engine.quantized_weights",
         ("--models", f"{SMALL},{DEFAULT}"), ("--models", SMALL, "--sentences", "2", "--repeats", "1"), 4,
         long_only=True),
    Step("avx2-path", "engine", 8, "benchmarks.engine.avx2_path", ("--models", f"{SMALL},{DEFAULT}"),
         ("--models", SMALL, "--repeats", "1"), 2, long_only=True),
    Step("blas-threads-1.5b", "engine", 4, "benchmarks.engine.blas_threads", ("--model", DEFAULT),
         ("--model", SMALL, "--rounds", "2"), 1, long_only=True),
    Step("busy-machine-1.5b", "engine", 6, "benchmarks.engine.busy_machine", ("--models", DEFAULT),
         ("--models", SMALL, "--rounds", "1", "--repeats", "2"), 2),
    Step("llama-cpp", "engine", 10, "benchmarks.engine.llama_cpp_peer", ("--models", f"{SMALL},{DEFAULT}"),
         ("--models", SMALL, "--repeats", "2"), 2, needs="llama_cpp", long_only=True),
    Step("verify-cost-1.5b", "engine", 2, "benchmarks.engine.verify_cost", ("--model", DEFAULT),
         ("--model", SMALL, "--sizes", "1,16", "--repeats", "3"), 1),
    # after a talk's context: the built-in examples' prompt (410 tokens) and earlier captions
    Step("verify-cost-context-1.5b", "engine", 2, "benchmarks.engine.verify_cost",
         ("--model", DEFAULT, "--context", "640", "--sizes", "1,4,8,16,32"),
         ("--model", SMALL, "--context", "640", "--sizes", "1,16", "--repeats", "3"), 1),
    Step("multistream-0.5b", "engine", 15, "benchmarks.engine.multistream",
         ("--model", SMALL, "--methods", "ssbd", "--streams", "1,2,4", "--items", "4"),
         ("--model", SMALL, "--methods", "ssbd", "--streams", "1,2", "--items", "2"), 3, long_only=True),
    Step("capacity-small", "engine", 6, "benchmarks.engine.capacity",
         ("--models", "small-shape,tiny-shape", "--streams", "1,4,16,64", "--steps", "2"),
         ("--models", "small-shape", "--streams", "1,4", "--steps", "1", "--min-updates", "4"), 1,
         long=("--models", "small-shape,tiny-shape", "--streams", "1,2,4,8,16,32,64", "--steps", "4"),
         long_minutes=18),
    Step("capacity-0.5b", "engine", 8, "benchmarks.engine.capacity",
         ("--models", f"0.5b-shape,{SMALL}", "--streams", "1,4,16", "--steps", "4", "--min-updates", "8"),
         ("--models", SMALL, "--streams", "1,2", "--steps", "1", "--min-updates", "0"), 1),
    Step("capacity-1.5b", "engine", 7, "benchmarks.engine.capacity",
         ("--models", f"1.5b-shape,{DEFAULT}", "--streams", "1,4", "--steps", "4", "--min-updates", "8"),
         ("--models", DEFAULT, "--streams", "1", "--steps", "1", "--min-updates", "0"), 1),
    Step("capacity-gpu", "engine", 12, "benchmarks.engine.capacity",
         ("--models", "0.5b-shape,1.5b-shape", "--streams", "1,2,4,8,16,32,64,128", "--steps", "6"),
         ("--models", "0.5b-shape", "--streams", "1,8", "--steps", "1", "--min-updates", "4"), 1, gpu=True),
    Step("longform-0.5b", "engine", 15, "benchmarks.engine.longform_memory", ("--model", SMALL),
         ("--model", SMALL, "--updates", "100"), 2, long_only=True),
    Step("shared-prefix-1.5b", "engine", 3, "benchmarks.engine.shared_prefix", ("--model", DEFAULT),
         ("--model", SMALL, "--sessions", "2"), 1),
    Step("hybrid-reuse", "engine", 3, "benchmarks.engine.hybrid_reuse", ("--limit", "2"), ("--limit", "1"), 3,
         long=("--limit", "6"), long_minutes=15),
    # quality: speed at equal quality, flicker, acceptance rules, the paper's grid
    Step("sentences-1.5b", "quality", 15, BENCH,
         ("bench", "--data", SENTENCES, "--words", "10-25", "-t", "de", "-m", DEFAULT,
          "--methods", "rt,ssbd,ssbd-final0", "--semsim"),
         ("bench", "--data", SENTENCES, "--words", "10-25", "--limit", "2", "-t", "de", "-m", SMALL,
          "--methods", "rt,ssbd"), 3, report="summary.json", long_only=True),
    Step("talks-1.5b", "quality", 30, BENCH,
         ("bench", "--data", PARTIALS, "-m", DEFAULT, "-t", "de", "--methods", "rt,ssbd,ssbd-steady,ssbd-final0",
          "--display-mask-k", "2",
          "--data-note", "talk-style ASR partials written for the project"),
         ("bench", "--data", PARTIALS, "-m", SMALL, "-t", "de", "--methods", "rt,ssbd", "--limit", "1"), 3,
         report="summary.json", long_only=True),
    # ... and on each talk's real ASR partials (synthetic speech, streaming Whisper), with references
    *(Step(f"asr-partials-{part}-1.5b", "quality", 8, BENCH,
           ("bench", "--data", data, "--refs", refs, "-m", DEFAULT, "-t", "de",
            "--methods", "rt,ssbd,ssbd-steady,ssbd-final0", "--display-mask-k", "2", "--semsim",
            "--data-note", "the talk spoken by espeak-ng, streaming whisper-tiny.en's partials"),
           ("bench", "--data", data, "--refs", refs, "-m", SMALL, "-t", "de", "--methods", "rt,ssbd", "--limit", "1"),
           2, report="summary.json", long_only=True)
      for part, (data, refs) in ASR_PARTIALS.items()),
    Step("plain-rt-1.5b", "quality", 15, BENCH,
         ("bench", "--data", TALK_TEST, "-m", DEFAULT, "-t", "de", "--methods", "rt-nocache,rt,ssbd",
          "--data-note", "talk-like sentences written for the project, references by the authors"),
         ("bench", "--data", TALK_TEST, "-m", SMALL, "-t", "de", "--methods", "rt-nocache,ssbd", "--limit", "2"),
         2, report="summary.json"),
    Step("acceptance-analysis-0.5b", "quality", 10, "benchmarks.quality.acceptance_analysis",
         ("--model", SMALL, "--data", TALK_DEV), ("--model", SMALL, "--data", TALK_DEV, "--limit", "2"), 2),
    Step("rules-test-1.5b", "quality", 24, "benchmarks.quality.accept_rules",
         ("--model", DEFAULT, "--data", TALK_TEST, "--semsim", "--configs", "rt,ssbd-b0.2,ssbd-final0-b0.2"),
         ("--model", SMALL, "--data", TALK_TEST, "--limit", "3", "--configs", "rt,ssbd-b0.2"), 3,
         long=("--model", DEFAULT, "--data", TALK_TEST, "--semsim",
               "--configs", "rt,ssbd-b0,ssbd-b0.2,ssbd-ratio-b0.8,ssbd-final0-b0.2"), long_minutes=40),
    Step("prompt-test-1.5b", "quality", 30, "benchmarks.quality.accept_rules",
         ("--model", DEFAULT, "--data", TALK_TEST, "--semsim", "--examples", EXAMPLES,
          "--configs", "rt,rt+examples,rt+context,ssbd-b0.2,ssbd-b0.2+examples,ssbd-b0.2+context"),
         ("--model", SMALL, "--data", TALK_TEST, "--limit", "2", "--examples", EXAMPLES,
          "--configs", "rt,rt+examples,rt+context"), 3, long_only=True),
    Step("builtin-examples-test-1.5b", "quality", 16, "benchmarks.quality.accept_rules",
         ("--model", DEFAULT, "--data", TALK_TEST, "--semsim", "--examples", "builtin",
          "--configs", "rt+examples,rt,ssbd-b0.2+examples,ssbd-b0.2"),
         ("--model", SMALL, "--data", TALK_TEST, "--limit", "2", "--examples", "builtin",
          "--configs", "rt,rt+examples"), 3),
    Step("builtin-examples-dev-1.5b", "quality", 8, "benchmarks.quality.accept_rules",
         ("--model", DEFAULT, "--data", TALK_DEV, "--semsim", "--examples", "builtin", "--configs", "rt+examples,rt"),
         ("--model", SMALL, "--data", TALK_DEV, "--limit", "2", "--examples", "builtin",
          "--configs", "rt,rt+examples"), 3),
    # the built-in examples' Chinese and Japanese: RT and the default with and without them
    *(Step(f"builtin-examples-{part}-{lang}-1.5b", "quality", 16 if part == "test" else 8,
           "benchmarks.quality.accept_rules",
           ("--model", DEFAULT, "--data", data, "--target", lang, "--semsim", "--examples", "builtin",
            "--configs", "rt+examples,rt,ssbd-b0.2+examples,ssbd-b0.2" if part == "test" else "rt+examples,rt"),
           ("--model", SMALL, "--data", data, "--target", lang, "--limit", "2", "--examples", "builtin",
            "--configs", "rt,rt+examples"), 3)
      for (lang, part), data in TALK_ZH_JA.items()),
    # β with the default prompt: chosen on the dev talk, reported on the held-out one
    *(Step(f"examples-beta-{part}-1.5b", "quality", 16, "benchmarks.quality.accept_rules",
           ("--model", DEFAULT, "--data", data, "--examples", "builtin",
            "--configs", "rt+examples,ssbd-b0.2+examples,ssbd-b0.25+examples,ssbd-b0.3+examples"),
           ("--model", SMALL, "--data", data, "--limit", "2", "--examples", "builtin",
            "--configs", "rt+examples,ssbd-b0.3+examples"), 2, long_only=True)
      for part, data in (("dev", TALK_DEV), ("test", TALK_TEST))),
    # ... and the fastest any rule could be there: every draft token kept (cd)
    Step("examples-ceiling-test-1.5b", "quality", 10, "benchmarks.quality.accept_rules",
         ("--model", DEFAULT, "--data", TALK_TEST, "--examples", "builtin",
          "--configs", "rt+examples,ssbd-b0.2+examples,cd+examples"),
         ("--model", SMALL, "--data", TALK_TEST, "--limit", "2", "--examples", "builtin",
          "--configs", "rt+examples,cd+examples"), 2, long_only=True),
    # ... and what committing exactly RT's captions costs with the default prompt (ssbd-final0)
    *(Step(f"final0-{part}-1.5b", "quality", 8, "benchmarks.quality.accept_rules",
           ("--model", DEFAULT, "--data", data, "--examples", "builtin",
            "--configs", "rt+examples,ssbd-b0.2+examples,ssbd-final0-b0.2+examples"),
           ("--model", SMALL, "--data", data, "--limit", "2", "--examples", "builtin",
            "--configs", "rt+examples,ssbd-final0-b0.2+examples"), 2, long_only=True)
      for part, data in (("dev", TALK_DEV), ("test", TALK_TEST))),
    # ... and the bias the default commits with: chosen on the dev talk, reported on the held-out one
    *(Step(f"commit-beta-{part}-1.5b", "quality", 12, "benchmarks.quality.accept_rules",
           ("--model", DEFAULT, "--data", data, "--examples", "builtin",
            "--configs", "rt+examples,ssbd-b0.2-final0.2+examples,ssbd-b0.2-final0.15+examples,"
            "ssbd-b0.2+examples,ssbd-b0.2-final0.05+examples,ssbd-final0-b0.2+examples"),
           ("--model", SMALL, "--data", data, "--limit", "2", "--examples", "builtin",
            "--configs", "rt+examples,ssbd-b0.2-final0.2+examples"), 2, long_only=True)
      for part, data in (("dev", TALK_DEV), ("test", TALK_TEST))),
    # ... and what rejoining the draft after a divergence gives the default (ssbd-plain never rejoins)
    *(Step(f"rejoin-{part}-1.5b", "quality", 6, "benchmarks.quality.accept_rules",
           ("--model", DEFAULT, "--data", data, "--examples", "builtin",
            "--configs", "rt+examples,ssbd-plain-b0.2+examples,ssbd-b0.2+examples"),
           ("--model", SMALL, "--data", data, "--limit", "2", "--examples", "builtin",
            "--configs", "rt+examples,ssbd-plain-b0.2+examples"), 2, long_only=True)
      for part, data in (("dev", TALK_DEV), ("test", TALK_TEST))),
    # ... and, on real ASR partials, committing a final that repeats the last partial as shown
    *(Step(f"commit-shown-{part}-1.5b", "quality", 10, "benchmarks.quality.accept_rules",
           ("--model", DEFAULT, "--data", data, "--refs", refs, "--examples", "builtin",
            "--configs", "rt+examples,ssbd-b0.2+examples,ssbd-b0.2-recheck+examples,ssbd-b0.2-final0.2+examples"),
           ("--model", SMALL, "--data", data, "--refs", refs, "--limit", "2", "--examples", "builtin",
            "--configs", "rt+examples,ssbd-b0.2-recheck+examples"), 2, long_only=True)
      for part, (data, refs) in ASR_PARTIALS.items()),
    # ... and their decisions at this machine's and other machines' pass costs (nothing timed)
    Step("work-model", "quality", 1, "benchmarks.quality.work_model", WORK_MODEL, WORK_MODEL, 1, long_only=True),
    Step("paper-preset", "quality", 60, BENCH,
         ("reproduce", "--models", f"{SMALL},{DEFAULT}", "--data", str(DATA / "udhr-sentences" / "{pair}.jsonl"),
          "--words", "8-20", "--limit", "10"),
         ("reproduce", "--models", SMALL, "--data", str(DATA / "udhr-sentences" / "{pair}.jsonl"),
          "--words", "8-20", "--limit", "1"), 5, report="paper.md", long_only=True),
    # live: captions behind the speaker, speech in, several languages, glossaries
    Step("live-replay-talk-1.5b", "live", 8, "benchmarks.live.live_replay",
         ("--model", DEFAULT, "--minutes", "1.5", "--methods", "rt,ssbd", "--data", TALK_DEV, "--data", TALK_TEST),
         ("--model", SMALL, "--minutes", "0.5", "--methods", "ssbd", "--data", TALK_DEV), 2,
         long=("--model", DEFAULT, "--minutes", "3", "--methods", "rt,ssbd", "--data", TALK_DEV, "--data", TALK_TEST),
         long_minutes=15),
    Step("speech-1.5b", "live", 25, "benchmarks.live.speech_chain", ("--model", DEFAULT, "--methods", "rt,ssbd"),
         ("--model", SMALL, "--paragraphs", "1", "--methods", "ssbd"), 3, long_only=True),
    Step("long-speech-1.5b", "live", 12, "benchmarks.live.long_speech", ("--model", DEFAULT), ("--model", SMALL), 4,
         long_only=True),
    Step("asr-models", "live", 8, "benchmarks.live.asr_models", (),
         ("--paragraphs", "1", "--pairs", "whisper-tiny.en:en"), 2, needs="faster_whisper", long_only=True),
    Step("targets-1.5b", "live", 25, "benchmarks.live.targets", ("--models", DEFAULT, "--partials", "60"),
         ("--models", SMALL, "--partials", "6", "--seconds", "15"), 3, long_only=True),
    Step("glossary-terms", "live", 20, "benchmarks.live.glossary_terms", ("--models", f"{DEFAULT},{SMALL}"),
         ("--models", SMALL), 4, long_only=True),
    # service: load, faults, attacks, replicas, the chat endpoint
    Step("service-load-1.5b", "service", 16, "benchmarks.service.load",
         ("--model", DEFAULT, "--sessions", "1,2,4", "--seconds", "90", "--target-p95", "5"),
         ("--model", SMALL, "--sessions", "1", "--seconds", "20"), 2, long_only=True),
    Step("service-load-0.5b", "service", 12, "benchmarks.service.load",
         ("--model", SMALL, "--sessions", "1,4,8", "--seconds", "90"),
         ("--model", SMALL, "--sessions", "1,2", "--seconds", "20"), 3,
         long=("--model", SMALL, "--sessions", "1,2,4,8", "--seconds", "90"), long_minutes=15),
    Step("service-languages-0.5b", "service", 14, "benchmarks.service.load",
         ("--model", SMALL, "--methods", "ssbd", "--sessions", "1,4", "--languages", "de/de,fr,ja", "--seconds", "90"),
         ("--model", SMALL, "--methods", "ssbd", "--sessions", "1", "--languages", "de/de,fr", "--seconds", "20"), 2,
         long_only=True),
    Step("service-faults-0.5b", "service", 8, "benchmarks.service.faults", ("--model", SMALL, "--seconds", "60"),
         ("--model", SMALL, "--seconds", "20"), 3, long_only=True),
    Step("service-abuse-0.5b", "service", 8, "benchmarks.service.abuse", ("--model", SMALL),
         ("--model", SMALL, "--seconds", "15", "--idle", "50", "--viewers", "20"), 3, long_only=True),
    Step("service-attacks-0.5b", "service", 8, "benchmarks.service.attacks", ("--model", SMALL),
         ("--model", SMALL, "--seconds", "15"), 3),
    Step("service-failover-0.5b", "service", 5, "benchmarks.service.failover",
         ("--model", SMALL, "--seconds", "60", "--kill-after", "25"),
         ("--model", SMALL, "--seconds", "30", "--kill-after", "12"), 3, long_only=True),
    Step("service-outage-0.5b", "service", 9, "benchmarks.service.outage", ("--model", SMALL),
         ("--model", SMALL, "--seconds", "60", "--outage-at", "15", "--outage", "20"), 3, needs="psycopg"),
    Step("service-soak", "service", 14, "benchmarks.service.soak", (), ("--hours", "0.3"), 3, long_only=True),
    Step("service-push-0.5b", "service", 6, "benchmarks.service.push", ("--model", SMALL),
         ("--model", SMALL, "--seconds", "25", "--outage", "8", "--outage-at", "5"), 2),
    Step("chat-predicted-0.5b", "service", 10, "benchmarks.service.chat_predicted", ("--model", SMALL, "--limit", "8"),
         ("--model", SMALL, "--limit", "2"), 2, long_only=True),
)  # fmt: skip


def machine_kind() -> str:
    """The machine a results folder is named after (the results page shows each kind's newest
    run): OS, architecture, then the GPU's name, or the cores and the CPU's family where that
    tells runs apart (``linux-x86_64-2cpu-epyc``, ``-2cpu-epyc-vnni`` for an EPYC with AVX-512 VNNI,
    ``-2cpu-vnni`` for such a Xeon)."""

    def slug(text: str) -> str:
        return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")

    base = f"{platform.system().lower()}-{platform.machine()}"
    if on_gpu():
        name = child_says("import mlx_ssbd, mlx.core as mx; print(mx.device_info()['device_name'])")
        return f"{base}-{slug(name).removeprefix('nvidia-').removeprefix('apple-')}"
    model = child_says("from mlx_ssbd.evaluation.bench import cpu_model; print(cpu_model())")
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        flags = []
    vnni = "avx512_vnni" in flags
    family = (
        ("epyc-vnni" if vnni else "epyc")
        if "EPYC" in model
        else "vnni"
        if vnni
        else "xeon"
        if "Xeon" in model
        else slug(model)
    )
    return f"{base}-{os.cpu_count()}cpu-{family[:24]}"


# The CPU families ``machine_kind`` names, the longest first (``folder_kind`` tells them from a label).
CPU_FAMILIES = ("epyc-vnni", "epyc", "vnni", "xeon")


def folder_kind(name: str) -> str:
    """The machine kind a results folder's name (``DATE-KIND[-LABEL]``) gives, its label left out:
    ``2026-11-30-linux-x86_64-2cpu-epyc-vnni-rejoin`` -> ``linux-x86_64-2cpu-epyc-vnni``. A kind
    that names a CPU model or a GPU (families this cannot tell from a label) keeps the whole name."""
    rest = name[len("YYYY-MM-DD-") :]
    cpus = re.match(r"[a-z]+-[a-z0-9_]+-\d+cpu", rest)
    if cpus:
        for family in CPU_FAMILIES:
            kind = f"{cpus.group(0)}-{family}"
            if rest == kind or rest.startswith(f"{kind}-"):
                return kind
    return rest


def default_out(label: str | None) -> Path:
    name = f"{datetime.date.today():%Y-%m-%d}-{machine_kind()}" + (f"-{label}" if label else "")
    return RESULTS / name


def chosen(only: str | None, size: str) -> list[tuple[Step, tuple[str, ...], float]]:
    """``(step, ARGS, minutes)`` of each step of a run of ``size`` (``--only``: one group or step)."""
    steps = [s for s in STEPS if only in (None, s.group, s.name)]
    if not steps:
        groups = sorted({s.group for s in STEPS})
        raise SystemExit(f"--only {only!r}: no such group ({', '.join(groups)}) or step (see --list)")
    if only == steps[0].name and steps[0].sized(size) is None:
        raise SystemExit(f"{only} is a step of the long run only: add --long")
    return [(s, *sized) for s in steps if (sized := s.sized(size)) is not None]


def child_says(code: str) -> str:
    """What ``python -c code`` prints, run from the repository: this process imports no MLX."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO
    ).stdout.strip()


def dirty() -> bool:
    """The code that would run has uncommitted changes (``evaluation.bench.code_commit``)."""
    return child_says("from mlx_ssbd.evaluation.bench import code_commit; print(code_commit())").endswith(
        "+dirty"
    )


def on_gpu() -> bool:
    """MLX's default device here is a GPU."""
    return (
        child_says("import mlx_ssbd; from mlx_ssbd.platform.backend import is_gpu; print(is_gpu())") == "True"
    )


def done(step: Step, out: Path) -> bool:
    return any((out / step.name).glob(step.report))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="results folder (default: benchmarks/results/DATE-MACHINE)")
    parser.add_argument(
        "--label", help="why the run was made, appended to the default folder's name after the machine"
    )
    parser.add_argument("--only", help="one group or step")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run, not a result")
    parser.add_argument(
        "--long", action="store_true", help="every step, at the larger sizes (~10 hours on 2 cores)"
    )
    parser.add_argument("--list", action="store_true", help="list the steps and their estimates, run nothing")
    args = parser.parse_args()
    if args.quick and args.long:
        parser.error("--quick and --long: one size at a time")
    steps = chosen(args.only, "quick" if args.quick else "long" if args.long else "default")
    label = "-".join(part for part in (args.label, "quick" if args.quick else None) if part)
    out = args.out or default_out(label or None)
    if args.list:
        total = 0.0
        for s, given, minutes in steps:
            total += minutes
            shown = " ".join(relative(a) if a.startswith(str(REPO)) else a for a in given)
            print(f"{s.group:8} {s.name:24} ~{minutes:4g} min  python -m {s.module} {shown}")
        gpu = sum(minutes for s, _, minutes in steps if s.gpu)
        print(
            f"{'':8} {'total':24} ~{total:4g} min"
            + (f" (GPU steps ~{gpu:g} min of it: skipped on a CPU)" if gpu else "")
        )
        return
    if not args.quick and dirty():
        raise SystemExit(
            "the working tree has uncommitted changes: a run's results come from one commit, so commit "
            "or stash them first (--quick, a smoke run, runs anyway)"
        )
    out.mkdir(parents=True, exist_ok=True)
    for i, (step, given, minutes) in enumerate(steps, 1):
        if done(step, out):
            print(f"[{i}/{len(steps)}] {step.name}: done already", file=sys.stderr)
            continue
        if step.gpu and not on_gpu():
            print(
                f"[{i}/{len(steps)}] {step.name}: skipped (a GPU's measurement; here: CPU)", file=sys.stderr
            )
            continue
        if step.needs and importlib.util.find_spec(step.needs) is None:
            print(f"[{i}/{len(steps)}] {step.name}: skipped ({step.needs} is not installed)", file=sys.stderr)
            continue
        print(f"[{i}/{len(steps)}] {step.name} (~{minutes:g} min)", file=sys.stderr, flush=True)
        command = [sys.executable, "-m", step.module, *given, "--out", str(out / step.name)]
        subprocess.run(command, cwd=REPO, check=True)
    subprocess.run([sys.executable, "-m", "benchmarks.tools.collect", str(out)], cwd=REPO, check=True)
    if not args.quick and args.only is None:
        subprocess.run([sys.executable, "-m", "benchmarks.tools.results_page"], cwd=REPO, check=True)
    print(f"done: {relative(out)}", file=sys.stderr)


if __name__ == "__main__":
    main()
