"""Where benchmark sentence pairs come from: FLORES+, WMT test sets through sacrebleu, or JSONL.

Contract: ``load_pairs(spec, source_lang, target_lang, *, flores_dir=None)`` returns the
``streams.Pair``s of a data spec, in the set's order:

* ``flores`` or ``flores:SPLIT`` (``dev`` or ``devtest``, the default): FLORES+, the Open Language
  Data Initiative's continuation of FLORES-200 (``openlanguagedata/flores_plus`` on Hugging Face).
  Read from ``flores_dir`` (or ``$MLX_SSBD_FLORES``) when given, laid out as the dataset is:
  ``SPLIT/CODE.parquet`` or ``SPLIT/CODE.jsonl`` (``CODE`` as ``eng_Latn``; rows with ``id`` and
  ``text``); else downloaded with ``huggingface_hub`` (the dataset is gated: accept its terms on
  the hub and log in first). Pairs are aligned by ``id``.
* ``sacrebleu:NAME`` (``sacrebleu:wmt22``): a test set through sacrebleu's own downloader and
  cache (``$SACREBLEU``, by default ``~/.sacrebleu``); the first reference is used.
* anything else: a JSONL file of ``{"id", "src", "ref"}`` pairs (``streams.read_pairs``).

A set that cannot be had (offline, gated, unknown language pair) raises ``DataUnavailable`` with
what to download and where to put it. Nothing is downloaded at import.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .streams import Pair, read_pairs

FLORES_REPO = "openlanguagedata/flores_plus"
FLORES_SPLITS = ("dev", "devtest")
# ISO 639-1 (the languages ``live.languages`` knows) -> FLORES+ code (ISO 639-3 and script).
FLORES_CODES = {
    "ar": "arb_Arab",
    "cs": "ces_Latn",
    "de": "deu_Latn",
    "en": "eng_Latn",
    "es": "spa_Latn",
    "fr": "fra_Latn",
    "hi": "hin_Deva",
    "it": "ita_Latn",
    "ja": "jpn_Jpan",
    "ko": "kor_Hang",
    "nl": "nld_Latn",
    "pl": "pol_Latn",
    "pt": "por_Latn",
    "ru": "rus_Cyrl",
    "tr": "tur_Latn",
    "uk": "ukr_Cyrl",
    "vi": "vie_Latn",
    "zh": "cmn_Hans",
}
FLORES_ENV = "MLX_SSBD_FLORES"


class DataUnavailable(ValueError):
    """A data set cannot be read here; the message says what to download and where."""


def load_pairs(spec: str, source_lang: str, target_lang: str, *, flores_dir: str | None = None) -> list[Pair]:
    """The pairs of ``spec`` for ``source_lang`` -> ``target_lang``; see the module docstring.

    Raises:
        DataUnavailable: the set cannot be had here.
        ValueError: a bad spec, or a JSONL file with a bad line (``streams.StreamError``).
    """
    kind, _, arg = spec.partition(":")
    if kind == "flores" and not Path(spec).exists():
        return flores_pairs(source_lang, target_lang, arg or "devtest", flores_dir)
    if kind == "sacrebleu" and arg:
        return sacrebleu_pairs(arg, source_lang, target_lang)
    return [pair for _, pair in read_pairs(spec)]


def describe(spec: str) -> str:
    """A short name of the data for reports (never a machine path)."""
    kind, _, arg = spec.partition(":")
    if kind == "flores" and not Path(spec).exists():
        return f"FLORES+ {arg or 'devtest'}"
    if kind == "sacrebleu" and arg:
        return f"{arg} (sacrebleu)"
    return Path(spec).name


# -- FLORES+ -------------------------------------------------------------------------------------


def flores_code(lang: str) -> str:
    code = FLORES_CODES.get(lang)
    if code is None:
        raise DataUnavailable(f"no FLORES+ code known for {lang!r}; known: {', '.join(sorted(FLORES_CODES))}")
    return code


def flores_pairs(
    source_lang: str, target_lang: str, split: str = "devtest", root: str | None = None
) -> list[Pair]:
    """FLORES+ ``split`` as pairs, from ``root`` (or ``$MLX_SSBD_FLORES``) or the hub."""
    if split not in FLORES_SPLITS:
        raise ValueError(f"unknown FLORES+ split {split!r}; known: {', '.join(FLORES_SPLITS)}")
    codes = flores_code(source_lang), flores_code(target_lang)
    root = root or os.environ.get(FLORES_ENV)
    folder = Path(root) if root else _download_flores(split, codes)
    src, ref = (_flores_rows(folder, split, code) for code in codes)
    return [Pair(f"flores-{split}-{i}", src[i], ref[i]) for i in sorted(src) if i in ref]


def _flores_rows(root: Path, split: str, code: str) -> dict:
    """id -> text of one language's file (parquet or JSONL)."""
    for path in (root / split / f"{code}.parquet", root / split / f"{code}.jsonl"):
        if path.is_file():
            rows = _read_parquet(path) if path.suffix == ".parquet" else _read_jsonl(path)
            return {row["id"]: row["text"] for row in rows}
    raise DataUnavailable(
        f"FLORES+ {split}/{code} is not in {root}: download {split}/{code}.parquet from "
        f"https://huggingface.co/datasets/{FLORES_REPO} into {root / split}"
    )


