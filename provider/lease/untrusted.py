"""What a lease leaves behind, read as a hostile party's: the site's only way into a lease's
directory once the lease has run.

A lease writes its directory as it likes. When its processes are gone (the sandbox's PID
namespace ends them all with its first process), whatever it left may be a link to a file of
the provider's, a FIFO that blocks whoever opens it, a device, a tree a million deep. The
launcher runs as the site's user, often root, so every read and write it makes there goes
through this module:

  - every path is opened one component at a time, relative to the directory above it, with
    `O_NOFOLLOW` (a link is never followed, wherever it sits on the way) and `O_NONBLOCK` (a
    FIFO does not block the open), and what was opened is checked with `fstat`: anything but
    a regular file or a directory is refused;
  - what is read is bounded: a report at most `SMALL_BYTES`, a tree at most `MAX_DEPTH` deep
    and `MAX_ENTRIES` entries;
  - a file the site writes into a directory the lease wrote (the manifest of a result kept in
    the buyer's own directory) replaces whatever entry held that name, never writing through it.

What the site will not read raises `Unreadable`, naming the path: the buyer's fault, in one sentence.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from compute.errors import ComputeError

SMALL_BYTES = 1 << 20  # a report the site reads whole (run.json)
MAX_DEPTH = 64
MAX_ENTRIES = 100_000
CHUNK = 1 << 20

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class Unreadable(ComputeError):
    """Something a lease left is not what the site reads: a link, a special file, too much."""


@dataclass(frozen=True)
class Entry:
    """One regular file of a tree, as the manifest lists it."""

    path: str  # relative to the tree's top, with forward slashes
    size: int
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "sha256": self.sha256}


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a special file"


def _open_dir(parent: int | None, name: str | Path, shown: str) -> int:
    """A directory, opened without following a link; Unreadable when it is anything else."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Unreadable(f"the job left {shown} as something other than a directory (a link or a "
                          "file); the site reads only what it wrote there as a directory") from None
        if exc.errno == errno.EACCES:
            raise Unreadable(f"the job left {shown} closed to the site; leave results readable") from None
        raise


@contextmanager
def directory(root: Path, rel: str = "") -> Iterator[int]:
    """`root/rel` as an open directory descriptor, every component below `root` opened without
    following links. `root` itself is the site's (the lease's directory, which it made)."""
    fd = _open_dir(None, root, str(root))
    try:
        walked = PurePosixPath()
        for part in _parts(rel):
            walked /= part
            below = _open_dir(fd, part, str(walked))
            os.close(fd)
            fd = below
        yield fd
    finally:
        os.close(fd)


def _parts(rel: str) -> tuple[str, ...]:
    parts = PurePosixPath(rel).parts
    if any(p in ("..", "/") for p in parts):
        raise Unreadable(f"{rel} does not lie inside the lease")
    return tuple(p for p in parts if p != ".")


def _open_file(parent: int, name: str, shown: str) -> tuple[int, os.stat_result]:
    """A regular file, opened without following a link or blocking on a FIFO."""
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Unreadable(f"the job left {shown}, a link; the site reads only regular files there") \
                from None
        if exc.errno in (errno.ENXIO, errno.ENODEV):
            raise Unreadable(f"the job left {shown}, a special file; the site reads only regular files") \
                from None
        if exc.errno == errno.EACCES:
            raise Unreadable(f"the job left {shown} closed to the site; leave results readable") from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise Unreadable(f"the job left {shown}, {_kind(info.st_mode)}; the site reads only regular files "
                         "there")
    return fd, info


def read_from(root: Path, rel: str, offset: int, limit: int) -> bytes:
    """At most `limit` bytes of a file the lease appends to (`rel` under `root`), from `offset`;
    nothing when it has not written one."""
    parts = _parts(rel)
    try:
        with directory(root, str(PurePosixPath(*parts[:-1])) if len(parts) > 1 else "") as parent:
            fd, _ = _open_file(parent, parts[-1], rel)
    except FileNotFoundError:
        return b""
    with os.fdopen(fd, "rb") as f:
        f.seek(offset)
        return f.read(limit)


def read_small(root: Path, rel: str, limit: int = SMALL_BYTES) -> bytes | None:
    """A report the lease wrote (`rel` under `root`), at most `limit` bytes; None when it left none."""
    parts = _parts(rel)
    try:
        with directory(root, str(PurePosixPath(*parts[:-1])) if len(parts) > 1 else "") as parent:
            fd, info = _open_file(parent, parts[-1], rel)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as f:
        if info.st_size > limit:
            raise Unreadable(f"the job's {rel} holds {info.st_size} bytes, more than the {limit} the site "
                             "reads")
        return f.read(limit + 1)[:limit]


def tail(path: Path, size: int = 64 << 10) -> str:
    """The end of a log the site keeps (its own file, which only the sandbox's output fills)."""
    fd = os.open(path, FILE_FLAGS)
    with os.fdopen(fd, "rb") as f:
        end = os.fstat(fd).st_size
        f.seek(max(0, end - size))
        return f.read(size).decode(errors="replace")


def walk(root: Path, rel: str, skip: frozenset[str] = frozenset(), lenient: bool = False,
         ) -> Iterator[tuple[str, int, int]]:
    """Each regular file under `root/rel`: (its path relative to `rel`, an open descriptor the
    caller closes, its size), sorted by path, leaving out the names in `skip` at its top. A link,
    a FIFO, a socket or a device anywhere in it is Unreadable (left out when `lenient`); so is a
    tree deeper than MAX_DEPTH or with more than MAX_ENTRIES entries."""
    count = [0]
    with directory(root, rel) as top:
        yield from _walk(top, PurePosixPath(), PurePosixPath(rel), count, skip, lenient)


