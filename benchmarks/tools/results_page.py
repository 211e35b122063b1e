"""Write ``docs/results.md`` from the report files: one section per question, tables only.

    python -m benchmarks.tools.results_page [FOLDER ...]    # default: every benchmarks/results/*

A results folder is named ``DATE-KIND[-LABEL]``, KIND the machine it ran on
(``linux-x86_64-2cpu-epyc``, ``linux-x86_64-h200``), LABEL why the run was made. For each section,
each of its steps is shown from its newest run on each machine kind, whatever the folder's label
(the latest date, then the latest commit the step ran at, then the folder's name), newest first; a folder of the
generic kind ``linux-x86_64-2cpu`` (runs named before folders said which CPU) is shown only for a
step that no named kind has run; a smoke run's folder (``-quick``) never is. The page shows the
tables of that step's markdown report (its prose stays in the folder), under a line naming the
run: date, folder, machine, device, and the commit the numbers come from. A run made at an older
commit says how many later commits changed ``mlx_ssbd/``; a run from before reports named their
commit says that it is older than the code. Superseded runs stay in ``benchmarks/results/`` only
(``tools.prune`` lists them). The sections, and the steps each shows, are ``tools.sections``; a
contents list under the page's first paragraph links to each section shown.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import subprocess
from pathlib import Path

from benchmarks.common import REPO, RESULTS, relative
from benchmarks.run import folder_kind
from benchmarks.tools.sections import SECTIONS

PAGE = REPO / "docs" / "results.md"
# Reports of analyses whose feature is gone (the draft model's tail guess); they stay in their folder.
RETIRED = ("tail_ceiling-",)


GENERIC_KINDS = ("linux-x86_64-2cpu",)


def kind(folder: Path) -> str:
    """The machine kind a results folder names: what follows its date, without its label."""
    return folder_kind(folder.name)


@functools.cache
def commit_order(commit: str | None) -> int:
    """Where ``commit`` stands in the history: how many commits it descends from, itself included
    (``git rev-list --count``), 0 where it is unknown to this repository. Unlike the time a commit
    was made, it tells apart two commits made in the same second."""
    if not commit or commit == "unknown":
        return 0
    done = subprocess.run(
        ["git", "rev-list", "--count", commit.removesuffix("+dirty")],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    return int(done.stdout.strip() or 0) if done.returncode == 0 else 0


def age(step: Path) -> tuple[str, int, str]:
    """What orders a step's runs, newest last: its folder's date, then the commit it ran at (runs
    of one day under several labels), then the folder's name."""
    return step.parent.name[:10], commit_order(machine_of(step).get("commit")), step.parent.name


def newest(names: tuple[str, ...], folders: list[Path]) -> list[Path]:
    """The step's newest run on each machine kind (whatever the folder's label), under any of its
    names, newest first; a run of a generic kind only where no named kind has one."""
    runs: dict[str, Path] = {}
    for folder in folders:
        if folder.name.endswith("-quick"):
            continue  # a smoke run (``benchmarks.run --quick``), not a result
        step = next((folder / name for name in names if (folder / name).is_dir()), None)
        if step is not None and (kind(folder) not in runs or age(step) > age(runs[kind(folder)])):
            runs[kind(folder)] = step
    ordered = sorted(runs.items(), key=lambda item: age(item[1]), reverse=True)
    named = [step for k, step in ordered if k not in GENERIC_KINDS]
    return named or [step for _, step in ordered]


def tables(markdown: str) -> list[str]:
    """The report's title (bold) and its tables, in order."""
    out, block = [], []
    for line in [*markdown.splitlines(), ""]:
        if line.startswith("# ") and not out:
            out.append(f"**{line[2:].strip()}**")
        if line.startswith("|"):
            block.append(line)
        elif block:
            out.append("\n".join(block))
            block = []
    return out


def machine_of(step: Path) -> dict:
    """The ``machine`` record of the step's first JSON report that has one."""
    for path in sorted(step.glob("*.json")):
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        found = _find_machine(report)
        if found:
            return found
    return {}


def _find_machine(report) -> dict | None:
    if isinstance(report, dict):
        if isinstance(report.get("machine"), dict):
            return report["machine"]
        for value in report.values():
            found = _find_machine(value)
            if found:
                return found
    return None


def kernel_build(machine: dict) -> str | None:
    """The CPU kernel's build where the report names one ("kernel avx512"): what tells two runs on
    CPUs of one name apart (an EPYC with AVX-512 and one with AVX2 only)."""
    found = re.match(r"CPU kernel on \((\w+)", machine.get("quantized_kernel") or "")
    return f"kernel {found.group(1)}" if found else None


def provenance(step: Path) -> str:
    machine = machine_of(step)
    date = step.parent.name[:10]
    where = ", ".join(
        str(part)
        for part in (
            machine.get("cpu_model"),
            f"{machine['cpus']} CPUs" if machine.get("cpus") else None,
            kernel_build(machine),
            machine.get("device"),
        )
        if part
    )
    line = f"Run {date}, [`{relative(step)}`](../{relative(step)}/)" + (f", {where}" if where else "")
    commit = machine.get("commit")
    if not commit or commit == "unknown":
        return line + "; run before reports named their commit: older than the current code."
    changed = subprocess.run(
        ["git", "rev-list", "--count", f"{commit.removesuffix('+dirty')}..HEAD", "--", "mlx_ssbd"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    count = changed.stdout.strip() if changed.returncode == 0 else "?"
    since = "the current code" if count == "0" else f"`mlx_ssbd/` changed in {count} commits since"
    return line + f"; commit `{commit}` ({since})."


def anchor(heading: str) -> str:
    """The fragment GitHub gives a markdown heading: lower case, punctuation dropped (letters of
    any script, digits, ``_`` and ``-`` stay), spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def page(folders: list[Path]) -> str:
    shown = []  # (section, its steps' newest runs): the sections some run has
    for section in SECTIONS:
        found = [(names, newest(names, folders)) for names in section.steps]
        if any(step for _, step in found):
            shown.append((section, found))
    lines = [
        "# Results",
        "",
        "The current result of each benchmark, one section per question; written by "
        "`python -m benchmarks.tools.results_page` from the reports in `benchmarks/results/` (each "
        "step's newest run on each kind of machine; `python -m benchmarks.run` makes a new folder "
        "from the current commit). Timings vary about ±40% between runs on these VMs: compare within "
        "one table, where every row comes from the same run. How each benchmark runs: "
        "[benchmarks](benchmarks.md).",
        "",
        *(f"- [{section.title}](#{anchor(section.title)})" for section, _ in shown),
    ]
    for section, found in shown:
        lines += ["", f"## {section.title}", "", section.about]
        for names, steps in found:
            if not steps:
                lines += ["", f"Not run yet: `python -m benchmarks.run --only {names[0]}`."]
            for step in steps:
                lines += ["", provenance(step)]
                reports = [
                    p
                    for p in sorted(step.glob("*.md"))
                    if p.name not in ("README.md", "RESULTS.md") and not p.name.startswith(RETIRED)
                ]
                for report in reports:
                    lines += ["", *(re.sub(r"\n\n+", "\n", t) + "\n" for t in tables(report.read_text()))]
    return "\n".join(lines).rstrip() + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path, help="results folders (default: all, by name)")
    parser.add_argument("--out", type=Path, default=PAGE)
    args = parser.parse_args()
    folders = sorted(args.folders or [p for p in RESULTS.iterdir() if p.is_dir()], key=lambda p: p.name)
    args.out.write_text(page(folders))
    print(f"wrote {relative(args.out)}")


if __name__ == "__main__":
    main()
