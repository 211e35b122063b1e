"""Audio in: files, raw PCM streams and a microphone, as chunks of 16 kHz mono float32 samples.

Contract: ``read_audio(path)`` decodes any audio file ffmpeg/PyAV can read (WAV, FLAC, MP3, ...)
to 16 kHz mono float32. ``pcm_chunks(stream, step_s)`` reads a binary stream of 16 kHz mono
signed 16-bit little-endian PCM (or a WAV of that form, recognised by its ``RIFF`` header) and
yields chunks of ``step_s`` seconds as they arrive. ``Replay(samples, step_s, realtime)``
yields chunks of in-memory audio, in real time when asked (each chunk once the speaker would
have said it; a late reader gets everything that has arrived), and records when playback
started. ``microphone(step_s)`` yields chunks from the default input device (``sounddevice``).
``synthesize(text, path)`` speaks text into a WAV file with ``espeak-ng`` (test speech for tests
and benchmarks). Errors a user can fix raise ``AsrError``.
"""

from __future__ import annotations

import queue
import shutil
import subprocess
import time
import wave
from collections.abc import Iterator
from typing import BinaryIO

import numpy as np

from .recognizer import INSTALL_HINT, SAMPLE_RATE, AsrError

PCM_SCALE = 32768.0


def read_audio(path: str) -> np.ndarray:
    try:
        from faster_whisper import decode_audio
    except ImportError:
        raise AsrError(f"reading audio files needs faster-whisper: {INSTALL_HINT}") from None
    try:
        samples = decode_audio(path, sampling_rate=SAMPLE_RATE)
    except FileNotFoundError:
        raise AsrError(f"{path}: no such file") from None
    except Exception as error:  # PyAV raises its own error types for unreadable data
        raise AsrError(f"{path}: cannot read audio ({error})") from None
    if not len(samples):
        raise AsrError(f"{path}: no audio in it")
    return samples.astype(np.float32, copy=False)


def pcm_to_float(data: bytes) -> np.ndarray:
    """Signed 16-bit little-endian PCM bytes as float32 samples in [-1, 1)."""
    usable = len(data) - len(data) % 2
    return np.frombuffer(data[:usable], dtype="<i2").astype(np.float32) / PCM_SCALE


def pcm_chunks(stream: BinaryIO, step_s: float) -> Iterator[np.ndarray]:
    """Chunks of ``step_s`` seconds from a raw PCM (or 16 kHz mono 16-bit WAV) stream."""
    size = 2 * int(step_s * SAMPLE_RATE)
    head = stream.read(4)
    if head == b"RIFF":
        yield from _wav_chunks(stream, head, size // 2)
        return
    pending = head
    while data := stream.read(size - len(pending)):
        pending += data
        if len(pending) == size:
            yield pcm_to_float(pending)
            pending = b""
    if len(pending) >= 2:
        yield pcm_to_float(pending)


class _Prefixed:
    """A stream whose first bytes were already read (the WAV reader needs them back)."""

    def __init__(self, head: bytes, stream: BinaryIO):
        self.head, self.stream = head, stream

    def read(self, n: int = -1) -> bytes:
        if n < 0:
            data, self.head = self.head + self.stream.read(), b""
            return data
        take, self.head = self.head[:n], self.head[n:]
        return take + (self.stream.read(n - len(take)) if n > len(take) else b"")


def _wav_chunks(stream: BinaryIO, head: bytes, frames: int) -> Iterator[np.ndarray]:
    try:
        reader = wave.open(_Prefixed(head, stream), "rb")
    except (wave.Error, EOFError) as error:
        raise AsrError(f"audio stream: not a readable WAV ({error})") from None
    form = (reader.getframerate(), reader.getnchannels(), reader.getsampwidth())
    if form != (SAMPLE_RATE, 1, 2):
        raise AsrError(
            f"audio stream: WAV of {form[0]} Hz, {form[1]} channel(s), {8 * form[2]}-bit; a stream must be "
            f"16 kHz mono 16-bit (e.g. ffmpeg -i IN -ar 16000 -ac 1 -f s16le -), or give the file's path"
        )
    while data := reader.readframes(frames):
        yield pcm_to_float(data)


class Replay:
    """Chunks of in-memory audio; see the module docstring. ``started_at`` is the
    ``time.monotonic()`` when the first chunk was due (None before)."""

    def __init__(self, samples: np.ndarray, step_s: float, realtime: bool = False):
        self.samples, self.step, self.realtime = samples, int(step_s * SAMPLE_RATE), realtime
        self.started_at: float | None = None

    @property
    def duration_s(self) -> float:
        return len(self.samples) / SAMPLE_RATE

    def __iter__(self) -> Iterator[np.ndarray]:
        self.started_at = t0 = time.monotonic()
        pos, total = 0, len(self.samples)
        while pos < total:
            end = min(total, pos + self.step)
            if self.realtime:
                time.sleep(max(0.0, t0 + end / SAMPLE_RATE - time.monotonic()))
                arrived = int((time.monotonic() - t0) * SAMPLE_RATE)
                end = min(total, max(end, arrived - arrived % self.step))
            yield self.samples[pos:end]
            pos = end


def microphone(step_s: float, device: str | int | None = None) -> Iterator[np.ndarray]:
    """Chunks from an input device until the caller stops iterating."""
    try:
        import sounddevice
    except ImportError:
        raise AsrError(f"--mic needs the sounddevice package: {INSTALL_HINT}") from None
    except OSError as error:  # the package is there, PortAudio is not
        raise AsrError(f"--mic: {error} (on Debian/Ubuntu: apt install libportaudio2)") from None
    chunks: queue.Queue[np.ndarray] = queue.Queue()
    try:
        stream = sounddevice.InputStream(
            samplerate=SAMPLE_RATE,
            channels=1,
            dtype="float32",
            device=device,
            blocksize=int(step_s * SAMPLE_RATE),
            callback=lambda data, frames, when, status: chunks.put(data[:, 0].copy()),
        )
    except Exception as error:  # PortAudioError: no such device, no input channels
        raise AsrError(f"--mic: cannot open the input device ({error})") from None
    with stream:
        while True:
            yield chunks.get()


def synthesize(text: str, path: str, words_per_minute: int = 150, voice: str = "en-us") -> str:
    """Speak ``text`` into the WAV file ``path`` with espeak-ng (22.05 kHz; ``read_audio`` resamples)."""
    if shutil.which("espeak-ng") is None:
        raise AsrError("espeak-ng is not installed (Debian/Ubuntu: apt install espeak-ng)")
    subprocess.run(
        ["espeak-ng", "-v", voice, "-s", str(words_per_minute), "-w", str(path), text],
        check=True,
        capture_output=True,
    )
    return str(path)
