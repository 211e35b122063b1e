"""Glossaries: the TSV and JSON formats, their errors (with file:line), matching and term accuracy."""

import json
import re
from pathlib import Path

from mlx_ssbd.live.glossary import (
    BUILTIN,
    EXAMPLES,
    GLOSSARY,
    GlossaryError,
    builtin_examples,
    examples_for,
    load_examples,
    load_glossary,
    parse_json,
    parse_tsv,
    term_accuracy,
)

import pytest

TSV = (
    "en\tde\tfr\n# a comment\nweather station\tWetterstation\tstation météo\n\nSSBD\tSSBD\t\nC++\tC++\tC++\n"
)


def test_tsv_and_json_give_the_same_glossary(tmp_path):
    tsv = parse_tsv(TSV)
    assert tsv.source == "en" and tsv.targets == ["de", "fr"] and len(tsv) == 5
    assert tsv.entries["fr"] == {
        "weather station": "station météo",
        "C++": "C++",
    }  # an empty cell: none required
    (tmp_path / "g.json").write_text(json.dumps(tsv.to_json()))
    (tmp_path / "g.tsv").write_text(TSV)
    assert (
        load_glossary(tmp_path / "g.json").entries == load_glossary(tmp_path / "g.tsv").entries == tsv.entries
    )


def test_matching_is_case_insensitive_and_by_whole_words():
    glossary = parse_tsv(TSV)
    assert glossary.matches("Our Weather Station works", "de") == [("weather station", "Wetterstation")]
    assert glossary.matches("weather stations", "de") == []  # another word
    assert glossary.matches("we use C++ here", "de") == [("C++", "C++")]
    assert glossary.matches("SSBD is fast", "fr") == []  # no French rendering required


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "g.tsv:1: empty"),
        ("en\n", "g.tsv:1: the first line names the source language and at least one target"),
        ("en\tde\tde\n", "g.tsv:1: a language is named twice"),
        ("en\tklingon\n", "g.tsv:1: unknown language code 'klingon'; known: "),
        ("en\tde\nstation\n", "g.tsv:2: 1 columns; the first line names 2"),
        ("en\tde\n\t\tStation\n", "g.tsv:2: 3 columns"),
        ("en\tde\n \tStation\n", "g.tsv:2: the source term is empty"),
        ("en\tde\tfr\nstation\t\t\n", "g.tsv:2: the term 'station' has no rendering"),
        ("en\tde\nstation\tStation\n# x\nStation\tHaltestelle\n", "g.tsv:4: the term 'Station' is already"),
        ("en\tde\nstation\tSta\x07tion\n", "g.tsv:2: the de rendering holds a control character"),
        ("en\tde\n" + "x" * (GLOSSARY.chars + 1) + "\ty\n", f"the limit is {GLOSSARY.chars}"),
        (
            "en\tde\n" + "".join(f"t{i}\tu{i}\n" for i in range(GLOSSARY.entries + 1)),
            f"g.tsv:{GLOSSARY.entries + 2}: more than",
        ),
    ],
)
def test_bad_tsv_says_where(tmp_path, text, message):
    (tmp_path / "g.tsv").write_text(text)
    with pytest.raises(GlossaryError) as error:
        load_glossary(tmp_path / "g.tsv")
    assert str(error.value).startswith(str(tmp_path / "g.tsv")) and message in str(error.value)


@pytest.mark.parametrize(
    "obj, message",
    [
        ([], "JSON glossary must be an object"),
        ({"de": ["x"]}, "the de entries must be an object"),
        ({"de": {"": "x"}}, "a source term is empty"),
        ({"de": {"x": 5}}, "a rendering must be text"),
        ({"<script>": {"x": "y"}}, "unknown language code '<script>'"),
    ],
)
def test_bad_json_says_what(obj, message):
    with pytest.raises(GlossaryError, match=message):
        parse_json(obj)


def test_a_file_that_is_not_json_says_where(tmp_path):
    (tmp_path / "g.json").write_text('{"de":\n {"x": }')
    with pytest.raises(GlossaryError, match=r"g.json:2: not JSON"):
        load_glossary(tmp_path / "g.json")
    with pytest.raises(GlossaryError, match="cannot read it"):
        load_glossary(tmp_path / "missing.tsv")


