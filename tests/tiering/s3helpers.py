"""Helpers of the tier-2 tests: moto's S3 server in its own process on 127.0.0.1 (as users
start it), ``Link`` (a TCP relay a test cuts and restores to take the endpoint away mid-run
without losing what the server holds), s3fs options and buckets, and ``Backend`` (a tier-2
target: URL, fsspec options)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Iterator

S3_KEY = {"key": "testing", "secret": "testing"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(port: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, f"moto's server exited with {proc.returncode}"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            assert time.monotonic() < deadline, "moto's server did not start listening"
            time.sleep(0.05)


def moto_server() -> Iterator[str]:
    """Run moto's S3 server (``python -m moto.server``) on 127.0.0.1; yields its URL."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_listening(port, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Link:
    """A TCP relay from a local port to ``upstream``: ``cut()`` closes the port and every
    connection through it (the endpoint is unreachable: connections are refused); ``restore()``
    listens on the same port again."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream = upstream_port
        self.port = _free_port()
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._server: socket.socket | None = None
        self.restore()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def restore(self) -> None:
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("127.0.0.1", self.port))
        srv.listen(64)
        with self._lock:
            self._server = srv
        threading.Thread(target=self._accept, args=(srv,), daemon=True).start()

    def cut(self) -> None:
        with self._lock:
            srv, self._server = self._server, None
            conns, self._conns = self._conns, []
        if srv is not None:
            srv.close()
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()

    def _accept(self, srv: socket.socket) -> None:
        while True:
            try:
                client, _ = srv.accept()
            except OSError:
                return  # cut
            try:
                up = socket.create_connection(("127.0.0.1", self.upstream))
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._server is not srv:
                    client.close()
                    up.close()
                    return
                self._conns += [client, up]
            for a, b in ((client, up), (up, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(1 << 16):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def s3_options(endpoint: str) -> dict:
    """s3fs options for moto: quick to give up on a dead endpoint (the tierer retries)."""
    return {**S3_KEY, "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
            "config_kwargs": {"connect_timeout": 2, "read_timeout": 10,
                              "retries": {"max_attempts": 1}},
            "skip_instance_cache": True, "use_listings_cache": False}


def new_bucket(endpoint: str) -> str:
    import boto3  # moto's own dependency
    name = f"t2-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                 aws_secret_access_key="testing").create_bucket(Bucket=name)
    return name


@dataclass
class Backend:
    """One tier-2 target: its URL and fsspec options, and a filesystem to look with."""

    name: str
    url: str
    options: dict = field(default_factory=dict)

    def fs(self):
        import fsspec
        return fsspec.core.url_to_fs(self.url, **self.options)
