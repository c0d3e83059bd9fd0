"""`fetch`: downloads from a loopback HTTP server and file:// URLs."""

import dataclasses
import hashlib
import http.server
import os
import pathlib
import socket
import threading

import numpy as np
import pytest

from conftest import DEIT_NPZ, requires_shared, runs_once
from keras_vit.weights import download
from keras_vit.weights.download import (
    WeightsDownloadError,
    cache_path,
    default_cache_dir,
    fetch,
)
from keras_vit.weights.registry import get_record

pytestmark = runs_once("torch", "downloads are Python's urllib and files")

# A few chunks, so progress and resuming have something to do.
PAYLOAD = np.random.default_rng(0).integers(0, 256, 3 * (1 << 20) + 12345, np.uint8).tobytes()
SHA = hashlib.sha256(PAYLOAD).hexdigest()


class _Server:
    """A loopback HTTP server over an in-memory file, with switchable faults."""

    def __init__(self):
        self.files = {"/w.npz": PAYLOAD}
        self.ranges = True  # honour Range requests
        self.truncate_at = None  # drop the connection after this many bytes
        self.requests = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                server.requests.append((self.path, self.headers.get("Range")))
                data = server.files.get(self.path)
                if data is None:
                    self.send_error(404)
                    return
                start, status = 0, 200
                header = self.headers.get("Range")
                if header and server.ranges:
                    start = int(header.split("=")[1].split("-")[0])
                    status = 206
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                self.send_response(status)
                self.send_header("Content-Length", str(len(data) - start))
                self.send_header("ETag", '"v1"')
                if status == 206:
                    self.send_header(
                        "Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}"
                    )
                self.end_headers()
                body = data[start:]
                if server.truncate_at is not None:
                    body = body[: server.truncate_at]
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def server():
    s = _Server()
    yield s
    s.close()


def _closed_port_url():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/w.npz"


def _record(*urls, sha256=None):
    return dataclasses.replace(
        get_record("Ti/16", "augreg-i21k"),
        urls=urls,
        file_name="test_weights.npz",
        sha256=sha256,
    )


def test_fresh_download(server, tmp_path, capsys):
    path = fetch(_record(server.url + "/w.npz", sha256=SHA), cache_dir=tmp_path)
    assert path == str(tmp_path / "test_weights.npz")
    assert pathlib.Path(path).read_bytes() == PAYLOAD
    assert sorted(os.listdir(tmp_path)) == ["test_weights.npz"]
    err = capsys.readouterr().err
    assert "test_weights.npz" in err
    assert f"{len(PAYLOAD) / 2**20:.1f}/{len(PAYLOAD) / 2**20:.1f} MiB (100%)" in err


def test_no_progress_output(server, tmp_path, capsys):
    fetch(_record(server.url + "/w.npz"), cache_dir=tmp_path, progress=False)
    assert capsys.readouterr().err == ""


def test_cached_file_is_reused_without_network(server, tmp_path):
    record = _record(server.url + "/w.npz")
    first = fetch(record, cache_dir=tmp_path, progress=False)
    assert len(server.requests) == 1
    assert fetch(record, cache_dir=tmp_path, progress=False) == first
    assert len(server.requests) == 1
    # Also when every URL is unreachable.
    offline = _record(_closed_port_url())
    assert fetch(offline, cache_dir=tmp_path, progress=False) == first


def test_resume_partial_download(server, tmp_path):
    record = _record(server.url + "/w.npz", sha256=SHA)
    server.truncate_at = 1_000_000
    with pytest.raises(WeightsDownloadError, match="received 1000000 of"):
        fetch(record, cache_dir=tmp_path, progress=False)
    part = tmp_path / "test_weights.npz.part"
    assert part.stat().st_size == 1_000_000
    assert not (tmp_path / "test_weights.npz").exists()
    server.truncate_at = None
    path = fetch(record, cache_dir=tmp_path, progress=False)
    assert server.requests[-1] == ("/w.npz", "bytes=1000000-")
    assert pathlib.Path(path).read_bytes() == PAYLOAD
    assert sorted(os.listdir(tmp_path)) == ["test_weights.npz"]


def test_complete_part_is_not_downloaded_again(server, tmp_path):
    # A process stopped between the last byte and the final rename.
    url = server.url + "/w.npz"
    part = tmp_path / "test_weights.npz.part"
    part.write_bytes(PAYLOAD)
    download._write_info(str(part), {"url": url, "total": len(PAYLOAD)})
    path = fetch(_record(url, sha256=SHA), cache_dir=tmp_path, progress=False)
    assert server.requests == [("/w.npz", f"bytes={len(PAYLOAD)}-")]
    assert pathlib.Path(path).read_bytes() == PAYLOAD


