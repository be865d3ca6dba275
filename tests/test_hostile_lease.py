"""What a lease leaves behind, as a hostile buyer would leave it: links aimed at the provider's
files, FIFOs, trees too deep to walk, traps for the next attempt. Each test runs the lease
through the launcher the site runs (`provider.lease.launch.launch`) and asserts that nothing
outside the lease changed, that the launcher finished, and that the job failed as the buyer's
fault where the site had to read what was left. The leases run plain programs (no Ray of their
own), so these run in `make test`'s light lane."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from compute.manifest import MANIFEST, build_manifest, canonical, manifest_hash
from provider.lease import FETCHED, WORK
from provider.lease.inputs import fetch_inputs
from provider.lease.launch import launch
from provider.lease.outcome import Outcome
from provider.lease.plan import Fetch
from provider.lease.untrusted import MAX_DEPTH, Refused, read_small
from tests.programs import program_plan

LAUNCH_TIMEOUT_S = 120  # a lease of a plain program ends in seconds; a blocked launcher never does


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file of the provider's, as root would overwrite it: a keystore, a shell start-up file."""
    path = tmp_path / "provider" / "keystore.json"
    path.parent.mkdir()
    path.write_text('{"crypto": "the provider key"}')
    return path


def run_lease(directory: Path, plan) -> Outcome:
    """The launcher, in a thread the test gives up on after LAUNCH_TIMEOUT_S: a launcher blocked
    by what the lease left fails the test instead of hanging it."""
    done: list[Outcome] = []
    thread = threading.Thread(target=lambda: done.append(launch(directory, plan)), daemon=True)
    thread.start()
    thread.join(LAUNCH_TIMEOUT_S)
    assert done, f"the launcher did not finish in {LAUNCH_TIMEOUT_S} s"
    return done[0]


def leave(code: str) -> str:
    """A program that writes an honest output, then runs `code` in its work directory."""
    return ("import os, pathlib\n"
            "pathlib.Path(os.environ['SWARM_OUTPUT_DIR'], 'answer.txt').write_text('42')\n" + code)


@pytest.mark.parametrize("name", [MANIFEST, "lease.tmp", "lease.json", "run.json"])
def test_a_link_left_where_the_site_once_wrote_does_not_make_the_site_write_the_providers_file(
        tmp_path: Path, victim: Path, name: str) -> None:
    plan = program_plan(tmp_path, leave(f"os.symlink({str(victim)!r}, {name!r})\n"))
    outcome = run_lease(tmp_path / "lease", plan)

    assert victim.read_text() == '{"crypto": "the provider key"}'
    assert outcome.state == "succeeded", outcome.error  # nothing the site reads was touched
    stored = tmp_path / "results" / "job-1"
    assert (stored / MANIFEST).read_bytes() == canonical(build_manifest(stored))
    assert manifest_hash(build_manifest(stored)) == outcome.result_hash


def test_a_link_to_the_root_left_for_the_manifest_does_not_crash_the_site_or_frame_the_provider(
        tmp_path: Path) -> None:
    plan = program_plan(tmp_path, leave(f"os.symlink('/', {MANIFEST!r})\nos.symlink('/', 'outputs/root')\n"))
    outcome = run_lease(tmp_path / "lease", plan)
    assert outcome.state == "failed" and outcome.fault != "provider"
    assert outcome.error == "the job's outputs hold outputs/root, a link; outputs are regular files only."
    assert not (tmp_path / "results").exists(), "nothing half-stored"


@pytest.mark.parametrize("where", [MANIFEST, "outputs/answer.fifo"])
def test_a_fifo_left_behind_does_not_block_the_site(tmp_path: Path, where: str) -> None:
    plan = program_plan(tmp_path, leave(f"os.mkfifo({where!r})\n"))
    outcome = run_lease(tmp_path / "lease", plan)
    if where == MANIFEST:  # not the site's to read: the result stands, with the site's manifest
        assert outcome.state == "succeeded", outcome.error
        assert (tmp_path / "results" / "job-1" / MANIFEST).is_file()
    else:
        assert outcome.state == "failed" and outcome.fault != "provider"
        assert "outputs/answer.fifo, a FIFO" in outcome.error


