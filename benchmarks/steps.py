"""The steps of a benchmark run (``benchmarks.run``): each result's script, its arguments at each
size (a smoke run's, a run's, a long run's), its group and its time estimate, with the data and
models they name. Data only: nothing here runs a step.
"""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.common import DATA, RESULTS

DEFAULT = "qwen2.5-coder-1.5b"
SMALL = "qwen2.5-coder-0.5b"
SENTENCES = str(DATA / "udhr-sentences" / "en-de.jsonl")
TALK_DEV, TALK_TEST = (str(DATA / "talk-sentences" / f"en-de.{part}.jsonl") for part in ("dev", "test"))
# the same talks with Chinese, Japanese, French and Spanish references
TALK_LANGS = {
    (lang, part): str(DATA / "talk-sentences" / f"en-{lang}.{part}.jsonl")
    for lang in ("zh", "ja", "fr", "es")
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
    # the built-in examples in the other languages: RT and the default with and without them
    *(Step(f"builtin-examples-{part}-{lang}-1.5b", "quality", 16 if part == "test" else 8,
           "benchmarks.quality.accept_rules",
           ("--model", DEFAULT, "--data", data, "--target", lang, "--semsim", "--examples", "builtin",
            "--configs", "rt+examples,rt,ssbd-b0.2+examples,ssbd-b0.2" if part == "test" else "rt+examples,rt"),
           ("--model", SMALL, "--data", data, "--target", lang, "--limit", "2", "--examples", "builtin",
            "--configs", "rt,rt+examples"), 3, long_only=True)
      for (lang, part), data in TALK_LANGS.items()),
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
    # ... and that bias in the other languages, each chosen on its own dev talk
    *(Step(f"commit-beta-{part}-{lang}-1.5b", "quality", 10, "benchmarks.quality.accept_rules",
           ("--model", DEFAULT, "--data", data, "--target", lang, "--examples", "builtin",
            "--configs", "rt+examples,ssbd-b0.2-final0.1+examples,ssbd-b0.2-final0.05+examples,"
            "ssbd-final0-b0.2+examples"),
           ("--model", SMALL, "--data", data, "--target", lang, "--limit", "2", "--examples", "builtin",
            "--configs", "rt+examples,ssbd-b0.2-final0.05+examples"), 2, long_only=True)
      for (lang, part), data in TALK_LANGS.items()),
    # ... and what rejoining the draft after a divergence gives the default (ssbd-plain never rejoins)
    *(Step(f"rejoin-{part}-1.5b", "quality", 6, "benchmarks.quality.accept_rules",
           ("--model", DEFAULT, "--data", data, "--examples", "builtin",
            "--configs", "rt+examples,ssbd-plain-b0.2+examples,ssbd-b0.2+examples"),
           ("--model", SMALL, "--data", data, "--limit", "2", "--examples", "builtin",
            "--configs", "rt+examples,ssbd-plain-b0.2+examples"), 2, long_only=True)
      for part, data in (("dev", TALK_DEV), ("test", TALK_TEST))),
    # ... and rejoining it also where the output's last token alone anchors it, not only its last two
    # (the default): on the dev talk in German and Japanese, and on the held-out talk in all five
    *(Step(f"rejoin-anchor-{part}-{lang}-1.5b", "quality", 8, "benchmarks.quality.accept_rules",
           ("--model", DEFAULT, "--data", data, "--target", lang, "--examples", "builtin",
            "--configs", "rt+examples,ssbd-b0.2+examples,ssbd-b0.2-anchor1+examples"),
           ("--model", SMALL, "--data", data, "--target", lang, "--limit", "2", "--examples", "builtin",
            "--configs", "rt+examples,ssbd-b0.2-anchor1+examples"), 2, long_only=True)
      for (lang, part), data in {**{("de", "dev"): TALK_DEV, ("de", "test"): TALK_TEST}, **TALK_LANGS}.items()
      if part == "test" or lang in ("de", "ja")),
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
    Step("live-replay-talk-1.5b", "live", 11, "benchmarks.live.live_replay",
         ("--model", DEFAULT, "--minutes", "1.5", "--methods", "rt,ssbd,ssbd-steady", "--data", TALK_DEV,
          "--data", TALK_TEST),
         ("--model", SMALL, "--minutes", "0.5", "--methods", "ssbd", "--data", TALK_DEV), 2,
         long=("--model", DEFAULT, "--minutes", "3", "--methods", "rt,ssbd,ssbd-steady", "--data", TALK_DEV,
               "--data", TALK_TEST),
         long_minutes=15),
    Step("speech-1.5b", "live", 37, "benchmarks.live.speech_chain",
         ("--model", DEFAULT, "--methods", "rt,ssbd,ssbd-steady"),
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
