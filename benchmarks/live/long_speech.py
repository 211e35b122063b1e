"""Where long speech is cut: captions of ASR sentences longer than the segmenter's ``max_words``.

Each talk's real ASR partials (``benchmarks/data/asr-partials``: streaming Whisper tiny.en on a
synthetic recording of the talk; see its README) are replayed into a ``LiveSession`` as ``mlx-ssbd
listen`` builds it (its translators' source language, English), every partial translated in
order, no pause rule (the partials carry no audio times): the segmenter commits at the ASR's
sentence ends and finals and, where an ASR sentence runs past ``max_words`` words because the
recognizer missed a sentence end, where its length rule cuts. The same again with the length rule
off (``max_words`` 0: each ASR sentence one caption, however long: the captions a cut should
not make worse). Reported per talk and setting: the length cuts (each caption's source and
translation), and chrF++ of the items' captions (each item's joined) against their references,
over the items the length rule cut and over all items.

    python -m benchmarks.live.long_speech --model qwen2.5-coder-1.5b --out DIR
"""

from __future__ import annotations

import mlx_ssbd  # noqa: F401  (loads the BLAS before mlx.core)
from benchmarks.common import DATA, machine_line, relative
from benchmarks.harness import Benchmark, markdown_table, option
from mlx_ssbd.evaluation.streams import read_pairs, read_partials
from mlx_ssbd.live.methods import method_config
from mlx_ssbd.live.segmenter import SegmenterConfig
from mlx_ssbd.live.session import CaptionCommit, LiveSession
from mlx_ssbd.models.loading import load_model

from sacrebleu.metrics import CHRF

TALKS = {part: DATA / "asr-partials" / f"en-de.{part}.jsonl" for part in ("dev", "test")}


def captions(loaded, partials: list, method: str, max_words: int) -> list[dict]:
    """The commits of one replay of ``partials``: segment id, why, source and caption."""
    translator = loaded.translator("de", source_lang="en", config=method_config(method))
    session = LiveSession(
        translator, segmenter=SegmenterConfig(max_words=max_words, pause_s=None), latest_wins=False
    )
    for partial in partials:
        session.push(partial)
    session.close()
    return [
        {"segment": event.segment, "reason": event.reason, "source": event.source, "text": event.text}
        for event in session.run()
        if isinstance(event, CaptionCommit)
    ]


def scores(commits: list[dict], refs: dict[str, str], ids: list[str]) -> float:
    """Corpus chrF++ of the items ``ids``, each its commits' captions joined."""
    hyps = [" ".join(c["text"] for c in commits if c["segment"] == item) for item in ids]
    return round(CHRF(word_order=2).corpus_score(hyps, [[refs[item] for item in ids]]).score, 1)


def measure(args) -> dict:
    loaded = load_model(args.model)
    result = {"model": loaded.name, "method": args.method, "max_words": args.max_words, "talks": {}}
    for part in args.talks.split(","):
        path = TALKS[part]
        partials = list(read_partials(str(path)))
        refs = {pair.id: pair.ref for _, pair in read_pairs(str(path.with_suffix(".refs.jsonl")))}
        ids = list(dict.fromkeys(p.segment_id for p in partials))
        runs = {"cut": captions(loaded, partials, args.method, args.max_words)}
        runs["uncut"] = captions(loaded, partials, args.method, 0)
        cut_ids = list(dict.fromkeys(c["segment"] for c in runs["cut"] if c["reason"] == "length"))
        result["talks"][part] = {
            "data": relative(path),
            "items": len(ids),
            "partials": len(partials),
            "cut_items": cut_ids,
            "runs": {
                name: {
                    "chrf_cut_items": scores(commits, refs, cut_ids) if cut_ids else None,
                    "chrf_all": scores(commits, refs, ids),
                    "commits": commits,
                }
                for name, commits in runs.items()
            },
        }
    return result


def render(result: dict) -> list[str]:
    lines = [
        f"{machine_line(result['machine'])} {result['model']}, method {result['method']}, en-de; the segmenter "
        f"as `listen` sets it (max_words {result['max_words']}, no pause rule), every partial translated; "
        "`uncut`: the length rule off. Real ASR partials of a synthetic recording (see the data's README). "
        "chrF++: corpus over items, each item's captions joined. See the script's docstring.",
        "",
        *markdown_table(
            ["talk", "items", "items cut", "chrF++ cut items: cut", "uncut", "chrF++ all items: cut", "uncut"],
            [
                (part, t["items"], len(t["cut_items"]), t["runs"]["cut"]["chrf_cut_items"],
                 t["runs"]["uncut"]["chrf_cut_items"], t["runs"]["cut"]["chrf_all"], t["runs"]["uncut"]["chrf_all"])
                for part, t in result["talks"].items()
            ],
        ),
        "",
        "The captions of the items the length rule cut:",
        "",
    ]  # fmt: skip
    rows = []
    for part, talk in result["talks"].items():
        for item in talk["cut_items"]:
            for name, run in talk["runs"].items():
                rows += [
                    (part, item, name, c["reason"], c["source"], c["text"])
                    for c in run["commits"]
                    if c["segment"] == item
                ]
    return lines + markdown_table(["talk", "item", "setting", "commit", "source", "caption"], rows)


BENCHMARK = Benchmark(
    "long_speech",
    "Where long speech is cut: the segmenter's length rule on real ASR partials",
    measure,
    render,
    options=(
        option("--model", default="qwen2.5-coder-1.5b"),
        option("--method", default="ssbd"),
        option("--max-words", type=int, default=SegmenterConfig.max_words),
        option("--talks", default="dev,test", help="dev, test or both, comma-separated"),
    ),
    about=__doc__,
)

if __name__ == "__main__":
    BENCHMARK.main()
