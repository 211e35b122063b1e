"""Waiting in tests: on a condition, bounded, never on how fast the machine is.

``until(condition, timeout, what)`` polls ``condition()`` until it is true and returns its value;
past ``timeout`` seconds it fails with a message naming ``what`` it waited for (and ``detail()``,
when given, e.g. the events seen). ``until_async`` is the same inside a coroutine (the event loop
goes on, so WebSockets keep answering pings).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


def until(
    condition: Callable[[], object],
    timeout: float = 30.0,
    what: str = "the condition",
    *,
    interval: float = 0.05,
    detail: Callable[[], object] | None = None,
):
    for value in _polls(condition, timeout, what, detail):
        if value:
            return value
        time.sleep(interval)


async def until_async(
    condition: Callable[[], object],
    timeout: float = 30.0,
    what: str = "the condition",
    *,
    interval: float = 0.05,
    detail: Callable[[], object] | None = None,
):
    for value in _polls(condition, timeout, what, detail):
        if value:
            return value
        await asyncio.sleep(interval)


def _polls(condition, timeout: float, what: str, detail):
    """``condition()`` once per poll, until the deadline; then the failure naming what was awaited."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() < deadline:
            yield value
            continue
        text = f"waited {timeout:g} s for {what}"
        raise AssertionError(f"{text}; {detail()}" if detail is not None else text)
