"""Push targets of a served session: named in ``session.update``, checked there, fed every commit
once and in order, reported to the session's client only, never stored or echoed with secrets."""

import asyncio
import json
import pathlib
import time

from benchmarks.service.push_peers import RulesServer

import httpx
import pytest
import websockets
from serving import server, ws_url
from test_service_languages import PARTIALS
from test_service_replicas import expect


@pytest.fixture(scope="module")
def served(model_dir, tmp_path_factory):
    store = tmp_path_factory.mktemp("store") / "t.sqlite3"
    with server(model_dir, store, "--pause", "0") as (base, _):
        yield base, store


async def talk(url: str, settings: dict, partials=PARTIALS) -> tuple[dict, list[dict]]:
    """A session with ``settings``: its ``session.updated`` and every event after it."""
    async with websockets.connect(ws_url(url)) as ws:
        await expect(ws, "session.created")
        await ws.send(json.dumps({"type": "session.update", **settings}))
        updated = await expect(ws, "session.updated")
        for text, final, segment in partials:
            await ws.send(
                json.dumps({"type": "source.update", "text": text, "final": final, "segment": segment})
            )
        await ws.send(json.dumps({"type": "session.close"}))
        seen = []
        while not seen or seen[-1]["type"] != "session.closed":
            seen.append(json.loads(await asyncio.wait_for(ws.recv(), 60)))
    return updated, seen


def test_a_session_pushes_every_commit_to_each_target_and_keeps_the_urls_secret(served):
    url, store = served
    zoom, youtube = RulesServer("zoom", ("de-DE", "fr-FR")), RulesServer("youtube")
    try:
        push = [
            {"platform": "zoom", "url": zoom.url},
            {"platform": "youtube", "lang": "fr", "url": youtube.url},
        ]
        updated, seen = asyncio.run(talk(url, {"targets": ["de", "fr"], "push": push}))
        assert updated["push"] == [f"zoom:de,fr ({zoom.place})", f"youtube:fr ({youtube.place})"]
        commits = {
            lang: [e["text"] for e in seen if e["type"] == "translation.commit" and e["target"] == lang]
            for lang in ("de", "fr")
        }
        for server_, lang, code in ((zoom, "de", "de-DE"), (zoom, "fr", "fr-FR"), (youtube, "fr", None)):
            words = " ".join(commits[lang]).split()
            deadline = time.monotonic() + 30  # delivery goes on after the session's end
            while " ".join(server_.texts(code)).split() != words and time.monotonic() < deadline:
                time.sleep(0.02)
            assert " ".join(server_.texts(code)).split() == words, (lang, code)
        assert zoom.violations == youtube.violations == []
        assert not [e for e in seen if e["type"] in ("error", "push.status")]
        health = httpx.get(f"{url}/health").json()["push"]
        assert (
            health["undelivered"] == 0
            and health["delivered"] >= len(zoom.received) + len(youtube.received) - 2
        )
        stored = b"".join(p.read_bytes() for p in pathlib.Path(store).parent.glob("t.sqlite3*"))
        assert b"nYtX" not in stored and b"abcd-efgh" not in stored  # the URLs' secrets are not kept
    finally:
        zoom.close()
        youtube.close()


def test_a_bad_push_target_is_an_error_that_changes_nothing_and_a_dead_one_is_reported(served):
    url, _ = served

    async def refused():
        async with websockets.connect(ws_url(url)) as ws:
            await expect(ws, "session.created")
            bad = [{"platform": "youtube", "url": "http://upload.youtube.com/closedcaption?cid=s3cret"}]
            await ws.send(json.dumps({"type": "session.update", "targets": ["de", "fr"], "push": bad}))
            error = await expect(ws, "error")
            await ws.send(json.dumps({"type": "session.update", "target": "de"}))
            return error, await expect(ws, "session.updated")

    error, updated = asyncio.run(refused())
    assert (
        error["code"] == "invalid_push"
        and "youtube:de=URL" in error["message"]
        and "s3cret" not in error["message"]
    )
    assert updated["targets"] == ["de"] and updated["push"] == []  # the refused update changed nothing

    dead = RulesServer("teams")
    dead.fail_with = 403
    try:
        _, seen = asyncio.run(talk(url, {"target": "de", "push": [{"platform": "teams", "url": dead.url}]}))
        reports = [e for e in seen if e["type"] == "push.status"]
        assert reports and reports[0]["kind"] == "stopped" and "403" in reports[0]["message"]
        assert "tkb8kvx" not in json.dumps(seen)
        assert [e["type"] for e in seen].count("translation.commit") == 2  # the captions are all there
    finally:
        dead.close()
