"""Real ASR partials of the two talks, with references: what a speaker's captions are made from.

Each talk of ``benchmarks/data/talk-sentences/`` is spoken as one recording (espeak-ng, en-us,
150 words a minute: ``asr.audio.synthesize``) and recognised as ``mlx-ssbd listen --asr-only
--pace fast`` does: the streaming Whisper policy (``asr.streaming.StreamingRecognizer``, a
re-decode after every second of audio, LocalAgreement-2) over the default ASR card, fed the
audio as fast as it decodes, so the partials depend on the audio alone. Its sentences are then
matched to the talk's: every recognised word is aligned with the spoken words (difflib's longest
matching blocks over lower-cased words without punctuation), an ASR sentence covers the talk
sentences its matched words came from, and ASR sentences that share a talk sentence (a sentence
end the recognizer missed, or one it put in the middle) become one item. An item's partials are
those of its ASR sentences in order, each after the final text of the ones before it; its last
is final. Its reference is its talk sentences' references joined, its ``src`` what was spoken.

Writes, per talk, ``benchmarks/data/asr-partials/en-de.{dev,test}.jsonl`` (partials, the input
of ``mlx-ssbd bench --data`` and ``translate --stream``) and ``en-de.{dev,test}.refs.jsonl``
(``{"id", "src", "ref"}`` by item id: ``bench --refs``), and prints how many spoken words the
recognizer got exactly. Needs espeak-ng and the ``asr`` extra.

    python -m benchmarks.tools.asr_partials
"""

from __future__ import annotations

import difflib
import json
import re
import sys
import tempfile
from pathlib import Path

from benchmarks.common import DATA, data_pairs
from mlx_ssbd.asr.audio import Replay, read_audio, synthesize
from mlx_ssbd.asr.recognizer import load_recognizer
from mlx_ssbd.asr.streaming import StreamingConfig, StreamingRecognizer

TALKS = ("dev", "test")
OUT = DATA / "asr-partials"


def _norm(word: str) -> str:
    return re.sub(r"[^\w']", "", word.lower())


def recognise(text: str, recognizer) -> list:
    """The ASR partials of ``text`` spoken (``SourcePartial``s, as ``listen --asr-only`` writes)."""
    with tempfile.TemporaryDirectory() as folder:
        samples = read_audio(synthesize(text, str(Path(folder) / "talk.wav")))
    config = StreamingConfig()
    return list(StreamingRecognizer(recognizer, config).run(Replay(samples, config.step_s)))


def segments(partials) -> list[list]:
    """The partials grouped by ASR sentence, in order."""
    groups: list[list] = []
    for partial in partials:
        if not groups or groups[-1][-1].segment_id != partial.segment_id:
            groups.append([])
        groups[-1].append(partial)
    return groups


def cover(heard: list[list[str]], spoken: list[list[str]]) -> tuple[list[tuple[int, int]], int]:
    """For each ASR sentence (its words), the first and last talk sentence (index into
    ``spoken``) its matched words came from ((-1, -1) where none matched), and how many words
    matched in all."""
    flat_heard = [(s, _norm(w)) for s, words in enumerate(heard) for w in words]
    flat_spoken = [(s, _norm(w)) for s, words in enumerate(spoken) for w in words]
    matcher = difflib.SequenceMatcher(
        None, [w for _, w in flat_heard], [w for _, w in flat_spoken], autojunk=False
    )
    spans, matched = [(-1, -1)] * len(heard), 0
    for a, b, size in matcher.get_matching_blocks():
        matched += size
        for i in range(size):
            segment, sentence = flat_heard[a + i][0], flat_spoken[b + i][0]
            lo, hi = spans[segment]
            spans[segment] = (sentence if lo < 0 else min(lo, sentence), max(hi, sentence))
    return spans, matched


def items(partials, pairs) -> tuple[list[dict], list[dict], int]:
    """(partial records, reference records, spoken words matched) of one talk."""
    groups = segments(partials)
    heard = [group[-1].text.split() for group in groups]
    spoken = [pair.src.split() for pair in pairs]
    spans, matched = cover(heard, spoken)
    joined: list[tuple[list[list], int]] = []  # (ASR sentences, last talk sentence covered)
    for group, (lo, hi) in zip(groups, spans):
        if joined and (lo < 0 or lo <= joined[-1][1]):
            joined[-1] = (joined[-1][0] + [group], max(joined[-1][1], hi))
        else:
            joined.append(([group], hi))
    records, refs, first = [], [], 0
    for number, (members, last) in enumerate(joined):
        last = len(pairs) - 1 if number == len(joined) - 1 else last
        covered = pairs[first : last + 1]
        first = last + 1
        ident = "+".join(pair.id for pair in covered)
        before, previous = "", None
        for m, group in enumerate(members):
            for partial in group:
                text = f"{before} {partial.text}".strip()
                final = partial.final and m == len(members) - 1
                if text != previous or final:
                    records.append({"id": ident, "text": text, "final": final})
                previous = text
            before = f"{before} {group[-1].text}".strip()
        refs.append(
            {"id": ident, "src": " ".join(p.src for p in covered), "ref": " ".join(p.ref for p in covered)}
        )
    return records, refs, matched


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))


def main() -> int:
    OUT.mkdir(exist_ok=True)
    recognizer = load_recognizer()
    for talk in TALKS:
        pairs = data_pairs(DATA / "talk-sentences" / f"en-de.{talk}.jsonl")
        partials = recognise("\n".join(pair.src for pair in pairs), recognizer)
        records, refs, matched = items(partials, pairs)
        _write(OUT / f"en-de.{talk}.jsonl", records)
        _write(OUT / f"en-de.{talk}.refs.jsonl", refs)
        words = sum(len(pair.src.split()) for pair in pairs)
        print(
            f"en-de.{talk}: {len(pairs)} sentences -> {len(refs)} items, {len(records)} partials; "
            f"{matched} of {words} spoken words recognised exactly",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
