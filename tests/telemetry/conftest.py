"""A real ``mlflow server`` on 127.0.0.1 over the session's micro suite, shared by the UI tests
(its REST API in test_mlflow_ui.py, the rendered pages in test_mlflow_ui_browser.py)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(micro_suite):
    result, _ = micro_suite
    port = _free_port()
    exe = Path(sys.executable).parent / "mlflow"
    proc = subprocess.Popen(
        [
            str(exe),
            "server",
            "--backend-store-uri",
            result.tracking_uri,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=2):
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("mlflow server did not start") from None
                time.sleep(0.5)
        yield base, result
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
