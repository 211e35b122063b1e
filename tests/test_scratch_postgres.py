"""The scratch PostgreSQL server (``mlx_ssbd/service/store/scratch_postgres.py``) ends with the
process that started it, however that process ends: here it is killed outright (SIGKILL, no
cleanup runs in it) while the server runs, and the server must stop and its directory go."""

import os
import signal
import subprocess
import sys

from mlx_ssbd.service.store.scratch_postgres import MISSING

import pytest
from children import running
from waiting import until

pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")

HOLDER = """
import sys, time
from mlx_ssbd.service.store.scratch_postgres import postgres_server
with postgres_server() as server:
    pid = int(open(server.data + "/postmaster.pid").readline())
    print(server.root, pid, flush=True)
    time.sleep(600)
"""


def test_a_killed_holder_leaves_no_server_behind():
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True)
    try:
        line = holder.stdout.readline()  # returns when the server runs, or at the holder's end
        assert line, "the holder ended before its server ran"
        root, pid = line.split()[0], int(line.split()[1])
        assert running(pid) and os.path.isdir(root)
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=60)
        until(lambda: not running(pid), 90, "the orphaned server to stop")
        until(lambda: not os.path.exists(root), 90, "its directory to be deleted")
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=60)
        holder.stdout.close()
