"""Stop tokens: EOS and end of turn leave nothing; a newline token keeps the text before it; an
output that ends in a decoding loop is cut back to one copy of the loop."""

from mlx_ssbd.engine.stops import StopRule, loop_cut

import pytest
from tiny import byte_tokenizer


def test_newline_token_keeps_the_text_before_the_newline():
    tok = byte_tokenizer()
    tok.add_tokens([".\n", "\n\n"])  # merged tokens as in Qwen's vocabulary
    dot_newline, blank = tok.convert_tokens_to_ids([".\n", "\n\n"])
    rule = StopRule(tok)
    assert rule(dot_newline) == tuple(tok.encode(".", add_special_tokens=False))
    assert rule(blank) == ()
    assert rule(tok.eos_token_id) == ()
    assert rule(tok.encode("a", add_special_tokens=False)[0]) is None
    assert StopRule(tok, on_newline=False)(dot_newline) is None


# -- the repetition rule -------------------------------------------------------------------------


def test_a_loop_at_the_end_is_cut_back_to_one_copy():
    arzt = [7, 8] + [9] * 12  # "Krankenhaus" + "arzt" x 12
    assert loop_cut(arzt) == 11 and loop_cut(arzt[:-1]) == 0  # 11 copies of "arzt": not yet a loop
    block = [1, 2, 3, 4]
    assert loop_cut([5, *block * 3]) == 8  # a 4-token block three times: two copies go
    assert loop_cut([5, *block * 2, 1, 2, 3]) == 0  # twice and a bit: not yet
    assert loop_cut([5, 6, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2]) == 10  # 6 x 2 tokens, the loop began at "1"
    assert loop_cut([1, 2, 3, 1, 2, 3, 1, 2, 3]) == 0  # "no, no, no": three short copies are speech
    assert loop_cut(list(range(40))) == 0
    # a locked start is never cut
    assert loop_cut([9] * 14, floor=10) == 4 and loop_cut([9] * 14, floor=14) == 0


class Bigram:
    """A hand-made model: after token ``t`` always comes ``following[t]`` (one-hot logits)."""

    def __init__(self, following: dict[int, int]):
        self.following = following

    def feed(self, feeds):
        from mlx_ssbd.engine.requests import Fed

        import mlx.core as mx

        out = []
        for _, feed in feeds:
            last = list(feed.ids)[-feed.logits :]
            rows = [[10.0 if v == self.following[t] else 0.0 for v in range(10)] for t in last]
            out.append(Fed(mx.array(rows), 0, len(feed.ids)))
        return out


@pytest.mark.parametrize("draft", [[], [1, 2, 3, 4, 3, 4]])
def test_a_decoding_loop_ends_the_output_with_one_copy_kept(draft):
    """A model that falls into "3 4 3 4 ...": with the rule the output ends after one "3 4"; without
    it, the loop runs to the token budget. The same with the loop's start offered as a draft."""
    from mlx_ssbd.engine.update import Job, run

    model = Bigram({0: 1, 1: 2, 2: 3, 3: 4, 4: 3})
    job = dict(head=[0], locked=(), draft=draft, beta=0.0, max_new=40, stops=lambda t: None)
    looped = run(model, [(None, Job(**job, loop_cut=loop_cut))])[0]
    assert looped.output == [1, 2, 3, 4] and looped.looped
    endless = run(model, [(None, Job(**job))])[0]
    assert len(endless.output) == 40 and not endless.looped
