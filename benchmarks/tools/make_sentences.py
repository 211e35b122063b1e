"""Split the UDHR paragraph pairs into sentence pairs: an evaluation set of ordinary sentences.

A paragraph is split after ``. ! ?`` (``。！？`` for zh/ja) followed by the next sentence; its
sentences are kept as pairs only when both sides split into the same number, so every pair is
aligned by position (a paragraph that splits unevenly is left out). Ids keep document order
(``udhr-art1-p1-s2``), so context across sentences can be measured.

    python -m benchmarks.tools.make_sentences   # writes benchmarks/data/udhr-sentences/en-{de,zh,ja}.jsonl
"""

import json
import re
import sys

from benchmarks.common import DATA

HERE = DATA
SPLIT = {
    "latin": re.compile(r"(?<=[.!?])\s+(?=[A-ZÄÖÜ„\"“(])"),
    "cjk": re.compile(r"(?<=[。！？])"),
}


def sentences(text: str, lang: str) -> list[str]:
    pattern = SPLIT["cjk" if lang in ("zh", "ja") else "latin"]
    return [s.strip() for s in pattern.split(text.strip()) if s.strip()]


def main() -> int:
    out_dir = HERE / "udhr-sentences"
    out_dir.mkdir(exist_ok=True)
    for tgt in ("de", "zh", "ja"):
        pairs = [
            json.loads(line)
            for line in (HERE / "udhr" / f"en-{tgt}.jsonl").read_text().splitlines()
            if line.strip()
        ]
        rows, dropped = [], 0
        for pair in pairs:
            src, ref = sentences(pair["src"], "en"), sentences(pair["ref"], tgt)
            if len(src) != len(ref):
                dropped += 1
                continue
            rows += [
                {"id": f"{pair['id']}-s{i + 1}", "src": s, "ref": r} for i, (s, r) in enumerate(zip(src, ref))
            ]
        (out_dir / f"en-{tgt}.jsonl").write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        )
        words = [len(r["src"].split()) for r in rows]
        print(
            f"en-{tgt}: {len(rows)} sentences from {len(pairs) - dropped} paragraphs ({dropped} left out), "
            f"{sum(words) / len(words):.1f} words on average ({min(words)}-{max(words)})",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
