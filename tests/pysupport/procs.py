"""Helpers shared by the Python suites that drive real processes (tests/browser, tests/paging):
free ports, the reckon binary, child processes with their logs, and polling."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A loopback port free now, below the kernel's ephemeral range (32768-60999 on Linux). A
    port bind(0) handed out is back in that range once released, and the kernel may give it to
    any outgoing connection before the server it was meant for binds it (seen in CI: an
    Alertmanager's bind refused). A random port below the range is not handed out that way."""
    for _ in range(200):
        port = random.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free loopback port in 20000-32000")


def reckon_bin() -> Path:
    """$RECKON_BIN, else the newest reckon `cargo build` made (debug or release)."""
    if os.environ.get("RECKON_BIN"):
        return Path(os.environ["RECKON_BIN"])
    target = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
    found = [p for p in (target / "debug" / "reckon", target / "release" / "reckon") if p.exists()]
    if not found:
        pytest.fail(f"no reckon binary under {target}: run `cargo build --bin reckon` or set RECKON_BIN")
    return max(found, key=lambda p: p.stat().st_mtime)


def wait_for(what: str, check, seconds: float = 60, every: float = 0.25):
    """Polls `check()` until it returns something truthy; fails naming `what` and the last value."""
    deadline = time.monotonic() + seconds
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except OSError as e:  # not listening yet
            last = e
        if last and not isinstance(last, Exception):
            return last
        time.sleep(every)
    pytest.fail(f"timed out after {seconds}s waiting for {what}; last: {last!r}")


class Proc:
    """A child process with its output in a log file, stopped (SIGTERM, then SIGKILL) at the end."""

    def __init__(self, name: str, args: list[str], work: Path, env: dict | None = None):
        self.name, self.log = name, work / f"{name}.log"
        with open(self.log, "w") as log:
            self.p = subprocess.Popen(args, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL)

    def alive(self) -> bool:
        if self.p.poll() is not None:
            pytest.fail(f"{self.name} exited with {self.p.returncode}:\n{self.log.read_text()[-4000:]}")
        return True

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(15)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
