"""Leases as a hostile buyer writes them, on a site run by root and on one run by an ordinary
user as docs/operations.md's systemd unit runs it: links aimed at the provider's files, FIFOs,
trees too deep to walk, traps for the next attempt, spies on the site's secrets and on other
buyers' files, and leases that take more disk, memory or units than they may.

Each lease runs as the site's Ray job runs it, `python -m provider.lease.launch NAME`, with the
site's environment and secrets, and each test asserts what must hold after the attack: the
provider's file unchanged, no secret in the lease's result, the launcher finished, the job
failed as the buyer's fault where it broke something, the disk given back. The leases run
plain programs (no Ray of their own), so these run in `make test`'s light lane."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from compute import dataplane
from compute.manifest import LOG, MANIFEST, RECORD, build_manifest, canonical, manifest_hash
from compute.runners.params import Pinned
from provider.lease import FETCHED, OUTCOME, PLAN_ENV, WORK
from provider.lease.inputs import fetch_inputs
from provider.lease.outcome import Outcome
from provider.lease.plan import Fetch, LeasePlan
from provider.lease.sandbox import disk_usage
from provider.lease.untrusted import MAX_DEPTH, Unreadable, read_small
from tests.programs import program_plan

LAUNCH_TIMEOUT_S = 120  # a lease of a plain program ends in seconds; a blocked launcher never does
SECRETS = {"SWARM_KEY_PASSWORD": "the-keystore-password", "AWS_SECRET_ACCESS_KEY": "the-site-s3-secret"}
KEY = '{"crypto": "the provider key"}'


@dataclass
class Site:
    """A provider's machine as a lease finds it: a SWARM_HOME with a keystore (the file a root
    write would target), a buyers' store every user may read, and the results directory the
    site publishes to, which holds another buyer's result already."""

    kind: str  # "root" | "user"
    root: Path
    home: Path
    store: Path
    results: Path
    keystore: Path
    user: Any = None  # the unit's user (pwd entry) for an ordinary user's site
    unit: Any = None
    numbers: int = 0

    def plan(self, code: str) -> LeasePlan:
        self.numbers += 1
        plan = program_plan(self.store, code).but(result=str(self.results / f"job-{self.numbers}"),
                                                  job_id=self.numbers, number=self.numbers)
        for path in self.store.rglob("*"):  # as a buyer's local store must be: readable by all
            path.chmod(0o755 if path.is_dir() else 0o644)
        return plan

    def lease(self, name: str) -> Path:
        return self.home / "site" / "leases" / name

    def start(self, plan: LeasePlan, name: str) -> subprocess.Popen:
        """The launcher, as the site's Ray job starts it on this machine."""
        argv = [sys.executable, "-m", "provider.lease.launch", name]
        env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "PYTHONPATH": str(Path.cwd()),
               "SWARM_HOME": str(self.home), PLAN_ENV: plan.encode()} | SECRETS
        if self.kind == "root":
            return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, start_new_session=True)
        from tests.site_user import as_user, python_env

        unit_env = {k: v for k, v in self.unit.environment.items() if k != "SWARM_HOME"}
        return as_user(self.user, argv, python_env(self.user, self.home, unit_env | env),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def finish(self, proc: subprocess.Popen, name: str) -> Outcome:
        try:
            out, _ = proc.communicate(timeout=LAUNCH_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(f"the launcher did not finish in {LAUNCH_TIMEOUT_S} s") from None
        path = self.lease(name) / OUTCOME
        assert path.exists(), f"the launcher wrote no outcome: {out[-3000:]}"
        return Outcome.parse(json.loads(path.read_text()))

    def run(self, plan: LeasePlan) -> Outcome:
        name = f"lease-{plan.number}"
        return self.finish(self.start(plan, name), name)


@pytest.fixture(scope="module")
def site_user():
    """The unit's user (docs/operations.md), made if missing, with subordinate ids."""
    from tests.site_user import ensure_user, site_unit

    assert os.geteuid() == 0, "these tests make the site's user, as root"
    unit = site_unit()
    return unit, ensure_user(unit.user)


@pytest.fixture(params=["root", "user"])
def site(request: pytest.FixtureRequest) -> Iterator[Site]:
    root = Path(tempfile.mkdtemp(prefix="swarm-hostile-", dir="/var/tmp"))
    root.chmod(0o755)
    site = Site(request.param, root, root / "home", root / "store", root / "results",
                root / "home" / "keys" / "provider.json")
    site.keystore.parent.mkdir(parents=True)
    site.keystore.write_text(KEY)
    site.store.mkdir(mode=0o755)
    (site.results / "job-0" / "outputs").mkdir(parents=True)
    (site.results / "job-0" / "outputs" / "weights.bin").write_text("another buyer's weights")
    if site.kind == "user":
        site.unit, site.user = request.getfixturevalue("site_user")
        for path in [site.home, site.keystore.parent, site.keystore, *site.results.rglob("*"), site.results]:
            os.chown(path, site.user.pw_uid, site.user.pw_gid)
    site.home.chmod(0o700)
    site.keystore.chmod(0o600)
    yield site
    shutil.rmtree(root, ignore_errors=True)


def leave(code: str) -> str:
    """A program that writes an honest output, then runs `code` in its work directory."""
    return ("import os, pathlib\n"
            "pathlib.Path(os.environ['SWARM_OUTPUT_DIR'], 'answer.txt').write_text('42')\n" + code)


def stored(site: Site, plan: LeasePlan) -> Path:
    return Path(plan.result)


# ── what a lease leaves behind ───────────────────────────────────────────────────────

@pytest.mark.parametrize(
    "name", [MANIFEST, RECORD, LOG, "lease.tmp", "lease.json", "run.json", "reports.jsonl"])
def test_a_link_left_where_the_site_once_wrote_does_not_make_the_site_write_the_providers_file(
        site: Site, name: str) -> None:
    plan = site.plan(leave(f"os.symlink({str(site.keystore)!r}, {name!r})\n"))
    outcome = site.run(plan)

    assert site.keystore.read_text() == KEY
    assert outcome.state == "succeeded", outcome.error  # nothing the site reads was touched
    result = stored(site, plan)
    assert (result / MANIFEST).read_bytes() == canonical(build_manifest(result)), "the site's own manifest"
    assert outcome.result_record is not None
    assert manifest_hash(build_manifest(result)) == outcome.result_record["outputs"]


def test_a_link_to_the_root_does_not_crash_the_site_or_frame_the_provider(site: Site) -> None:
    plan = site.plan(leave(f"os.symlink('/', {MANIFEST!r})\nos.symlink('/', 'outputs/root')\n"))
    outcome = site.run(plan)
    assert outcome.state == "failed" and outcome.fault == "buyer"
    assert outcome.error == "the job's outputs hold outputs/root, a link; outputs are regular files only."
    assert [p.name for p in stored(site, plan).iterdir()] == ["log"], "nothing half-stored: its log only"


@pytest.mark.parametrize("where", [MANIFEST, "outputs/answer.fifo"])
def test_a_fifo_left_behind_does_not_block_the_site(site: Site, where: str) -> None:
    plan = site.plan(leave(f"os.mkfifo({where!r})\n"))
    outcome = site.run(plan)
    if where == MANIFEST:  # not the site's to read: the result stands, with the site's manifest
        assert outcome.state == "succeeded", outcome.error
        assert (stored(site, plan) / MANIFEST).is_file()
    else:
        assert outcome.state == "failed" and outcome.fault == "buyer" and outcome.error is not None
        assert "outputs/answer.fifo, a FIFO" in outcome.error


def test_outputs_deeper_than_the_site_walks_fail_the_job_as_the_buyers(site: Site) -> None:
    deep = "/".join(["d"] * (MAX_DEPTH + 2))
    code = f"os.makedirs('outputs/{deep}')\nopen('outputs/{deep}/x', 'w').close()\n"
    outcome = site.run(site.plan(leave(code)))
    assert outcome.state == "failed" and outcome.fault == "buyer" and outcome.error is not None
    assert f"more than {MAX_DEPTH} directories deep" in outcome.error


def test_links_left_for_the_next_attempt_are_not_written_through_when_the_lease_runs_again(
        site: Site) -> None:
    """An attempt cut short (its machine lost: the launcher killed) leaves links where the site
    staged the code, the inputs and the plan; the site runs the lease again in the same directory."""
    trap = site.keystore.parent / "trap"
    trap.mkdir()
    if site.user is not None:
        os.chown(trap, site.user.pw_uid, site.user.pw_gid)
    plant = "".join(f"import shutil; shutil.rmtree({d!r}, ignore_errors=True)\n"
                    f"os.symlink({str(trap)!r}, {d!r})\n" for d in (".swarm", "inputs"))
    plant += "".join(f"os.symlink({str(site.keystore)!r}, {f!r})\n"
                     for f in ("lease.tmp", "lease.json", "run.json"))
    # The first attempt plants its traps and waits to be cut short; the second finds them and ends.
    plan = site.plan("import os, sys\nif os.path.exists('planted'):\n    sys.exit(0)\n" + plant
                     + "open('planted', 'w').close()\nimport time\ntime.sleep(600)\n")
    name = f"lease-{plan.number}"
    first = site.start(plan, name)
    deadline = time.monotonic() + LAUNCH_TIMEOUT_S
    while not (site.lease(name) / WORK / "planted").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    os.killpg(first.pid, signal.SIGKILL)  # the machine lost: the sandbox dies with its launcher
    first.wait()

    again = site.finish(site.start(plan.but(attempt=2), name), name)

    assert site.keystore.read_text() == KEY
    assert list(trap.iterdir()) == [], "nothing staged into what the links name"
    assert again.attempt == 2 and again.state == "succeeded", again.error


# ── what a lease may see ─────────────────────────────────────────────────────────────

SPY = """
import glob, os, pathlib
seen = []
for path in glob.glob('/proc/*/environ') + {paths!r}:
    try:
        seen.append(open(path, 'rb').read().decode(errors='replace'))
    except OSError as exc:
        seen.append(f'{{path}}: {{exc.strerror}}')
seen.append(repr(dict(os.environ)))
pathlib.Path(os.environ['SWARM_OUTPUT_DIR'], 'seen.txt').write_text('\\n'.join(seen))
"""


def test_a_lease_sees_none_of_the_sites_secrets_nor_other_buyers_files(site: Site) -> None:
    home = Path(site.user.pw_dir) if site.user is not None else Path.home()
    aws = home / ".aws" / "credentials"
    made = not aws.exists()
    if made:
        aws.parent.mkdir(exist_ok=True)
        aws.write_text("[default]\naws_secret_access_key = the-users-aws-secret\n")
        aws.chmod(0o644)  # readable by every user: still not by a lease
    other = site.plan("print('another buyer')\n")  # another buyer's code, in the store
    assert other.program is not None and isinstance(other.program.code, Pinned)
    other_code = other.program.code.uri
    try:
        targets = [str(aws), str(site.keystore), str(site.results / "job-0" / "outputs" / "weights.bin"),
                   other_code]
        plan = site.plan(SPY.format(paths=targets))
        outcome = site.run(plan)
    finally:
        if made:
            shutil.rmtree(aws.parent, ignore_errors=True)

    assert outcome.state == "succeeded", outcome.error
    seen = (stored(site, plan) / "outputs" / "seen.txt").read_text()
    assert "SWARM_OUTPUT_DIR" in seen, "the spy ran and wrote what it saw"
    for secret in (*SECRETS.values(), "the-users-aws-secret", "the provider key", "another buyer's weights"):
        assert secret not in seen
    assert f"{other_code}: No such file or directory" in seen


def test_each_lease_runs_as_a_user_of_its_own_never_the_sites(site: Site) -> None:
    plan = site.plan("import os, time\nopen('mine', 'w').close()\n"
                     "deadline = time.time() + 60\n"
                     "while not os.path.exists('proceed') and time.time() < deadline:\n    time.sleep(0.1)\n")
    name = f"lease-{plan.number}"
    proc = site.start(plan, name)
    work = site.lease(name) / WORK
    deadline = time.monotonic() + LAUNCH_TIMEOUT_S
    while not (work / "mine").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    left = os.stat(work / "mine")
    (work / "proceed").touch()
    assert site.finish(proc, name).state == "succeeded"

    site_uid = site.user.pw_uid if site.user is not None else 0
    assert left.st_uid != site_uid, "the lease ran as a user of its own, not the site's"
    if site.user is not None:
        from provider.lease.sandbox import SUBUID, _subordinate

        subordinate = _subordinate(SUBUID, site.user.pw_name, site_uid)
        assert subordinate is not None, "the site user has subordinate uids"
        first, count = subordinate
        assert first <= left.st_uid < first + count, "one of the site user's subordinate uids"
    assert Path(plan.result).stat().st_uid == site_uid, "the site stored the result as itself"


# ── what a lease may use ─────────────────────────────────────────────────────────────

def test_a_lease_past_its_disk_quota_is_stopped_and_its_disk_given_back(site: Site) -> None:
    plan = site.plan("chunk = b'x' * 2**20\nwith open('fill', 'wb') as f:\n"
                     "    for _ in range(1024):\n        f.write(chunk)\n").but(disk_bytes=64 * 2**20)
    outcome = site.run(plan)
    assert outcome.state == "failed" and outcome.fault == "buyer" and outcome.broke == "disk", outcome
    assert outcome.error == "the job wrote more than the 64 MiB of disk a lease may hold and was stopped."
    lease = site.lease(f"lease-{plan.number}")
    assert not (lease / WORK).exists(), "the lease's directory is cleaned"
    assert disk_usage([lease]) < 2**20, "what stays is the log and the verdict"


def test_memory_held_in_tmp_and_dev_shm_counts_against_the_lease(site: Site) -> None:
    fill = ("chunk = b'x' * 2**20\n"
            "for where in ('/tmp/a', '/dev/shm/b'):\n"
            "    with open(where, 'wb') as f:\n"
            "        for _ in range(100):\n            f.write(chunk)\n"
            "import time\ntime.sleep(30)\n")
    outcome = site.run(site.plan(fill).but(memory_bytes=160 * 2**20))
    assert outcome.state == "failed" and outcome.broke == "memory" and outcome.fault == "buyer", outcome
    assert outcome.peak_memory_bytes > 160 * 2**20


def test_a_lease_is_stopped_when_its_units_reach_max_units_and_pays_for_them(site: Site) -> None:
    outcome = site.run(site.plan("import time\ntime.sleep(120)\n").but(max_units=3))
    assert outcome.state == "failed" and outcome.broke == "units" and outcome.fault == "buyer", outcome
    assert outcome.units == 3 and outcome.seconds < 20
    assert outcome.error == ("the job used all 3 units its max_units allow and was stopped; post it with "
                             "more units.")


def test_a_lease_whose_result_is_stored_leaves_no_disk_behind(site: Site) -> None:
    plan = site.plan(leave("open('scratch', 'wb').write(b'x' * 2**20)\n"))
    assert site.run(plan).state == "succeeded"
    assert not (site.lease(f"lease-{plan.number}") / WORK).exists()
    assert (stored(site, plan) / "outputs" / "answer.txt").read_text() == "42"


# ── the site's readers, alone ────────────────────────────────────────────────────────

def test_a_built_in_jobs_inputs_are_not_fetched_through_a_link_an_earlier_attempt_left(
        tmp_path: Path) -> None:
    data = tmp_path / "rows.csv"
    data.write_text("x,y\n1,2\n")
    plan = program_plan(tmp_path, "").but(
        fetch=(Fetch(uri=str(data), sha256=dataplane.digest(str(data)), target="inputs/dataset",
                     param="dataset", path="inputs/dataset/rows.csv"),))
    directory = tmp_path / "lease"
    work = directory / WORK
    trap = tmp_path / "trap"
    trap.mkdir()
    work.mkdir(parents=True)
    os.symlink(trap, work / "inputs")  # as the lease left it

    fetch_inputs(plan, work, directory)

    assert list(trap.iterdir()) == []
    assert (work / "inputs" / "dataset" / "rows.csv").read_text() == "x,y\n1,2\n"
    assert not (work / "inputs").is_symlink() and (directory / FETCHED).exists()


@pytest.mark.parametrize("leave_as", ["link", "fifo", "huge"])
def test_a_report_the_site_reads_is_refused_unless_it_is_a_small_regular_file(
        tmp_path: Path, leave_as: str) -> None:
    victim = tmp_path / "victim"
    victim.write_text(KEY)
    report = tmp_path / "run.json"
    if leave_as == "link":
        report.symlink_to(victim)
    elif leave_as == "fifo":
        os.mkfifo(report)
    else:
        report.write_bytes(b" " * (2 << 20))
    with pytest.raises(Unreadable, match=r"run\.json"):
        read_small(tmp_path, "run.json")


def test_a_site_user_without_subordinate_ids_is_told_how_to_give_its_leases_users() -> None:
    from compute.errors import ComputeError
    from provider.lease.sandbox import lease_root

    with pytest.raises(ComputeError, match=r"install Debian's `uidmap` package and run `usermod --add-sub"):
        lease_root(["true"], user="swarm-no-such-user")


def test_a_devnets_files_in_the_checkout_are_not_in_sight(site: Site) -> None:
    """A devnet keeps its SWARM_HOME, its buyers' code and their results in the checkout
    (`./.swarm`): a lease sees the project's Python packages, not the rest of it."""
    from provider.lease import PROJECT

    other = PROJECT / f".swarm-test-{site.kind}-{os.getpid()}" / "results" / "job-0" / "outputs" / "w.bin"
    other.parent.mkdir(parents=True)
    other.write_text("another buyer's weights")
    for path in [other, *other.parents]:
        if path == PROJECT:
            break
        path.chmod(0o755 if path.is_dir() else 0o644)
    try:
        plan = site.plan(SPY.format(paths=[str(other)]))
        outcome = site.run(plan)
    finally:
        shutil.rmtree(PROJECT / f".swarm-test-{site.kind}-{os.getpid()}", ignore_errors=True)
    assert outcome.state == "succeeded", outcome.error
    seen = (stored(site, plan) / "outputs" / "seen.txt").read_text()
    assert "another buyer's weights" not in seen and f"{other}: No such file or directory" in seen
