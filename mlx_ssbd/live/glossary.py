"""A talk's glossary: the renderings its translations must use, per target language; and example
translations in the same format.

Contract: ``parse_tsv(text, origin)`` and ``parse_json(obj, origin)`` build a ``Glossary`` or raise
``GlossaryError`` whose message starts with ``origin:line:`` (TSV) or ``origin:`` (JSON);
``load_glossary(path)`` reads either format from a file (``.json``, else TSV). Pure functions, no
I/O beyond that read. ``load_examples(path)`` reads a file of example translations (a translation
memory: whole sentences and their translations, which the prompt shows the model before the talk,
``prompt.PromptBuilder``) in the same formats, with ``EXAMPLES``' limits; ``builtin_examples()``
the project's own (``examples.tsv`` beside this module: English talk sentences and their German,
Chinese, Japanese, French and Spanish),
read when called; ``examples_for(spec)`` any of them: ``BUILTIN`` names the built-in ones, ``NONE``
none, anything else a file.

TSV: the first line names the languages, the source first (``en<TAB>de<TAB>fr``); each further
line is one term: its source form, then its required rendering in each target language (an empty
cell: no rendering required in that language). Blank lines and lines starting with ``#`` are
skipped. JSON: ``{"de": {"source term": "required rendering", ...}, "fr": {...}}``.

Limits (``Kind``): at most 500 terms per language, 100 characters per term or rendering (examples:
20 per language, 300 characters each); nothing empty, nothing twice in one language, no control
characters; languages are codes that ``languages.LANGUAGES`` knows.

``uncovered(targets, entries)`` names the target languages a given glossary or set of examples has
nothing for (their captions go without it).
``Glossary.matches(source, target)`` lists the entries of ``target`` whose source term occurs in
``source`` (case-insensitive, as whole words where the term starts and ends with a letter or digit),
in the order they occur.
``term_accuracy`` scores captions against a glossary: the share of (caption, term) pairs whose
source holds the term and whose translation holds the required rendering (case-insensitive).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from .languages import LANGUAGES


@dataclass(frozen=True)
class Kind:
    """What a file holds, and its limits."""

    noun: str  # one entry, in messages
    name: str  # the whole, in messages
    entries: int  # per language, at most
    chars: int  # per entry or rendering, at most


GLOSSARY = Kind("term", "glossary", 500, 100)
EXAMPLES = Kind("example", "examples", 20, 300)


class GlossaryError(ValueError):
    """A glossary that cannot be used; the message names where (``file:line:``)."""


@dataclass(frozen=True)
class Glossary:
    entries: dict[str, dict[str, str]] = field(default_factory=dict)  # target -> source term -> rendering
    source: str | None = None  # the source language the TSV named (None: not said)

    @property
    def targets(self) -> list[str]:
        return list(self.entries)

    def __len__(self) -> int:
        return sum(len(terms) for terms in self.entries.values())

    def matches(self, source: str, target: str) -> list[tuple[str, str]]:
        """The ``(term, rendering)`` entries of ``target`` whose term occurs in ``source``, in the
        order of their first occurrence."""
        found = [
            (match.start(), term, rendering)
            for term, rendering in self.entries.get(target, {}).items()
            if (match := _pattern(term).search(source))
        ]
        return [(term, rendering) for _, term, rendering in sorted(found, key=lambda hit: hit[0])]

    def to_json(self) -> dict:
        return {target: dict(terms) for target, terms in self.entries.items()}


def _pattern(term: str) -> re.Pattern:
    head = r"(?<!\w)" if term[:1].isalnum() else ""
    tail = r"(?!\w)" if term[-1:].isalnum() else ""
    return re.compile(head + re.escape(term) + tail, re.IGNORECASE)


def _check(text: object, what: str, where: str, kind: Kind = GLOSSARY) -> str:
    if not isinstance(text, str):
        raise GlossaryError(f"{where}: {what} must be text, got {json.dumps(text)[:40]}")
    text = text.strip()
    if not text:
        raise GlossaryError(f"{where}: {what} is empty")
    if len(text) > kind.chars:
        raise GlossaryError(f"{where}: {what} has {len(text)} characters; the limit is {kind.chars}")
    if any(ch < " " or "\x7f" <= ch <= "\x9f" for ch in text):
        raise GlossaryError(f"{where}: {what} holds a control character")
    return text


def _language(code: object, where: str) -> str:
    code = _check(code, "a language code", where).lower()
    if code not in LANGUAGES:
        raise GlossaryError(
            f"{where}: unknown language code {code[:16]!r}; known: {', '.join(sorted(LANGUAGES))}"
        )
    return code


def _add(
    entries: dict[str, dict[str, str]], target: str, term: str, rendering: str, where: str, kind: Kind
) -> None:
    terms = entries.setdefault(target, {})
    if term.lower() in (known.lower() for known in terms):
        raise GlossaryError(f"{where}: the {kind.noun} {term[:60]!r} is already in the {target} {kind.name}")
    if len(terms) >= kind.entries:
        raise GlossaryError(f"{where}: more than {kind.entries} {kind.noun}s for {target}")
    terms[term] = rendering


def parse_tsv(text: str, origin: str = "glossary", kind: Kind = GLOSSARY) -> Glossary:
    lines = [
        (n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip() and not line.startswith("#")
    ]
    if not lines:
        raise GlossaryError(f"{origin}:1: empty; the first line names the languages (e.g. en<TAB>de<TAB>fr)")
    head_n, head = lines[0]
    languages = [_language(cell, f"{origin}:{head_n}") for cell in head.split("\t")]
    if len(languages) < 2:
        raise GlossaryError(
            f"{origin}:{head_n}: the first line names the source language and at least one target, "
            "separated by tabs (e.g. en<TAB>de)"
        )
    if len(set(languages)) != len(languages):
        raise GlossaryError(f"{origin}:{head_n}: a language is named twice")
    entries: dict[str, dict[str, str]] = {}
    for n, line in lines[1:]:
        cells = line.split("\t")
        if len(cells) != len(languages):
            raise GlossaryError(
                f"{origin}:{n}: {len(cells)} columns; the first line names {len(languages)} "
                f"({', '.join(languages)})"
            )
        term = _check(cells[0], f"the source {kind.noun}", f"{origin}:{n}", kind)
        renderings = [(target, cell) for target, cell in zip(languages[1:], cells[1:]) if cell.strip()]
        if not renderings:
            raise GlossaryError(
                f"{origin}:{n}: the {kind.noun} {term[:60]!r} has no rendering in any language"
            )
        for target, cell in renderings:
            rendering = _check(cell, f"the {target} rendering", f"{origin}:{n}", kind)
            _add(entries, target, term, rendering, f"{origin}:{n}", kind)
    return Glossary(entries, languages[0])


def parse_json(obj: object, origin: str = "glossary", kind: Kind = GLOSSARY) -> Glossary:
    if not isinstance(obj, dict):
        raise GlossaryError(
            f'{origin}: JSON {kind.name} must be an object: {{"de": {{"source {kind.noun}": "rendering"}}}}'
        )
    entries: dict[str, dict[str, str]] = {}
    for target, terms in obj.items():
        target = _language(target, origin)
        if not isinstance(terms, dict):
            raise GlossaryError(f"{origin}: the {target} entries must be an object of {kind.noun}: rendering")
        for term, rendering in terms.items():
            where = f"{origin}: {target}"
            term = _check(term, f"a source {kind.noun}", where, kind)
            _add(entries, target, term, _check(rendering, "a rendering", where, kind), where, kind)
    return Glossary(entries)


def load_glossary(path: str | Path, kind: Kind = GLOSSARY) -> Glossary:
    """A glossary file: JSON when its name ends in ``.json``, else TSV."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise GlossaryError(f"{path}: cannot read it: {error}") from None
    if path.suffix.lower() == ".json":
        try:
            obj = json.loads(text)
        except ValueError as error:
            raise GlossaryError(f"{path}:{getattr(error, 'lineno', 1)}: not JSON: {error}") from None
        return parse_json(obj, str(path), kind)
    return parse_tsv(text, str(path), kind)


