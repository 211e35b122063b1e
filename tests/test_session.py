"""Live sessions: latest partial wins, commits never skipped, stable text, context (tiny models)."""

import random
import threading
import time

from mlx_ssbd.live.multistream import MultiStreamTranslator
from mlx_ssbd.live.segmenter import SegmenterConfig
from mlx_ssbd.live.session import (
    CaptionCommit,
    LiveSession,
    SessionError,
)
from mlx_ssbd.live.source import SourcePartial

import pytest
from test_translator import make, random_stream
from tiny import tiny_model

MANUAL = SegmenterConfig(sentence_end=False, max_words=0, pause_s=None)  # commits only at final/segment/end


def run_all(session, partials):
    """Push everything first (the engine is 'busy'), then run the engine to the end."""
    for p in partials:
        session.push(p)
    session.close()
    return list(session.run())


def test_latest_partial_wins_but_finals_and_segment_ends_are_never_skipped(model, tok):
    session = LiveSession(make(model, tok, policy="ssbd"), segmenter=MANUAL)
    engine = session.run()
    push = lambda *partials: [session.push(p) for p in partials]
    push(SourcePartial("so", segment_id="a"), SourcePartial("so to", segment_id="a"))
    first = next(engine)
    push(
        SourcePartial("so today", segment_id="a"),
        SourcePartial("so today we", final=True, segment_id="a"),
        SourcePartial("it", segment_id="b"),
        SourcePartial("it works", segment_id="b"),
    )
    second, third = next(engine), next(engine)
    push(SourcePartial("and", segment_id="c"))  # segment b ends without final: still committed
    push(SourcePartial("and then", segment_id="c"))
    session.close()
    events = [first, second, third, *engine]
    kinds = [(type(e).__name__, e.update.source, e.coalesced) for e in events]
    assert kinds == [
        ("CaptionUpdate", "so to", 1),
        ("CaptionCommit", "so today we", 1),  # the commit superseded the queued live update
        ("CaptionUpdate", "it works", 1),
        ("CaptionCommit", "it works", 0),
        ("CaptionCommit", "and then", 2),  # close() commits what is live, superseding "and", "and then"
    ]
    assert [e.reason for e in events if isinstance(e, CaptionCommit)] == ["final", "segment", "end"]
    assert [e.caption for e in events] == [0, 0, 1, 1, 2] and [e.seq for e in events] == list(range(5))
    assert session.coalesced == 5


def test_every_partial_mode_translates_each_one(model, tok):
    session = LiveSession(make(model, tok), segmenter=MANUAL, latest_wins=False)
    events = run_all(session, [SourcePartial(t, segment_id="a") for t in ["so", "so to", "so today"]])
    assert [e.update.source for e in events] == ["so", "so to", "so today", "so today"]


def test_beta0_through_the_session_is_token_identical_to_rt(model, tok):
    rng = random.Random(11)
    partials = []
    for index in range(12):
        prefixes = random_stream(rng)
        partials += [
            SourcePartial(p, final=i == len(prefixes) - 1 and index % 3 > 0, segment_id=f"s{index}")
            for i, p in enumerate(prefixes)
        ]
    outputs = {}
    for policy in ("rt", "ssbd"):
        session = LiveSession(make(model, tok, policy=policy, beta=0.0), segmenter=MANUAL, latest_wins=False)
        outputs[policy] = [(type(e).__name__, e.update.output_ids) for e in run_all(session, partials)]
    assert outputs["ssbd"] == outputs["rt"] and len(outputs["rt"]) > len(partials)


