"""The data plane (docs/architecture.md §4): a buyer's code, datasets, models and outputs live at
URIs the buyer chooses, and each input is pinned by its sha256.

A URI is anything pyarrow's filesystems open: a local path (on a devnet), `file://`, `s3://`
(an S3-compatible store names its endpoint in the query, `?endpoint_override=HOST:PORT&scheme=http`,
and keys come from the environment, as for the AWS tools), `gs://`, `hdfs://`.

- `digest(uri)`: a file's sha256, or for a directory the sha256 of its manifest (every file's
  relative path, size and sha256, sorted: `compute.manifest`), so a dataset of many Parquet
  parts or a model checkpoint directory is pinned as one.
- `stage(uri, sha256, target)`: copies an input into a lease while hashing what arrives; a
  copy that does not hash to the pin is deleted and refused, so what a job reads is exactly
  what its spec names.
- `pack(directory)`: a code directory as one tar whose bytes depend only on the files' names,
  contents and executable bits, so the same code always has the same digest.
- `upload` and `publish`: local files to a URI.

Errors are `DataPlaneError` (a `ComputeError`), one sentence naming the input; they are the
buyer's to fix.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit, urlunsplit

from compute.errors import ComputeError
from compute.manifest import manifest_hash

CHUNK = 1 << 20
MAX_CODE_BYTES = 256 * 2**20
# Left out of a packed code directory: caches and version control, never part of a program.
SKIPPED = {
    "__pycache__",
    ".git",
    ".hg",
    ".svn",
    ".ipynb_checkpoints",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
}
SKIPPED_SUFFIXES = (".pyc", ".pyo")
SHA256 = re.compile(r"^(?:0x)?([0-9a-f]{64})$")


class DataPlaneError(ComputeError):
    """A URI that cannot be read or written, or an input that is not what its spec pins."""


class DigestMismatch(DataPlaneError):
    """An input whose bytes do not hash to the sha256 its spec pins."""


def is_uri(location: str) -> bool:
    return "://" in location


def join(location: str, name: str) -> str:
    """`name` inside `location`: a directory, or a URI whose query (an S3 endpoint, its region)
    stays after the path."""
    if not is_uri(location):
        return f"{location.rstrip('/')}/{name}"
    parts = urlsplit(location)
    return urlunsplit(parts._replace(path=f"{parts.path.rstrip('/')}/{name}"))


def shown(location: str) -> str:
    """A URI as it may be printed: without a password in it (`s3://KEY:SECRET@bucket`)."""
    if not is_uri(location):
        return location
    parts = urlsplit(location)
    if parts.password is None:
        return location
    host = parts.hostname or ""
    return urlunsplit(
        parts._replace(netloc=f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else ""))
    )


def filesystem(location: str):
    """(pyarrow filesystem, path in it) for a local path or a URI."""
    import pyarrow as pa
    import pyarrow.fs as pafs

    if not is_uri(location):
        return pafs.LocalFileSystem(), str(Path(location).expanduser().resolve())
    try:
        return pafs.FileSystem.from_uri(location)
    except (pa.ArrowException, ValueError, OSError) as exc:
        raise DataPlaneError(
            f"{shown(location)} cannot be opened ({_reason(exc)}); give a local path or a URI "
            "pyarrow opens (s3://bucket/key?endpoint_override=HOST:PORT, gs://, hdfs://)"
        ) from None


@dataclass(frozen=True)
class Entry:
    path: str  # relative, with '/'
    size: int


def _listing(location: str, what: str):
    """(fs, root path, is_dir, files under it) — a missing or unreadable location is an error naming
    `what`."""
    import pyarrow as pa
    import pyarrow.fs as pafs

    fs, root = filesystem(location)
    try:
        info = fs.get_file_info(root)
        if info.type == pafs.FileType.NotFound:
            raise DataPlaneError(f"{what} {shown(location)} does not exist")
        if info.type == pafs.FileType.File:
            return fs, root, False, [Entry(PurePosixPath(root).name, info.size)]
        found = fs.get_file_info(pafs.FileSelector(root, recursive=True))
    except (pa.ArrowException, OSError) as exc:
        raise DataPlaneError(f"{what} {shown(location)} cannot be read ({_reason(exc)})") from None
    base = root.rstrip("/") + "/"
    files = sorted((Entry(i.path[len(base):], i.size) for i in found if i.type == pafs.FileType.File),
                   key=lambda e: e.path)
    return fs, root, True, files


def digest(location: str, what: str = "input") -> str:
    """The sha256 (hex) of a file, or of a directory's manifest, at a path or URI."""
    fs, root, is_dir, files = _listing(location, what)
    if not is_dir:
        return _stream(fs, root, None, location, what)
    entries = [{"path": e.path, "size": e.size, "sha256": _stream(fs, f"{root.rstrip('/')}/{e.path}", None,
                                                                   location, what)} for e in files]
    return manifest_hash(entries).removeprefix("0x")


