"""Many streams in one batched forward give each stream exactly its single-stream output."""

import random

import pytest

from mlx_ssbd import StreamTranslator, TranslatorConfig
from mlx_ssbd.multistream import MultiStreamTranslator

from test_translator import SMALL, random_stream
from tiny import byte_tokenizer, tiny_model


@pytest.fixture(scope="module")
def tok():
    return byte_tokenizer()


def make(model, tok, **cfg):
    return StreamTranslator(model, tok, family="chatml", source_lang="en", target_lang="de",
                            config=TranslatorConfig(**{**SMALL, **cfg}))


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("cfg", [
    dict(policy="ssbd", beta=0.0), dict(policy="ssbd", beta=0.3), dict(policy="rt"), dict(policy="cd"),
    dict(policy="ssbd", beta=0.3, temperature=1.0, top_p=0.9), dict(policy="rt", temperature=0.8),
])
def test_batched_streams_equal_single_streams(tok, arch, cfg):
    model = tiny_model(arch, seed=8)
    rng = random.Random(5)
    n = 4
    streams = [[(p, i == len(ps) - 1) for i, p in enumerate(ps)] for ps in (random_stream(rng) for _ in range(n))]
    streams[1] = streams[1][:2]  # streams of different lengths: some sit out later steps
    batched = MultiStreamTranslator([make(model, tok, **cfg, seed=i) for i in range(n)])
    alone = [make(model, tok, **cfg, seed=i) for i in range(n)]
    greedy = [make(model, tok, **{**cfg, "temperature": 0.0}) for _ in range(n)]
    differs = False  # sampling is really exercised: some output differs from greedy decoding
    for step in range(max(len(s) for s in streams)):
        sources = [s[step] if step < len(s) else None for s in streams]
        results = batched.update(sources)
        for i, item in enumerate(sources):
            if item is None:
                assert results[i] is None
                continue
            single = alone[i].update(item[0], final=item[1])
            assert results[i].output_ids == single.output_ids, (i, step)
            assert results[i].stats.accepted == single.stats.accepted
            if cfg.get("temperature"):
                differs |= single.output_ids != greedy[i].update(item[0], final=item[1]).output_ids
    assert differs or not cfg.get("temperature")
    for tr in batched.translators:  # each cache still holds exactly its own tokens
        assert len(tr.cache) == tr.cache.layers[0].offset


def test_batched_mode_refuses_what_it_cannot_batch(tok):
    model = tiny_model("qwen2")
    with pytest.raises(ValueError, match="lookahead"):
        MultiStreamTranslator([make(model, tok, resync=True)])
    with pytest.raises(ValueError, match="share one model"):
        MultiStreamTranslator([make(model, tok), make(tiny_model("qwen2", seed=1), tok)])
    multi = MultiStreamTranslator([make(model, tok), make(model, tok)])
    with pytest.raises(ValueError, match="stream 1: source is empty"):
        multi.update([("so today", False), ("  ", False)])
    assert multi.update([("so today", False), None])[0].output_ids  # still usable
