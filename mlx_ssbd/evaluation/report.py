"""Benchmark reports: ``summary.json``, a markdown table shaped like the paper's Tables 2-4, plots.

Contract: ``write_report(out_dir, summary, records)`` writes ``summary.json``, ``report.md`` and,
when matplotlib is installed, ``speed_ne_vs_beta.png`` and ``update_latency.png``; it returns the
names of the files written. Every report states the substitutions made on this machine.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path


def substitutions(summary: dict) -> str:
    """What this run measured differently from the paper: the NE tokenizer, the data, COMET."""
    tok = summary["ne_tokenizer"]
    comet = next((s["comet_model"] for s in summary["configs"].values() if "comet_model" in s), None)
    return (
        f"NE tokenizer: sacrebleu {tok}"
        + ("" if tok == "flores101" else " (the paper's flores101 SentencePiece model could not be had)")
        + f". Data: {summary['run']['data_note']}. Quality: sacrebleu BLEU/chrF++ on final outputs; "
        + (f"COMET: {comet}." if comet else "no COMET model was given, so no COMET")
        + ("" if comet else "; semsim (if present) is USE-multilingual-v3 cosine similarity, NOT COMET.")
    )


COLUMNS = [
    ("Method", lambda s: s["label"]),
    ("β", lambda s: f"{s['beta']:g}" if s["method"] == "ssbd" else "-"),
    ("T", lambda s: f"{s['temperature']:g}" if s.get("temperature") else "-"),
    ("NE↓", lambda s: f"{s['ne']:.3f}"),
    ("NE disp↓", lambda s: f"{s['ne_display']:.3f}"),
    ("NE stable↓", lambda s: _num(s.get("ne_stable"), 3)),
    ("A/D", lambda s: _pct(s["a_d"])),
    ("A/O", lambda s: _pct(s["a_o"])),
    ("TPS", lambda s: _num(s["tps"], 1)),
    ("Wall s", lambda s: _num(s["wall_s"], 1)),
    ("Verify s", lambda s: _num(s.get("prefill_verify_s"), 1)),
    ("Decode s", lambda s: _num(s.get("decode_s"), 1)),
    ("Speedup", lambda s: f"{s['speedup']:.2f}x" if s.get("speedup") else "-"),
    ("Passes/upd", lambda s: _num(s["forward_passes_per_update"], 1)),
    ("Fed/upd", lambda s: _num(s["tokens_fed_per_update"], 1)),
    ("LAAL-CA s", lambda s: _num(s["laal_ca_s"], 2)),
    ("Looped", lambda s: str(s["looped_captions"]) if "looped_captions" in s else "-"),
    ("BLEU", lambda s: _num(s.get("bleu"), 1)),
    ("chrF++", lambda s: _num(s.get("chrf"), 1)),
    ("Δ chrF++ vs RT [95%]", lambda s: _interval(s.get("chrf_vs_rt"))),
    ("semsim", lambda s: _num(s.get("semsim"), 3)),
    ("COMET", lambda s: _num(s.get("comet"), 3)),
]


DELTA_NOTE = (
    " Δ chrF++ vs RT: the method's chrF++ minus RT's (the same RT as its speedup's) on the same "
    "sentences, with the 2.5th-97.5th percentile of that difference over 1000 paired bootstrap "
    "resamples of the sentences."
)


def _pct(value):
    return "-" if value is None else f"{100 * value:.1f}%"


def _num(value, digits):
    return "-" if value is None else f"{value:.{digits}f}"


def _interval(value):
    """A difference and its 95% interval, ``[change, low, high]``."""
    return "-" if value is None else f"{value[0]:+.1f} [{value[1]:+.1f}, {value[2]:+.1f}]"


def markdown_table(configs: dict) -> str:
    """One row per configuration, named by its label (e.g. ``ssbd-resync-b0.2``)."""
    rows = [{**s, "label": label} for label, s in configs.items()]
    cols = [(name, fn) for name, fn in COLUMNS if any(fn(s) != "-" for s in rows)]
    lines = ["| " + " | ".join(name for name, _ in cols) + " |", "|" + "---|" * len(cols)]
    for s in rows:
        lines.append("| " + " | ".join(fn(s) for _, fn in cols) + " |")
    return "\n".join(lines)


def markdown(summary: dict) -> str:
    facts = summary["run"]
    machine = summary["machine"]
    out = [
        f"# mlx-ssbd benchmark: {facts['source']}->{facts['target']} on {facts['data_name']}",
        "",
        f"Model `{facts['model']}` ({machine['compute_dtype']}), {machine['device']}, BLAS {machine['blas']}"
        + (f" (sgemv shim: {machine['gemv']})" if "gemv" in machine else "")
        + ", "
        f"{machine['cpus']} CPUs, machine `{machine['machine']}` ({machine.get('os', machine['platform'])}). "
        f"{facts['items']} items, lag {facts['lag']}, display mask-k {facts['display_mask_k']}, "
        f"{facts['word_s']} s per source word for lagging."
        + (f" Source segments of {facts['words']} words." if facts.get("words") else ""),
        "",
        markdown_table(summary["configs"]),
        "",
        "Speedup = RT (prefix-cached) wall time / method wall time, same run; a sampled method (T > 0) "
        "is compared with RT sampling at the same temperature. Verify s = prompt tail + "
        "verify passes, Decode s = token-by-token decoding (together: Wall s). Passes/upd counts "
        "the model's passes. TPS = output tokens / generation wall time. NE on raw outputs; "
        "NE disp on displayed text. LAAL-CA: "
        "computation-aware length-adaptive average lagging in seconds (see mlx_ssbd/evaluation/metrics.py)."
        + (DELTA_NOTE if any("chrf_vs_rt" in s for s in summary["configs"].values()) else ""),
        "",
        "**Substitutions:** " + substitutions(summary),
    ]
    sig = next((s for s in summary["configs"].values() if "bleu_signature" in s), None)
    if sig:
        out += [
            "",
            f"BLEU signature: `{sig['bleu_signature']}`; chrF++ signature: `{sig['chrf_signature']}`.",
        ]
    for note in summary.get("notes", []):
        out += ["", f"Note: {note}"]
    return "\n".join(out) + "\n"


def pyplot():
    """matplotlib.pyplot on the non-interactive Agg backend, or None without ``mlx-ssbd[plots]``."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(plt, fig, path: Path) -> None:
    """Lay out, write (PNG, 120 dpi) and close a figure."""
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(out_dir: Path, summary: dict, records: list[dict]) -> list[str]:
    out_dir = Path(out_dir)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False))
    written = ["summary.json"]
    plt = pyplot()
    if plt is not None:
        written += _plots(plt, out_dir, summary, records)
    else:
        summary.setdefault("notes", []).append("plots skipped: pip install 'mlx-ssbd[plots]' for PNG plots")
        (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False))
    (out_dir / "report.md").write_text(markdown(summary))
    return written + ["report.md"]


