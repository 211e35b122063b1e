"""Servers a test starts that end with the test run, however it ends.

``ends_with_us`` is a ``preexec_fn`` for ``subprocess.Popen``: on Linux the kernel sends the child
SIGTERM when the process that started it ends (PR_SET_PDEATHSIG), so a test run killed outright
(SIGKILL, a timeout) leaves no ``mlx-ssbd serve`` or HAProxy behind; elsewhere it does nothing (the
tests' own ``finally`` blocks still stop every server). libc is loaded here, before any fork: the
child only makes the call. ``running(pid)`` says whether a process still runs (Linux's ``/proc``;
a zombie, ended but not yet reaped, has ended).
"""

import ctypes
import ctypes.util
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
_LIBC = (
    ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True) if sys.platform.startswith("linux") else None
)
_PARENT = os.getpid()


def ends_with_us() -> None:
    if _LIBC is None:
        return
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != _PARENT:  # the parent ended before the call: nobody would signal us
        os.kill(os.getpid(), signal.SIGTERM)


def running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
