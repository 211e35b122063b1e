"""Benchmark runs: every method on the same items with the same model, in one process.

Contract: ``run_bench(model, items, configs, out_dir, ...)`` warms every configuration up, then
translates the items in order, running every configuration on an item before moving to the next
(so slow drift of the machine hits all methods alike), and appends one record per update to
``results.jsonl`` as it goes. A run is resumable per item: items whose records are complete for
every configuration are kept and skipped; partial ones are re-run. ``summarize`` turns the records
into per-configuration metrics (``metrics`` module) with speedup against ``rt`` from the same run
(at the same sampling temperature) and, where the items have references, chrF++ against that
RT's with a paired-bootstrap 95% interval (``chrf_vs_rt``).
"""

from __future__ import annotations

import itertools
import json
import platform
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..live import scripts
from ..live.methods import METHODS, method_config
from ..live.source import SourcePartial
from ..live.translator import StreamTranslator
from ..platform.info import backend_info
from . import metrics
from .streams import Pair, lag_updates, read_pairs, read_partials

RESULTS = "results.jsonl"
RUN = "run.json"


@dataclass(frozen=True)
class Item:
    """One segment to translate: its updates and optional reference."""

    id: str
    updates: tuple[SourcePartial, ...]
    ref: str | None = None


def items_from_pairs(pairs: Sequence[Pair], lag: int) -> list[Item]:
    return [Item(p.id, tuple(lag_updates(p.src, lag, p.id)), p.ref) for p in pairs]


def items_from_partials(
    updates: Sequence[SourcePartial], refs: Mapping[str, str] | None = None
) -> list[Item]:
    """Group ASR partials into segments (by id; a final partial closes its segment), each with the
    reference ``refs`` holds for its id, if any."""
    items, current = [], []
    for update in updates:
        if current and update.segment_id != current[-1].segment_id:
            items.append(current)
            current = []
        current.append(update)
        if update.final:
            items.append(current)
            current = []
    if current:
        items.append(current)
    out = []
    for index, group in enumerate(items):
        if not group[-1].final:  # a segment that never said final is committed at its last partial
            group[-1] = SourcePartial(group[-1].text, True, group[-1].segment_id)
        segment = group[0].segment_id
        out.append(Item(f"{segment}#{index}", tuple(group), (refs or {}).get(segment)))
    return out


class NoReferences(ValueError):
    """A references file gives none of the ASR segments a reference."""


def partials_items(partials: str, refs: str | None = None) -> list[Item]:
    """The items of the ASR partials file ``partials`` (``items_from_partials``), each with the
    reference the pairs file ``refs`` gives its segment id. Raises ``NoReferences`` when ``refs``
    gives none of them one (ids that do not match: most likely the wrong file)."""
    references = None if refs is None else {pair.id: pair.ref for _, pair in read_pairs(refs) if pair.ref}
    items = items_from_partials(list(read_partials(partials)), references)
    if references is not None and not any(item.ref for item in items):
        raise NoReferences(f"{refs}: no reference has the id of one of {partials}'s segments")
    return items


def make_configs(
    methods: Sequence[str],
    betas: Sequence[float] | None,
    *,
    draft_mask_k: int = 0,
    display_mask_k: int = 0,
    temperatures: Sequence[float] = (0.0,),
    top_p: float = 1.0,
    seed: int = 0,
    agreements: Sequence[int] = (0,),
    contexts: Sequence[int] = (0,),
) -> dict:
    """label -> TranslatorConfig for every temperature, method (and beta for the ssbd methods;
    ``betas`` None: each method's own), stable-text agreement and context budget.

    Labels: ``rt``, ``ssbd-b0.2``, ``ssbd-resync-b0.2-mask2``, ``ssbd-b0.2-agree2``,
    ``ssbd-b0.2-ctx256``; a sampled configuration ends in ``-t<temperature>`` (``rt-t0.7``).
    """
    configs = {}
    for temperature, method, agreement, context in itertools.product(
        temperatures, methods, agreements, contexts
    ):
        biased = method.startswith("ssbd")
        for beta in (betas or [METHODS[method].beta]) if biased else [0.0]:
            mask = draft_mask_k if biased or method == "cd" else 0
            label = (
                method
                + (f"-b{beta:g}" if biased else "")
                + (f"-mask{mask}" if mask else "")
                + (f"-agree{agreement}" if agreement else "")
                + (f"-ctx{context}" if context else "")
                + (f"-t{temperature:g}" if temperature else "")
            )
            configs[label] = method_config(
                method,
                beta=beta,
                draft_mask_k=mask,
                display_mask_k=display_mask_k,
                temperature=temperature,
                top_p=top_p,
                seed=seed,
                agreement=agreement,
                context_tokens=context,
            )
    return configs


