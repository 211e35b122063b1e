"""A server a test starts ends with the test run, however the run ends (``children.ends_with_us``):
here the process that started one is killed outright (SIGKILL: none of its cleanup runs)."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from children import running
from waiting import until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")

HOLDER = """
import subprocess, sys, time
from children import ends_with_us
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], preexec_fn=ends_with_us)
print(child.pid, flush=True)
time.sleep(600)
"""


def test_a_child_ends_when_its_starter_is_killed():
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True, env=env)
    child = None
    try:
        line = holder.stdout.readline()
        assert line, "the holder ended before starting its child"
        child = int(line)
        assert running(child)
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=60)
        until(lambda: not running(child), 60, "the child to end with its starter")
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=60)
        if child is not None and running(child):
            os.kill(child, signal.SIGKILL)
        holder.stdout.close()
