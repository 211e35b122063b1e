"""Single-stream cost of the update machinery itself, old engine against new, on identical work.

Runs in the tree given by ``PYTHONPATH`` (``--tree-label`` names it): from the same prompt ids,
(a) greedy decoding of ``--tokens`` tokens and (b) an SSBD-style update (verify a draft of the
first half of that greedy output, then decode the rest), each repeated, timing the median. The
old tree runs ``decode.decode`` / ``verify.verify``; the new one ``engine.update.run``. The token
ids fed are identical in both, so any difference is the machinery, not the translation.
``--summarize DIR`` reads the ``before-*.json`` / ``after-*.json`` runs there (alternated, one per
process) and writes ``engine_overhead.md``: the median over runs, after / before.

    PYTHONPATH=OLD_TREE python benchmarks/engine_overhead.py --tree-label before --out before.json
    PYTHONPATH=.        python benchmarks/engine_overhead.py --tree-label after --out after.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import mlx_ssbd  # noqa: F401  (backend policy first)


def old_api():
    try:
        from mlx_ssbd.cache import TokenCache
        from mlx_ssbd.decode import decode
        from mlx_ssbd.verify import verify
    except ImportError:
        return None
    return TokenCache, decode, verify


def run_once(model, prompt, draft, n, api):
    """Seconds for one update from a cache holding the prompt minus its last token, and the output."""
    if api is not None:  # the old engine
        TokenCache, decode, verify = api
        cache = TokenCache(model)
        cache.forward(prompt[:-1])
        start = time.perf_counter()
        check = verify(cache, prompt, draft, 0.0)
        out = list(draft[: check.accepted])
        out += list(
            decode(cache, check.next_token, max_tokens=n - len(out), is_stop=lambda t: False, prefix=out)
        )
        return time.perf_counter() - start, out
    from mlx_ssbd.engine.cache import TokenCache
    from mlx_ssbd.engine.update import Job, run

    cache = TokenCache(model)
    cache.forward(prompt[:-1])
    start = time.perf_counter()
    outcome = run(
        cache, [(cache, Job(head=prompt, locked=(), draft=draft, beta=0.0, max_new=n, stops=lambda t: None))]
    )[0]
    return time.perf_counter() - start, outcome.output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--tree-label", default="this tree")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--summarize", type=Path, metavar="DIR")
    args = parser.parse_args()
    if args.summarize:
        summarize(args.summarize)
        return
    try:
        from mlx_ssbd.loading import load_model
    except ImportError:
        from mlx_ssbd.models.loading import load_model
    loaded = load_model(args.model)
    tok = loaded.tokenizer
    text = (
        "<|im_start|>system\nTranslate the English source text to German.<|im_end|>\n<|im_start|>user\n"
        "English: All human beings are born free and equal in dignity and rights.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    prompt = list(tok.encode(text, add_special_tokens=False))
    api = old_api()
    _, greedy = run_once(loaded.model, prompt, [], args.tokens, api)  # warm-up, and the draft source
    cases = {"decode": [], "verify+decode": []}
    outputs = {}
    for _ in range(args.repeats):
        for case, draft in (("decode", []), ("verify+decode", greedy[: args.tokens // 2])):
            seconds, out = run_once(loaded.model, prompt, draft, args.tokens, api)
            cases[case].append(seconds)
            outputs[case] = out
    result = {
        "tree": args.tree_label,
        "engine": "old" if api else "new",
        "model": loaded.name,
        "tokens": args.tokens,
        "median_s": {k: statistics.median(v) for k, v in cases.items()},
        "outputs_equal_greedy": {k: v == greedy for k, v in outputs.items()},
    }
    print(json.dumps(result))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))


def summarize(folder: Path) -> None:
    runs = {
        label: [json.loads(p.read_text()) for p in sorted(folder.glob(f"{label}-*.json"))]
        for label in ("before", "after")
    }
    first = runs["before"][0]
    lines = [
        f"# Engine machinery, old against new: {first['model']}, {first['tokens']} tokens",
        "",
        "The same token ids fed by the old engine (`decode.decode`, `verify.verify`) and the new one "
        "(`engine.update.run`), one process per run, alternating; each run's median of 7 repeats, then "
        f"the median over {len(runs['before'])} runs. Outputs equal plain greedy decoding in every run: "
        f"{all(all(r['outputs_equal_greedy'].values()) for rs in runs.values() for r in rs)}.",
        "",
        "| case | before s | after s | after / before |",
        "|---|---|---|---|",
    ]
    for case in first["median_s"]:
        b = statistics.median(r["median_s"][case] for r in runs["before"])
        a = statistics.median(r["median_s"][case] for r in runs["after"])
        lines.append(f"| {case} | {b:.3f} | {a:.3f} | {a / b:.3f} |")
    (folder / "engine_overhead.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
