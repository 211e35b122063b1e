"""Where does the quality of biased verification go? Every draft token accepted under bias, examined.

Sentences are revealed ``--lag`` words at a time and translated with SSBD at ``--beta`` (greedy);
every verify pass is recorded: for each draft position the model's probability of the draft token
p[y], its largest probability max p, the margin max p - p[y], the entropy, the position, the token's
*age* (how many consecutive earlier outputs of the segment already held it with the same prefix)
and the decision. A **biased accept** is a draft token accepted where greedy decoding (β = 0) would
have chosen another token. Each sentence is also translated by RT (greedy on the full source: what
RT commits), which labels a biased accept whose prefix still equals RT's final translation:

* *right*: RT's final translation has the same token there (the bias kept a token that the full
  source confirms; the partial source had made the model waver);
* *wrong*: RT's final translation has another token there (the bias kept a token RT changes).

Accepts after the first point where an output left RT's final translation are not labelled. For
the final update, the share of the committed caption that lies after its first biased accept is
what the bias locked in against RT.

The verify decisions are observed by wrapping ``engine.update.decide`` in this process (an
instrument of this script; the engine is unchanged), which recomputes the softmax of the verify
rows on the host: timings of this run mean nothing.

    python -m benchmarks.quality.acceptance_analysis --model qwen2.5-coder-0.5b \
        --data benchmarks/data/talk-sentences/en-de.dev.jsonl --out DIR
"""

from __future__ import annotations

import json
from pathlib import Path

import mlx_ssbd  # noqa: F401  (backend policy first)
from benchmarks.common import data_pairs, machine_line, relative
from benchmarks.harness import Benchmark, markdown_table, option
from mlx_ssbd.engine import update as engine_update
from mlx_ssbd.engine.cache import common_prefix_len
from mlx_ssbd.evaluation.report import pyplot, save_figure
from mlx_ssbd.evaluation.streams import lag_updates
from mlx_ssbd.live.methods import method_config
from mlx_ssbd.models.loading import load_model

import mlx.core as mx
import numpy as np

FEATURES = ("p_draft", "p_max", "margin", "entropy", "position", "from_end", "age")


class Recorder:
    """Wraps ``decide``: keeps the first verify pass of each update (the draft check)."""

    def __init__(self, decide):
        self.decide, self.passes = decide, []

    def __call__(self, rows, draft, *args, **kwargs):
        if draft and self.passes and self.passes[-1] is None:
            probs = np.array(mx.softmax(rows[: len(draft)].astype(mx.float32), axis=-1, precise=True))
            y = np.array(draft)
            p_draft = probs[np.arange(len(y)), y]
            self.passes[-1] = {
                "p_draft": p_draft.tolist(),
                "p_max": probs.max(axis=-1).tolist(),
                "argmax": probs.argmax(axis=-1).tolist(),
                "entropy": (-(probs * np.log(np.clip(probs, 1e-12, 1))).sum(axis=-1)).tolist(),
            }
        return self.decide(rows, draft, *args, **kwargs)

    def start_update(self):
        self.passes.append(None)


def analyse_sentence(translator, rt, recorder, pair, lag) -> tuple[list[dict], dict]:
    rt.reset()
    final_rt = list(rt.update(pair.src, final=True).output_ids)
    translator.reset()
    earlier, tokens, summary = [], [], {}
    updates = lag_updates(pair.src, lag)
    for index, source in enumerate(updates):
        draft = earlier[-1] if earlier else []  # the previous output (no mask-k, nothing locked)
        recorder.start_update()
        result = translator.update(source.text, final=source.final)
        output, seen = list(result.output_ids), recorder.passes[-1]
        accepted = result.stats.accepted
        first_biased = None
        for i in range(accepted if seen else 0):
            if draft[i] == seen["argmax"][i] or seen["p_draft"][i] >= seen["p_max"][i]:
                continue  # greedy would have taken it too
            first_biased = i if first_biased is None else first_biased
            age = 0
            for old in reversed(earlier):
                if common_prefix_len(old, draft) <= i:
                    break
                age += 1
            label = None
            if common_prefix_len(output, final_rt) >= i:
                label = "right" if i < len(final_rt) and final_rt[i] == draft[i] else "wrong"
            tokens.append(
                {
                    "item": pair.id,
                    "update": index,
                    "final": source.final,
                    "label": label,
                    "p_draft": seen["p_draft"][i],
                    "p_max": seen["p_max"][i],
                    "margin": seen["p_max"][i] - seen["p_draft"][i],
                    "entropy": seen["entropy"][i],
                    "position": i,
                    "from_end": len(draft) - 1 - i,
                    "age": age,
                    "first_in_update": first_biased == i,
                }
            )
        if source.final:
            locked_in = 0 if first_biased is None else len(output) - first_biased
            summary = {
                "item": pair.id,
                "final_tokens": len(output),
                "locked_in": locked_in,
                "same_as_rt": output == final_rt,
                "caption": result.output,
                "rt": rt.tokenizer.decode(final_rt).strip(),
            }
        earlier.append(output)
    return tokens, summary


