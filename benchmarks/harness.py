"""One harness for the benchmark steps: a step says what it measures and how its report reads; the
harness owns the command line, the machine and commit facts, the JSON and the markdown.

Contract: a step module defines ``BENCHMARK = Benchmark(...)`` and ends with
``if __name__ == "__main__": BENCHMARK.main()``:

* ``name``: the report's files, ``NAME.json`` and ``NAME.md`` in ``--out`` (the harness's option);
* ``title``: the markdown report's heading, or a function of the result that gives it;
* ``options``: the step's own command-line options (``option("--models", default=...)``);
* ``measure(args)``: runs the measurement and returns its result, a JSON-able dict (facts and
  metrics; rows printed as they come are the step's business), or None when it writes no report;
* ``render(result)``: the report's lines under the heading (the machine's line first, as
  ``machine_line`` gives it, then tables: ``markdown_table``; notes);
* ``plot(result, out)``: draws the report's figures into the folder ``out`` from the result alone
  (so ``--report`` draws them again too);
* ``child(args)``, for a step that measures each setting in a process of its own: what one such
  process measures (``args.child`` names the setting); ``python -m STEP --child VALUE`` prints it
  as JSON on its last line, which the parent reads (``common.child_json``).

``main()`` parses the options, adds ``machine`` (``evaluation.bench.machine_info``: the CPU, the
backend and the commit the numbers come from) to the result, writes the JSON and the markdown and
prints the markdown; with ``--report`` it measures nothing and writes the markdown again from the
JSON in ``--out`` (after a change of the report's layout). A model, data or examples file the step
cannot use (``input_errors``) ends it with the reason and a non-zero status, not a traceback.
``markdown_table(header, rows)`` renders a table's lines from its cells; ``whole_numbers(least,
what)`` is the type of an option that takes comma-separated counts or sizes.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path


def input_errors() -> tuple[type[Exception], ...]:
    """What a step's own input can be wrong with: a model it cannot load, a data or examples file it
    cannot read, a dataset that is not here."""
    from mlx_ssbd.evaluation.datasets import DataUnavailable
    from mlx_ssbd.evaluation.lines import StreamError
    from mlx_ssbd.live.glossary import GlossaryError
    from mlx_ssbd.models.registry import ModelError

    return (DataUnavailable, GlossaryError, ModelError, StreamError)


@dataclass(frozen=True)
class Option:
    """One command-line option of a step: ``argparse``'s flags and keywords."""

    flags: tuple[str, ...]
    settings: dict


def option(*flags: str, **settings) -> Option:
    """An option as ``parser.add_argument(*flags, **settings)`` would declare it."""
    return Option(flags, settings)


def whole_numbers(least: int, what: str) -> Callable[[str], list[int]]:
    """An option's ``type`` for comma-separated whole numbers, each at least ``least``: anything else
    is argparse's error (a message naming the option and ``what`` it takes, exit status 2)."""

    def parse(text: str) -> list[int]:
        try:
            values = [int(v) for v in text.split(",")]
        except ValueError:
            values = []
        if not values or min(values) < least:
            raise argparse.ArgumentTypeError(
                f"expected {what}: whole numbers of at least {least}, comma-separated; got {text!r}"
            )
        return values

    return parse


@dataclass(frozen=True)
class Benchmark:
    """A benchmark step; see the module docstring."""

    name: str
    title: str | Callable[[dict], str]
    measure: Callable[[argparse.Namespace], dict | None]
    render: Callable[[dict], list[str]]
    options: tuple[Option, ...] = ()
    about: str = ""  # the command line's description (the step module's docstring)
    plot: Callable[[dict, Path], None] | None = None
    child: Callable[[argparse.Namespace], dict] | None = None

    def parser(self) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(
            description=self.about.strip().splitlines()[0] if self.about else None
        )
        for opt in self.options:
            parser.add_argument(*opt.flags, **opt.settings)
        if self.child is not None:
            parser.add_argument("--child", help=argparse.SUPPRESS)
        parser.add_argument("--out", type=Path, help="the report's folder (required)")
        parser.add_argument(
            "--report", action="store_true", help="only write the markdown again from --out's JSON"
        )
        return parser

    def main(self, argv: Sequence[str] | None = None) -> dict | None:
        """Measure, then write and print the report; returns the result (None: no report)."""
        try:
            return self._main(argv)
        except input_errors() as error:
            raise SystemExit(f"error: {error}") from None

    def _main(self, argv: Sequence[str] | None) -> dict | None:
        parser = self.parser()
        args = parser.parse_args(argv)
        if getattr(args, "child", None):
            print(json.dumps(self.child(args)), flush=True)
            return None
        if args.out is None:
            parser.error("--out is required")
        if args.report:
            stored = args.out / f"{self.name}.json"
            if not stored.is_file():
                raise SystemExit(f"--report: no {stored.name} in {args.out}")
            result = json.loads(stored.read_text())  # rendered again, not written again
        else:
            from mlx_ssbd.evaluation.bench import machine_info

            machine = machine_info()  # the commit that runs, read before it runs
            result = self.measure(args)
            if result is None:
                return None
            result["machine"] = machine
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"{self.name}.json").write_text(json.dumps(result, indent=2, ensure_ascii=False))
        title = self.title(result) if callable(self.title) else self.title
        text = "\n".join([f"# {title}", "", *self.render(result)]) + "\n"
        (args.out / f"{self.name}.md").write_text(text)
        print(text)
        if self.plot is not None:
            self.plot(result, args.out)
        return result


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """A markdown table's lines: the header, its rule, then one line per row of cells."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return lines
