"""Encrypted keystores: files on disk, `swarm keys new|import|list`, and signing with `--key`.

Keystores made through the Python API use a light scrypt cost (LIGHT_KDF) so the tests stay
fast; the ones made through `swarm keys` use eth-account's default, as users get. Every CLI
result is checked for the private key's hex: it must never be printed.
"""

from __future__ import annotations

import json
import re
import shutil
import stat
from pathlib import Path

import pytest
from eth_account import Account
from hypothesis import given, settings
from hypothesis import strategies as st

from anvil import RpcClient, dev_account
from ledger.client import Swarm
from ledger.errors import InvalidInput, SwarmError
from ledger.keys import (
    SECP256K1_HALF_N,
    CorruptKeystore,
    DigestSigner,
    InvalidSignature,
    KeyInfo,
    Keystore,
    WrongPassword,
    address_of,
    recover,
)
from ledger.units import ONE
from tests.conftest import CliResult, one_line_error

LIGHT_KDF = 2**10  # scrypt n for test keystores; the default (2**18) costs ~0.4 s per encryption
PASSWORD = "correct horse battery staple"
KEY = "4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318"
ADDRESS = Account.from_key(KEY).address


@pytest.fixture
def store(tmp_path: Path) -> Keystore:
    return Keystore(tmp_path / "keys", kdf_iterations=LIGHT_KDF)


@pytest.fixture
def home(tmp_path: Path, swarm_home: Path, deployed) -> Path:
    """A SWARM_HOME of its own (so its keystores are the test's alone) that knows the session's deployment."""
    shutil.copytree(swarm_home / "deployments", tmp_path / "deployments")
    return tmp_path


def _env(home: Path, password: str = PASSWORD) -> dict[str, str]:
    return {"SWARM_HOME": str(home), "SWARM_KEY_PASSWORD": password}


def _shows_no_key(result: CliResult, key_hex: str = KEY) -> CliResult:
    output = (result.stdout + result.stderr).lower()
    assert key_hex.lower().removeprefix("0x") not in output
    return result


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# ── the keystore files ──────────────────────────────────────────────────────

def test_created_key_is_a_0600_file_in_a_0700_directory_that_decrypts_to_its_address(store: Keystore) -> None:
    info = store.create(PASSWORD, name="alice")
    assert info.path == store.directory / f"{info.address}.json"
    assert _mode(store.directory) == 0o700 and _mode(info.path) == 0o600
    keyfile = json.loads(info.path.read_text())
    assert keyfile["name"] == "alice" and keyfile["crypto"]["kdf"] == "scrypt"
    assert Account.from_key(Account.decrypt(keyfile, PASSWORD)).address == info.address
    assert [p.name for p in store.directory.iterdir()] == [info.path.name]  # no temporary file left


@pytest.mark.parametrize(
    "text", [KEY, "0x" + KEY, KEY.upper(), f"  0x{KEY}\n"], ids=["bare", "0x", "upper", "padded"]
)
def test_imported_key_keeps_its_address_and_unlocks_to_the_same_key(store: Keystore, text: str) -> None:
    info = store.import_key(text, PASSWORD)
    assert info.address == ADDRESS and info.name is None
    assert store.unlock(info, PASSWORD) == bytes.fromhex(KEY)


def test_find_without_a_reference_takes_the_only_keystore_or_asks_to_choose(store: Keystore) -> None:
    with pytest.raises(
        SwarmError, match=r"^No keystore in .*; create one with `swarm keys new` \(or use --account"
    ):
        store.find(None)
    only = store.import_key(KEY, PASSWORD)
    assert store.find(None) == only
    store.create(PASSWORD)
    with pytest.raises(SwarmError, match=r"^2 keystores in .*; choose one with --key"):
        store.find(None)


def test_find_by_name_or_by_address_in_any_case(store: Keystore) -> None:
    info = store.import_key(KEY, PASSWORD, name="bob")
    store.create(PASSWORD, name="carol")
    assert store.find("bob") == info
    assert store.find(ADDRESS.lower()) == info
    assert store.find("0x" + ADDRESS[2:].upper()) == info


def test_unknown_or_malformed_reference_names_the_input(store: Keystore) -> None:
    store.import_key(KEY, PASSWORD, name="bob")
    with pytest.raises(SwarmError) as unknown:
        store.find("nobody")
    assert str(unknown.value) == f"No keystore for nobody in {store.directory}; see `swarm keys list`."
    other = dev_account(1).address
    with pytest.raises(SwarmError, match=f"No keystore for {other} in"):
        store.find(other)
    with pytest.raises(InvalidInput, match="'0x1234' is not an Ethereum address"):
        store.find("0x1234")


