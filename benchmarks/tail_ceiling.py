"""What guessing SSBD's new tail could save on ordinary sentences, replayed from a bench run (#14).

After SSBD's verify pass accepts a prefix of the old draft, the rest of the new output is decoded
one token per forward pass. This replays a finished ``bench`` run offline (its ``results.jsonl``,
RT and one SSBD method, greedy) with the measured cost of a pass of w tokens in decode steps
(a ``verify_cost.json`` of the same model, linear between measured widths), and reports:

* **the cost model against the run**: RT's and SSBD's updates priced pass by pass (RT: the prompt
  tail, then one step per token; SSBD: the verify pass, then one step per token), and the speedup
  that gives next to the measured one;
* **a guess in the verify pass** (what ``Job.guess`` does): if the first fraction f of the tokens
  SSBD decodes one by one were guessed right and fed after the draft, the update is one wider
  pass plus the rest; the speedup for f = 0.25 .. 1, and the least f that reaches the target;
* **n-gram pools** (prompt lookup; lookahead decoding's pool): while decoding, when the last ``n``
  output tokens occur in earlier text, the next up to ``--max-len`` tokens there are fed with the
  last token and accepted while they match. Pools: ``source`` (the update's source, what
  ``ssbd-plus`` uses), ``this sentence`` (the item's earlier outputs), ``session`` (the final
  outputs of the items before, as a live session's committed segments), and all three.

The records keep text, not token ids: for the pools, outputs are re-tokenized with the model's
tokenizer (the decoded tokens they give are counted beside the run's own). Nothing here runs a
model; it prices what the run did.

    python benchmarks/tail_ceiling.py RUN_DIR --model qwen2.5-coder-1.5b --costs DIR/verify_cost.json
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path

from mlx_ssbd.engine.lookahead import Proposer
from mlx_ssbd.models.loading import resolve
from mlx_ssbd.models.registry import ModelError, model_dir

END = -1  # stands for the end-of-turn token the model decodes last
FRACTIONS = (0.25, 0.5, 0.75, 1.0)


class PassCost:
    """A pass of w tokens in decode steps, linear between the widths measured (and beyond the last
    two). A wider pass is never priced below a narrower one (a measured dip is timing noise)."""

    def __init__(self, pass_over_step: dict[str, float]):
        self.points, most = [], 0.0
        for width, ratio in sorted((int(width), ratio) for width, ratio in pass_over_step.items()):
            most = max(most, ratio)
            self.points.append((width, most))

    def __call__(self, width: int) -> float:
        points = self.points
        for (w0, c0), (w1, c1) in zip(points, points[1:]):
            if width <= w1 or (w1, c1) == points[-1]:
                return c0 + (c1 - c0) * (width - w0) / (w1 - w0)
        return points[0][1]


def diverged_before_end(record: dict) -> int:
    """How many tokens before the end of its draft an SSBD update diverged (0: the whole draft held)."""
    return record["draft_tokens"] - record["accepted"]


def decoded_one_by_one(record: dict) -> int:
    """The update's passes after its first: each feeds one token (no proposals: checked)."""
    return record["forward_passes"] - 1


def first_width(record: dict) -> int:
    """Tokens fed in the update's first pass (the prompt tail, with the draft for SSBD)."""
    return record["tokens_fed"] - decoded_one_by_one(record)


def update_costs(record: dict, cost: PassCost, guessed: float = 0.0, wasted: int = 0) -> float:
    """One update of the run in decode steps: its first pass, then one step per token decoded;
    ``guessed`` of those tokens (a fraction) fed in the first pass, with ``wasted`` more tokens of
    guesses that do not hold."""
    steps = decoded_one_by_one(record)
    moved = round(guessed * steps)
    return cost(first_width(record) + moved + wasted) + steps - moved


def draft_model_guesses(records: list[dict]) -> list[dict]:
    """Per method that guessed tails with a draft model (``Job.guess``): tokens guessed and held."""
    methods = sorted({r["config"] for r in records if r.get("tail_guessed")})
    return [
        {
            "method": m,
            "guessed": sum(r["tail_guessed"] for r in records if r["config"] == m),
            "held": sum(r["tail_accepted"] for r in records if r["config"] == m),
        }
        for m in methods
    ]


