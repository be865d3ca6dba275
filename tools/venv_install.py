"""Installs requirements into a virtual environment, as `pip install` would, with uv where it can.

    python tools/venv_install.py VENV_PYTHON PIP_INSTALL_ARGS...

pip unpacks one wheel at a time; uv unpacks them side by side, which on a fresh clone is most
of `make test`'s set-up. uv reads none of pip's settings, so pip's own (`pip config list`: its
configuration files and PIP_* variables, e.g. a mirror's index, a directory of wheels, a
constraints file) are handed to it as its options. Where pip is set up with a setting uv is not
given here, or uv cannot be had or fails, pip installs as before: the result is the same
packages, found where pip would look for them.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

# Sections of pip's configuration that an install reads, from the weakest to the strongest.
SECTIONS = ("global", "install", ":env:")
# pip settings that choose nothing an install finds, or that uv takes from the environment.
IGNORED = {"disable-pip-version-check", "progress-bar", "quiet", "verbose", "no-compile", "root-user-action",
           "no-warn-script-location", "cache-dir", "no-cache-dir"}
MULTI = {"extra-index-url": "--extra-index-url", "find-links": "--find-links", "constraint": "--constraint",
         "trusted-host": "--allow-insecure-host"}
SINGLE = {"index-url": "--index-url"}
TRUE = {"1", "true", "yes", "on"}


def pip_settings(listing: str) -> dict[str, str]:
    """pip's effective settings for an install from `pip config list`: {name: value}."""
    found: dict[str, dict[str, str]] = {section: {} for section in SECTIONS}
    for line in listing.splitlines():
        key, sep, value = line.partition("=")
        section, dot, name = key.rpartition(".")
        if sep and dot and section in found:
            found[section][name] = ast.literal_eval(value)
    settings: dict[str, str] = {}
    for section in SECTIONS:
        settings |= found[section]
    return settings


def uv_options(settings: dict[str, str]) -> tuple[list[str], dict[str, str]] | None:
    """uv's options and environment for pip's settings, or None when one has no counterpart here."""
    args = ["--index-strategy", "unsafe-best-match"]  # as pip: the best version across every index
    env: dict[str, str] = {}
    for name, value in settings.items():
        if name in IGNORED:
            continue
        if name in MULTI:
            for item in value.split():
                args += [MULTI[name], item]
        elif name in SINGLE:
            args += [SINGLE[name], value]
        elif name == "no-index":
            if value.lower() in TRUE:
                args.append("--no-index")
        elif name == "cert":
            env["SSL_CERT_FILE"] = value
        elif name in ("timeout", "default-timeout"):
            env["UV_HTTP_TIMEOUT"] = str(round(float(value)))
        else:
            return None
    return args, env


def installer(python: str) -> tuple[list[str], bool]:
    """The pip that installs into `python`'s venv, and whether the venv still needs a pip of its own:
    its own pip, else (a venv made `--without-pip`, which takes a quarter of the time) this
    interpreter's acting on it, else the one `ensurepip` gives it."""
    def runs(command: list[str]) -> bool:
        return subprocess.run([*command, "--version"], capture_output=True, check=False).returncode == 0

    if runs([python, "-m", "pip"]):
        return [python, "-m", "pip"], False
    here = [sys.executable, "-m", "pip", "--python", python]
    if runs(here):
        return here, True
    subprocess.run([python, "-m", "ensurepip", "--upgrade", "--default-pip"], check=True)
    return [python, "-m", "pip"], False


def main(python: str, requirements: list[str]) -> int:
    pip, needs_pip = installer(python)
    listing = subprocess.run([*pip, "config", "list"], capture_output=True, text=True, check=False)
    options = uv_options(pip_settings(listing.stdout)) if listing.returncode == 0 else None
    uv = Path(python).parent / "uv"
    if options is not None and (uv.exists() or subprocess.run(
            [*pip, "install", "-qq", "uv"], check=False).returncode == 0):
        args, env = options
        wanted = [*requirements, "pip"] if needs_pip else requirements  # the venv's own, for what runs in it
        command = [str(uv), "pip", "install", "--quiet", "--python", python, *args, *wanted]
        done = subprocess.run(command, env=os.environ | env, check=False)
        if done.returncode == 0:
            return 0
        print("uv could not install the requirements; pip installs them instead.", file=sys.stderr)
    elif options is None:
        print("pip is set up with a setting not handed to uv; pip installs the requirements.",
              file=sys.stderr)
    if needs_pip:
        subprocess.run([python, "-m", "ensurepip", "--upgrade", "--default-pip"], check=True)
        pip = [python, "-m", "pip"]
    if "--group" in requirements:  # pip reads dependency groups from 25.1 on
        subprocess.run([*pip, "install", "--quiet", "--upgrade", "pip"], check=True)
    return subprocess.run([*pip, "install", "--quiet", "--no-compile", *requirements], check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
