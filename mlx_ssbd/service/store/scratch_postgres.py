"""A scratch PostgreSQL server: Debian's ``postgresql`` binaries, ``initdb`` into a temporary
directory as an unprivileged user, listening on a free loopback port; stopped (by ``pg_ctl``,
which signals the server's own pid) and deleted at the end. For tests, benchmarks and trying
replicas on one machine; ``MISSING`` says why it cannot run here (None: it can).

Contract: nothing runs at import; ``postgres_server()`` is a context manager.
"""

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
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


@contextlib.contextmanager
def postgres_server():
    root = tempfile.mkdtemp(prefix="mlx-ssbd-pg-")
    os.chmod(root, 0o755)
    server = Server(root)
    try:
        server.init()
        server.start()
        yield server
    finally:
        server.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)
