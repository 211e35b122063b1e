"""Compare two ``benchmarks/service/load.py`` runs (before and after a change to the server), side by side.

Reads ``BEFORE/service_load.json`` and ``AFTER/service_load.json`` (the same script, options and
machine, run one after the other) and writes ``service_batching.md`` (or ``--name``) with lag
p50/p95 and the events served per (method, sessions), before and after.

    python -m benchmarks.compare.load BEFORE AFTER --before-label "step batching" \
        --after-label "continuous batching" --title "..." --out DIR
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--before-label", default="before")
    parser.add_argument("--after-label", default="after")
    parser.add_argument("--title", default="Service load, before and after")
    parser.add_argument("--note", default="", help="a sentence on how the two runs were made")
    parser.add_argument("--name", default="service_batching.md")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    before, after = (json.loads((d / "service_load.json").read_text()) for d in (args.before, args.after))
    rows = {(r["method"], r["sessions"]): r for r in before["rows"]}
    m = after["machine"]
    b, a = args.before_label, args.after_label
    lines = [
        f"# {args.title}",
        "",
        f"{after['model']}, {m['device']}, {m['compute_dtype']}, BLAS {m['blas']}, {m['cpus']} CPUs; "
        f"`benchmarks/service/load.py`, {after['seconds_per_run']:g} s of speech per session and run. "
        f"{args.note}".strip(),
        "",
        f"| method | sessions | lag p50 s, {b} | lag p50 s, {a} | lag p95 s, {b} | lag p95 s, {a} | "
        f"updates + commits, {b} | updates + commits, {a} |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in after["rows"]:
        old = rows.get((r["method"], r["sessions"]))
        if old is None:
            continue
        served = lambda x: x["translation.update"] + x["translation.commit"]
        lines.append(
            f"| {r['method']} | {r['sessions']} | {old['lag_p50_s']} | {r['lag_p50_s']} | {old['lag_p95_s']} | "
            f"{r['lag_p95_s']} | {served(old)} | {served(r)} |"
        )
    lines += ["", "Events served = translation updates and commits received by all sessions together."]
    if before.get("chat_tokens") and after.get("chat_tokens"):  # a chat client ran beside the sessions
        lines += [
            "",
            f"Beside the sessions, a client asked for chat completions of {after['chat_tokens']} tokens back to "
            "back. Longest wait = between a session's caption events during the replay (and to its end); "
            "held = events that came only after the replay ended (+5 s):",
            "",
            f"| method | sessions | longest wait s, {b} | {a} | held, {b} | {a} | lag max of any event s, {b} | {a} | "
            f"chat answers (median s), {b} | {a} |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in after["rows"]:
            if (old := rows.get((r["method"], r["sessions"]))) is not None:
                lines.append(
                    f"| {r['method']} | {r['sessions']} | {old['longest_gap_s']} | {r['longest_gap_s']} | "
                    f"{old['events_after_replay']} | {r['events_after_replay']} | {old['lag_max_all_s']} | "
                    f"{r['lag_max_all_s']} | {old['chat_answers']} ({old['chat_s_median']}) | "
                    f"{r['chat_answers']} ({r['chat_s_median']}) |"
                )
    codes = [run.get("server_code") for run in (before, after)]
    if all(codes):
        lines += ["", f"Server code: {b} {codes[0]}, {a} {codes[1]}."]
    lines.append("")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / args.name).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