def _plots(plt, out_dir: Path, summary: dict, records: list[dict]) -> list[str]:
    configs = summary["configs"]
    written = []
    # The beta plot shows plain greedy SSBD only (labels ssbd-b<beta>), not lookahead or sampled variants.
    ssbd = sorted(
        (
            (s["beta"], s)
            for label, s in configs.items()
            if label.startswith("ssbd-b") and not s.get("temperature")
        ),
        key=lambda pair: pair[0],
    )
    if ssbd:
        fig, ax1 = plt.subplots(figsize=(6, 4))
        betas = [b for b, _ in ssbd]
        ax1.plot(betas, [s["speedup"] or 0 for _, s in ssbd], "o-", color="tab:blue", label="speedup vs RT")
        ax1.set_xlabel("β (bias towards the draft)")
        ax1.set_ylabel("speedup vs prefix-cached RT (x)", color="tab:blue")
        ax2 = ax1.twinx()
        ax2.plot(betas, [s["ne"] for _, s in ssbd], "s--", color="tab:red", label="NE")
        ax2.set_ylabel("normalized erasure", color="tab:red")
        for label, colour in (("rt", "tab:gray"), ("cd", "tab:green")):
            if label in configs:
                ax2.axhline(configs[label]["ne"], color=colour, lw=0.8, ls=":", label=f"NE {label.upper()}")
        fig.legend(loc="lower center", ncol=4, fontsize=8)
        ax1.set_title(f"SSBD: speed and flicker against β ({summary['run']['target']})", fontsize=10)
        fig.tight_layout(rect=(0, 0.07, 1, 1))
        fig.savefig(out_dir / "speed_ne_vs_beta.png", dpi=120)
        plt.close(fig)
        written.append("speed_ne_vs_beta.png")

    latencies = defaultdict(list)
    for r in records:
        latencies[r["config"]].append(r["wall_s"] * 1000)
    fig, ax = plt.subplots(figsize=(max(6, len(latencies) * 0.9), 4))
    labels = list(latencies)
    ax.boxplot([latencies[k] for k in labels], showfliers=True)
    ax.set_xticks(range(1, len(labels) + 1), labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("wall time per update (ms)")
    ax.set_yscale("log")
    ax.set_title("Per-update latency", fontsize=10)
    fig.tight_layout()
    fig.savefig(out_dir / "update_latency.png", dpi=120)
    plt.close(fig)
    return written + ["update_latency.png"]
