"""Stop tokens: EOS and end of turn leave nothing; a newline token keeps the text before it."""

from tiny import byte_tokenizer

from mlx_ssbd.engine.stops import StopRule


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