def test_term_accuracy_counts_caption_term_pairs():
    glossary = parse_tsv(TSV)
    captions = [
        ("the weather station and SSBD", "die Wetterstation und SSBD"),  # 2 pairs, 2 hits
        ("a weather station", "eine Wetter-Station"),  # 1 pair, missed
        ("nothing here", "nichts"),
    ]  # no pair
    assert term_accuracy(glossary, "de", captions) == (2, 3)
    assert term_accuracy(glossary, "fr", captions) == (0, 2)


def test_the_terms_go_after_the_source_and_the_prefix_stays_cached(model_dir):
    """A glossary's hits are named after the source, in the user turn: the prefix (its KV cache)
    is the same with or without them, the source ids too; only hits found in the source are named."""
    from mlx_ssbd.live.methods import method_config
    from mlx_ssbd.models.loading import load_model

    loaded = load_model(model_dir)
    glossary = parse_tsv(TSV)
    tr = loaded.translator("de", config=method_config("rt"), glossary=glossary)
    built = []
    build = tr.prompts.build
    tr.prompts.build = lambda *args: built.append(build(*args)) or built[-1]
    tr.update("so today the weather station", final=False)
    tr.update("so today we talk", final=True)
    plain = build("so today the weather station")
    hinted, without = built
    assert hinted.prefix == plain.prefix and hinted.source == plain.source and hinted.suffix != plain.suffix
    assert '"weather station" = "Wetterstation"' in loaded.tokenizer.decode(list(hinted.suffix))
    assert without.suffix == tr.prompts.suffix  # no term in the source: the plain prompt


def test_the_terms_named_in_a_prompt_fit_a_token_budget_in_the_order_they_occur(model_dir):
    """A flood of hits (200 long terms, all in the source) costs the prompt at most
    ``glossary_tokens``: the earliest hits are named, as many as fit."""
    from mlx_ssbd.live.glossary import Glossary
    from mlx_ssbd.live.methods import method_config
    from mlx_ssbd.models.loading import load_model

    loaded = load_model(model_dir)
    terms = {f"term{i:03d}": "x" * 90 for i in range(200)}
    flood = Glossary({"de": terms})
    source = " ".join(reversed(list(terms)))  # the last term occurs first
    plain = loaded.translator("de", config=method_config("rt"))
    for budget in (0, 256, 1024):
        tr = loaded.translator("de", config=method_config("rt", glossary_tokens=budget), glossary=flood)
        named = tr._terms(source)
        extra = len(tr.prompts.build(source, (), named).ids) - len(plain.prompts.build(source).ids)
        assert extra <= budget + 40  # the template's words around the entries
        assert [term for term, _ in named] == [f"term{i:03d}" for i in range(199, 199 - len(named), -1)]
        assert (len(named) > 0) == (budget > 0) and len(named) < 200


@pytest.mark.parametrize("option", ["--glossary", "--examples"])
def test_a_bad_glossary_or_examples_file_exits_1_naming_the_line(model_dir, tmp_path, option):
    from mlx_ssbd_cli.main import cli

    from click.testing import CliRunner

    (tmp_path / "g.tsv").write_text("en\tde\nso today\n")
    result = CliRunner().invoke(
        cli, ["translate", "hello", "--model", model_dir, option, str(tmp_path / "g.tsv")]
    )
    assert result.exit_code == 1 and f"{tmp_path / 'g.tsv'}:2: 1 columns" in result.output
    (tmp_path / "ok.tsv").write_text("en\tde\nso today\tAlso heute\n")
    ok = CliRunner().invoke(
        cli, ["translate", "hello", "--model", model_dir, option, str(tmp_path / "ok.tsv")]
    )
    assert ok.exit_code == 0, ok.output


