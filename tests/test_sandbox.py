"""A lease's sandbox, attacked: each attack is a program a buyer could send. Run bare, as a
provider's machine would run it without the sandbox, it succeeds; in the sandbox it fails,
and the next lease still runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from provider.lease.sandbox import Limits, Sandbox, lease_uid

PYTHON = "/usr/bin/python3"  # readable by a lease's own user, unlike a venv in a private home
LIMITS = Limits(memory_bytes=512 * 2**20, max_processes=32, wall_seconds=20)
# Lease numbers of these sandboxes: far past any a site of the suite reaches, so that no lease of
# the Ray tests beside them (whose site numbers its leases from 1) shares their users and their
# process limit.
OWN = 40_000

READ_KEYSTORE = "print(open({keystore!r}).read())"
READ_TOKEN = "print(open({token!r}).read())"
READ_OTHER_LEASE = "print(open({other!r}).read())"
EXHAUST_MEMORY = "blob = b\"x\" * 1024 ** 3; print(\"allocated\", len(blob))"
FORK_WITHOUT_BOUND = """
import os, time
children = []
for _ in range(64):
    pid = os.fork()
    if pid == 0:
        time.sleep(2)
        os._exit(0)
    children.append(pid)
print('forked', len(children))
for pid in children:
    os.waitpid(pid, 0)
"""

# A child forked by a thread other than the main one (the kernel lists it among that thread's
# children only), growing a little at a time.
GROW_IN_A_THREADS_CHILD = """
import os, threading, time
def fork():
    if os.fork() == 0:
        blobs = []
        for _ in range(30):
            blobs.append(b"x" * 64 * 2**20)
            time.sleep(0.1)
        print("held", 64 * len(blobs), "MiB", flush=True)
        os._exit(0)
    os.wait()
thread = threading.Thread(target=fork)
thread.start()
thread.join()
"""


@pytest.fixture
def site() -> Iterator[dict[str, Path]]:
    """A provider's SWARM_HOME and leases directory, outside /tmp (which a lease sees as its
    own empty /tmp anyway), with a keystore, a cluster token and another lease's output."""
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is not installed: `make test` installs Debian's `bubblewrap` package")
    root = Path("/var/tmp") / f"swarm-site-{uuid.uuid4().hex[:8]}"
    home, leases = root / "home", root / "leases"
    (home / "keys").mkdir(parents=True)
    keystore = home / "keys" / "provider.json"
    keystore.write_text('{"crypto": "the provider key"}')
    token = home / "cluster-token"
    token.write_text("the cluster token")
    (leases / "7").mkdir(parents=True)
    other = leases / "7" / "model.bin"
    other.write_text("another buyer's weights")
    for path in (root, home, leases, home / "keys", leases / "7"):
        path.chmod(0o755)  # a bare process of another user could read them: the sandbox must hide them
    for path in (keystore, token, other):
        path.chmod(0o644)
    yield {"root": root, "home": home, "leases": leases, "keystore": keystore, "token": token, "other": other}
    shutil.rmtree(root, ignore_errors=True)


def _sandbox(site: dict[str, Path], number: int, limits: Limits = LIMITS) -> Sandbox:
    return Sandbox(site["leases"] / str(number), limits, hidden=[site["home"], site["leases"]],
                   lease_uid=lease_uid(OWN + number))