def cpu_model() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else the machine type."""
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def code_commit() -> str:
    """The git commit of the mlx_ssbd that runs (``+dirty`` with uncommitted changes to tracked
    files other than benchmark reports, which a run of several steps writes as it goes), or
    ``unknown`` where its files are not tracked by a checkout (an installed package, even one
    inside some other repository): what a report's numbers come from."""
    import subprocess

    here = Path(__file__).resolve().parent

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=here, capture_output=True, text=True, timeout=10)

    try:
        tracked = git("ls-files", "--error-unmatch", Path(__file__).name)
        head = git("rev-parse", "--short", "HEAD")
        top = git("rev-parse", "--show-toplevel").stdout.strip()
        dirty = git("diff", "--quiet", "HEAD", "--", top, f":(exclude){top}/benchmarks/results")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if tracked.returncode != 0 or head.returncode != 0:
        return "unknown"
    return head.stdout.strip() + ("+dirty" if dirty.returncode == 1 else "")


def machine_info() -> dict:
    """The machine, backend and code a report was made with; a BLAS inside the working directory
    (a virtual environment's MKL) is named relative to it, so reports hold no machine's paths."""
    import os

    backend = backend_info().to_dict()
    if backend.get("blas_path"):
        try:
            backend["blas_path"] = str(Path(backend["blas_path"]).resolve().relative_to(Path.cwd().resolve()))
        except ValueError:
            pass
    return {
        **backend,
        "commit": code_commit(),
        "machine": platform.node(),
        "os": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_model": cpu_model(),
        "cpus": os.cpu_count(),
    }


def _load_done(out_dir: Path, labels: set[str]) -> tuple[list[dict], set[str]]:
    """Records of items already complete for every configuration, and those items' ids."""
    path = out_dir / RESULTS
    if not path.exists():
        return [], set()
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    finals = defaultdict(set)
    for r in records:
        if r["final"]:
            finals[r["item"]].add(r["config"])
    done = {item for item, seen in finals.items() if labels <= seen}
    return [r for r in records if r["item"] in done], done