def test_an_unchanged_partial_costs_no_forward_pass(model, tok):
    translator = make(model, tok)
    session = LiveSession(translator, segmenter=MANUAL)
    engine = session.run()
    session.push(SourcePartial("so today", segment_id="a"))
    assert next(engine).update.source == "so today"
    calls = translator.cache.forward_calls
    for _ in range(3):  # the ASR repeats its partial
        session.push(SourcePartial("so today", segment_id="a"))
    session.push(SourcePartial("so", segment_id="a"))  # revised, then back while the engine was busy:
    session.push(SourcePartial("so today", segment_id="a"))  # the newest equals what is on screen
    threading.Timer(1.0, session.close).start()  # the engine sees the live job before the commit
    rest = list(engine)
    assert [(type(e).__name__, e.update.source) for e in rest] == [("CaptionCommit", "so today")]
    assert session.unchanged == 1 and session.coalesced == 1
    # only the commit ran
    assert translator.cache.forward_calls - calls == rest[0].update.stats.forward_passes


def test_a_pause_commits_the_open_caption(model, tok):
    session = LiveSession(make(model, tok), segmenter=SegmenterConfig(pause_s=0.2))

    def speak():
        session.push(SourcePartial("so today we", segment_id="never-final"))
        time.sleep(3.0)  # silence: no partial at all
        session.close()

    threading.Thread(target=speak).start()
    events = list(session.run())
    commits = [e for e in events if isinstance(e, CaptionCommit)]
    assert [(c.source, c.reason, c.timed_by) for c in commits] == [("so today we", "pause", "clock")]
    assert commits[0].end >= 0.2 and commits[0].at < 3.0


def test_a_pause_on_the_inputs_clock_commits_only_when_the_input_says_so(model, tok):
    """Input times (speech: audio heard) drive the pause rule: the session clock may run on, the
    pause commits when the input's clock has moved ``pause_s`` past the last change."""
    wall = [0.0]
    session = LiveSession(make(model, tok), segmenter=SegmenterConfig(pause_s=2.0), clock=lambda: wall[0])
    session.push(SourcePartial("so today we", segment_id="a"), at=1.0)
    wall[0] = 100.0  # a very slow machine: the session clock says nothing about the speaker
    assert (
        session.next_due() is None and session.take().source.text == "so today we" and session.take() is None
    )
    session.tick(2.9)
    assert session.take() is None
    session.tick(3.0)
    item = session.take()
    assert (item.source.text, item.source.final, item.source.reason) == ("so today we", True, "pause")
    # A recognizer that was behind and heard 3 s at once: new words are no pause, however late.
    session.push(SourcePartial("so today we talk", segment_id="b"), at=4.0)
    session.push(SourcePartial("so today we talk about it", segment_id="b"), at=9.0)
    assert [(i.source.text, i.source.final) for i in iter(session.take, None)] == [
        ("so today we talk about it", False)
    ]


def test_arrival_times_commit_a_pause_before_the_next_partial_even_while_the_engine_is_busy(model, tok):
    """Text partials are timed by their arrival: a pause between two of them commits at the second
    one's arrival whether or not the engine looked in between."""
    wall = [0.0]
    session = LiveSession(make(model, tok), segmenter=SegmenterConfig(pause_s=2.0), clock=lambda: wall[0])
    session.push(SourcePartial("so today we", segment_id="a"))
    wall[0] = 2.5  # the speaker paused; the engine did not call take() meanwhile
    session.push(SourcePartial("so today we talk", segment_id="a"))
    jobs = [(i.source.text, i.source.final) for i in iter(session.take, None)]
    assert jobs == [("so today we", True), ("talk", False)]


def test_a_rejected_job_is_an_error_event_and_the_session_goes_on(model, tok):
    session = LiveSession(make(model, tok), segmenter=MANUAL)
    events = run_all(
        session,
        [
            SourcePartial("word " * 3000, final=True, segment_id="a"),
            SourcePartial("so today", final=True, segment_id="b"),
        ],
    )
    assert isinstance(events[0], SessionError) and "context" in events[0].message
    assert isinstance(events[1], CaptionCommit) and events[1].update.source == "so today"