def _bare(code: str, cwd: Path) -> subprocess.CompletedProcess:
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.run([PYTHON, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=60,
                          check=False)


ATTACKS = {
    "read the provider's keystore": (READ_KEYSTORE, "the provider key"),
    "read the cluster token": (READ_TOKEN, "the cluster token"),
    "read another lease's files": (READ_OTHER_LEASE, "another buyer's weights"),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_lease_cannot_read_what_is_not_its_own(site, attack: str) -> None:
    template, secret = ATTACKS[attack]
    code = template.format(keystore=str(site["keystore"]), token=str(site["token"]), other=str(site["other"]))

    bare = _bare(code, site["root"] / "bare")
    assert bare.returncode == 0 and secret in bare.stdout, "without the sandbox the attack works"

    result = _sandbox(site, 1).run([PYTHON, "-c", code])
    assert result.returncode != 0 and secret not in result.stdout
    assert "No such file or directory" in result.stderr
    assert (site["other"]).read_text() == "another buyer's weights"


def test_a_lease_writes_only_its_own_directory(site) -> None:
    code = ("open('result.txt', 'w').write('done')\n"
            f"open({str(site['other'])!r}, 'w').write('overwritten')")
    result = _sandbox(site, 1).run([PYTHON, "-c", code])
    assert result.returncode != 0
    assert (site["leases"] / "1" / "result.txt").read_text() == "done"
    assert site["other"].read_text() == "another buyer's weights"


MEMORY_ATTACKS = {
    "in its own process": (EXHAUST_MEMORY, "allocated"),
    "in a child a thread forked": (GROW_IN_A_THREADS_CHILD, "held 1920 MiB"),
}


@pytest.mark.parametrize("attack", list(MEMORY_ATTACKS))
def test_memory_beyond_the_lease_is_refused_and_the_site_serves_the_next_lease(site, attack: str) -> None:
    code, took = MEMORY_ATTACKS[attack]
    bare = _bare(code, site["root"] / "bare")
    assert took in bare.stdout, "without the sandbox the allocation succeeds"

    greedy = _sandbox(site, 1).run([PYTHON, "-c", code])
    assert greedy.returncode != 0 and greedy.broke == "memory"
    assert took.split()[0] not in greedy.stdout

    honest = _sandbox(site, 2).run([PYTHON, "-c", "print(sum(range(10 ** 6)))"])
    assert honest.returncode == 0 and honest.stdout.strip() == str(sum(range(10**6)))


def test_forking_beyond_the_lease_is_refused_and_the_site_serves_the_next_lease(site) -> None:
    bare = _bare(FORK_WITHOUT_BOUND, site["root"] / "bare")
    assert "forked 64" in bare.stdout, "without the sandbox every fork succeeds"

    forker = _sandbox(site, 1).run([PYTHON, "-c", FORK_WITHOUT_BOUND])
    assert forker.returncode != 0 and forker.broke == "processes"
    assert "forked 64" not in forker.stdout

    honest = _sandbox(site, 2).run([PYTHON, "-c", "import os; print(os.getpid())"])
    assert honest.returncode == 0 and honest.stdout.strip() == "2", "its own PID namespace"


def test_a_lease_past_its_time_is_killed_with_everything_it_started(site) -> None:
    limits = Limits(memory_bytes=512 * 2**20, max_processes=32, wall_seconds=2)
    code = "import subprocess, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"
    result = _sandbox(site, 1, limits).run([PYTHON, "-c", code])
    assert result.broke == "time" and result.returncode != 0
    assert result.seconds < 10
    deadline = time.monotonic() + 5  # the kernel tears the lease's PID namespace down
    while (
        left := subprocess.run(
            ["pgrep", "-u", str(lease_uid(OWN + 1))], capture_output=True, text=True, check=False
        ).stdout.strip()
    ) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left == "", "no process of the lease outlives it"


def test_leases_run_as_users_of_their_own(site) -> None:
    if os.geteuid() != 0:
        pytest.fail(
            "the site gives each lease a user of its own only when it runs as root; run the tests as root"
        )
    ids = [
        _sandbox(site, n).run([PYTHON, "-c", "import os; print(os.getuid())"]).stdout.strip() for n in (1, 2)
    ]
    assert ids == [str(lease_uid(OWN + 1)), str(lease_uid(OWN + 2))]


def test_a_lease_cannot_reach_the_sites_services(site) -> None:
    """The site's Ray cluster and agent listen on the host: a lease has a loopback of its own."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2); print('connected')"
    try:
        bare = _bare(code, site["root"] / "bare")
        assert "connected" in bare.stdout, "without the sandbox the site's port answers"
        result = _sandbox(site, 1).run([PYTHON, "-c", code])
        assert result.returncode != 0 and "connected" not in result.stdout
        assert "Connection refused" in result.stderr
    finally:
        server.close()


def test_a_lease_runs_code_from_a_project_in_a_private_directory(site) -> None:
    """A checkout in a directory only its owner may enter (a private temporary directory, a
    home): the lease still imports the project and reads its virtual environment, nested in it."""
    private = site["root"] / "private"
    project = private / "checkout"
    (project / "pkg").mkdir(parents=True)
    (project / "pkg" / "__init__.py").write_text("ANSWER = 42\n")
    (project / ".venv").mkdir()
    (project / ".venv" / "marker").write_text("the venv")
    for path in (project, project / "pkg", project / ".venv"):
        path.chmod(0o755)
    for path in (project / "pkg" / "__init__.py", project / ".venv" / "marker"):
        path.chmod(0o644)
    private.chmod(0o700)
    code = (f"import sys; sys.path.insert(0, {str(project)!r}); import pkg; "
            f"print(pkg.ANSWER, open({str(project / '.venv' / 'marker')!r}).read())")
    sandbox = _sandbox(site, 1)
    sandbox.runtime = [Path("/usr"), project, project / ".venv"]
    result = sandbox.run([PYTHON, "-c", code])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "42 the venv"


def test_a_home_inside_a_private_project_stays_hidden(site) -> None:
    """The default SWARM_HOME is ./.swarm, inside the checkout: where the checkout sits in a
    private directory, the sandbox binds it back for the lease's code, and the home inside it
    must stay hidden all the same."""
    private = site["root"] / "private-home"
    project = private / "checkout"
    keystore = project / ".swarm" / "keys" / "provider.json"
    keystore.parent.mkdir(parents=True)
    keystore.write_text('{"crypto": "the provider key"}')
    for path in (project, project / ".swarm", keystore.parent):
        path.chmod(0o755)
    keystore.chmod(0o644)
    private.chmod(0o700)
    code = READ_KEYSTORE.format(keystore=str(keystore))
    assert "the provider key" in _bare(code, site["root"] / "bare").stdout, (
        "without the sandbox the attack works"
    )

    sandbox = Sandbox(site["leases"] / "1", LIMITS, hidden=[project / ".swarm", site["leases"]],
                      lease_uid=lease_uid(OWN + 1), runtime=[Path("/usr"), project])
    result = sandbox.run([PYTHON, "-c", code])
    assert result.returncode != 0 and "the provider key" not in result.stdout
    assert "No such file or directory" in result.stderr
    listed = sandbox.run([PYTHON, "-c", f"import os; print(sorted(os.listdir({str(project)!r})))"])
    assert listed.returncode == 0 and listed.stdout.strip() == "['.swarm']", "the checkout itself is readable"


def test_a_lease_runs_code_from_a_project_under_tmp(site) -> None:
    """A checkout under /tmp, which the sandbox replaces with an empty one of the lease's own:
    the checkout is bound back into it."""
    project = Path("/tmp") / f"swarm-checkout-{uuid.uuid4().hex[:8]}"
    try:
        (project / "pkg").mkdir(parents=True)
        (project / "pkg" / "__init__.py").write_text("ANSWER = 42\n")
        for path in (project, project / "pkg"):
            path.chmod(0o755)
        code = f"import sys; sys.path.insert(0, {str(project)!r}); import pkg; print(pkg.ANSWER)"
        sandbox = _sandbox(site, 1)
        sandbox.runtime = [Path("/usr"), project]
        result = sandbox.run([PYTHON, "-c", code])
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "42"
        assert not (site["leases"] / "1" / "pkg").exists()
    finally:
        shutil.rmtree(project, ignore_errors=True)
