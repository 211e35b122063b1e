"""Speech recognizers by language: how fast and how well each ASR model hears a recording.

The first UDHR paragraphs (``benchmarks/data/udhr/en-de.jsonl``: the English text and its German
translation) are spoken by espeak-ng in each language (a synthetic voice: clearer than a person in
a room, so every model errs less than it would on real speech). Each (ASR model, language) then
hears its recording twice, on all the machine's cores, nothing else running: in one pass (``listen
FILE``) and through the live policy as fast as it goes (``listen --pace fast``: the buffer
re-decoded every ``--step`` s, words confirmed by LocalAgreement-2), at each step of ``--steps``
(seconds; the default step 1, and 2: half the decodes). Reported for each: the
speech's seconds, the seconds of ASR decoding and their ratio to the speech (the live policy keeps
up with a live speaker only below 1, and the translation needs its share of the cores too), the
decodes, and chrF++ of what it heard (its final sentences joined) against the written text.

    python -m benchmarks.live.asr_models --pairs whisper-tiny.en:en,whisper-base:en,whisper-base:de --out DIR
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import mlx_ssbd  # noqa: F401  (loads the BLAS before mlx.core)
from benchmarks.common import DATA, chrf, machine_line, relative
from benchmarks.harness import Benchmark, markdown_table, option
from benchmarks.live.speech_chain import recognise
from mlx_ssbd.asr.audio import read_audio, synthesize
from mlx_ssbd.asr.recognizer import load_recognizer
from mlx_ssbd.asr.streaming import StreamingConfig

UDHR = DATA / "udhr" / "en-de.jsonl"
VOICES = {"en": "en-us", "de": "de"}  # espeak-ng's voice for each language the data has


def texts(paragraphs: int) -> dict[str, str]:
    """The written text of the first ``paragraphs`` paragraphs, by language."""
    rows = [json.loads(line) for line in UDHR.read_text(encoding="utf-8").splitlines()[:paragraphs]]
    return {"en": " ".join(r["src"] for r in rows), "de": " ".join(r["ref"] for r in rows)}


def hear(recognizer, samples, written: str, step_s: float, one_pass: bool) -> dict:
    run = recognise(recognizer, samples, step_s, realtime=False, one_pass=one_pass)
    asr = run["asr"]
    heard = [p.text for _, p in run["partials"] if p.final]
    return {
        "asr_s": round(asr.asr_s, 2),
        "asr_per_speech_s": round(asr.asr_s / asr.audio_s, 3),
        "decodes": asr.passes,
        "chrf": round(chrf(heard, written), 1),
        "heard": " ".join(heard),
    }


def measure(args) -> dict:
    written = texts(args.paragraphs)
    pairs = [pair.split(":") for pair in args.pairs.split(",")]
    steps = [float(step) for step in args.steps.split(",")]
    result = {"data": relative(UDHR), "paragraphs": args.paragraphs, "runs": []}
    with tempfile.TemporaryDirectory() as scratch:
        recordings = {
            lang: read_audio(
                synthesize(written[lang], str(Path(scratch) / f"{lang}.wav"), voice=VOICES[lang])
            )
            for lang in dict.fromkeys(lang for _, lang in pairs)
        }
        for card, lang in pairs:
            recognizer = load_recognizer(card, language=lang, download=True)
            samples = recordings[lang]
            result["runs"].append(
                {
                    "asr_model": card,
                    "language": lang,
                    "speech_s": round(len(samples) / 16000, 1),
                    "one_pass": hear(recognizer, samples, written[lang], steps[0], one_pass=True),
                    "live": {
                        f"{step:g}": hear(recognizer, samples, written[lang], step, one_pass=False)
                        for step in steps
                    },
                }
            )
    return result


def render(result: dict) -> list[str]:
    rows = [
        (r["asr_model"], r["language"], r["speech_s"], run["asr_s"], run["asr_per_speech_s"], run["decodes"],
         run["chrf"], name)
        for r in result["runs"]
        for run, name in [(r["one_pass"], "one pass"), *((v, f"live, every {k} s") for k, v in r["live"].items())]
    ]  # fmt: skip
    return [
        f"{machine_line(result['machine'])} The first {result['paragraphs']} UDHR paragraphs of "
        f"`{result['data']}` spoken by espeak-ng (synthetic voice), each language's text in its own voice; "
        "ASR s per speech s below 1 keeps up with a live speaker (with the cores to itself). chrF++: what "
        "it heard against the written text. See the script's docstring.",
        "",
        *markdown_table(
            ["ASR model", "language", "speech s", "ASR s", "ASR s per speech s", "decodes", "chrF++", "how"],
            rows,
        ),
    ]


BENCHMARK = Benchmark(
    "asr_models",
    "Speech recognizers by language: speed and accuracy on a synthetic recording",
    measure,
    render,
    options=(
        option("--pairs", default="whisper-tiny.en:en,whisper-base:en,whisper-base:de",
               help="ASR-MODEL:LANGUAGE pairs, comma-separated (languages: en, de)"),
        option("--paragraphs", type=int, default=3),
        option("--steps", default=f"{StreamingConfig.step_s:g},2", help="live policy steps (s), comma-separated"),
    ),
    about=__doc__,
)  # fmt: skip

if __name__ == "__main__":
    BENCHMARK.main()
