"""Push targets: what users name is checked, and every caption reaches each platform-rules
endpoint once, in order, through faults (``benchmarks/service/push_peers.py`` enforces the rules)."""

from __future__ import annotations

import time

from benchmarks.service.push_peers import ObsPeer, RulesServer
from mlx_ssbd.live.japanese import phrases
from mlx_ssbd.live.languages import LANGUAGES
from mlx_ssbd.push.delivery import DeliveryLimits, PushHub
from mlx_ssbd.push.senders import youtube_time
from mlx_ssbd.push.spec import BCP47_LANGS, ZOOM_LANGS, PushError, parse_targets, redact
from mlx_ssbd.push.text import cea608, cut_lines

import pytest

FAST = DeliveryLimits(backoff_s=(0.05, 0.2), hold_s=0.05, timeout_s=2.0)
ZOOM = "https://wmcapi.zoom.us/closedcaption?id=1&ns=x&expire=86400&sparams=id&signature=s3cret"


def wait_until(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture
def hub():
    with PushHub() as hub:
        yield hub


@pytest.fixture
def servers():
    made = []
    yield lambda *a, **k: made.append(RulesServer(*a, **k)) or made[-1]
    for server in made:
        server.close()


# --- what the user names -------------------------------------------------------------------------


def test_a_zoom_url_carries_every_language_and_the_same_url_named_twice_is_one_target():
    (spec,) = parse_targets([f"zoom={ZOOM}"], ("de", "fr"))
    assert (spec.platform, spec.languages) == ("zoom", ("de", "fr"))
    (merged,) = parse_targets([f"zoom:fr={ZOOM}", f"ZOOM:de={ZOOM}"], ("de", "fr"))
    assert merged.languages == ("de", "fr")  # in the talk's order
    assert "s3cret" not in spec.name and "wmcapi.zoom.us" in spec.name


@pytest.mark.parametrize(
    "value, languages, words",
    [
        ("zoomx=https://a.b/c?id=1", ("de",), "unknown push platform 'zoomx'"),
        ("zoom https://a.b", ("de",), "PLATFORM[:LANG]=URL"),
        ("zoom=wmcapi.zoom.us/closedcaption", ("de",), "not a https or http URL"),
        ("zoom=https://wmcapi.zoom.us/closedcaption?id=1&ns=x", ("de",), "no expire, signature parameters"),
        ("youtube=http://upload.youtube.com/closedcaption", ("de",), "no cid parameter"),
        ("teams=https://api.captions.office.microsoft.com/cartcaption?meetingid=1", ("de",), "no token"),
        (f"zoom:ja={ZOOM}", ("de", "fr"), "not captioned in 'ja'"),
        ("youtube=http://upload.youtube.com/closedcaption?cid=k", ("de", "fr"), "youtube:de=URL"),
        ("obs:ja=ws://127.0.0.1:4455", ("ja",), "Latin script only"),
        ("obs=http://127.0.0.1:4455", ("de",), "not a ws or wss URL"),
        ("obs=ws://127.0.0.1:99999", ("de",), "malformed URL"),
    ],
)
def test_what_cannot_be_served_is_refused_with_the_reason_and_no_secret(value, languages, words):
    with pytest.raises(PushError) as refused:
        parse_targets([value], languages)
    assert words in str(refused.value)
    assert "s3cret" not in str(refused.value)


def test_one_language_platforms_refuse_one_url_named_for_two_languages():
    url = "http://upload.youtube.com/closedcaption?cid=k"
    with pytest.raises(PushError, match="one language per URL"):
        parse_targets([f"youtube:de={url}", f"youtube:fr={url}"], ("de", "fr"))


def test_redact_keeps_the_place_and_drops_the_secrets():
    assert redact("ws://:pw@127.0.0.1:4455/x?token=1#f") == "ws://127.0.0.1:4455/x"
    assert redact(ZOOM) == "https://wmcapi.zoom.us/closedcaption"


def test_every_talk_language_has_a_code_for_zoom_and_teams():
    assert set(ZOOM_LANGS) == set(BCP47_LANGS) == set(LANGUAGES)
    assert (ZOOM_LANGS["ja"], BCP47_LANGS["ja"]) == ("jp-JP", "ja-JP")


# --- lines ---------------------------------------------------------------------------------------


def test_lines_are_cut_where_subtitle_lines_break_and_long_words_in_pieces():
    assert cut_lines("Das erste Problem ist die Latenz.", 12) == ["Das erste", "Problem ist", "die Latenz."]
    assert cut_lines("  a   b\nc ", 80) == ["a b c"]
    japanese = cut_lines("最初の問題は遅延です。", 4)  # where subtitle lines break (live.subtitles)
    assert "".join(japanese) == "最初の問題は遅延です。" and max(map(len, japanese)) <= 4
    assert not any(line.startswith("。") for line in japanese)
    if phrases("最初の問題") is not None:  # MeCab (the ja extra): between phrases where they fit
        assert japanese[0] == "最初の"
    assert cut_lines("用 GPU 训练模型，今天很好。", 5) == [
        "用 GPU",
        "训练模型，",
        "今天很好。",
    ]  # spaces count
    assert cut_lines("ab Donaudampfschiff", 6) == ["ab", "Donaud", "ampfsc", "hiff"]
    for width in (1, 5, 32):
        assert all(len(line) <= width for line in cut_lines("ein langes Wort: Donaudampfschifffahrt", width))


def test_cea608_keeps_western_european_letters_and_spells_others_without_accents():
    assert cea608("Größe: 5 €, très à l’école") == "Größe: 5 , très à l’école"
    assert cea608("Łódź, Čapek, İstanbul, Việt") == "ódz, Capek, Istanbul, Viet"
    assert cea608("„Zitat“ – ok…") == "“Zitat“ - ok..."


# --- delivery ------------------------------------------------------------------------------------


def test_zoom_gets_every_caption_once_in_order_in_each_language_from_its_last_seq(hub, servers):
    zoom = servers("zoom", ("de-DE", "fr-FR"))
    zoom.last_seq = 7  # an earlier captioner posted 7: the first post must be 8
    reports = []
    pusher = hub.open(parse_targets([f"zoom={zoom.url}"], ("de", "fr")), reports.append, FAST)
    for n in range(1, 6):
        pusher.submit("de", f"Satz {n}.", spoken_at=0.0, caption=n)
        pusher.submit("fr", f"Phrase {n}.", spoken_at=0.0, caption=n)
    stats = pusher.finish(10).result(30)
    assert zoom.violations == []
    assert zoom.texts("de-DE") == [f"Satz {n}." for n in range(1, 6)]
    assert zoom.texts("fr-FR") == [f"Phrase {n}." for n in range(1, 6)]
    assert [seq for *_, seq, _ in zoom.received] == list(range(8, 18))
    assert stats[0]["delivered"] == 10 and stats[0]["undelivered"] == 0 and reports == []


def test_zoom_keeps_captions_until_the_meeting_starts_and_a_bad_token_stops_with_a_reason(hub, servers):
    zoom = servers("zoom", started=False)
    reports = []
    pusher = hub.open(parse_targets([f"zoom={zoom.url}"], ("de",)), reports.append, FAST)
    pusher.submit("de", "Erster Satz.", spoken_at=0.0, caption=1)
    wait_until(lambda: zoom.posts + len(reports) >= 1 and reports)
    assert reports[0].kind == "failing" and "not started" in reports[0].message
    pusher.submit("de", "Zweiter Satz.", spoken_at=0.0, caption=2)
    zoom.started = True
    assert pusher.finish(10).result(30)[0]["delivered"] == 2
    assert zoom.texts() == ["Erster Satz.", "Zweiter Satz."] and reports[-1].kind == "recovered"

    bad = [f"zoom={zoom.url.replace('signature=nYtX', 'signature=old')}"]
    reports.clear()
    pusher = hub.open(parse_targets(bad, ("de",)), reports.append, FAST)
    pusher.submit("de", "Dritter Satz.", spoken_at=0.0, caption=3)
    wait_until(lambda: any(r.kind == "stopped" for r in reports))
    pusher.submit("de", "Vierter Satz.", spoken_at=0.0, caption=4)  # after the stop: counted, not sent
    (stats,) = pusher.finish(1).result(30)
    assert stats["state"] == "stopped" and stats["undelivered"] == 2 and "token" in stats["last_error"]
    assert "nYtX" not in repr(reports) and "old" not in repr(reports)


def test_a_target_down_for_a_while_loses_nothing_and_does_not_hold_up_another(hub, servers):
    down, healthy = servers("youtube"), servers("teams")
    down.fail_with = 503
    reports = []
    specs = parse_targets([f"youtube={down.url}", f"teams={healthy.url}"], ("de",))
    pusher = hub.open(specs, reports.append, FAST)
    spoken = 1_800_000_000.25
    for n in range(1, 21):
        pusher.submit("de", f"Satz {n}.", spoken_at=spoken + n, caption=n)
    wait_until(lambda: len(healthy.received) == 20 and down.posts >= 2)  # while the other fails, retried
    assert len(down.received) == 0
    down.fail_with = None
    stats = pusher.finish(20).result(60)
    assert down.texts() == healthy.texts() == [f"Satz {n}." for n in range(1, 21)]
    assert down.violations == healthy.violations == []
    assert [r.kind for r in reports] == ["failing", "recovered"]
    assert [s["undelivered"] for s in stats] == [0, 0]
    assert youtube_time(spoken) == "2027-01-15T08:00:00.250"


def test_a_hanging_target_times_out_and_retries_the_same_seq(hub, servers):
    zoom = servers("zoom")
    zoom.hang_s = 0.6
    limits = DeliveryLimits(backoff_s=(0.05, 0.1), timeout_s=0.3)
    pusher = hub.open(parse_targets([f"zoom={zoom.url}"], ("de",)), lambda r: None, limits)
    pusher.submit("de", "Satz.", spoken_at=0.0, caption=1)
    wait_until(lambda: zoom.posts >= 2)
    zoom.hang_s = 0.0
    assert pusher.finish(10).result(30)[0]["delivered"] == 1
    assert zoom.texts() == ["Satz."] and zoom.violations == []


def test_the_queue_and_the_retry_time_are_bounded_and_what_is_given_up_is_reported(hub, servers):
    teams = servers("teams")
    teams.fail_with = 500
    reports = []
    limits = DeliveryLimits(max_queue=3, retry_for_s=0.5, backoff_s=(0.05, 0.1), timeout_s=2.0)
    pusher = hub.open(parse_targets([f"teams={teams.url}"], ("de",)), reports.append, limits)
    for n in range(10):
        pusher.submit("de", f"Satz {n}.", spoken_at=0.0, caption=n)
    (stats,) = pusher.finish(3).result(30)
    assert stats["delivered"] == 0 and stats["undelivered"] == 10 and stats["waiting"] == 0
    assert sum(r.lines for r in reports if r.kind == "undelivered") == 10


def test_obs_gets_cea608_rows_after_the_real_handshake_and_holds_while_not_streaming(hub):
    obs = ObsPeer("pa55")
    try:
        obs.streaming = False
        reports = []
        pusher = hub.open(
            parse_targets([f"obs=ws://:pa55@127.0.0.1:{obs.port}"], ("de",)), reports.append, FAST
        )
        pusher.submit(
            "de", "Die Größe der Modelle – und ihre Łatenz ist das erste Problem.", spoken_at=0, caption=1
        )
        wait_until(lambda: reports)
        assert "not streaming" in reports[0].message
        obs.streaming = True
        pusher.finish(10).result(30)
        rows = [text for text, _ in obs.captions]
        assert rows == ["Die Größe der Modelle - und ihre", "atenz ist das erste Problem."]

        wrong = hub.open(
            parse_targets([f"obs=ws://:nope@127.0.0.1:{obs.port}"], ("de",)), reports.append, FAST
        )
        wrong.submit("de", "Satz.", spoken_at=0, caption=2)
        (stats,) = wrong.finish(10).result(30)
        assert stats["state"] == "stopped" and "password" in stats["last_error"] and obs.auth_failures == 1
        assert "nope" not in repr(reports)
    finally:
        obs.close()