def _read_parquet(path: Path) -> list[dict]:
    try:
        import pyarrow.parquet as pq
    except ImportError as error:
        raise DataUnavailable(f"reading {path.name} needs pyarrow: pip install 'mlx-ssbd[paper]'") from error
    return pq.read_table(path, columns=["id", "text"]).to_pylist()


def _read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def _download_flores(split: str, codes: tuple[str, str]) -> Path:
    """The hub's copy of the two files (cached by huggingface_hub)."""
    try:
        from huggingface_hub import snapshot_download

        return Path(
            snapshot_download(
                FLORES_REPO, repo_type="dataset", allow_patterns=[f"{split}/{code}.*" for code in codes]
            )
        )
    except Exception as error:  # offline, gated (terms not accepted), not logged in
        raise DataUnavailable(
            f"FLORES+ could not be downloaded ({type(error).__name__}). It is gated: accept its terms on "
            f"https://huggingface.co/datasets/{FLORES_REPO} and run `huggingface-cli login`; or download "
            f"{split}/{codes[0]}.parquet and {split}/{codes[1]}.parquet from there into a folder DIR "
            f"(as DIR/{split}/...) and pass --flores-dir DIR (or set ${FLORES_ENV})"
        ) from error


# -- WMT and other sacrebleu test sets ------------------------------------------------------------


def sacrebleu_pairs(name: str, source_lang: str, target_lang: str) -> list[Pair]:
    """A sacrebleu test set as pairs (its first reference), downloaded into sacrebleu's cache."""
    from sacrebleu.dataset import DATASETS

    langpair = f"{source_lang}-{target_lang}"
    if name not in DATASETS:
        raise DataUnavailable(f"sacrebleu knows no test set {name!r} (try: sacrebleu --list)")
    dataset = DATASETS[name]
    if langpair not in dataset.langpairs:
        raise DataUnavailable(f"{name} has no {langpair}; it has: {', '.join(sorted(dataset.langpairs))}")
    try:
        sources = list(dataset.source(langpair))
        refs = [row[0] for row in dataset.references(langpair)]
    except (Exception, SystemExit) as error:  # sacrebleu exits on some download errors
        cache = os.environ.get("SACREBLEU", "~/.sacrebleu")
        raise DataUnavailable(
            f"sacrebleu could not get {name} {langpair} ({type(error).__name__}): run "
            f"`sacrebleu -t {name} -l {langpair} --echo src` where the network is reachable and copy "
            f"{cache}/{name} here (or set $SACREBLEU to a copy)"
        ) from error
    return [Pair(f"{name}-{i}", src, ref.strip()) for i, (src, ref) in enumerate(zip(sources, refs))]
