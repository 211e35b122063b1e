"""The phone viewer page and its QR code: the code (decoded by zxing-cpp) opens the session's page;
in Chromium with a phone's viewport the page shows each language's captions as the transcript holds
them, switches language, switches light and dark, and its opt-in "Listen" speaks the live commits
(the browser's speech synthesis, observed through a stand-in for ``speechSynthesis.speak``)."""

import asyncio
import io
import json
import threading

import httpx
import pytest
import websockets
from browser import MISSING, sync_chromium
from serving import server, ws_url
from test_service_languages import PARTIALS, lockstep
from test_service_replicas import expect

PHONE = {
    "viewport": {"width": 390, "height": 844},
    "device_scale_factor": 3,
    "is_mobile": True,
    "has_touch": True,
}
# Records what the page asks the browser to speak, in the DOM (the page's CSP forbids eval).
SPEECH = """
window.speechSynthesis = window.speechSynthesis || { cancel() {} };
if (!window.SpeechSynthesisUtterance) window.SpeechSynthesisUtterance = function (text) { this.text = text; };
window.speechSynthesis.speak = (u) => {
  const said = document.createElement("i");
  said.className = "said"; said.hidden = true; said.textContent = `${u.lang}|${u.text}`;
  document.documentElement.append(said);
};
"""


@pytest.fixture(scope="module")
def url(model_dir, tmp_path_factory):
    with server(model_dir, tmp_path_factory.mktemp("store") / "t.sqlite3", "--pause", "0") as (base, _):
        yield base


def decoded(png: bytes) -> str:
    zxingcpp = pytest.importorskip("zxingcpp")
    from PIL import Image

    return zxingcpp.read_barcode(Image.open(io.BytesIO(png))).text


def test_the_qr_code_is_the_link_to_the_phone_page(url):
    sid, _ = asyncio.run(lockstep(url, {"targets": ["de", "fr"], "method": "rt"}))
    png = httpx.get(f"{url}/v1/sessions/{sid}/qr.png")
    assert png.headers["content-type"] == "image/png" and decoded(png.content) == f"{url}/watch/{sid}"
    assert (
        decoded(httpx.get(f"{url}/v1/sessions/{sid}/qr.png?lang=fr").content) == f"{url}/watch/{sid}?lang=fr"
    )
    svg = httpx.get(f"{url}/v1/sessions/{sid}/qr.svg")
    assert svg.headers["content-type"].startswith("image/svg+xml") and svg.text.lstrip().startswith("<?xml")
    for missing in (
        "/v1/sessions/sess_nope/qr.png",
        f"/v1/sessions/{sid}/qr.gif",
        f"/v1/sessions/{sid}/qr.png?lang=ja",
        "/watch/sess_nope",
        f"/watch/{sid}?lang=ja",
    ):
        assert httpx.get(url + missing).status_code == 404, missing


@pytest.mark.skipif(MISSING is not None, reason=str(MISSING))
def test_a_phone_follows_a_live_talk_switches_language_and_hears_the_new_captions(url, tmp_path):
    ready, sid_box, commits = threading.Event(), [], {"de": [], "fr": []}

    async def speaker():
        async with websockets.connect(ws_url(url)) as ws:
            sid_box.append((await expect(ws, "session.created"))["session"])
            await ws.send(json.dumps({"type": "session.update", "targets": ["de", "fr"], "method": "rt"}))
            await expect(ws, "session.updated")
            await asyncio.to_thread(ready.wait, 60)  # the phone is watching
            for text, final, segment in PARTIALS:
                message = {"type": "source.update", "text": text, "final": final, "segment": segment}
                await ws.send(json.dumps(message))
            await ws.send(json.dumps({"type": "session.close"}))
            while (event := json.loads(await asyncio.wait_for(ws.recv(), 60)))["type"] != "session.closed":
                if event["type"] == "translation.commit":
                    commits[event["target"]].append(event["text"])

    talk = threading.Thread(target=asyncio.run, args=(speaker(),))
    talk.start()
    try:
        with sync_chromium() as browser:
            page = browser.new_context(**PHONE).new_page()
            page.add_init_script(SPEECH)
            while not sid_box:
                talk.join(0.05)
            link = decoded(httpx.get(f"{url}/v1/sessions/{sid_box[0]}/qr.png").content)
            page.goto(link)
            page.get_by_role("status").filter(has_text="live").wait_for(timeout=30_000)
            assert page.get_by_label("Caption language").input_value() == "de"
            assert page.locator("#captions").get_attribute("aria-live") == "polite"
            page.get_by_role("button", name="Listen").click()
            assert page.get_by_role("button", name="Listen").get_attribute("aria-pressed") == "true"
            ready.set()
            page.get_by_role("status").filter(has_text="ended").wait_for(timeout=60_000)
            talk.join(60)
            shown = page.locator("#captions p").all_text_contents()
            said = page.locator("i.said").all_text_contents()
            page.screenshot(path=str(tmp_path / "phone-de.png"))

            page.get_by_label("Caption language").select_option("fr")
            page.get_by_role("status").filter(has_text="ended").wait_for(timeout=30_000)
            shown_fr = page.locator("#captions p").all_text_contents()
            assert page.url.endswith("?lang=fr") and page.locator("html").get_attribute("lang") == "fr"
            assert page.locator("i.said").count() == len(said)  # the replay of earlier captions is not spoken
            page.get_by_role("button", name="Dark").click()  # the phone's default here is light
            assert page.locator("html").get_attribute("data-theme") == "dark"
            assert page.get_by_role("button", name="Dark").get_attribute("aria-pressed") == "true"
            page.get_by_role("button", name="Larger text").click()
            assert "1.8rem" in page.locator("html").get_attribute("style")
            page.screenshot(path=str(tmp_path / "phone-fr.png"))
    finally:
        ready.set()
        talk.join(60)
    assert shown == commits["de"] and len(shown) == 2
    assert said == [f"de|{text}" for text in commits["de"] if text.strip()]
    assert shown_fr == commits["fr"]