def stage(location: str, sha256: str, target: Path, what: str = "input") -> Path:
    """Copies a file or directory from `location` into the directory `target` (a file keeps its
    name there, so readers that go by extension still know it), hashing what arrives: if it is
    not `sha256`, nothing stays and DigestMismatch names the input. Returns the file or `target`."""
    fs, root, is_dir, files = _listing(location, what)
    partial = target.with_name(target.name + ".partial")
    _remove(partial)
    try:
        entries = []
        for e in files:
            local = partial / e.path
            local.parent.mkdir(parents=True, exist_ok=True)
            source = f"{root.rstrip('/')}/{e.path}" if is_dir else root
            entries.append(
                {"path": e.path, "size": e.size, "sha256": _stream(fs, source, local, location, what)}
            )
        partial.mkdir(parents=True, exist_ok=True)
        actual = manifest_hash(entries).removeprefix("0x") if is_dir else entries[0]["sha256"]
        if actual != normal_sha256(sha256):
            raise DigestMismatch(
                f"{what} {shown(location)} has sha256 {actual}, not the {normal_sha256(sha256)} "
                "its spec pins; post the spec again to pin what is there now, or restore "
                "what it pinned"
            )
        _remove(target)
        os.replace(partial, target)
    finally:
        _remove(partial)
    return target if is_dir else target / files[0].path


def _stream(fs, path: str, copy_to: Path | None, location: str, what: str) -> str:
    import pyarrow as pa

    h = hashlib.sha256()
    try:
        with fs.open_input_stream(path) as source, (open(copy_to, "wb") if copy_to else _Null()) as sink:
            while chunk := source.read(CHUNK):
                h.update(chunk)
                sink.write(chunk)
    except (pa.ArrowException, OSError) as exc:
        raise DataPlaneError(f"{what} {shown(location)} cannot be read ({_reason(exc)})") from None
    return h.hexdigest()


class _Null(io.RawIOBase):
    def write(self, b) -> int:
        return len(b)


def normal_sha256(value: str) -> str:
    """A sha256 as 64 lowercase hex digits; ValueError when it is not one."""
    match = SHA256.match(str(value).strip().lower())
    if not match:
        raise ValueError(f"{value!r} is not a sha256 (64 hex digits)")
    return match.group(1)


def upload(source: Path, location: str, what: str = "file") -> None:
    """Copies a local file or directory to `location` (a path or URI), replacing what is there."""
    import pyarrow as pa
    import pyarrow.fs as pafs

    fs, root = filesystem(location)
    try:
        if source.is_dir():
            if isinstance(fs, pafs.LocalFileSystem):
                shutil.copytree(source, root, dirs_exist_ok=True, symlinks=False)
            else:
                pafs.copy_files(
                    str(source), root, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs
                )
        else:
            parent = str(PurePosixPath(root).parent)
            fs.create_dir(parent, recursive=True)
            with open(source, "rb") as f, fs.open_output_stream(root) as out:
                while chunk := f.read(CHUNK):
                    out.write(chunk)
    except (pa.ArrowException, OSError) as exc:
        raise DataPlaneError(f"the {what} cannot be written to {shown(location)} ({_reason(exc)})") from None