def lookup_passes(tail: Sequence[int], history: Sequence[int], pools: list[list[int]], n: int, max_len: int):
    """(tokens fed per pass, tokens accepted from guesses) to decode ``tail`` after ``history``."""
    # the engine's lookup, uncapped
    propose = Proposer(pools=pools, n=n, pool_len=max_len, max_attempts=len(tail))
    widths: list[int] = []
    accepted = done = 0
    while done < len(tail):
        guess = propose([*history, *tail[:done]])
        hit = 0
        while hit < len(guess) and done + hit < len(tail) and guess[hit] == tail[done + hit]:
            hit += 1
        widths.append(1 + len(guess))  # the last token and the guess, in one pass
        accepted += hit
        done += hit + 1  # the pass also yields the model's own next token
    return widths, accepted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a bench output directory (with results.jsonl)")
    parser.add_argument(
        "--method", default="ssbd-b0.2", help="the SSBD config in results.jsonl (without proposals)"
    )
    parser.add_argument(
        "--model", required=True, help="the model (card or directory) whose tokenizer the run used"
    )
    parser.add_argument("--costs", type=Path, required=True, help="a verify_cost.json of the same model")
    parser.add_argument("--target", type=float, default=2.5, help="the speedup over RT sought")
    parser.add_argument("-n", type=int, default=2, help="tokens matched by the n-gram lookup")
    parser.add_argument("--max-len", type=int, default=2, help="most tokens an n-gram guess proposes")
    args = parser.parse_args()

    if args.n < 1 or args.max_len < 1:
        raise SystemExit("-n and --max-len must be at least 1")
    try:
        card, location = resolve(args.model)
        records = [
            json.loads(line) for line in (args.run / "results.jsonl").read_text().splitlines() if line.strip()
        ]
        costs = json.loads(args.costs.read_text())
    except (OSError, ValueError, ModelError) as error:  # ValueError: not JSON
        raise SystemExit(f"tail_ceiling: {type(error).__name__}: {error}") from None
    if not isinstance(costs, dict) or not costs.get("pass_over_step"):
        raise SystemExit(f"tail_ceiling: {args.costs} is not a verify_cost.py report (no pass_over_step)")
    cost = PassCost(costs["pass_over_step"])
    args.tokenizer = str(model_dir(card)) if card else location
    greedy = [r for r in records if r.get("temperature", 0.0) == 0.0]
    rt, ssbd = ([r for r in greedy if r["config"] == name] for name in ("rt", args.method))
    if not rt or not ssbd:
        raise SystemExit(f"{args.run / 'results.jsonl'} needs greedy records of 'rt' and {args.method!r}")
    if any(r.get("proposals", 0) for r in ssbd):
        raise SystemExit(f"{args.method!r} made proposals: its passes' widths are not in the records")
    rt_steps = sum(update_costs(r, cost) for r in rt)
    measured = sum(r["wall_s"] for r in rt) / sum(r["wall_s"] for r in ssbd)

    def speedup(guessed: float) -> float:
        return rt_steps / sum(update_costs(r, cost, guessed) for r in ssbd)

    needed = next((f / 100 for f in range(101) if speedup(f / 100) >= args.target), None)
    decoded = sum(map(decoded_one_by_one, ssbd))

    def placed(cuts: tuple[int, ...]) -> dict:
        """Guesses fed after the draft less its last ``c`` tokens, for each ``c`` in ``cuts`` (a
        tree of lines in one pass): each as long as the tail and right, but one can only help an
        update that diverges exactly where it sits; the others' tokens are fed in vain."""

        def fits(r: dict) -> bool:
            at = diverged_before_end(r)
            return at in cuts and (r["draft_tokens"] > at or at == 0)

        helped = [r for r in ssbd if fits(r)]
        steps = sum(
            update_costs(r, cost, 1.0 if fits(r) else 0.0, decoded_one_by_one(r) * (len(cuts) - fits(r)))
            for r in ssbd
        )
        share = sum(map(decoded_one_by_one, helped)) / decoded
        return {
            "cuts": list(cuts),
            "updates": len(helped),
            "share": round(share, 3),
            "speedup": round(rt_steps / steps, 3),
        }

    result = {
        "run": args.run.name,
        "method": args.method,
        "updates": len(ssbd),
        "costs": args.costs.parent.name,
        "measured_speedup": round(measured, 3),
        "modeled_speedup": round(speedup(0.0), 3),
        "rt_steps": round(rt_steps, 1),
        "decoded_one_by_one": decoded,
        "draft_model_guesses": draft_model_guesses(greedy),
        "verify_guess": {str(f): round(speedup(f), 3) for f in FRACTIONS},
        "fraction_for_target": needed,
        "target": args.target,
        "placed": [placed(cuts) for cuts in ((0,), (1,), (0, 1))],
        "pools": pool_rows(args, ssbd, cost, rt_steps),
    }
    drafted = [
        f"A draft model's guesses in the same run (`{g['method']}`): {g['guessed']} tokens guessed, {g['held']} "
        f"held, {100 * g['held'] / decoded:.0f}% of the tokens {args.method} decoded one by one.\n"
        for g in result["draft_model_guesses"]
    ]
    lines = [
        f"# What guessing the new tail could save: `{args.run.name}` ({args.method} against RT, "
        f"{len(ssbd)} updates, pass costs from `{args.costs.parent.name}`)",
        "",
        f"Cost model: RT {rt_steps:.0f} decode steps; speedup modeled {result['modeled_speedup']:.2f}x, "
        f"measured {measured:.2f}x (wall time of the run). SSBD decoded {decoded} tokens one by one "
        f"({decoded / len(ssbd):.1f} per update).",
        "",
        *drafted,
        "**A guess fed in the verify pass**, right for the first fraction f of those tokens:",
        "",
        "| f | " + " | ".join(f"{f:g}" for f in FRACTIONS) + " |",
        "|---|" + "---|" * len(FRACTIONS),
        "| speedup over RT (modeled) | " + " | ".join(f"{speedup(f):.2f}x" for f in FRACTIONS) + " |",
        "",
        f"{args.target}x needs f >= {needed:.2f}."
        if needed is not None
        else f"{args.target}x is out of reach even with f = 1.",
        "",
        "A guess rides on one line of the draft: fed after the whole draft (what `Job.guess` does) it "
        "helps only updates that keep the whole draft (or have none yet); after the draft less its last token, "
        "only those that diverge there. Priced as guesses as long as the tail and always right, on one line or "
        "on two (a tree in one pass), the tokens of a line that cannot help fed in vain:",
        "",
        "| guess fed after | updates it can help | their share of the tokens decoded | speedup over RT (modeled) |",
        "|---|---|---|---|",
    ]
    names = {0: "the whole draft", 1: "the draft less its last token"}
    for row in result["placed"]:
        where = " and ".join(names[cut] for cut in row["cuts"])
        lines.append(
            f"| {where} | {row['updates']} of {len(ssbd)} | {100 * row['share']:.0f}% | {row['speedup']:.2f}x |"
        )
    lines += [
        "",
        f"**n-gram pools while decoding** (n={args.n}, up to {args.max_len} tokens a guess):",
        "",
        "| pool | decoded one by one (re-tokenized) | passes | guesses | tokens accepted | per guess | "
        "decode cost, steps | speedup over RT (modeled) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in result["pools"]:
        lines.append(
            f"| {row['pool']} | {row['decoded']} | {row['passes']} | {row['guesses']} | {row['accepted']} | "
            f"{row['per_guess']:.2f} | {row['decode_steps']:.0f} | {row['speedup']:.2f}x |"
        )
    stem = f"tail_ceiling-{args.method}"
    (args.run / f"{stem}.md").write_text("\n".join(lines) + "\n")
    (args.run / f"{stem}.json").write_text(json.dumps(result, indent=2))
    print("\n".join(lines))


def pool_rows(args, ssbd: list[dict], cost: PassCost, rt_steps: float) -> list[dict]:
    """The n-gram pools replayed on the re-tokenized outputs (see the module docstring)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False)
    items: dict[str, list[dict]] = {}
    for record in ssbd:
        items.setdefault(record["item"], []).append(record)
    order, finals = list(items), {item: encode(updates[-1]["output"]) for item, updates in items.items()}
    kinds: dict[str, Callable[[dict], list[list[int]]]] = {
        "none": lambda r: [],
        "source": lambda r: [encode(r["source"])],
        "this sentence": lambda r: [
            encode(u["output"]) for u in reversed(items[r["item"]]) if u["update"] < r["update"]
        ],
        "session": lambda r: [finals[item] for item in reversed(order[: order.index(r["item"])])],
    }
    kinds["all"] = lambda r: [p for kind in ("this sentence", "session", "source") for p in kinds[kind](r)]
    first = [cost(first_width(r)) for r in ssbd]  # the verify passes
    rows = []
    for name, pools_of in kinds.items():
        decoded, widths, accepted = 0, [], 0
        for record in ssbd:
            output = [*encode(record["output"]), END]
            # The verify pass yields the first token past the accepted draft: decoding starts after it.
            head, tail = output[: record["accepted"] + 1], output[record["accepted"] + 1 :]
            used, hit = lookup_passes(tail, head, pools_of(record), args.n, args.max_len)
            decoded, widths, accepted = decoded + len(tail), widths + used, accepted + hit
        guesses = sum(width > 1 for width in widths)
        steps = sum(cost(width) for width in widths)
        rows.append(
            {
                "pool": name,
                "decoded": decoded,
                "passes": len(widths),
                "guesses": guesses,
                "accepted": accepted,
                "per_guess": accepted / guesses if guesses else 0.0,
                "decode_steps": round(steps, 1),
                "speedup": round(rt_steps / (sum(first) + steps), 3),
            }
        )
    return rows


if __name__ == "__main__":
    main()