def describe(tokens: list[dict]) -> dict:
    out = {}
    for label in ("right", "wrong", None):
        group = [t for t in tokens if t["label"] == label]
        out[str(label)] = {
            "count": len(group),
            **{f: round(float(np.median([t[f] for t in group])), 3) for f in FEATURES if group},
        }
    return out


def plot(tokens: list[dict], beta: float, path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    bound = beta / (1 - beta)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for final, colour, name in ((False, "tab:blue", "live update"), (True, "tab:red", "committing update")):
        group = [t for t in tokens if t["final"] == final]
        axes[0].scatter(
            [t["p_max"] for t in group],
            [t["p_draft"] for t in group],
            s=14,
            alpha=0.6,
            color=colour,
            label=f"{name} ({len(group)})",
        )
    grid = np.linspace(0, 1, 50)
    axes[0].plot(
        grid,
        np.clip(grid - bound, 0, None),
        "k--",
        lw=1,
        label=f"mixture β={beta:g}: p[y] ≥ max p − {bound:.2f}",
    )
    axes[0].plot(grid, (1 - beta) * grid, "k:", lw=1, label=f"ratio β={beta:g}: p[y] ≥ {1 - beta:.2f} max p")
    axes[0].set(
        xlabel="max p (the model's top choice)",
        ylabel="p[y] (the draft token kept)",
        title="Draft tokens kept only because of the bias",
    )
    axes[0].legend(fontsize=8)
    axes[1].hist([t["p_max"] for t in tokens], bins=np.linspace(0, 1, 21), color="grey")
    axes[1].axvline(bound, color="k", ls="--", lw=1, label=f"below {bound:.2f}: the mixture keeps any token")
    axes[1].set(xlabel="max p at the kept token", ylabel="biased accepts", title="How sure the model was")
    axes[1].legend(fontsize=8)
    save_figure(plt, fig, path)


def measure(args) -> dict:
    sets = [(data, data_pairs(data, args.limit)) for data in args.data]
    loaded = load_model(args.model)
    make = lambda config: loaded.translator(args.target, config=config)
    loops = {"cut_loops": not args.keep_loops}
    translator, rt = make(method_config("ssbd", beta=args.beta, **loops)), make(method_config("rt", **loops))
    recorder = Recorder(engine_update.decide)
    engine_update.decide = recorder
    tokens, summaries = [], []
    for data, pairs in sets:
        for pair in pairs:
            found, summary = analyse_sentence(translator, rt, recorder, pair, args.lag)
            tokens += found
            summaries.append({**summary, "data": Path(data).name})
            print(f"{pair.id}: {len(found)} biased accepts", flush=True)

    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "biased_accepts.jsonl", "w") as f:
        for t in tokens:
            f.write(json.dumps(t) + "\n")
    plot(tokens, args.beta, args.out / "biased_accepts.png")
    finals = [t for t in tokens if t["final"] and t["first_in_update"]]
    return {
        "model": args.model,
        "beta": args.beta,
        "lag": args.lag,
        "data": [relative(d) for d in args.data],
        "sentences": len(summaries),
        "biased_accepts": describe(tokens),
        "committed_like_rt": sum(s["same_as_rt"] for s in summaries),
        "final_updates_with_biased_accept": len(finals),
        "locked_in_share": round(
            sum(s["locked_in"] for s in summaries) / max(1, sum(s["final_tokens"] for s in summaries)), 3
        ),
        "final_first_biased": describe(finals),
        "sentences_detail": summaries,
    }


def render(result: dict) -> list[str]:
    labels = {
        "right": "right (RT's final has it)",
        "wrong": "wrong (RT's final has another)",
        "None": "unlabelled",
    }
    lines = [
        f"{machine_line(result['machine'])} {result['model']}, β = {result['beta']}, lag {result['lag']}, "
        f"{result['sentences']} sentences of {', '.join(f'`{d}`' for d in result['data'])}.",
        "",
        f"Committed captions equal to RT's: {result['committed_like_rt']} of {result['sentences']}; final "
        f"updates with a biased accept: {result['final_updates_with_biased_accept']}; share of the committed "
        f"tokens after a final update's first biased accept: {result['locked_in_share']:.1%}. Medians per "
        "group of biased accepts (draft tokens kept only because of the bias); plot: `biased_accepts.png`.",
        "",
    ]
    return lines + markdown_table(
        ["biased accepts", "count", *FEATURES],
        [
            (labels[label], group["count"], *(group.get(f, "") for f in FEATURES))
            for label, group in result["biased_accepts"].items()
        ],
    )


BENCHMARK = Benchmark(
    "acceptance_analysis",
    "Where the bias's quality goes: every draft token accepted only because of it",
    measure,
    render,
    options=(
        option("--model", default="qwen2.5-coder-0.5b"),
        option("--data", action="append", required=True, help="sentence pairs JSONL (repeatable)"),
        option("--target", default="de"),
        option("--beta", type=float, default=0.2),
        option("--lag", type=int, default=3),
        option("--limit", type=int, default=0),
        option(
            "--keep-loops",
            action="store_true",
            help="decode as the paper does, without the rule that cuts decoding loops",
        ),
    ),
    about=__doc__,
)

if __name__ == "__main__":
    BENCHMARK.main()