def exists(location: str) -> bool:
    import pyarrow as pa
    import pyarrow.fs as pafs

    fs, root = filesystem(location)
    try:
        return fs.get_file_info(root).type != pafs.FileType.NotFound
    except (pa.ArrowException, OSError) as exc:
        raise DataPlaneError(f"{shown(location)} cannot be read ({_reason(exc)})") from None


def read_small(location: str, limit: int, what: str = "file") -> bytes | None:
    """The file at `location`, at most `limit` bytes of it (DataPlaneError past that); None where
    there is none."""
    import pyarrow as pa
    import pyarrow.fs as pafs

    fs, root = filesystem(location)
    try:
        info = fs.get_file_info(root)
        if info.type != pafs.FileType.File:
            return None
        if info.size is not None and info.size > limit:
            raise DataPlaneError(f"{what} {shown(location)} holds {info.size} bytes, more than {limit}")
        with fs.open_input_stream(root) as source:
            return source.read(limit)
    except (pa.ArrowException, OSError) as exc:
        raise DataPlaneError(f"{what} {shown(location)} cannot be read ({_reason(exc)})") from None


def download(location: str, target: Path, what: str = "result") -> None:
    """Copies a file or directory from `location` to a local `target`, as it is (no pin to check)."""
    fs, root, is_dir, files = _listing(location, what)
    if not is_dir:
        target.parent.mkdir(parents=True, exist_ok=True)
        _stream(fs, root, target, location, what)
        return
    for e in files:
        local = target / e.path
        local.parent.mkdir(parents=True, exist_ok=True)
        _stream(fs, f"{root.rstrip('/')}/{e.path}", local, location, what)
    target.mkdir(parents=True, exist_ok=True)


# ── code directories ───────────────────────────────────────────────────────────────


def pack(directory: Path) -> bytes:
    """A code directory as a tar: its regular files and directories in name order, each with mode
    0755 or 0644 (executable or not), owner 0 and time 0 — nothing else of the machine it was
    packed on. Symbolic links and special files are refused; caches and version control are left out."""
    directory = Path(directory)
    if not directory.is_dir():
        raise DataPlaneError(f"code directory {directory} does not exist; give the directory of the program")
    buffer = io.BytesIO()
    total = 0
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in _walk(directory):
            rel = path.relative_to(directory).as_posix()
            info = tarfile.TarInfo(rel)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if path.is_dir():
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
                continue
            info.size = path.stat().st_size
            info.mode = 0o755 if os.access(path, os.X_OK) else 0o644
            total += info.size
            if total > MAX_CODE_BYTES:
                raise DataPlaneError(
                    f"code directory {directory} holds more than {MAX_CODE_BYTES // 2**20} MiB; "
                    "keep data and models out of it and name them as inputs"
                )
            with open(path, "rb") as f:
                tar.addfile(info, f)
    return buffer.getvalue()


def _walk(directory: Path):
    for path in sorted(directory.iterdir(), key=lambda p: p.name):
        if path.name in SKIPPED or path.name.endswith(SKIPPED_SUFFIXES):
            continue
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            raise DataPlaneError(
                f"code directory {directory} holds {path.name}, which is a link or a special "
                "file; a program's code is regular files only"
            )
        yield path
        if path.is_dir():
            yield from _walk(path)


def unpack(archive: Path, target: Path) -> None:
    """Extracts a packed code directory; a member that would land outside `target`, or is not a
    regular file or directory, is refused."""
    target.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(archive, mode="r:") as tar:
            for member in tar.getmembers():
                if not (member.isfile() or member.isdir()):
                    raise DataPlaneError(
                        f"the code holds {member.name}, which is not a regular file or directory"
                    )
            tar.extractall(target, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise DataPlaneError(
            f"the code cannot be unpacked ({_reason(exc)}); pack it with `swarm job post`"
        ) from None


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]

