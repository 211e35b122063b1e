"""A synthetic ASR stream made of the UDHR English paragraphs, for replays in real time.

Contract: pure functions of their arguments and a seeded ``random.Random``. ``speech(pairs,
words, wps, rng)`` lays the words out in time (``wps`` words per second, with jitter);
``asr_partials(...)`` turns that speech into ASR-like partials: lower-cased, mostly unpunctuated,
a partial every 0.3-1.0 s, recent words misheard or missing and corrected later, an ASR ``final``
only every 45-90 s.
"""

from __future__ import annotations

import random
import string

from benchmarks.common import DATA as BENCH_DATA
from mlx_ssbd.live.source import SourcePartial, Word

DATA = BENCH_DATA / "udhr" / "en-de.jsonl"
MISHEARD = ["the", "a", "and", "in", "of", "to", "is", "that", "for", "on", "as", "with", "are"]


def speech(pairs: list[dict], words_needed: int, wps: float, rng: random.Random):
    """(words with times, German reference text) for at least ``words_needed`` spoken words."""
    words, refs, t = [], [], 0.5
    while len(words) < words_needed:
        for pair in pairs:
            for raw in pair["src"].split():
                keep_period = raw.endswith(".") and rng.random() < 0.2  # mostly unpunctuated
                text = raw.lower().strip(string.punctuation + "“”‘’") + ("." if keep_period else "")
                if not text.strip("."):
                    continue
                duration = rng.uniform(0.7, 1.3) / wps
                words.append(Word(text, round(t, 3), round(t + duration, 3)))
                t += duration
            refs.append(pair["ref"])
            if len(words) >= words_needed:
                break
    return words, " ".join(refs)


def asr_partials(
    words: list[Word], rng: random.Random, *, never_final: bool = False
) -> list[tuple[float, SourcePartial]]:
    """(emission time, partial) pairs as a re-decoding streaming ASR would emit them."""
    out, seg_start, seg_index, t = [], 0, 0, 0.0
    seg_len_s = rng.uniform(45, 90)
    end_time = words[-1].end + 0.5
    while t < end_time:
        t += rng.uniform(0.3, 1.0)
        heard = [i for i in range(seg_start, len(words)) if words[i].end + 0.3 <= t]
        if not heard:
            continue
        last = heard[-1] + 1
        seg_words = list(words[seg_start:last])
        final = (not never_final and words[last - 1].end - words[seg_start].start > seg_len_s) or last == len(
            words
        )
        if not final:
            roll = rng.random()
            if roll < 0.2:  # the newest word misheard (corrected by a later partial)
                w = seg_words[-1]
                seg_words[-1] = Word(rng.choice(MISHEARD), w.start, w.end)
            elif roll < 0.3 and len(seg_words) > 2:  # the newest word not recognised yet
                seg_words = seg_words[:-1]
        text = " ".join(w.text for w in seg_words)
        out.append(
            (
                t,
                SourcePartial(
                    text,
                    final=final,
                    segment_id=f"asr{seg_index}",
                    start=seg_words[0].start,
                    end=seg_words[-1].end,
                    words=tuple(seg_words),
                ),
            )
        )
        if final:
            seg_start, seg_index, seg_len_s = last, seg_index + 1, rng.uniform(45, 90)
            if seg_start >= len(words):
                break
    return out