def _walk(fd: int, at: PurePosixPath, shown: PurePosixPath, count: list[int], skip: frozenset[str],
          lenient: bool) -> Iterator[tuple[str, int, int]]:
    if len(at.parts) > MAX_DEPTH:
        raise Unreadable(f"the job's {shown} lie more than {MAX_DEPTH} directories deep; keep results "
                         "shallower")
    names = sorted(os.listdir(fd))
    count[0] += len(names)
    if count[0] > MAX_ENTRIES:
        raise Unreadable(f"the job's {shown} hold more than {MAX_ENTRIES} entries; pack them into fewer "
                         "files")
    for name in names:
        if not at.parts and name in skip:
            continue
        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        path = at / name
        if stat.S_ISDIR(info.st_mode):
            below = _open_dir(fd, name, str(shown / path))
            try:
                yield from _walk(below, path, shown, count, frozenset(), lenient)
            finally:
                os.close(below)
        elif stat.S_ISREG(info.st_mode):
            file_fd, opened = _open_file(fd, name, str(shown / path))
            yield path.as_posix(), file_fd, opened.st_size
        elif not lenient:
            raise Unreadable(f"the job's outputs hold {shown / path}, {_kind(info.st_mode)}; "
                          "outputs are regular files only")


def check_tree(root: Path, rel: str) -> int:
    """Walks `root/rel` as `walk` does, reading nothing; Unreadable as it would be. Its size in bytes."""
    total = 0
    for _, fd, size in walk(root, rel):
        os.close(fd)
        total += size
    return total


def copy_tree(root: Path, rel: str, sink: Callable[[str], IO[bytes]] | None,
              skip: frozenset[str] = frozenset(), lenient: bool = False) -> list[Entry]:
    """The manifest of `root/rel` (each regular file's path, size and sha256), read once through
    `walk`; with `sink`, each file is also written to what `sink(path)` opens, in the same pass."""
    entries = []
    for path, fd, size in walk(root, rel, skip, lenient):
        digest = hashlib.sha256()
        with os.fdopen(fd, "rb") as src:
            out = sink(path) if sink is not None else None
            try:
                while chunk := src.read(CHUNK):
                    digest.update(chunk)
                    if out is not None:
                        out.write(chunk)
            finally:
                if out is not None:
                    out.close()
        entries.append(Entry(path, size, digest.hexdigest()))
    return entries


def create(root: Path, rel: str) -> IO[bytes]:
    """The site's own file at `root/rel`, opened for writing, in a directory the lease may have
    written: each directory on the way is a directory (anything else in its place is removed),
    and whatever entry held the file's name (a link, a FIFO, a directory) is removed and the
    file created anew, so nothing is written through what the lease left."""
    parts = _parts(rel)
    with _way_to(root, parts) as parent:
        remove_entry(parent, parts[-1])
        fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o644, dir_fd=parent)
    return os.fdopen(fd, "wb")


@contextmanager
def _way_to(root: Path, parts: tuple[str, ...]) -> Iterator[int]:
    """The directory that holds `parts[-1]` under `root`, each directory on the way made one
    (anything else in its place removed), as an open descriptor."""
    with directory(root) as top:
        parent = top
        try:
            for part in parts[:-1]:
                parent = _ensure_dir(parent, part, top)
            yield parent
        finally:
            if parent != top:
                os.close(parent)


def write_file(root: Path, rel: str, data: bytes) -> None:
    with create(root, rel) as f:
        f.write(data)


def clear(root: Path, rel: str) -> None:
    """Makes way for the site to write `root/rel`: each directory on the way a directory, and
    nothing at `rel` itself."""
    parts = _parts(rel)
    with _way_to(root, parts) as parent:
        remove_entry(parent, parts[-1])


def _ensure_dir(parent: int, name: str, top: int) -> int:
    """`name` under `parent` as a directory the site can write into, replacing a non-directory."""
    try:
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if not stat.S_ISDIR(info.st_mode):
            remove_entry(parent, name)
            os.mkdir(name, 0o755, dir_fd=parent)
    except FileNotFoundError:
        os.mkdir(name, 0o755, dir_fd=parent)
    below = os.open(name, DIR_FLAGS, dir_fd=parent)
    if parent != top:
        os.close(parent)
    return below


def remove_entry(parent: int, name: str) -> None:
    """Whatever `name` is under the directory `parent`, gone, links never followed."""
    try:
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(name, dir_fd=parent)  # descriptor-based: it never follows a link out
    else:
        os.unlink(name, dir_fd=parent)


def remove(root: Path, rel: str) -> None:
    """`root/rel` gone, whatever it is, without following a link on the way."""
    parts = _parts(rel)
    try:
        with directory(root, str(PurePosixPath(*parts[:-1])) if len(parts) > 1 else "") as parent:
            remove_entry(parent, parts[-1])
    except (FileNotFoundError, Unreadable):
        if len(parts) > 1:  # a parent that is not a directory: remove it instead
            remove(root, str(PurePosixPath(*parts[:-1])))


def chown_tree(root: Path, uid: int) -> None:
    """`root` and everything under it to `uid`, links themselves and not what they name."""
    os.chown(root, uid, uid, follow_symlinks=False)
    for _, dirs, files, fd in os.fwalk(root, follow_symlinks=False):
        for name in dirs + files:
            os.chown(name, uid, uid, dir_fd=fd, follow_symlinks=False)