@pytest.mark.parametrize("policy", ["ssbd", "rt"])
def test_stable_text_never_changes_and_starts_every_later_caption(model, tok, policy):
    rng = random.Random(4)
    translator = make(model, tok, policy=policy, beta=0.2, agreement=2, max_tokens_ratio=2.0)
    grew = False
    for _ in range(10):
        prefixes = random_stream(rng)
        prefixes += [prefixes[-1] + " and then", prefixes[-1] + " and then some more words"]
        stable_ids, outputs = (), []
        for i, text in enumerate(prefixes):
            u = translator.update(text, final=i == len(prefixes) - 1)
            locked = u.stats.locked
            assert tuple(u.output_ids[:locked]) == tuple(stable_ids[:locked])
            assert u.output_ids[: len(stable_ids)] == stable_ids  # stable tokens are kept
            assert u.display.startswith(u.stable) and u.stable + u.unstable == u.display
            if not u.final:
                grew |= len(u.stable) > 0
                stable_ids = u.output_ids[: translator._locked]
            outputs.append(u)
        assert outputs[-1].stable == outputs[-1].output and outputs[-1].unstable == ""
    assert grew  # locking really happened


def test_context_is_in_the_prompt_and_its_kv_is_reused(model, tok):
    translator = make(model, tok, context_tokens=400)
    first = translator.update("so today", final=True)
    prompt_len = len(translator.prompts.build("so today"))
    second = translator.update("we made it", final=False)
    # the whole first segment (prompt and translation) is context now, and was not recomputed
    # (a last output token cut by the token budget was never fed, so it cannot be reused)
    assert second.stats.reused_tokens >= prompt_len + len(first.output_ids) - 1
    assert len(translator.prompts.build("x", translator._context_ids)) > prompt_len + len(first.output_ids)


def test_context_keeps_beta0_identity_and_stays_within_budget(model, tok):
    rng = random.Random(2)
    rt, ssbd = (
        make(model, tok, policy="rt", context_tokens=120),
        make(model, tok, beta=0.0, context_tokens=120),
    )
    for _ in range(8):
        prefixes = random_stream(rng)
        for i, p in enumerate(prefixes):
            final = i == len(prefixes) - 1
            assert rt.update(p, final=final).output_ids == ssbd.update(p, final=final).output_ids
        assert len(ssbd.prompts.context_ids(ssbd._context)) <= 120


def test_batched_streams_keep_locked_text_like_single_streams(tok):
    model = tiny_model("qwen2", seed=8)
    rng = random.Random(9)
    streams = [
        (lambda ps: ps + [ps[-1] + " and more", ps[-1] + " and more words"])(random_stream(rng))
        for _ in range(3)
    ]
    batched = MultiStreamTranslator([make(model, tok, agreement=2) for _ in streams])
    alone = [make(model, tok, agreement=2) for _ in streams]
    locked = 0
    for step in range(max(map(len, streams))):
        sources = [(s[step], step == len(s) - 1) if step < len(s) else None for s in streams]
        for tr, got, item in zip(alone, batched.update(sources), sources):
            if item is not None:
                want = tr.update(item[0], final=item[1])
                assert got.output_ids == want.output_ids and got.stable == want.stable
                locked += got.stats.locked
    assert locked > 0


def test_long_speech_is_cut_where_a_clause_opens_in_the_source_language(model, tok):
    """The segmenter reads the translators' source language (or one set before the first push):
    over-long speech is cut before "and then", not at ``max_words``."""
    text = "one two three four five six seven eight nine and then ten eleven"
    config = SegmenterConfig(max_words=11, pause_s=None)

    def commits(session):
        for partial in (text, text + " twelve"):
            session.push(SourcePartial(partial, segment_id="a"))
        return [item.source.text for item in iter(session.take, None) if item.source.final]

    before_and = text[: text.index(" and")]
    assert commits(LiveSession(make(model, tok), segmenter=config)) == [before_and]  # source "en"
    assert commits(LiveSession(None, segmenter=config)) == [before_and + " and then"]  # no language
    session = LiveSession(None, segmenter=config)
    session.set_language("en")
    assert commits(session) == [before_and]
