"""Downloads of registered checkpoints into the Keras cache.

Files land in `$KERAS_HOME/keras_vit/weights/` (`~/.keras/...` when
`KERAS_HOME` is unset, as for `keras.utils.get_file`). A download is written
to `<file>.part` and moved into place with `os.replace` only once complete
and verified, so an interrupted download never looks like a checkpoint; the
next call resumes it with an HTTP Range request when the server allows.

Why not `keras.utils.get_file`: it writes straight to the final path, so a
process killed mid-download leaves a partial file that later calls accept
when no hash is known (no Google checkpoint publishes one); it cannot resume
a multi-gigabyte file, try mirrors, or check the announced size. The
sha256 check here serves records that carry a hash (`registry.register`
takes any `WeightsRecord`, e.g. a team's own fine-tunes).
"""

import hashlib
import http.client
import json
import os
import sys
import time
import urllib.error
import urllib.request
import warnings

from keras_vit.version import __version__

CACHE_SUBDIR = os.path.join("keras_vit", "weights")
_CHUNK = 1 << 20
_MIB = float(1 << 20)
# Everything a failing URL can raise: HTTP errors and refused connections
# (URLError is an OSError), timeouts, truncated bodies, unknown schemes.
_NETWORK_ERRORS = (OSError, http.client.HTTPException, ValueError)


class WeightsDownloadError(OSError):
    """A checkpoint could not be downloaded from any of its URLs.

    An `OSError`. The message names every URL tried with its failure and the
    exact path where the file can be placed by hand.

    Attributes:
        urls: the URLs tried.
        path: the cache path the file was meant for.
    """

    def __init__(self, message, urls=(), path=None):
        super().__init__(message)
        self.urls = tuple(urls)
        self.path = path

    def __str__(self):
        return self.args[0]


def default_cache_dir():
    """The folder of downloaded weights: `$KERAS_HOME/keras_vit/weights`.

    Returns:
        A path; `KERAS_HOME` is read at call time, and `~/.keras` is used when
        it is unset (`/tmp/.keras` when the home folder is not writable, like
        Keras).
    """
    home = os.environ.get("KERAS_HOME")
    if not home:
        base = os.path.expanduser("~")
        if not os.access(base, os.W_OK):
            base = "/tmp"
        home = os.path.join(base, ".keras")
    return os.path.join(home, CACHE_SUBDIR)


def cache_path(record, cache_dir=None):
    """Where `fetch` keeps the file of `record`.

    Args:
        record: a `WeightsRecord`.
        cache_dir: folder holding the files; default `default_cache_dir()`.

    Returns:
        The absolute path of the cached file (it may not exist yet).
    """
    folder = os.path.expanduser(cache_dir) if cache_dir else default_cache_dir()
    return os.path.abspath(os.path.join(folder, record.file_name))


def fetch(record, cache_dir=None, progress=True, timeout=60):
    """Returns the local path of a registered checkpoint, downloading it once.

    A cached file is returned without any network access. Otherwise each URL
    of the record is tried in turn; a partial `<file>.part` left by an earlier
    attempt at the same URL is resumed (HTTP Range) when the server supports
    it and restarted otherwise. The result is checked against the size the
    server announced and, when the record has one, its sha256.

    Args:
        record: a `WeightsRecord` (see `keras_vit.weights.registry`).
        cache_dir: folder for the files; default `default_cache_dir()`.
        progress: bool, default True: show a progress bar on stderr.
        timeout: seconds to wait for the server before a URL counts as
            failed, default 60.

    Returns:
        The path of the verified file.

    Raises:
        WeightsDownloadError: (an `OSError`) when no URL worked, including a
            sha256 mismatch; the message lists every URL tried and the path
            where the file can be placed by hand.

    Example:

    >>> from keras_vit.weights.registry import get_record
    >>> path = fetch(get_record("B/16", "imagenet21k"))  # doctest: +SKIP

    Any URL urllib opens works, e.g. a local mirror:

    >>> import dataclasses, pathlib, tempfile
    >>> mirror = pathlib.Path(tempfile.mkdtemp())
    >>> (mirror / "ViT-B_16.npz").write_bytes(b"weights")
    7
    >>> record = dataclasses.replace(
    ...     get_record("B/16", "imagenet21k"),
    ...     urls=((mirror / "ViT-B_16.npz").as_uri(),))
    >>> path = fetch(record, cache_dir=mirror / "cache", progress=False)
    >>> os.path.basename(path), open(path, "rb").read()
    ('ViT-B_16_imagenet21k.npz', b'weights')
    """
    path = cache_path(record, cache_dir)
    if os.path.isfile(path):
        if record.sha256 is None or _sha256(path) == record.sha256:
            return path
        warnings.warn(
            f"The cached file {path} does not match the expected sha256; "
            "downloading it again.",
            stacklevel=2,
        )
    os.makedirs(os.path.dirname(path), exist_ok=True)
    part = path + ".part"
    failures = []
    for url in record.urls:
        try:
            _download(url, part, record.file_name, progress, timeout)
        except _NETWORK_ERRORS as error:
            failures.append(f"{url}: {_reason(error)}")
            continue
        if record.sha256 is not None:
            actual = _sha256(part)
            if actual != record.sha256:
                _remove(part)
                _remove(_info_path(part))
                failures.append(
                    f"{url}: sha256 mismatch: expected {record.sha256}, "
                    f"got {actual}; the partial file was deleted"
                )
                continue
        os.replace(part, path)
        _remove(_info_path(part))
        return path
    tried = "\n".join(f"  - {line}" for line in failures)
    raise WeightsDownloadError(
        f"Could not download the weights {record.name!r} for "
        f"ViT-{record.architecture} ({record.file_name}). Tried:\n{tried}\n"
        "Download the file by hand from one of these URLs and place it at:\n"
        f"  {path}",
        urls=record.urls,
        path=path,
    )


