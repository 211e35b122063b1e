"""A scratch PostgreSQL server: Debian's ``postgresql`` binaries, ``initdb`` into a temporary
directory as an unprivileged user, listening on a free loopback port; stopped (by ``pg_ctl``,
which signals the server's own pid) and deleted at the end. For tests, benchmarks and trying
replicas on one machine; ``MISSING`` says why it cannot run here (None: it can).

The end comes however the process that started it ends: a watchdog process of its own session
waits on a pipe from it, and when that pipe closes (a normal exit, an exception, SIGTERM or
SIGKILL alike) stops the server by the pid in its ``postmaster.pid`` if it still runs and deletes
the directory. So a test run killed by a timeout leaves no server behind.

Contract: nothing runs at import; ``postgres_server()`` is a context manager.
"""

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid

BIN = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
MISSING = (
    None
    if BIN and os.path.exists(os.path.join(BIN[-1], "initdb"))
    else "needs PostgreSQL's server binaries (apt-get install postgresql)"
)


def _user() -> tuple[int, int] | None:
    """The unprivileged user to run the server as (None: this process is not root)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            entry = pwd.getpwnam(name)
            return entry.pw_uid, entry.pw_gid
    raise RuntimeError("no unprivileged user to run PostgreSQL as")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One PostgreSQL server; ``url(db)`` for a database, ``new_database()`` for a fresh one."""

    def __init__(self, root: str):
        self.root, self.data, self.port = root, os.path.join(root, "data"), _free_port()
        self.user = _user()

    def _run(self, *args, check=True):
        def drop():
            if self.user is not None:
                os.setgid(self.user[1])
                os.setuid(self.user[0])

        return subprocess.run(
            [os.path.join(BIN[-1], args[0]), *args[1:]],
            preexec_fn=drop,
            capture_output=True,
            text=True,
            timeout=120,
            check=check,
        )

    def init(self) -> None:
        os.makedirs(self.data)
        if self.user is not None:
            for path in (self.root, self.data):
                os.chown(path, *self.user)
        self._run("initdb", "-D", self.data, "-U", "mlx", "-A", "trust", "--no-sync", "-E", "UTF8")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c max_connections=200"
        self._run(
            "pg_ctl",
            "-D",
            self.data,
            "-l",
            os.path.join(self.root, "log"),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", self.data, "-m", mode, "-w", "-t", "60", "stop", check=False)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://mlx@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as db:
            db.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def log(self) -> str:
        with contextlib.suppress(OSError):
            return open(os.path.join(self.root, "log")).read()
        return ""


# The watchdog (run as ``python -c _WATCHDOG ROOT``): its stdin is a pipe from the process that
# started the server, which it reads to the end, i.e. until that process has ended.
_WATCHDOG = """
import os, shutil, signal, sys, time
sys.stdin.buffer.read()
root = sys.argv[1]
try:
    with open(os.path.join(root, "data", "postmaster.pid")) as f:
        pid = int(f.readline())
    os.kill(pid, signal.SIGQUIT)  # PostgreSQL's immediate shutdown
    for _ in range(600):  # at most a minute
        os.kill(pid, 0)
        time.sleep(0.1)
except (OSError, ValueError):  # no server left (stopped already, or never started)
    pass
shutil.rmtree(root, ignore_errors=True)
"""


def _watchdog(root: str) -> subprocess.Popen:
    """The process that stops the server in ``root`` and deletes it once this process ends; in a
    session of its own, so that a signal to this process's group leaves it to do so."""
    return subprocess.Popen(
        [sys.executable, "-c", _WATCHDOG, root],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


@contextlib.contextmanager
def postgres_server():
    root = tempfile.mkdtemp(prefix="mlx-ssbd-pg-")
    os.chmod(root, 0o755)
    watchdog = _watchdog(root)
    server = Server(root)
    try:
        server.init()
        server.start()
        yield server
    finally:
        server.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)
        watchdog.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            watchdog.wait(timeout=60)
