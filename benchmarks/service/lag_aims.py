"""The service load report's verdicts: the most sessions served within each p95 lag bound, and each
median lag against one session's (and several languages' against one), with the aims.

Contract: pure functions of ``benchmarks.service.load``'s rows (dicts with ``method``,
``languages``, ``sessions``, ``lag_p50_s``, ``lag_p95_s``, ``model_busy``); ``against_aim(rows)``
returns the markdown lines of the ratio table, nothing when no row has one to be set against.
"""

from __future__ import annotations

from benchmarks.harness import markdown_table


def busy_cell(row: dict) -> str:
    return f"{row['model_busy']:.0%}" if row.get("model_busy") is not None else ""


AIM = {4: 2.0, 8: 4.0}  # sessions: at most this many times one session's median lag (same run)
LANGUAGES_AIM = 2.0  # several caption languages: at most this many times one language's median lag


def lag_ratios(rows: list[dict]) -> list[tuple[dict, dict, float | None]]:
    """(row, the row it is set against, the aim) for each row that has one: a row of N > 1
    sessions against the one-session row of its method and languages (aim: ``AIM``), a row of
    several languages against the run's first set of languages at the same N (``LANGUAGES_AIM``)."""
    first = rows[0].get("languages") if rows else None
    base = {(r["method"], r.get("languages"), r["sessions"]): r for r in rows}
    pairs = []
    for r in rows:
        alone = base.get((r["method"], r.get("languages"), 1))
        if r["sessions"] > 1 and alone is not None:
            pairs.append((r, alone, AIM.get(r["sessions"])))
        one_language = base.get((r["method"], first, r["sessions"]))
        if r.get("languages") != first and one_language is not None:
            pairs.append((r, one_language, LANGUAGES_AIM))
    return pairs


def met(row: dict, base: dict, aim: float | None) -> str:
    if aim is None:
        return ""
    return "yes" if row["lag_p50_s"] <= aim * base["lag_p50_s"] else "no"


def against_aim(rows: list[dict]) -> list[str]:
    pairs = lag_ratios(rows)
    if not pairs:
        return []

    def against(r: dict, base: dict) -> str:
        if base["sessions"] != r["sessions"]:
            return "one session"
        return (
            f"{base.get('languages')} alone"
            if r["sessions"] == 1
            else f"{base.get('languages')}, same sessions"
        )

    return [
        "",
        "Median lag against one session's (and several languages against one), same run, with the aim:",
        "",
        *markdown_table(
            ["method", "languages", "sessions", "against", "lag p50 ratio", "aim", "met", "model busy: it / against"],
            [
                (r["method"], r.get("languages", "de"), r["sessions"], against(r, base),
                 f"{r['lag_p50_s'] / base['lag_p50_s']:.1f}x" if base["lag_p50_s"] else "",
                 f"<= {aim:g}x" if aim else "", met(r, base, aim), f"{busy_cell(r)} / {busy_cell(base)}")
                for r, base, aim in pairs
            ],
        ),
    ]  # fmt: skip


BOUNDS = (2.0, 5.0, 10.0, 20.0)  # p95 lag bounds of the "most sessions served" table, seconds


def most_sessions(rows, methods, bound: float) -> dict:
    """Per method, the most sessions tried whose p95 lag stayed under ``bound`` (0: none), with the
    run's first set of languages."""
    first = rows[0].get("languages") if rows else None
    return {
        m: max(
            [
                r["sessions"]
                for r in rows
                if r["method"] == m and r.get("languages") == first and r["lag_p95_s"] < bound
            ]
            or [0]
        )
        for m in methods
    }
