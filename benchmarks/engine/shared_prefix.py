"""How long a new session waits for its first caption, with the prompt's shared prefix computed
once for every session (``engine.prefixes``, as the service does) and without.

``--sessions`` new translators of one model, language and examples are started one after another
in one process, each translating the talk's first ASR partial (``benchmarks/data/talks``); with
sharing, each is seeded from one ``Prefixes`` store before its first update (the first session
feeds the prefix, the others copy it), without, each feeds its whole prompt. The two kinds take
turns (a shared session, then an unshared one), so the machine's drift hits both alike. Reported
per kind: the first session's and the later sessions' median time to the first caption (seeding
included), and the tokens their first update fed.

    python -m benchmarks.engine.shared_prefix --model qwen2.5-coder-1.5b --sessions 4 --out DIR
"""

from __future__ import annotations

import statistics
import time

import mlx_ssbd  # noqa: F401  (backend policy first)
from benchmarks.common import DATA, machine_line
from benchmarks.harness import Benchmark, markdown_table, option
from mlx_ssbd.engine.prefixes import Prefixes
from mlx_ssbd.evaluation.streams import read_partials
from mlx_ssbd.models.loading import load_model

TALK = DATA / "talks" / "talk-partials.jsonl"
KINDS = ("shared", "unshared")


def first_caption(loaded, target: str, source: str, prefixes: Prefixes | None) -> dict:
    """A new translator's first update: seconds to its caption and tokens fed (a prefix the
    seeding fed included)."""
    start = time.perf_counter()
    translator = loaded.translator(target)
    seeded = 0
    if prefixes is not None:
        computed = prefixes.computed
        held = prefixes.seed(translator.cache, translator.prompts.prefix)
        seeded = held if prefixes.computed > computed else 0
    update = translator.update(source)
    return {
        "seconds": round(time.perf_counter() - start, 3),
        "fed": seeded + update.stats.tokens_fed,
        "prefix": len(translator.prompts.prefix),
    }


def measure(args) -> dict:
    loaded = load_model(args.model)
    source = next(iter(read_partials(str(TALK)))).text
    prefixes = Prefixes()
    runs = {kind: [] for kind in KINDS}
    for i in range(args.sessions):
        for kind in KINDS:
            run = first_caption(loaded, args.target, source, prefixes if kind == "shared" else None)
            runs[kind].append(run)
            print(kind, i, run, flush=True)
    examples = len(loaded.examples.entries.get(args.target, {})) if loaded.examples is not None else 0
    return {
        "model": args.model,
        "target": args.target,
        "examples": examples,
        "source": source,
        "sessions": args.sessions,
        "runs": runs,
    }


def render(result: dict) -> list[str]:
    rows = []
    for kind, runs in result["runs"].items():
        later = runs[1:] or runs
        rows.append(
            (kind, f"{runs[0]['seconds']:.2f}", f"{statistics.median(r['seconds'] for r in later):.2f}",
             runs[0]["fed"], statistics.median(r["fed"] for r in later))
        )  # fmt: skip
    prefix = result["runs"]["shared"][0]["prefix"]
    return [
        f"{machine_line(result['machine'])} `{result['model']}` into {result['target']}, "
        f"{result['examples'] or 'no'} example translations of its own in the prompt (a shared prefix of "
        f"{prefix} tokens); each session's first update "
        f'translates the talk\'s first partial ("{result["source"]}"). {result["sessions"]} sessions of '
        "each kind, taking turns; seconds from building the session's translator to its first caption, "
        "the prefix's seeding included; tokens fed, the seeding's included.",
        "",
        *markdown_table(
            [
                "prefix",
                "first session s",
                "later sessions s (median)",
                "first session fed",
                "later sessions fed",
            ],
            rows,
        ),
    ]


BENCHMARK = Benchmark(
    "shared_prefix",
    lambda r: f"A new session's first caption, with the prompt's prefix shared and without ({r['model']})",
    measure,
    render,
    options=(
        option("--model", default="qwen2.5-coder-1.5b"),
        option("--target", default="de"),
        option("--sessions", type=int, default=4),
    ),
    about=__doc__,
)

if __name__ == "__main__":
    BENCHMARK.main()