def load_examples(path: str | Path) -> Glossary:
    """A file of example translations (module docstring): source sentences and their translations."""
    return load_glossary(path, EXAMPLES)


BUILTIN = "builtin"  # names the built-in example translations where a file could be given
NONE = "none"  # ... and no example translations at all (an empty ``Glossary``)


def builtin_examples() -> Glossary:
    """The project's example translations (``examples.tsv``): English sentences of the kind a talk
    holds, with their German, Chinese, Japanese, French and Spanish; ``Glossary.source`` is
    ``"en"``."""
    text = resources.files(__package__).joinpath("examples.tsv").read_text(encoding="utf-8")
    return parse_tsv(text, "mlx_ssbd/live/examples.tsv", EXAMPLES)


def examples_for(spec: str | Path) -> Glossary:
    """The built-in example translations for ``BUILTIN``, none (an empty ``Glossary``) for ``NONE``,
    else those of the file ``spec``."""
    if str(spec) == NONE:
        return Glossary()
    return builtin_examples() if str(spec) == BUILTIN else load_examples(spec)


def uncovered(targets: Iterable[str], entries: Mapping[str, Mapping] | None) -> list[str]:
    """The languages of ``targets``, in order, that ``entries`` (a glossary's or example
    translations' ``{target: {source: rendering}}``) has nothing for. Nothing given (None) or
    nothing in it (no glossary, ``NONE`` examples): none, as there is nothing they go without."""
    return [lang for lang in targets if entries and not entries.get(lang)]


def term_accuracy(glossary: Glossary, target: str, captions: Iterable[tuple[str, str]]) -> tuple[int, int]:
    """``(hits, pairs)`` over ``(source, translation)`` captions: pairs are (caption, term) with the
    term in the source; hits are those whose translation holds the required rendering."""
    hits = pairs = 0
    for source, translation in captions:
        for _, rendering in glossary.matches(source, target):
            pairs += 1
            hits += bool(_pattern(rendering).search(translation))
    return hits, pairs
