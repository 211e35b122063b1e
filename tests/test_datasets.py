"""Benchmark data sources, offline: FLORES+ and a WMT test set in their real on-disk formats,
written by the tests; the messages when a set cannot be had."""

import json
import os
import subprocess
import sys
import tarfile

from mlx_ssbd.evaluation.datasets import DataUnavailable, describe, flores_pairs, load_pairs

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ENGLISH = [
    "On Monday, scientists announced a new test.",
    "The river rose overnight.",
    "Tickets sell out fast.",
]
GERMAN = [
    "Am Montag kündigten Forscher einen neuen Test an.",
    "Der Fluss stieg über Nacht.",
    "Karten sind schnell weg.",
]


def write_flores(root, split="devtest", fmt="parquet", german_ids=(0, 1, 2)):
    """FLORES+ as the hub holds it: SPLIT/CODE.parquet with the dataset's columns."""
    (root / split).mkdir(parents=True, exist_ok=True)
    for code, texts, ids in (("eng_Latn", ENGLISH, (0, 1, 2)), ("deu_Latn", GERMAN, german_ids)):
        rows = [
            {
                "id": i,
                "iso_639_3": code[:3],
                "iso_15924": code[4:],
                "glottocode": "x",
                "text": texts[i],
                "url": "https://example.org",
                "domain": "wikinews",
                "topic": "t",
                "has_image": False,
                "has_hyperlink": False,
                "last_updated": "2.1",
            }
            for i in ids
        ]
        if fmt == "parquet":
            pq.write_table(pa.Table.from_pylist(rows), root / split / f"{code}.parquet")
        else:
            (root / split / f"{code}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_flores_from_a_local_copy(tmp_path, fmt):
    write_flores(tmp_path, fmt=fmt)
    pairs = load_pairs("flores", "en", "de", flores_dir=str(tmp_path))
    assert [(p.src, p.ref) for p in pairs] == list(zip(ENGLISH, GERMAN))
    assert pairs[0].id == "flores-devtest-0" and describe("flores") == "FLORES+ devtest"


def test_flores_pairs_are_aligned_by_id_and_split(tmp_path, monkeypatch):
    write_flores(tmp_path, split="dev", german_ids=(2, 0))
    monkeypatch.setenv("MLX_SSBD_FLORES", str(tmp_path))
    pairs = load_pairs("flores:dev", "en", "de")
    assert [(p.src, p.ref) for p in pairs] == [(ENGLISH[0], GERMAN[0]), (ENGLISH[2], GERMAN[2])]
    with pytest.raises(DataUnavailable, match="devtest/eng_Latn.parquet"):
        flores_pairs("en", "de", "devtest", str(tmp_path))
    with pytest.raises(ValueError, match="unknown FLORES\\+ split 'test'"):
        load_pairs("flores:test", "en", "de", flores_dir=str(tmp_path))
    with pytest.raises(DataUnavailable, match="no FLORES\\+ code known for 'xx'"):
        load_pairs("flores", "en", "xx", flores_dir=str(tmp_path))


def test_flores_offline_names_what_to_download(tmp_path, monkeypatch):
    monkeypatch.delenv("MLX_SSBD_FLORES", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(DataUnavailable) as error:
        load_pairs("flores", "en", "ja")
    message = str(error.value)
    assert "huggingface.co/datasets/openlanguagedata/flores_plus" in message
    assert (
        "devtest/eng_Latn.parquet" in message
        and "devtest/jpn_Jpan.parquet" in message
        and "--flores-dir" in message
    )


WMT_XML = """<?xml version="1.0" encoding="utf-8"?>
<dataset id="wmttest2022">
  <collection id="general">
    <doc id="doc1" origlang="en">
      <src lang="en"><p><seg id="1">The council met on Tuesday.</seg><seg id="2">It  voted
      twice.</seg></p></src>
      <ref lang="de" translator="A"><p><seg id="1">Der Rat tagte am Dienstag.</seg><seg id="2">Er stimmte
      zweimal ab.</seg></p></ref>
    </doc>
  </collection>
</dataset>
"""


def write_sacrebleu_wmt22(home):
    """sacrebleu's cache after it downloaded and unpacked WMT22: the tarball and its files."""
    raw = home / "wmt22" / "raw"
    xml = raw / "wmt22-news-systems-1.1" / "xml" / "wmttest2022.en-de.all.xml"
    xml.parent.mkdir(parents=True)
    xml.write_text(WMT_XML, encoding="utf-8")
    with tarfile.open(raw / "wmt22.v1.1.tar.gz", "w:gz") as tar:
        tar.add(raw / "wmt22-news-systems-1.1", arcname="wmt22-news-systems-1.1")


def load_in_subprocess(spec, pair, home):
    """``$SACREBLEU`` is read when sacrebleu is imported: ask a fresh process."""
    code = (
        "import json, sys; from mlx_ssbd.evaluation.datasets import load_pairs\n"
        "try:\n    pairs = load_pairs(sys.argv[1], *sys.argv[2].split('-'))\n"
        "    print(json.dumps([[p.id, p.src, p.ref] for p in pairs]))\n"
        "except ValueError as e:\n    print('ERROR', e)"
    )
    env = {**os.environ, "SACREBLEU": str(home)}
    done = subprocess.run(
        [sys.executable, "-c", code, spec, pair], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_wmt_test_set_through_sacrebleus_cache(tmp_path):
    write_sacrebleu_wmt22(tmp_path)
    pairs = json.loads(load_in_subprocess("sacrebleu:wmt22", "en-de", tmp_path))
    assert pairs == [
        ["wmt22-0", "The council met on Tuesday.", "Der Rat tagte am Dienstag."],
        ["wmt22-1", "It voted twice.", "Er stimmte zweimal ab."],
    ]
    assert describe("sacrebleu:wmt22") == "wmt22 (sacrebleu)"


def test_a_wmt_set_that_cannot_be_had_says_what_to_do(tmp_path):
    assert "has no en-xx" in load_in_subprocess("sacrebleu:wmt22", "en-xx", tmp_path)
    assert "knows no test set 'wmt99'" in load_in_subprocess("sacrebleu:wmt99", "en-de", tmp_path)
    (tmp_path / "wmt22" / "raw").mkdir(parents=True)
    (tmp_path / "wmt22" / "raw" / "wmt22.v1.1.tar.gz").write_bytes(b"x")  # a cache copied without its files
    message = load_in_subprocess("sacrebleu:wmt22", "en-de", tmp_path)
    assert (
        message.startswith("ERROR sacrebleu could not get wmt22 en-de")
        and "sacrebleu -t wmt22 -l en-de" in message
    )


def test_bench_reads_flores_from_a_local_copy(model_dir, tmp_path):
    from mlx_ssbd_cli.main import cli

    from click.testing import CliRunner

    write_flores(tmp_path / "flores")
    out = tmp_path / "out"
    result = CliRunner().invoke(
        cli,
        [
            "bench",
            "--data",
            "flores",
            "--flores-dir",
            str(tmp_path / "flores"),
            "-t",
            "de",
            "--methods",
            "rt",
            "--limit",
            "2",
            "--model",
            model_dir,
            "--out",
            str(out),
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run"]["data_name"] == "FLORES+ devtest" and summary["configs"]["rt"]["items"] == 2
    missing = CliRunner().invoke(
        cli,
        [
            "bench",
            "--data",
            "flores",
            "--flores-dir",
            str(tmp_path / "flores"),
            "-t",
            "ja",
            "--model",
            "no-such-model",
            "--out",
            str(out),
        ],
    )
    assert missing.exit_code == 1 and "devtest/jpn_Jpan.parquet" in missing.output  # before any model loads
