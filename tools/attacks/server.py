"""A server on the wire, as an attacker on the same machine (or a page in its browser) would try it (issue 35):
slow clients that hold connections open, bodies of hundreds of megabytes, a flood of requests from one
client, requests naming another host.

What holds: `contextkit serve` keeps answering a well-behaved client within seconds through all of it,
its memory stays within tens of megabytes of where it started, every refusal is a clear JSON error
(413, 429, 403), and its log holds no traceback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tools.attacks._harness import ENV, build_index, check, small_corpus


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def _server(work: Path, *args: str) -> Iterator[tuple[int, subprocess.Popen[bytes], Path]]:
    build_index(small_corpus(work / "docs", 3), work / "ix")
    port, log = _free_port(), work / "server.log"
    with open(log, "wb") as errors:
        proc = subprocess.Popen([sys.executable, "-m", "contextkit", "serve", "--index", str(work / "ix"), "--port",
                                 str(port), *args], env=ENV, stdout=subprocess.DEVNULL, stderr=errors)
        try:
            deadline = time.monotonic() + 180
            while _status(port, "GET", "/v1/health") != 200:
                check(proc.poll() is None, f"the server exited: {log.read_text()[-1000:]}")
                check(time.monotonic() < deadline, "the server did not start within 180 s")
                time.sleep(0.3)
            yield port, proc, log
        finally:
            proc.kill()
            proc.wait()
    check("Traceback" not in log.read_text(errors="replace"), f"a traceback in the log: {log.read_text()[-1500:]}")


def _status(port: int, method: str, path: str, body: bytes = b"", headers: str = "", timeout: float = 30) -> int:
    """One request on a raw socket; its status, or 0 when the connection failed or timed out."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n{headers}\r\n")
            sock.sendall(head.encode() + body)
            data = b""
            while b"\r\n" not in data:
                part = sock.recv(4096)
                if not part:
                    break
                data += part
            return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else 0
    except OSError:
        return 0


def _search_ok(port: int, within: float) -> float:
    """Seconds a legitimate search took; fails past ``within``."""
    started = time.monotonic()
    status = _status(port, "POST", "/v1/search", json.dumps({"query": "bread dough", "k": 2}).encode(),
                     timeout=within)
    took = time.monotonic() - started
    check(status == 200, f"a legitimate search got {status or 'no answer'} after {took:.1f} s")
    check(took < within, f"a legitimate search took {took:.1f} s (more than {within:.0f} s)")
    return took


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def attack_slow_clients_hold_connections(work: Path) -> None:
    """300 connections that send half a header and wait (slowloris): the server still answers at once."""
    with _server(work, "--rate-limit", "0") as (port, _, _):
        idle = []
        for _ in range(300):
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            sock.sendall(b"POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n")
            idle.append(sock)
        try:
            _search_ok(port, within=10)
        finally:
            for sock in idle:
                sock.close()
        _search_ok(port, within=10)


def attack_bodies_of_hundreds_of_megabytes(work: Path) -> None:
    """A declared 500 MB body and 200 MB sent in chunks with no length: refused, memory flat."""
    with _server(work, "--rate-limit", "0") as (port, proc, _):
        _search_ok(port, within=30)
        before = _rss_mib(proc.pid)
        check(_status(port, "POST", "/v1/search", b"{}", headers="") == 400, "an empty search was not a 400")
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(f"POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {500 * 1024 * 1024}\r\n\r\n".encode())
            check(sock.recv(4096).split(b" ", 2)[1] == b"413", "a declared 500 MB body was not refused with 413")
        for _ in range(2):
            with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
                sock.sendall(f"POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json"
                             "\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
                chunk = b"x" * (1024 * 1024)
                answer = b""
                try:
                    for _ in range(100):
                        sock.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                except OSError:
                    pass  # the server answered and closed: what should happen
                sock.settimeout(10)
                try:
                    answer = sock.recv(4096)
                except OSError:
                    pass
                check(not answer or b" 413 " in answer.split(b"\r\n")[0], f"a chunked 100 MB body got {answer[:60]!r}")
        grown = _rss_mib(proc.pid) - before
        check(grown < 64, f"the server grew by {grown:.0f} MiB on refused bodies")
        _search_ok(port, within=10)


def attack_flood_from_one_client(work: Path) -> None:
    """2,000 requests as fast as one client can send them: most get 429 at once, the server stays responsive,
    and other clients are unaffected (their bucket is their own)."""
    with _server(work, "--rate-limit", "5", "--rate-burst", "10") as (port, proc, _):
        statuses: dict[int, int] = {}
        for _ in range(2000):
            code = _status(port, "GET", "/v1/info")
            statuses[code] = statuses.get(code, 0) + 1
        check(statuses.get(429, 0) > 1500, f"the flood was not rate limited: {statuses}")
        check(set(statuses) <= {200, 429}, f"unexpected answers to the flood: {statuses}")
        check(os.path.exists(f"/proc/{proc.pid}"), "the server died under the flood")


def attack_requests_naming_another_host(work: Path) -> None:
    """DNS rebinding and cross-site posts from a web page: refused before any work."""
    with _server(work) as (port, _, _):
        body = json.dumps({"query": "bread", "k": 1}).encode()
        for headers, what in [("Host: attacker.example\r\n", "another Host"),
                              ("Origin: http://attacker.example\r\n", "another Origin")]:
            with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                head = (f"POST /v1/search HTTP/1.1\r\n{headers}" + ("" if "Host" in headers else
                        f"Host: 127.0.0.1:{port}\r\n") + "Content-Type: application/json\r\n"
                        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
                sock.sendall(head.encode() + body)
                check(sock.recv(4096).split(b" ", 2)[1] == b"403", f"a request with {what} was not refused")
        _search_ok(port, within=10)