def test_examples_are_whole_sentences_within_their_own_limits(tmp_path):
    """A file of example translations has the glossary's formats, with sentences up to 300
    characters and 20 per language."""
    long = "word " * 50
    (tmp_path / "x.tsv").write_text(f"en\tde\tfr\n{long}\tWort\t\nso today\tAlso heute\tDonc aujourd'hui\n")
    examples = load_examples(tmp_path / "x.tsv")
    assert examples.entries == {
        "de": {long.strip(): "Wort", "so today": "Also heute"},
        "fr": {"so today": "Donc aujourd'hui"},
    }
    with pytest.raises(GlossaryError, match="x.tsv:3: the example 'So today' is already in the de examples"):
        parse_tsv("en\tde\nso today\ta\nSo today\tb\n", str(tmp_path / "x.tsv"), EXAMPLES)
    many = "en\tde\n" + "".join(f"sentence {i}\tSatz {i}\n" for i in range(EXAMPLES.entries + 1))
    with pytest.raises(GlossaryError, match=f"more than {EXAMPLES.entries} examples for de"):
        parse_tsv(many, "x.tsv", EXAMPLES)
    with pytest.raises(GlossaryError, match="the limit is 100"):
        parse_tsv(f"en\tde\n{long}\tWort\n", "g.tsv")  # too long for a glossary's term


def test_a_translator_shows_its_languages_examples_once_in_the_shared_prefix(model_dir):
    """The examples for the translator's target language end the prompt's prefix; a second
    segment reuses their KV (the prefix is fed once); other languages' examples are not shown."""
    from mlx_ssbd.live.methods import method_config
    from mlx_ssbd.models.loading import load_model

    loaded = load_model(model_dir)
    examples = parse_tsv("en\tde\tfr\nso today\tAlso heute\t\nthe weather\t\tla météo\n", "x", EXAMPLES)
    plain = loaded.translator("de", config=method_config("rt"))
    tr = loaded.translator("de", config=method_config("rt"), examples=examples)
    shown = loaded.tokenizer.decode(list(tr.prompts.prefix[len(plain.prompts.prefix) :]))
    assert "Also heute" in shown and "météo" not in shown
    first = tr.update("we talk", final=True)
    second = tr.update("all human beings", final=True)
    assert first.stats.tokens_fed >= len(tr.prompts.prefix) > len(plain.prompts.prefix)
    assert second.stats.reused_tokens >= len(tr.prompts.prefix)


TALKS = Path(__file__).parent.parent / "benchmarks" / "data" / "talk-sentences"
HAN, KANA, LATIN = re.compile("[\u4e00-\u9fff]"), re.compile("[\u3040-\u30ff]"), re.compile("[A-Za-z]")


def test_the_builtin_examples_are_english_talk_sentences_with_their_translations():
    """mlx-ssbd's own examples ship with the package: the same English sentences for German,
    Chinese, Japanese, French and Spanish (Chinese and Japanese in their own scripts), within the
    examples' limits for each language, and none a sentence of the benchmark talks they are
    measured on."""
    builtin = builtin_examples()
    assert builtin.source == "en" and builtin.targets == ["de", "zh", "ja", "fr", "es"]
    assert all(4 <= len(builtin.entries[lang]) <= EXAMPLES.entries for lang in builtin.targets)
    assert len({tuple(builtin.entries[lang]) for lang in builtin.targets}) == 1  # the same sentences
    assert all(HAN.search(text) and not KANA.search(text) for text in builtin.entries["zh"].values())
    assert all(KANA.search(text) for text in builtin.entries["ja"].values())
    assert examples_for(BUILTIN) == builtin
    sources = {
        json.loads(line)["src"] for part in ("dev", "test") for line in (TALKS / f"en-de.{part}.jsonl").open()
    }
    assert not sources & set(builtin.entries["de"])


