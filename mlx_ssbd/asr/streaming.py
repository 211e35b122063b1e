"""Streaming speech recognition by re-decoding a growing buffer, confirmed by LocalAgreement-2.

Contract: ``StreamingRecognizer(recognizer)``; ``insert(samples)`` appends 16 kHz mono float32
audio; ``transcribe()`` re-decodes the buffer and returns the ASR partials (``SourcePartial``) it implies;
``finish()`` decodes what is left and returns the last partials. ``run(chunks)`` does all three
over an iterable of audio chunks, yielding partials as they come; ``timed(chunks)`` also yields
the audio's clock (seconds heard) with each. ``OnePass(recognizer).run``
is the policy where nobody waits: the whole recording decoded once, sentence by sentence. Pure
policy around a ``Recognizer``: no threads, no MLX.

The policy is whisper_streaming's (Machacek et al., 2023):

* every ``transcribe()`` decodes the whole buffer again, prompted with the confirmed text that has
  left it;
* a word is *confirmed* once two consecutive transcriptions agree on it and on every word before
  it (LocalAgreement-2); confirmed words never change;
* words at the end of a transcription that lie in silence (outside the voice the recognizer's
  ``speech`` VAD finds, when it has one) are dropped: Whisper tends to hear "Thank you." in the
  silence after a speaker stops, and two transcriptions of a pause would confirm it;
* the buffer is trimmed at the end of each confirmed sentence (a word ending in ``. ! ?``); once
  it is longer than ``max_buffer_s`` without one, the older half of the latest transcription is
  taken as confirmed and the buffer is cut after it, so a step's cost stays flat and no word that
  was heard is dropped.

Partials: each sentence is one segment (``segment_id`` ``a0``, ``a1``, ...). While it is open,
its partials are ``final: false`` and hold its confirmed words followed by the unconfirmed ones,
which may still be revised; its last partial, ``final: true``, holds the confirmed sentence.
Every partial carries word timestamps (seconds of audio from the first sample inserted), the
form ``live.segmenter`` and ``LiveSession`` take. A partial equal to the previous one is not
repeated.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from ..live.scripts import join_words
from ..live.segmenter import is_sentence_end
from ..live.source import SourcePartial, Word
from .recognizer import SAMPLE_RATE, Recognizer

OVERLAP_WORDS = 5  # a new transcription may repeat up to this many confirmed words: dropped
TIME_SLACK_S = 0.1  # a word starting this close before the last confirmed end is still new


@dataclass(frozen=True)
class StreamingConfig:
    """``step_s``: audio per re-decode (drivers chunk by it); ``max_buffer_s``: beyond this much
    buffered audio, confirm the older half of the latest transcription and cut there;
    ``prompt_chars``: confirmed text before the buffer given to the decoder as its prompt."""

    step_s: float = 1.0
    max_buffer_s: float = 15.0
    prompt_chars: int = 200

    def __post_init__(self):
        if self.step_s <= 0 or self.max_buffer_s < self.step_s:
            raise ValueError("step_s must be > 0 and max_buffer_s >= step_s")


class StreamingRecognizer:
    """One audio stream turned into ASR partials; see the module docstring."""

    def __init__(self, recognizer: Recognizer, config: StreamingConfig = StreamingConfig()):
        self.recognizer = recognizer
        self.config = config
        self._buffer = np.zeros(0, dtype=np.float32)
        self._offset = 0.0  # audio time of the buffer's first sample
        self._history: list[Word] = []  # recent confirmed words (prompt, overlap check)
        self._open: list[Word] = []  # confirmed words of the open sentence
        self._tentative: list[Word] = []  # the last transcription past the confirmed words
        self._segment = 0
        self._last_text: str | None = None
        self._decoded = 0  # samples inserted at the last transcription
        self.received = 0  # samples inserted
        self.asr_s = 0.0  # seconds spent transcribing
        self.passes = 0  # transcriptions

    @property
    def audio_s(self) -> float:
        """Seconds of audio inserted so far."""
        return self.received / SAMPLE_RATE

    @property
    def buffered_s(self) -> float:
        return len(self._buffer) / SAMPLE_RATE

    def insert(self, samples: np.ndarray) -> None:
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        self._buffer = np.concatenate([self._buffer, samples])
        self.received += len(samples)

    def transcribe(self) -> list[SourcePartial]:
        """Transcribe the buffer again; the partials that follow (possibly none: no new audio)."""
        if not len(self._buffer) or self.received == self._decoded:
            return []
        self._decoded = self.received
        heard = self._transcribe()
        agreed = _agreed(heard, self._tentative)
        self._confirm(agreed)
        self._tentative = heard[len(agreed) :]
        out = self._sentences()
        if self.buffered_s > self.config.max_buffer_s:
            out += self._force()
        return out + self._live()

    def finish(self) -> list[SourcePartial]:
        """End of audio: the last transcription is taken as confirmed; every open word is final."""
        out = self.transcribe()
        self._confirm(self._tentative)
        self._tentative = []
        out += self._sentences()
        if self._open:
            out.append(self._partial(self._open, final=True))
            self._open, self._segment, self._last_text = [], self._segment + 1, None
        self._buffer = np.zeros(0, dtype=np.float32)
        return out

    def run(self, chunks: Iterable[np.ndarray]) -> Iterator[SourcePartial]:
        """Insert each chunk and step after it; finish at the end."""
        return (partial for _, partial in self.timed(chunks) if partial is not None)

    def timed(self, chunks: Iterable[np.ndarray]) -> Iterator[tuple[float, SourcePartial | None]]:
        """``run`` on the audio's clock: each partial with the seconds of audio heard when it was
        recognised, and ``(heard, None)`` after every step (what a pause rule reads)."""
        for chunk in chunks:
            self.insert(chunk)
            for partial in self.transcribe():
                yield self.audio_s, partial
            yield self.audio_s, None
        for partial in self.finish():
            yield self.audio_s, partial

    # -- helpers ---------------------------------------------------------------------------

    def _transcribe(self) -> list[Word]:
        prompt = join_words(w.text for w in self._history if w.end <= self._offset)[
            -self.config.prompt_chars :
        ]
        t0 = time.perf_counter()
        words = self.recognizer.transcribe(self._buffer, prompt)
        self.asr_s += time.perf_counter() - t0
        self.passes += 1
        last = self._history[-1].end if self._history else -np.inf
        heard = [Word(w.text, w.start + self._offset, w.end + self._offset) for w in words]
        heard = [w for w in heard if w.start > last - TIME_SLACK_S]
        return _drop_overlap(self._history, self._without_silent_tail(heard))

    def _without_silent_tail(self, words: list[Word]) -> list[Word]:
        """``words`` less those at the end that lie in silence (see the module docstring)."""
        speech = getattr(self.recognizer, "speech", None)
        if speech is None or not words:
            return words
        spans = [(start + self._offset, end + self._offset) for start, end in speech(self._buffer)]
        words = list(words)
        while words and not voiced(words[-1], spans):
            words.pop()
        return words

    def _confirm(self, words: list[Word]) -> None:
        self._open += words
        self._history = (self._history + words)[-4 * OVERLAP_WORDS - 50 :]

    def _sentences(self) -> list[SourcePartial]:
        """Final partials for the confirmed sentences of the open segment; the buffer is trimmed
        after each."""
        out = []
        while (
            end := next((i + 1 for i, w in enumerate(self._open) if is_sentence_end(w.text)), None)
        ) is not None:
            sentence, self._open = self._open[:end], self._open[end:]
            out.append(self._partial(sentence, final=True))
            self._segment, self._last_text = self._segment + 1, None
            self._trim(sentence[-1].end)
        return out

    def _force(self) -> list[SourcePartial]:
        """The buffer outgrew ``max_buffer_s`` without agreement: the latest transcription's words
        in its older half are taken as confirmed (nothing heard is dropped), and the buffer is cut
        after the last confirmed word (or, where nothing was heard, to its last step)."""
        end = self._offset + self.buffered_s
        older = end - self.config.max_buffer_s / 2
        n = next((i for i, w in enumerate(self._tentative) if w.end > older), len(self._tentative))
        self._confirm(self._tentative[:n])
        self._tentative = self._tentative[n:]
        out = self._sentences()
        cut = self._history[-1].end if self._history else self._offset
        if cut <= self._offset:
            cut = self._tentative[0].start if self._tentative else end - self.config.step_s
        self._trim(cut)
        return out

    def _live(self) -> list[SourcePartial]:
        words = self._open + self._tentative
        text = join_words(w.text for w in words)
        if not words or text == self._last_text:
            return []
        self._last_text = text
        return [self._partial(words, final=False)]

    def _partial(self, words: list[Word], final: bool) -> SourcePartial:
        return partial(words, final, self._segment)

    def _trim(self, at: float) -> None:
        """Drop the buffered audio before audio time ``at``."""
        cut = int(round((at - self._offset) * SAMPLE_RATE))
        if cut > 0:
            cut = min(cut, len(self._buffer))
            self._buffer = self._buffer[cut:]
            self._offset += cut / SAMPLE_RATE


class OnePass:
    """A whole recording recognised in one pass: Whisper's own 30-s windows, nothing decoded
    twice. ``run(chunks)`` gathers the chunks, then yields each sentence as a final partial as
    soon as its words are decoded (what follows the last sentence end comes last). Faster and
    more accurate than the live policy where nobody waits for partials (a file to subtitles).
    Same counters as ``StreamingRecognizer``."""

    def __init__(self, recognizer: Recognizer):
        self.recognizer = recognizer
        self.received = 0
        self.asr_s = 0.0
        self.passes = 0

    @property
    def audio_s(self) -> float:
        return self.received / SAMPLE_RATE

    def run(self, chunks: Iterable[np.ndarray]) -> Iterator[SourcePartial]:
        pieces = [np.asarray(c, dtype=np.float32).reshape(-1) for c in chunks]
        samples = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)
        self.received = len(samples)
        if not len(samples):
            return
        self.passes = 1
        words, sentence, segment = iter(self.recognizer.words(samples)), [], 0
        while True:
            t0 = time.perf_counter()
            word = next(words, None)
            self.asr_s += time.perf_counter() - t0
            if word is None:
                break
            sentence.append(word)
            if is_sentence_end(word.text):
                yield partial(sentence, True, segment)
                sentence, segment = [], segment + 1
        if sentence:
            yield partial(sentence, True, segment)


def partial(words: list[Word], final: bool, segment: int) -> SourcePartial:
    """The ASR partial of ``words`` (word timestamps, first and last time) in segment ``a<n>``."""
    return SourcePartial(
        join_words(w.text for w in words),
        final=final,
        segment_id=f"a{segment}",
        start=words[0].start,
        end=words[-1].end,
        words=tuple(words),
    )


MIN_WORD_S = 0.1  # a word shorter than this (Whisper gives some none) is widened to it, centred


def voiced(word: Word, spans: list[tuple[float, float]]) -> bool:
    """At least half of ``word`` (widened to ``MIN_WORD_S``) lies in the voiced ``spans``."""
    middle, half = (word.start + word.end) / 2, max(word.end - word.start, MIN_WORD_S) / 2
    start, end = middle - half, middle + half
    inside = sum(max(0.0, min(end, b) - max(start, a)) for a, b in spans)
    return inside >= (end - start) / 2


def _agreed(new: list[Word], previous: list[Word]) -> list[Word]:
    """The longest prefix of ``new`` whose words equal ``previous``'s (LocalAgreement-2)."""
    n = 0
    while n < min(len(new), len(previous)) and new[n].text == previous[n].text:
        n += 1
    return new[:n]


def _drop_overlap(confirmed: list[Word], new: list[Word]) -> list[Word]:
    """``new`` without a head that repeats the last confirmed words (up to ``OVERLAP_WORDS``)."""
    if not confirmed or not new or abs(new[0].start - confirmed[-1].end) >= 1.0:
        return new
    for n in range(min(OVERLAP_WORDS, len(confirmed), len(new)), 0, -1):
        if [w.text for w in confirmed[-n:]] == [w.text for w in new[:n]]:
            return new[n:]
    return new