def test_wrong_password_is_refused_by_address(store: Keystore) -> None:
    info = store.import_key(KEY, PASSWORD)
    with pytest.raises(WrongPassword, match=f"^Wrong password for keystore {ADDRESS}; "):
        store.unlock(info, "not it")


@pytest.mark.parametrize(
    "damage",
    [
        lambda text: text[: len(text) // 2],
        lambda text: "[]",
        lambda text: json.dumps({k: v for k, v in json.loads(text).items() if k != "crypto"}),
        lambda text: text.replace('"scrypt"', '"bcrypt"'),
    ],
    ids=["truncated", "not-an-object", "no-crypto", "unknown-kdf"],
)
def test_corrupt_keystore_is_refused_naming_the_file(store: Keystore, damage) -> None:
    info = store.import_key(KEY, PASSWORD)
    info.path.write_text(damage(info.path.read_text()))
    with pytest.raises(CorruptKeystore, match=f"^{re.escape(str(info.path))} is not a readable keystore"):
        store.unlock(info, PASSWORD)


def test_keystore_holding_another_address_is_refused(store: Keystore) -> None:
    info = store.import_key(KEY, PASSWORD)
    forged = store.directory / f"{dev_account(1).address}.json"
    info.path.rename(forged)
    with pytest.raises(CorruptKeystore, match="holds the key of another address"):
        store.unlock(store.find(None), PASSWORD)


def test_names_and_addresses_are_unique_and_names_well_formed(store: Keystore) -> None:
    first = store.import_key(KEY, PASSWORD, name="bob")
    with pytest.raises(
        InvalidInput, match=re.escape(f"A keystore for {ADDRESS} exists already: {first.path};")
    ):
        store.import_key(KEY, PASSWORD)
    with pytest.raises(InvalidInput, match=f"The name 'bob' is taken by the keystore for {ADDRESS}"):
        store.create(PASSWORD, name="bob")
    for bad in ("", "has space", "x" * 33, "0x1234", "0Xabc"):
        with pytest.raises(InvalidInput, match="is not allowed; use 1 to 32 letters"):
            store.create(PASSWORD, name=bad)
    with pytest.raises(InvalidInput, match="empty password"):
        store.create("")
    assert store.list() == [first]


# ── eth_keyfile without BLS12-381 (anvil.keyfile) ─────────────────────────────

def _in_a_fresh_process(code: str) -> dict:
    """What `code` prints as JSON on its last line, run by a new interpreter in the project root."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[1], check=True)
    return json.loads(done.stdout.splitlines()[-1])


def test_a_process_that_signs_loads_no_bls12_381_and_a_version_3_keystore_still_round_trips() -> None:
    found = _in_a_fresh_process(f"""
import json, sys
from ledger.tx import Sender  # loads eth_account
from eth_account import Account
from eth_account.messages import encode_defunct
keystore = Account.encrypt("{KEY}", "pw", kdf="pbkdf2", iterations=2)
key = Account.decrypt(keystore, "pw")
message = encode_defunct(text="swarm")
signed = Account.sign_message(message, key)
print(json.dumps({{"loaded": [m for m in ("py_ecc.bls", "py_ecc.bls12_381") if m in sys.modules],
                  "version": keystore["version"], "key": key.hex(),
                  "signer": Account.recover_message(message, signature=signed.signature)}}))
""")
    assert found["loaded"] == []  # the 0.45 CPU-seconds of pairing tables were not built
    assert found["version"] == 3 and found["key"].removeprefix("0x") == KEY
    assert found["signer"] == ADDRESS


def test_a_version_4_keystore_made_without_bls12_381_loaded_is_the_real_ciphersuites() -> None:
    """The stand-ins' constant bounds a version-4 key as py_ecc's curve order does, and the public key
    comes from the real ciphersuite, loaded on first use; the real modules are what `import` gives after."""
    found = _in_a_fresh_process("""
import json, sys
import anvil, eth_account, eth_keyfile
loaded_first = [m for m in ("py_ecc.bls", "py_ecc.bls12_381") if m in sys.modules]
from py_ecc.bls12_381 import curve_order
made = {}
for k in (1, 7, curve_order - 1):
    made[k] = eth_keyfile.create_keyfile_json(k.to_bytes(32, "big"), b"pw", version=4, kdf="pbkdf2",
                                              iterations=2)
try:
    eth_keyfile.create_keyfile_json(curve_order.to_bytes(32, "big"), b"pw", version=4)
    refused = False
except ValueError:
    refused = True
from py_ecc.bls import G2ProofOfPossession as bls
print(json.dumps({"loaded_first": loaded_first, "refused_at_the_order": refused,
                  "real": all(j["pubkey"] == bls.SkToPk(k).hex() for k, j in made.items()),
                  "round_trip": all(eth_keyfile.decode_keyfile_json(j, b"pw") == k.to_bytes(32, "big")
                                    for k, j in made.items()),
                  "modules_real": hasattr(sys.modules["py_ecc.bls"], "G2Basic")}))
""")
    assert found["loaded_first"] == []
    assert found["refused_at_the_order"] and found["real"] and found["round_trip"] and found["modules_real"]
    from py_ecc.bls12_381 import curve_order

    from anvil.keyfile import BLS12_381_ORDER

    assert curve_order == BLS12_381_ORDER


def test_reprs_hold_no_key(store: Keystore) -> None:
    info = store.import_key(KEY, PASSWORD, name="bob")
    for shown in (repr(info), repr(store), repr(store.list()), str(info.as_dict())):
        assert KEY not in shown.lower()
    assert isinstance(info, KeyInfo)
    assert KEY not in repr(DigestSigner(bytes.fromhex(KEY))).lower()


SECP256K1_N = 2 * SECP256K1_HALF_N + 1


@settings(max_examples=50, deadline=None)
@given(secret=st.integers(1, SECP256K1_N - 1), digest=st.binary(min_size=32, max_size=32))
def test_a_digest_signer_signs_as_eth_account_does_and_recovers_to_its_keys_address(
    secret: int, digest: bytes
) -> None:
    key = secret.to_bytes(32, "big")
    signer = DigestSigner(key)
    signature = signer.sign(digest)
    assert signer.address == address_of(key)
    assert signature == bytes(Account.unsafe_sign_hash(digest, key).signature)
    assert int.from_bytes(signature[32:64], "big") <= SECP256K1_HALF_N  # low s, as the escrow requires
    assert recover(digest, signature) == signer.address


def test_a_malformed_or_high_s_signature_recovers_no_one() -> None:
    digest = bytes(range(32))
    signature = DigestSigner(bytes.fromhex(KEY)).sign(digest)
    high_s = signature[:32] + (SECP256K1_N - int.from_bytes(signature[32:64], "big")).to_bytes(32, "big") \
        + bytes([55 - signature[64]])  # the same point's other signature: s' = n - s, the other parity
    for bad, why in ((signature[:64], "65 bytes"), (signature[:64] + b"\x01", "65 bytes"),
                     (high_s, "upper half")):
        with pytest.raises(InvalidSignature, match=why):
            recover(digest, bad)


# ── swarm keys ──────────────────────────────────────────────────────────────

def test_cli_new_then_list_shows_it_and_the_file_decrypts_with_the_password(cli, tmp_path: Path) -> None:
    done = cli("keys", "new", "--name", "alice", "--json", env=_env(tmp_path))
    assert done.code == 0, done.stderr
    created = json.loads(done.stdout)
    assert set(created) == {"address", "name", "path"} and created["name"] == "alice"
    path = Path(created["path"])
    assert path == tmp_path / "keys" / f"{created['address']}.json" and _mode(path) == 0o600
    key = Account.decrypt(path.read_text(), PASSWORD)
    assert Account.from_key(key).address == created["address"]
    _shows_no_key(done, key.hex())

    listed = cli("keys", "list", "--json", env=_env(tmp_path))
    assert listed.code == 0 and json.loads(listed.stdout) == [created]
    table = _shows_no_key(cli("keys", "list", env=_env(tmp_path)), key.hex())
    assert created["address"] in table.stdout and "alice" in table.stdout


def test_cli_import_from_stdin_gives_the_keys_address(cli, tmp_path: Path) -> None:
    done = cli("keys", "import", "--name", "bob", "--json", env=_env(tmp_path), input=f"0x{KEY}\n")
    assert _shows_no_key(done).code == 0, done.stderr
    assert json.loads(done.stdout)["address"] == ADDRESS
    store = Keystore(tmp_path / "keys")
    assert store.unlock(store.find("bob"), PASSWORD) == bytes.fromhex(KEY)


def test_cli_second_import_of_an_address_is_refused_naming_the_file(cli, tmp_path: Path) -> None:
    first = Keystore(tmp_path / "keys", LIGHT_KDF).import_key(KEY, PASSWORD)
    before = first.path.read_bytes()
    text = one_line_error(_shows_no_key(cli("keys", "import", env=_env(tmp_path), input=KEY + "\n")))
    assert f"A keystore for {ADDRESS} exists already: {first.path}" in text
    assert first.path.read_bytes() == before


@pytest.mark.parametrize(
    "typed",
    ["", "0x1234", KEY[:-1], KEY + "0", "zz" + KEY[2:], f"{KEY}\n{KEY}\n", "0" * 64],
    ids=["empty", "short", "63-digits", "65-digits", "not-hex", "two-lines", "zero"],
)
def test_cli_malformed_key_is_refused_and_nothing_written(cli, tmp_path: Path, typed: str) -> None:
    text = one_line_error(_shows_no_key(cli("keys", "import", env=_env(tmp_path), input=typed)))
    assert "The private key is" in text and "check what you pasted" in text
    assert not (tmp_path / "keys").exists()


def test_cli_empty_or_missing_password_is_refused(cli, tmp_path: Path, monkeypatch) -> None:
    assert "empty password" in one_line_error(cli("keys", "new", env=_env(tmp_path, password="")))
    monkeypatch.delenv("SWARM_KEY_PASSWORD", raising=False)
    text = one_line_error(cli("keys", "new", env={"SWARM_HOME": str(tmp_path)}))
    assert "set SWARM_KEY_PASSWORD" in text
    assert not (tmp_path / "keys").exists()


def test_cli_list_with_no_keystores_says_how_to_create_one(cli, tmp_path: Path) -> None:
    done = cli("keys", "list", env=_env(tmp_path))
    assert done.code == 0 and "swarm keys new" in done.stdout
    assert json.loads(cli("keys", "list", "--json", env=_env(tmp_path)).stdout) == []


# ── signing with --key ──────────────────────────────────────────────────────

def test_cli_wrong_password_is_refused_before_anything_else(cli, home: Path, swarm: Swarm) -> None:
    Keystore(home / "keys", LIGHT_KDF).import_key(KEY, PASSWORD, name="bob")
    block = swarm.chain.w3.eth.block_number
    # The keystore's account holds no tokens: the balance check would fail too, after the unlock.
    result = cli("token", "transfer", dev_account(4).address, "1", "--key", "bob", env=_env(home, "not it"))
    text = one_line_error(_shows_no_key(result))
    assert f"Wrong password for keystore {ADDRESS}" in text
    assert swarm.chain.w3.eth.block_number == block


def test_cli_unknown_key_name_is_refused(cli, home: Path) -> None:
    Keystore(home / "keys", LIGHT_KDF).import_key(KEY, PASSWORD, name="bob")
    args = ("token", "transfer", dev_account(4).address, "1", "--key", "nobody")
    text = one_line_error(cli(*args, env=_env(home)))
    assert f"No keystore for nobody in {home / 'keys'}; see `swarm keys list`." in text


def test_cli_key_and_account_together_are_refused(cli, home: Path) -> None:
    Keystore(home / "keys", LIGHT_KDF).import_key(KEY, PASSWORD, name="bob")
    args = ("token", "transfer", dev_account(4).address, "1", "--key", "bob", "--account", "3")
    assert "Give either --account or --key, not both." in one_line_error(cli(*args, env=_env(home)))


def test_cli_transfer_without_a_signer_says_how_to_get_one(cli, home: Path) -> None:
    text = one_line_error(cli("token", "transfer", dev_account(4).address, "1", env=_env(home)))
    assert "create one with `swarm keys new` (or use --account N on a devnet)" in text


def test_cli_keystore_signed_transfer_moves_tokens(cli, home: Path, swarm: Swarm, rpc: RpcClient) -> None:
    Keystore(home / "keys", LIGHT_KDF).import_key(KEY, PASSWORD, name="bob")
    funded = _shows_no_key(cli("token", "transfer", ADDRESS, "10", "--account", "0", env=_env(home)))
    assert funded.code == 0, funded.stderr
    rpc.call("anvil_setBalance", ADDRESS, hex(ONE))  # ether for gas
    receiver = dev_account(5).address
    before = swarm.balance_of(receiver)

    done = _shows_no_key(cli("token", "transfer", receiver, "2.5", "--key", "bob", "--json", env=_env(home)))
    assert done.code == 0, done.stderr
    assert json.loads(done.stdout)["from"] == ADDRESS
    assert swarm.balance_of(receiver) == before + 25 * ONE // 10
    assert swarm.balance_of(ADDRESS) == 75 * ONE // 10