def test_part_longer_than_file_restarts(server, tmp_path):
    url = server.url + "/w.npz"
    part = tmp_path / "test_weights.npz.part"
    part.write_bytes(PAYLOAD + b"extra")
    download._write_info(str(part), {"url": url, "total": None})
    path = fetch(_record(url, sha256=SHA), cache_dir=tmp_path, progress=False)
    assert server.requests == [("/w.npz", f"bytes={len(PAYLOAD) + 5}-"), ("/w.npz", None)]
    assert pathlib.Path(path).read_bytes() == PAYLOAD


def test_part_from_another_url_is_not_resumed(server, tmp_path):
    part = tmp_path / "test_weights.npz.part"
    part.write_bytes(b"x" * 1000)
    download._write_info(str(part), {"url": "https://elsewhere/w.npz", "total": 9})
    path = fetch(_record(server.url + "/w.npz", sha256=SHA), cache_dir=tmp_path, progress=False)
    assert server.requests == [("/w.npz", None)]
    assert pathlib.Path(path).read_bytes() == PAYLOAD


def test_restart_when_server_ignores_range(server, tmp_path):
    record = _record(server.url + "/w.npz", sha256=SHA)
    server.truncate_at = 500_000
    with pytest.raises(WeightsDownloadError):
        fetch(record, cache_dir=tmp_path, progress=False)
    server.truncate_at = None
    server.ranges = False
    path = fetch(record, cache_dir=tmp_path, progress=False)
    assert server.requests[-1] == ("/w.npz", "bytes=500000-")
    assert pathlib.Path(path).read_bytes() == PAYLOAD


def test_sha256_mismatch(server, tmp_path):
    wrong = hashlib.sha256(b"something else").hexdigest()
    path = cache_path(_record("https://x/y.npz"), tmp_path)
    with pytest.raises(WeightsDownloadError) as info:
        fetch(_record(server.url + "/w.npz", sha256=wrong), cache_dir=tmp_path, progress=False)
    message = str(info.value)
    assert f"expected {wrong}" in message and f"got {SHA}" in message
    assert path in message
    assert os.listdir(tmp_path) == []


def test_mirror_after_failed_url(server, tmp_path):
    record = _record(server.url + "/missing.npz", server.url + "/w.npz", sha256=SHA)
    path = fetch(record, cache_dir=tmp_path, progress=False)
    assert pathlib.Path(path).read_bytes() == PAYLOAD
    assert [r[0] for r in server.requests] == ["/missing.npz", "/w.npz"]


def test_unreachable_error_names_urls_and_cache_path(server, tmp_path):
    refused = _closed_port_url()
    missing = server.url + "/missing.npz"
    record = _record(refused, missing)
    with pytest.raises(OSError) as info:
        fetch(record, cache_dir=tmp_path, progress=False)
    error = info.value
    assert isinstance(error, WeightsDownloadError)
    message = str(error)
    assert refused in message and missing in message
    assert "HTTP 404" in message
    expected_path = str(tmp_path / "test_weights.npz")
    assert expected_path in message
    assert error.path == expected_path and error.urls == (refused, missing)
    assert not any(name.endswith(".npz") for name in os.listdir(tmp_path))


def test_file_url(tmp_path):
    source = tmp_path / "source.npz"
    source.write_bytes(PAYLOAD)
    cache = tmp_path / "cache"
    path = fetch(_record(source.as_uri(), sha256=SHA), cache_dir=cache, progress=False)
    assert pathlib.Path(path).read_bytes() == PAYLOAD
    assert sorted(os.listdir(cache)) == ["test_weights.npz"]


def test_default_cache_dir_honours_keras_home(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    assert default_cache_dir() == os.path.join(str(tmp_path), "keras_vit", "weights")
    record = get_record("B/16", "imagenet21k")
    assert cache_path(record) == os.path.join(
        str(tmp_path), "keras_vit", "weights", record.file_name
    )
    monkeypatch.delenv("KERAS_HOME")
    assert default_cache_dir().endswith(os.path.join(".keras", "keras_vit", "weights"))


def test_stale_cached_file_is_replaced(server, tmp_path):
    (tmp_path / "test_weights.npz").write_bytes(b"corrupt")
    with pytest.warns(UserWarning, match="sha256"):
        path = fetch(_record(server.url + "/w.npz", sha256=SHA), cache_dir=tmp_path, progress=False)
    assert pathlib.Path(path).read_bytes() == PAYLOAD
    assert download.CACHE_SUBDIR == os.path.join("keras_vit", "weights")


@requires_shared
def test_real_checkpoint_with_published_sha256(tmp_path):
    # The sha256 published in ../shared/README.md for the DeiT-Tiny file.
    sha = "eaca0f5347c3833606d535f553c84b73a5c6e1f1a81ce3700aba34dc76450df6"
    record = _record(DEIT_NPZ.as_uri(), sha256=sha)
    path = fetch(record, cache_dir=tmp_path, progress=False)
    assert pathlib.Path(path).read_bytes() == DEIT_NPZ.read_bytes()
