"""A real ``idem serve`` for the tests: the binary from ``IDEM_BIN``, a free loopback port, a
fresh SQLite file in a temporary directory, a clean environment (no ``IDEM_*`` settings leak
in). Without ``IDEM_BIN`` the suite fails rather than skipping: a client test that did not
talk to a server has shown nothing.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest


@dataclass
class Server:
    url: str
    db: str
    bin: str

    def token(self, namespace: str, role: str) -> str:
        out = subprocess.run(
            [self.bin, "token", "create", "--namespace", namespace, "--role", role, "--db", self.db],
            env=_clean_env(),
            check=True,
            capture_output=True,
            text=True,
        )
        return out.stdout.strip()


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("IDEM_")}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _binary() -> str:
    b = os.environ.get("IDEM_BIN")
    if not b or not Path(b).is_file():
        pytest.fail("set IDEM_BIN to an idem binary (the tests run against a real idem serve)")
    return b


def _start(tmp: Path, name: str) -> Iterator[Server]:
    binary = _binary()
    port = _free_port()
    db = f"sqlite://{tmp / (name + '.db')}"
    log = open(tmp / f"{name}.log", "wb")
    proc = subprocess.Popen(
        [binary, "serve", "--listen", f"127.0.0.1:{port}", "--db", db, "--janitor-interval", "1s"],
        env=_clean_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                pytest.fail(f"idem serve exited: {(tmp / f'{name}.log').read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("idem serve did not become ready within 30 s")
            time.sleep(0.05)
        yield Server(url=url, db=db, bin=binary)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        # CI keeps the server logs of a run (IDEM_TEST_LOG_DIR) to show them when it fails.
        keep = os.environ.get("IDEM_TEST_LOG_DIR")
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            shutil.copy(tmp / f"{name}.log", Path(keep) / f"python-{name}.log")


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """An open server (no tokens, loopback only)."""
    yield from _start(tmp_path_factory.mktemp("idem-open"), "open")


@pytest.fixture(scope="session")
def auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with tokens (created through the CLI on its database)."""
    yield from _start(tmp_path_factory.mktemp("idem-auth"), "auth")


@pytest.fixture
def ns() -> str:
    """A fresh namespace per test, so tests never see each other's keys."""
    return f"t-{uuid.uuid4().hex[:12]}"