def _download(url, part, label, progress, timeout):
    """Completes `part` from `url`; raises on any failure, keeping the part."""
    info = _read_info(part)
    offset = 0
    if info.get("url") == url and os.path.isfile(part):
        offset = os.path.getsize(part)
    headers = {"User-Agent": f"keras-vit/{__version__}"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
        if info.get("validator"):
            # The server answers 200 (whole file) if the file changed.
            headers["If-Range"] = info["validator"]
    request = urllib.request.Request(url, headers=headers)
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as error:
        if error.code != 416 or not offset:
            raise
        size = error.headers.get("Content-Range", "").rpartition("/")[2]
        error.close()
        if size == str(offset):
            return  # the part is already complete
        # The part does not fit the file any more: start from scratch.
        _remove(part)
        response = urllib.request.urlopen(
            urllib.request.Request(url, headers={"User-Agent": headers["User-Agent"]}),
            timeout=timeout,
        )
        offset = 0
    with response:
        total, resumed = _expected_size(response, offset)
        if not resumed:
            offset = 0
        validator = response.headers.get("ETag") or response.headers.get(
            "Last-Modified"
        )
        _write_info(part, {"url": url, "total": total, "validator": validator})
        bar = _Progress(label, total, offset, progress)
        done = offset
        with open(part, "ab" if resumed else "wb") as f:
            while True:
                chunk = response.read(_CHUNK)
                if not chunk:
                    break
                f.write(chunk)
                done += len(chunk)
                bar.update(done)
        bar.close(done)
    if total is not None and done != total:
        if done > total:
            _remove(part)
        raise OSError(
            f"incomplete download: received {done} of {total} bytes"
            + (" (kept for resuming)" if done < total else "")
        )


def _expected_size(response, offset):
    """(total size or None, whether the response continues at `offset`)."""
    status = getattr(response, "status", None)
    content_range = response.headers.get("Content-Range", "")
    if offset and status == 206 and content_range.startswith(f"bytes {offset}-"):
        total = content_range.rpartition("/")[2]
        return (int(total) if total.isdigit() else None), True
    length = response.headers.get("Content-Length")
    return (int(length) if length and length.isdigit() else None), False


class _Progress:
    """A one-line byte counter on stderr, throttled to a few updates a second."""

    def __init__(self, label, total, start, enabled):
        self.label = label
        self.total = total
        self.enabled = enabled
        self.stream = sys.stderr
        self.tty = getattr(self.stream, "isatty", lambda: False)()
        self.start_time = time.monotonic()
        self.start = start
        self.last_time = 0.0
        self.last_tenth = -1

    def _line(self, done):
        text = f"Downloading {self.label}: {done / _MIB:.1f}"
        if self.total:
            text += f"/{self.total / _MIB:.1f} MiB ({100 * done // self.total}%)"
        else:
            text += " MiB"
        elapsed = time.monotonic() - self.start_time
        if elapsed > 0:
            text += f" {(done - self.start) / _MIB / elapsed:.1f} MiB/s"
        return text

    def update(self, done):
        if not self.enabled:
            return
        now = time.monotonic()
        if self.tty:
            if now - self.last_time >= 0.2:
                self.last_time = now
                self.stream.write("\r" + self._line(done))
                self.stream.flush()
        elif self.total:
            # Logs get a line per tenth, not a line per chunk.
            tenth = 10 * done // self.total
            if tenth != self.last_tenth and tenth < 10:
                self.last_tenth = tenth
                self.stream.write(self._line(done) + "\n")

    def close(self, done):
        if self.enabled:
            self.stream.write(("\r" if self.tty else "") + self._line(done) + "\n")
            self.stream.flush()


def _info_path(part):
    return part + ".json"


def _read_info(part):
    # Which URL (and file version) the part came from: a part is only
    # resumed from the same source.
    try:
        with open(_info_path(part)) as f:
            info = json.load(f)
        return info if isinstance(info, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_info(part, info):
    with open(_info_path(part), "w") as f:
        json.dump(info, f)


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _remove(path):
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def _reason(error):
    if isinstance(error, urllib.error.HTTPError):
        return f"HTTP {error.code} {error.reason}"
    if isinstance(error, urllib.error.URLError):
        return f"unreachable ({error.reason})"
    return f"{type(error).__name__}: {error}"
