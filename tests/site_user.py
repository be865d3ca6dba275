"""A site run by an ordinary user, as docs/operations.md's systemd unit runs it: the unit's
`User=`, its `Environment=` and `EnvironmentFile=` (the site's secrets), and a SWARM_HOME of
that user's own. The user is made when missing, with subordinate uids and gids for its leases'
users, as the operations guide asks of a provider.

The Python the tests run, or the checkout, may lie in a directory closed to other users (root's
home, a fresh `mktemp -d`): the user's processes run in a mount namespace of their own in which
such a directory is an empty one with the runtime and the checkout bound back into it, as a
provider installs Swarm where its user can run it (/opt).
Nothing else of the machine changes for them.
"""

from __future__ import annotations

import os
import pwd
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from provider.lease.sandbox import default_runtime

ROOT = Path(__file__).resolve().parents[1]
OPERATIONS = ROOT / "docs" / "operations.md"
# Subordinate ids for the tests' site user when useradd gave it none: apart from the uids a root
# site gives its leases (200000 up), so the leases of the tests' two kinds of site never share one.
SUBORDINATE = "300000-365535"
LOCK = Path("/run/swarm-test-user.lock")
KEEP = Path("/run/swarm-test-runtime")  # where the runtime is held while its closed parent is emptied


@dataclass(frozen=True)
class Unit:
    """The systemd unit of a site, as docs/operations.md gives it."""

    user: str
    environment: dict[str, str]
    environment_file: Path
    exec_start: list[str]


def site_unit() -> Unit:
    text = OPERATIONS.read_text()
    block = re.search(r"# /etc/systemd/system/swarm-site\.service\n(.*?)```", text, re.DOTALL)
    assert block, "docs/operations.md gives the site's systemd unit"
    lines = block.group(1).splitlines()
    value = {k: v for k, _, v in (line.partition("=") for line in lines) if v and not k.startswith("#")}
    environment = dict(
        line.removeprefix("Environment=").split("=", 1) for line in lines if line.startswith("Environment=")
    )
    return Unit(value["User"], environment, Path(value["EnvironmentFile"]), shlex.split(value["ExecStart"]))


def ensure_user(name: str) -> pwd.struct_passwd:
    """The unit's user, an ordinary one with a home of its own and subordinate ids. Made under
    a lock: `make test`'s two pytest processes may both want it at once."""
    import fcntl

    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", "--create-home", "--shell", "/usr/sbin/nologin", name], check=True)
            entry = pwd.getpwnam(name)
        for table, flag in (("/etc/subuid", "--add-subuids"), ("/etc/subgid", "--add-subgids")):
            owned = Path(table).read_text() if Path(table).exists() else ""
            if not re.search(rf"^{re.escape(name)}:", owned, re.MULTILINE):
                subprocess.run(["usermod", flag, SUBORDINATE, name], check=True)
    return entry


def installed() -> list[Path]:
    """What the site's user runs: the sandbox's runtime (the interpreter, its packages) and the
    whole checkout, whose contracts and compiled artifacts the site reads as well."""
    paths = sorted({*default_runtime(), ROOT})
    return [p for p in paths if not any(p != q and p.is_relative_to(q) for q in paths)]


def closed_ancestors() -> list[Path]:
    """The directories on the way to what the site runs that other users cannot enter."""
    closed: set[Path] = set()
    for path in installed():
        for step in reversed(path.parents):
            if step != Path("/") and not os.stat(step).st_mode & 0o001:
                closed.add(step)
                break
    return sorted(closed)


def as_user(user: pwd.struct_passwd, argv: list[str], env: dict[str, str], **popen) -> subprocess.Popen:
    """`argv` as `user`, with exactly `env`, where it can run this Python (see the module)."""
    keep = KEEP
    keep.mkdir(exist_ok=True)
    script = ["set -e"]
    runtime = [p for p in installed() if any(p.is_relative_to(c) for c in closed_ancestors())]
    for i, path in enumerate(runtime):
        script += [f"mkdir -p {keep}/{i}", f"mount --rbind {shlex.quote(str(path))} {keep}/{i}"]
    for closed in closed_ancestors():
        script.append(f"mount -t tmpfs -o mode=0755 tmpfs {shlex.quote(str(closed))}")
    for i, path in enumerate(runtime):
        script += [f"mkdir -p {shlex.quote(str(path))}", f"mount --rbind {keep}/{i} {shlex.quote(str(path))}"]
    drop = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups", "--",
            "env", "-i", *(f"{k}={v}" for k, v in env.items()), *argv]
    script.append("exec " + shlex.join(drop))
    return subprocess.Popen(["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                             "\n".join(script)], cwd="/", **popen)


def python_env(user: pwd.struct_passwd, home: Path, extra: dict[str, str]) -> dict[str, str]:
    """What the unit gives the site's processes, with this checkout's Python on the PATH."""
    return {"PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin", "HOME": user.pw_dir,
            "USER": user.pw_name, "PYTHONPATH": str(ROOT), "SWARM_HOME": str(home)} | extra