def run_bench(
    translators: dict[str, StreamTranslator],
    items: Sequence[Item],
    out_dir: Path,
    *,
    run_facts: dict,
    on_item: Callable[[Item], None] | None = None,
) -> list[dict]:
    """Translate ``items`` with every translator; return all records (resumed ones included).

    Args:
        translators: label -> translator (one per configuration, all sharing one model).
        items: the segments, in order.
        out_dir: where ``results.jsonl`` and ``run.json`` go.
        run_facts: the settings of this run; resuming requires the same facts.
        on_item: called after each item (progress).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    run_file = out_dir / RUN
    if run_file.exists() and json.loads(run_file.read_text()) != run_facts:
        raise ValueError(
            f"{out_dir} holds results of a run with other settings; use another --out or --fresh"
        )
    run_file.write_text(json.dumps(run_facts, indent=2))
    records, done = _load_done(out_dir, set(translators))
    with open(out_dir / RESULTS, "w") as f:  # rewrite without partial items
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")

    _warm_up(translators, items)
    with open(out_dir / RESULTS, "a") as f:
        for item in items:
            if item.id not in done:
                for label, translator in translators.items():
                    for record in _translate_item(translator, label, item):
                        f.write(json.dumps(record, ensure_ascii=False) + "\n")
                        records.append(record)
                    f.flush()
            if on_item:
                on_item(item)
    return records


def _warm_up(translators: dict[str, StreamTranslator], items: Sequence[Item]) -> None:
    """Compile and page in everything once per configuration (not recorded)."""
    if not items:
        return
    for translator in translators.values():
        for update in items[0].updates[:2]:
            translator.update(update.text)
        translator.reset()


def _translate_item(translator: StreamTranslator, label: str, item: Item) -> list[dict]:
    translator.reset()
    out = []
    for index, update in enumerate(item.updates):
        result = translator.update(update.text, final=update.final)
        out.append(
            {
                "item": item.id,
                "config": label,
                "update": index,
                "source": update.text,
                "source_words": scripts.word_count(update.text),
                "output": result.output,
                "display": result.display,
                "stable": result.stable,
                "final": update.final,
                "ref": item.ref,
                "temperature": translator.config.temperature,
                "agreement": translator.config.agreement,
                "context_tokens": translator.config.context_tokens,
                **result.stats.to_dict(),
            }
        )
    return out


def summarize(
    records: Sequence[dict],
    *,
    target_lang: str,
    word_s: float,
    ne_tok: str | None = None,
    labels: Sequence[str] | None = None,
) -> dict:
    """Per-configuration metrics; see the ``metrics`` module for definitions."""
    tok_name, tokenize = metrics.ne_tokenizer(target_lang, ne_tok)
    by_config = defaultdict(lambda: defaultdict(list))
    for r in records:
        by_config[r["config"]][r["item"]].append(r)
    labels = list(labels or by_config)
    summary = {}
    for label in labels:
        segments = [sorted(rs, key=lambda r: r["update"]) for rs in by_config[label].values()]
        summary[label] = _config_summary(segments, tokenize, target_lang, word_s)
    # Speedup against plain prefix-cached RT (no agreement, no context) at the same temperature
    # (sampled RT for sampled methods): the first such configuration, where there are several.
    rt_label = {}
    for label, s in summary.items():
        if s["method"] == "rt" and not s["agreement"] and not s["context_tokens"]:
            rt_label.setdefault(s["temperature"], label)
    for s in summary.values():
        base = summary.get(rt_label.get(s["temperature"]), {}).get("wall_s")
        s["speedup_vs"] = rt_label.get(s["temperature"]) if base else None
        s["speedup"] = round(base / s["wall_s"], 3) if base and s["wall_s"] else None
    # chrF++ against the same RT's on the same sentences, with a paired-bootstrap 95% interval.
    for temperature, base in rt_label.items():
        if "chrf" in summary[base]:
            scored = [
                label for label, s in summary.items() if s["temperature"] == temperature and "chrf" in s
            ]
            for label, delta in chrf_against(records, scored, base).items():
                summary[label]["chrf_vs_rt"] = delta
    return {"ne_tokenizer": tok_name, "configs": summary}


def chrf_against(records: Sequence[dict], labels: Sequence[str], base: str, resamples: int = 1000) -> dict:
    """label -> chrF++ of its committed captions minus that of ``base``'s on the same items (taken
    by item id, whatever order the records came in), with the 2.5th and 97.5th percentile of that
    difference over paired bootstrap resamples (``metrics.paired_chrf_delta``)."""
    finals = {
        label: {r["item"]: r for r in records if r["config"] == label and r["final"]}
        for label in {*labels, base}
    }
    items = sorted(finals[base])
    outputs = lambda label: [finals[label][item]["output"] for item in items]
    refs = [finals[base][item]["ref"] for item in items]
    return {
        label: metrics.paired_chrf_delta(outputs(label), outputs(base), refs, resamples) for label in labels
    }


def _config_summary(segments: list[list[dict]], tokenize, target_lang: str, word_s: float) -> dict:
    flat = [r for seg in segments for r in seg]
    total = lambda key: sum(r[key] for r in flat)
    ne, ne_display, ne_stable, laal, laal_ca = [], [], [], [], []
    locks = bool(flat[0].get("agreement"))  # stable text exists before the commit; older records lack it
    for seg in segments:
        outputs = [tokenize(r["output"]) for r in seg]
        displays = [tokenize(r["display"]) for r in seg]
        ne.append(metrics.normalized_erasure(outputs))
        ne_display.append(metrics.normalized_erasure(displays))
        if locks:  # a viewer shown only the stable text; the commit is the segment's last update
            ne_stable.append(
                metrics.normalized_erasure([tokenize(r["stable"]) for r in seg[:-1]] + [outputs[-1]])
            )
        ref = seg[-1]["ref"]
        lag = metrics.lagging(
            displays,
            [r["source_words"] for r in seg],
            [r["wall_s"] for r in seg],
            word_s=word_s,
            ref_len=len(tokenize(ref)) if ref else None,
        )
        laal.append(lag.laal_s)
        laal_ca.append(lag.laal_ca_s)
    finals = [seg[-1] for seg in segments]
    result = {
        "method": flat[0]["policy"],
        "beta": flat[0]["beta"],
        "temperature": flat[0].get("temperature", 0.0),
        "agreement": flat[0].get("agreement", 0),
        "context_tokens": flat[0].get("context_tokens", 0),
        "items": len(segments),
        "updates": len(flat),
        "ne": _mean(ne),
        "ne_display": _mean(ne_display),
        "ne_stable": _mean(ne_stable) if locks else None,
        "a_d": _round(metrics.ratio(total("accepted"), total("draft_tokens"))),
        "a_o": _round(metrics.ratio(total("accepted"), total("output_tokens"))),
        "tps": _round(metrics.ratio(total("output_tokens"), total("wall_s"))),
        "wall_s": round(total("wall_s"), 3),
        "prefill_verify_s": round(total("prefill_s"), 3),
        "decode_s": round(total("decode_s"), 3),
        "median_update_s": round(statistics.median(r["wall_s"] for r in flat), 4),
        "forward_passes_per_update": _round(total("forward_passes") / len(flat)),
        "tokens_fed_per_update": _round(total("tokens_fed") / len(flat)),
        "laal_s": _mean(laal),
        "laal_ca_s": _mean(laal_ca),
        "looped_captions": sum(r.get("looped", 0) for r in finals),  # commits whose decoding loop was cut
    }
    refs = [r["ref"] for r in finals]
    if all(refs):
        result.update(metrics.quality([r["output"] for r in finals], refs, target_lang))
    else:
        result["quality_note"] = "some items have no reference: BLEU/chrF skipped"
    return result


def _mean(values) -> float:
    return round(sum(values) / len(values), 4) if values else 0.0


def _round(value):
    return None if value is None else round(value, 4)