def test_outputs_deeper_than_the_site_walks_fail_the_job_as_the_buyers(tmp_path: Path) -> None:
    deep = "/".join(["d"] * (MAX_DEPTH + 2))
    code = f"os.makedirs('outputs/{deep}')\nopen('outputs/{deep}/x', 'w').close()\n"
    plan = program_plan(tmp_path, leave(code))
    outcome = run_lease(tmp_path / "lease", plan)
    assert outcome.state == "failed" and outcome.fault != "provider"
    assert f"more than {MAX_DEPTH} directories deep" in outcome.error


def test_links_left_for_the_next_attempt_are_not_written_through_when_the_lease_runs_again(
        tmp_path: Path, victim: Path) -> None:
    """An attempt cut short (its node lost) leaves links where the site staged the code, the inputs
    and the plan; the site runs the lease again in the same directory."""
    trap = victim.parent / "trap"
    trap.mkdir()
    plant = "".join(f"import shutil; shutil.rmtree({d!r}, ignore_errors=True)\n"
                    f"os.symlink({str(trap)!r}, {d!r})\n" for d in (".swarm", "inputs"))
    plant += "".join(f"os.symlink({str(victim)!r}, {f!r})\n" for f in ("lease.tmp", "lease.json", "run.json"))
    plan = program_plan(tmp_path, leave(plant))
    first = run_lease(tmp_path / "lease", plan)
    assert first.state == "succeeded", first.error
    again = run_lease(tmp_path / "lease", plan.but(attempt=2))

    assert victim.read_text() == '{"crypto": "the provider key"}'
    assert list(trap.iterdir()) == [], "nothing staged into what the links name"
    assert again.attempt == 2 and again.fault != "provider"


def test_a_built_in_jobs_inputs_are_not_fetched_through_a_link_an_earlier_attempt_left(
        tmp_path: Path) -> None:
    data = tmp_path / "rows.csv"
    data.write_text("x,y\n1,2\n")
    from compute import dataplane

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
        tmp_path: Path, victim: Path, leave_as: str) -> None:
    report = tmp_path / "run.json"
    if leave_as == "link":
        report.symlink_to(victim)
    elif leave_as == "fifo":
        os.mkfifo(report)
    else:
        report.write_bytes(b" " * (2 << 20))
    with pytest.raises(Refused, match="run.json"):
        read_small(tmp_path, "run.json")


SPY_ON_THE_SITE = """
import glob, os, pathlib
seen = []
for path in glob.glob('/proc/*/environ'):
    try:
        seen.append(open(path, 'rb').read().decode(errors='replace'))
    except OSError:
        pass
seen.append(repr(dict(os.environ)))
for path in ('/root/.aws/credentials', os.path.expanduser('~/.aws/credentials')):
    try:
        seen.append(open(path).read())
    except OSError:
        pass
pathlib.Path(os.environ['SWARM_OUTPUT_DIR'], 'seen.txt').write_text('\\n'.join(seen))
"""


