"""What rounding x costs the model: the block size of the CPU kernel's int8 steps, measured.

The kernel rounds each row of x to int8 steps, one step per block of 32 values, before its integer
products (``extension.rounded_activations``). A step shared by more values (llama.cpp's Q8_K shares
one per 256) would let a kernel scale its integer sums once per larger block, less fp32 work beside
its int8 products, but rounds coarser. This measures what each size costs the model's predictions:
the model's weights exactly as stored, dequantized (``load_model(weights="dense")``), multiplied in
fp32 by x rounded per block of each size before every linear layer (and a tied output layer),
against the same with x exact, on the reference translations of the dev talk's sentences after
their prompts (teacher forcing: each reference token's next-token distribution, the default
prompt without examples). It reports the mean KL divergence of each rounded distribution from the
exact one (nats per token) and how often their most likely tokens agree. Block 32 is the kernel's
arithmetic up to the order of its fp32 sums.

    python -m benchmarks.engine.x_rounding --out benchmarks/results/DIR/x-rounding-1.5b
"""

from __future__ import annotations

import json

import mlx_ssbd  # noqa: F401  (backend policy first, before mlx.core)
from benchmarks.common import DATA, machine_line
from benchmarks.harness import Benchmark, markdown_table, option, whole_numbers
from mlx_ssbd.live.prompt import PromptBuilder
from mlx_ssbd.models.loading import load_model
from mlx_ssbd.platform.extension import rounded_activations

import mlx.core as mx
import mlx.nn as nn

SENTENCES = DATA / "talk-sentences" / "en-de.dev.jsonl"
ROUNDING = {"block": None}  # the block size x is rounded per while the rounded layers run; None: exact


def _rounded(x):
    return x if ROUNDING["block"] is None else rounded_activations(x, ROUNDING["block"])


class RoundedLinear(nn.Linear):
    def __call__(self, x):
        return super().__call__(_rounded(x))


class RoundedEmbedding(nn.Embedding):
    def as_linear(self, x):
        return super().as_linear(_rounded(x))


def round_inputs(model) -> int:
    """Make every linear layer of ``model`` (and each embedding's ``as_linear``, a tied output
    layer) round its input as ``ROUNDING`` says; the count."""
    count = 0
    for _, module in model.named_modules():
        if type(module) is nn.Linear:
            module.__class__ = RoundedLinear
        elif type(module) is nn.Embedding:
            module.__class__ = RoundedEmbedding
        else:
            continue
        count += 1
    return count


def teacher_forced(loaded, pairs) -> list[tuple[mx.array, int]]:
    """For each (source, reference): the prompt's ids followed by the reference's, and where the
    reference's predictions start."""
    builder = PromptBuilder(loaded.tokenizer, loaded.family, "en", "de")
    out = []
    for source, reference in pairs:
        prompt = list(builder.build(source).ids)
        target = loaded.tokenizer.encode(reference, add_special_tokens=False)
        out.append((mx.array(prompt + target)[None], len(prompt) - 1))
    return out


def log_probs(model, ids: mx.array, start: int) -> mx.array:
    logits = model(ids)[0, start:-1].astype(mx.float32)
    return logits - mx.logsumexp(logits, axis=-1, keepdims=True)


def measure(args) -> dict:
    blocks = args.blocks
    if args.sentences < 1:
        raise SystemExit("x_rounding: --sentences must be at least 1")
    loaded = load_model(args.model, weights="dense")
    layers = round_inputs(loaded.model)
    rows = [json.loads(line) for line in SENTENCES.read_text().splitlines() if line.strip()]
    inputs = teacher_forced(loaded, [(r["src"], r["ref"]) for r in rows[: args.sentences]])
    kl = {b: 0.0 for b in blocks}
    agree = {b: 0 for b in blocks}
    tokens = 0
    for ids, start in inputs:
        ROUNDING["block"] = None
        exact = log_probs(loaded.model, ids, start)
        top = mx.argmax(exact, axis=-1)
        tokens += exact.shape[0]
        for block in blocks:
            ROUNDING["block"] = block
            rounded = log_probs(loaded.model, ids, start)
            kl[block] += mx.sum(mx.exp(exact) * (exact - rounded)).item()
            agree[block] += mx.sum(mx.argmax(rounded, axis=-1) == top).item()
    ROUNDING["block"] = None
    return {
        "model": loaded.name,
        "layers_rounded": layers,
        "sentences": len(inputs),
        "tokens": tokens,
        "rows": [
            {"block": b, "kl_nats": round(kl[b] / tokens, 6), "top1_agreement": round(agree[b] / tokens, 4)}
            for b in blocks
        ],
    }


def render(result: dict) -> list[str]:
    return [
        machine_line(result["machine"]),
        "",
        f"{result['sentences']} sentences of the dev talk, {result['tokens']} reference tokens after their "
        f"prompts; x rounded before each of {result['layers_rounded']} linear layers (the weights as stored, "
        "dequantized, in fp32). KL: the mean divergence of the rounded next-token distribution from the "
        "exact one; agreement: the share of tokens whose most likely next token is the same.",
        "",
        *markdown_table(
            ["x rounded per", "KL nats per token", "KL against block 32", "top-1 agreement"],
            [
                (
                    f"{r['block']} values" + (" (the kernel)" if r["block"] == 32 else ""),
                    f"{r['kl_nats']:.5f}",
                    _against(r, result["rows"]),
                    f"{r['top1_agreement']:.2%}",
                )
                for r in result["rows"]
            ],
        ),
        "",
    ]


def _against(row: dict, rows: list[dict]) -> str:
    base = next((r["kl_nats"] for r in rows if r["block"] == 32), None)
    return f"{row['kl_nats'] / base:.1f}x" if base else ""


BENCHMARK = Benchmark(
    "x_rounding",
    lambda r: f"What rounding x costs the model ({r['model']})",
    measure,
    render,
    options=(
        option("--model", default=None),
        option("--blocks", type=whole_numbers(1, "block sizes"), default="32,64,128,256"),
        option("--sentences", type=int, default=24),
    ),
    about=__doc__,
)

if __name__ == "__main__":
    BENCHMARK.main()