@pytest.mark.parametrize("lang", ["zh", "ja", "fr", "es"])
def test_the_benchmark_talks_other_references_pair_with_the_german(lang):
    """Each talk's Chinese, Japanese, French and Spanish references are for the same sentences, in
    the same order, as its German ones (the benchmarks compare the languages on one talk), each in
    its own script."""
    for part in ("dev", "test"):
        german = [json.loads(line) for line in (TALKS / f"en-de.{part}.jsonl").open()]
        other = [json.loads(line) for line in (TALKS / f"en-{lang}.{part}.jsonl").open()]
        assert [(r["id"], r["src"]) for r in other] == [(r["id"], r["src"]) for r in german]
        dense = lang in ("zh", "ja")  # Han characters without Latin letters, or the reverse
        for ref in (r["ref"] for r in other):
            assert bool(HAN.search(ref)) == dense and bool(LATIN.search(ref)) != dense, ref
            assert bool(KANA.search(ref)) == (lang == "ja"), ref


def test_builtin_examples_from_the_cli_and_a_source_they_do_not_fit(model_dir):
    """``--examples builtin`` shows mlx-ssbd's own (``none``: none); with another source language
    than theirs the command exits 1 saying so, before any model loads."""
    from mlx_ssbd_cli.main import cli

    from click.testing import CliRunner

    for spec in ("builtin", "none"):
        ok = CliRunner().invoke(cli, ["translate", "hello", "--model", model_dir, "--examples", spec])
        assert ok.exit_code == 0, ok.output
    other = CliRunner().invoke(
        cli, ["translate", "bonjour", "--model", model_dir, "--source", "fr", "--examples", "builtin"]
    )
    assert other.exit_code == 1 and "the example translations are en sentences" in other.output


def test_the_cli_names_the_targets_a_given_glossary_or_examples_file_has_nothing_for(model_dir, tmp_path):
    """A glossary or example translations given for some target languages only: a note on stderr
    names the others (their captions go without it) and the captions follow; no note where every
    target is covered, with the model's own examples, or with ``--examples none``."""
    from mlx_ssbd_cli.main import cli

    from click.testing import CliRunner

    german = tmp_path / "german.tsv"
    german.write_text("en\tde\nthe weather\tdas Wetter\n", encoding="utf-8")

    def run(*options):
        done = CliRunner().invoke(cli, ["translate", "the weather", "--model", model_dir, *options])
        assert done.exit_code == 0, done.output
        return done.output

    both = run("-t", "de,fr", "--glossary", str(german), "--examples", str(german))
    assert "note: the glossary has no terms for fr;" in both
    assert "note: the example translations have none for fr;" in both
    assert "fr: " in both  # ... and French captions all the same
    assert "note:" not in run("-t", "de", "--glossary", str(german), "--examples", "builtin")
    assert "note: the example translations have none for pt;" in run("-t", "pt", "--examples", "builtin")
    assert "note:" not in run("-t", "pt", "--examples", "none") + run("-t", "pt")


def test_a_models_own_examples_are_shown_unless_a_translator_is_told_otherwise(model_dir):
    """``LoadedModel.examples`` (its card's) end the prompt's prefix of every translator made
    without ``examples``, for talks in their source language only; ``examples=None`` or an
    empty ``Glossary`` (``--examples none``) shows none; the default model's card names the built-in
    ones."""
    from mlx_ssbd.live.glossary import NONE
    from mlx_ssbd.live.methods import method_config
    from mlx_ssbd.models.loading import load_model
    from mlx_ssbd.models.registry import default_card

    assert default_card().examples == BUILTIN
    loaded = load_model(model_dir)
    assert loaded.examples is None
    plain = loaded.translator("de", config=method_config("rt"))
    loaded.examples = builtin_examples()
    shown = loaded.translator("de", config=method_config("rt"))
    assert shown.prompts.examples == tuple(builtin_examples().entries["de"].items())
    for lang in ("zh", "ja", "fr", "es"):  # each target its own translations of the same sentences
        theirs = loaded.translator(lang, config=method_config("rt")).prompts.examples
        assert theirs == tuple(builtin_examples().entries[lang].items())
    for off in (
        loaded.translator("de", config=method_config("rt"), examples=None),
        loaded.translator("de", config=method_config("rt"), examples=examples_for(NONE)),
        loaded.translator("de", source_lang="fr", config=method_config("rt")),  # not French sentences
    ):
        assert off.prompts.examples == ()
    assert len(shown.prompts.prefix) > len(plain.prompts.prefix)