def test_no_process_in_the_sandbox_carries_the_sites_environment(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWARM_KEY_PASSWORD", "the-keystore-password")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "the-site-s3-secret")
    outcome = run_lease(tmp_path / "lease", program_plan(tmp_path, SPY_ON_THE_SITE))
    assert outcome.state == "succeeded", outcome.error
    seen = (tmp_path / "results" / "job-1" / "outputs" / "seen.txt").read_text()
    assert "SWARM_OUTPUT_DIR" in seen, "the spy ran and wrote what it saw"
    assert "the-keystore-password" not in seen and "the-site-s3-secret" not in seen


# ── a site run by an ordinary user ─────────────────────────────────────────────────────

@pytest.fixture(scope="module")
def site_user():
    """The unit's user (docs/operations.md), made if missing, with subordinate ids."""
    from tests.site_user import ensure_user, site_unit

    assert os.geteuid() == 0, "these tests make the site's user, as root"
    unit = site_unit()
    return unit, ensure_user(unit.user)


@pytest.fixture
def user_site(site_user, tmp_path: Path):
    """A SWARM_HOME of the user's own (0700, as a provider keeps it), the unit's secrets, and a
    buyer's store every user may read."""
    import pwd
    import shutil
    import tempfile

    unit, user = site_user
    root = Path(tempfile.mkdtemp(prefix="swarm-user-site-", dir="/var/tmp"))
    root.chmod(0o755)
    home, store, results = root / "home", root / "store", root / "results"
    for path in (home, results):
        path.mkdir()
        os.chown(path, user.pw_uid, user.pw_gid)
    home.chmod(0o700)
    store.mkdir(mode=0o755)
    aws = Path(user.pw_dir) / ".aws"
    aws.mkdir(exist_ok=True)
    (aws / "credentials").write_text("[default]\naws_secret_access_key = the-users-aws-secret\n")
    (aws / "credentials").chmod(0o644)  # readable by every user: still not by a lease
    secrets = {"SWARM_KEY_PASSWORD": "the-keystore-password", "AWS_SECRET_ACCESS_KEY": "the-site-s3-secret"}
    yield {"unit": unit, "user": user, "home": home, "store": store, "results": results, "secrets": secrets,
           "aws": aws / "credentials", "pwd": pwd}
    shutil.rmtree(aws, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)


def launch_as_site_user(site: dict, plan, name: str = "lease-1") -> tuple[Outcome, str]:
    """`python -m provider.lease.launch NAME` as the site's user, as its Ray job runs it, with
    the unit's environment and secrets; its outcome and what it printed."""
    from provider.lease import OUTCOME, PLAN_ENV
    from tests.site_user import as_user, python_env

    unit_env = {k: v for k, v in site["unit"].environment.items() if k != "SWARM_HOME"}
    env = python_env(site["user"], site["home"], unit_env | site["secrets"] | {PLAN_ENV: plan.encode()})
    proc = as_user(site["user"], [sys.executable, "-m", "provider.lease.launch", name], env,
                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, _ = proc.communicate(timeout=LAUNCH_TIMEOUT_S)
    outcome = site["home"] / "site" / "leases" / name / OUTCOME
    assert outcome.exists(), f"the launcher wrote no outcome: {out[-3000:]}"
    return Outcome.parse(json.loads(outcome.read_text())), out


def test_an_ordinary_users_site_gives_each_lease_a_user_of_its_own_and_none_of_its_secrets(user_site) -> None:
    spy = SPY_ON_THE_SITE.replace("'/root/.aws/credentials'", repr(str(user_site["aws"])))
    spy += ("open('mine', 'w').write('the lease was here')\n"
            "pathlib.Path(os.environ['SWARM_OUTPUT_DIR'], 'uid.txt').write_text(str(os.getuid()))\n")
    plan = program_plan(user_site["store"], spy).but(result=str(user_site["results"] / "job-1"))
    for path in user_site["store"].rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)

    outcome, done = launch_as_site_user(user_site, plan)

    assert outcome.state == "succeeded", (outcome.error, done[-3000:])
    seen = (user_site["results"] / "job-1" / "outputs" / "seen.txt").read_text()
    assert "SWARM_OUTPUT_DIR" in seen, "the spy ran and wrote what it saw"
    for secret in (*user_site["secrets"].values(), "the-users-aws-secret"):
        assert secret not in seen
    left = os.stat(user_site["home"] / "site" / "leases" / "lease-1" / "work" / "mine")
    assert left.st_uid != user_site["user"].pw_uid, "the lease ran as a user of its own, not the site's"
    from provider.lease.sandbox import SUBUID, _subordinate

    first, count = _subordinate(SUBUID, user_site["user"].pw_name, user_site["user"].pw_uid)
    assert first <= left.st_uid < first + count, "one of the site user's subordinate uids"
    assert (user_site["results"] / "job-1").stat().st_uid == user_site["user"].pw_uid, "the site stored it"


def test_a_site_user_without_subordinate_ids_is_told_how_to_give_its_leases_users() -> None:
    from compute.errors import ComputeError
    from provider.lease.sandbox import lease_root

    with pytest.raises(ComputeError, match=r"install Debian's `uidmap` package and run `usermod --add-sub"):
        lease_root(["true"], user="swarm-no-such-user")
