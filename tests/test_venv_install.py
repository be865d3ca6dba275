"""pip's settings handed to uv (tools/venv_install.py): the same indexes, wheels and constraints,
each setting's strongest section winning as it does for pip, and pip itself where a setting has
no counterpart; a venv made without pip gets its requirements and a pip of its own."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("venv_install", ROOT / "tools" / "venv_install.py")
assert _spec is not None and _spec.loader is not None
venv_install = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(venv_install)

LISTING = """\
:env:.cert='/etc/ssl/certs/ca.crt'
:env:.default-timeout='180'
:env:.disable-pip-version-check='1'
:env:.find-links='/srv/wheels'
global.cert='/etc/ssl/other.crt'
global.constraint='/etc/pip/constraints.txt'
global.extra-index-url='file:///mirror/a/simple file:///mirror/b/simple'
global.find-links='/elsewhere'
"""


def test_a_mirror_a_wheel_directory_and_constraints_reach_uv_and_the_environment_wins() -> None:
    settings = venv_install.pip_settings(LISTING)
    assert settings["find-links"] == "/srv/wheels" and settings["cert"] == "/etc/ssl/certs/ca.crt"
    args, env = venv_install.uv_options(settings)
    pairs = list(zip(args[::2], args[1::2], strict=True))
    assert ("--index-strategy", "unsafe-best-match") in pairs
    assert ("--find-links", "/srv/wheels") in pairs and ("--find-links", "/elsewhere") not in pairs
    assert [v for k, v in pairs if k == "--extra-index-url"] == ["file:///mirror/a/simple", "file:///mirror/b/simple"]
    assert ("--constraint", "/etc/pip/constraints.txt") in pairs
    assert env == {"SSL_CERT_FILE": "/etc/ssl/certs/ca.crt", "UV_HTTP_TIMEOUT": "180"}


def test_an_install_section_overrides_global_and_no_index_is_kept() -> None:
    settings = venv_install.pip_settings("global.index-url='https://a/simple'\ninstall.index-url='https://b/simple'\n"
                                         "install.no-index='true'\n")
    args, _ = venv_install.uv_options(settings)
    assert args[-3:] == ["--index-url", "https://b/simple", "--no-index"]


@given(st.sampled_from(["require-hashes", "proxy", "client-cert", "only-binary", "pre", "user", "target"]),
       st.sampled_from(["global", "install", ":env:"]))
def test_a_setting_uv_is_not_given_leaves_the_install_to_pip(name: str, section: str) -> None:
    settings = venv_install.pip_settings(f"global.find-links='/w'\n{section}.{name}='x'\n")
    assert venv_install.uv_options(settings) is None


def test_settings_of_other_commands_and_empty_config_change_nothing() -> None:
    assert venv_install.pip_settings("download.proxy='http://p'\nfreeze.all='1'\n") == {}
    assert venv_install.uv_options({}) == (["--index-strategy", "unsafe-best-match"], {})


@pytest.mark.parametrize("runner", ["an interpreter with pip", "an interpreter without pip"])
def test_a_venv_made_without_pip_gets_its_requirements_and_a_pip_of_its_own(tmp_path: Path,
                                                                            runner: str) -> None:
    """Made as `make` makes the project's (`python -m venv --without-pip`), installed into by an
    interpreter whose pip acts on it, or by one with none, which gives the venv `ensurepip`'s first."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = str(venv / "bin" / "python")
    interpreter = sys.executable
    if runner == "an interpreter without pip":
        bare = tmp_path / "bare"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", bare], check=True)
        interpreter = str(bare / "bin" / "python")
    no_pip = subprocess.run([python, "-m", "pip", "--version"], check=False, capture_output=True)
    assert no_pip.returncode != 0
    done = subprocess.run([interpreter, ROOT / "tools" / "venv_install.py", python, "idna"],
                          check=False, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert subprocess.run([python, "-c", "import idna"], check=False).returncode == 0
    pip = subprocess.run([python, "-m", "pip", "--version"], check=False, capture_output=True, text=True)
    assert pip.returncode == 0 and str(venv) in pip.stdout  # the venv's own, which a lease's requirements use
