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
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() >= deadline:
            raise AssertionError(_message(what, timeout, detail))
        time.sleep(interval)
    return value


async def until_async(
    condition: Callable[[], object],
    timeout: float = 30.0,
    what: str = "the condition",
    *,
    interval: float = 0.05,
    detail: Callable[[], object] | None = None,
):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() >= deadline:
            raise AssertionError(_message(what, timeout, detail))
        await asyncio.sleep(interval)
    return value


def _message(what: str, timeout: float, detail) -> str:
    text = f"waited {timeout:g} s for {what}"
    return f"{text}; {detail()}" if detail is not None else text
