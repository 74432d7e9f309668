"""A federation device's data at rest.

A device reads a sealed history (`privacy seal`), and what it derives from it (the personal
adapter, its round log) is sealed with the same key; new passphrase vaults use scrypt n = 2^17
and the vaults sealed at the old n = 2^15 still open.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specsteer.core.adapters import AdapterError, load_device_specialist
from specsteer.core.models import load_causal_lm
from specsteer.federation.atrest import device_key_provider, read_sealed_log, unseal_file
from specsteer.federation.budget_ledger import Ledger
from specsteer.federation.client_app import UNAVAILABLE
from specsteer.federation.simulation import run_in_process
from specsteer.privacy import vault
from specsteer.privacy.accounting import read_ledger_file
from specsteer.privacy.cli import main as privacy_main
from specsteer.privacy.vault import ENV_KEY, PassphraseKeyProvider, ProfileVault, StaticKeyProvider
from tests.federation.conftest import FIXTURE_USERS, node_configs, run_config

KEY = bytes(range(32))


def _header(path: Path) -> dict[str, object]:
    blob = path.read_bytes()
    size = int.from_bytes(blob[len(vault.MAGIC) : len(vault.MAGIC) + 2], "big")
    return json.loads(blob[len(vault.MAGIC) + 2 : len(vault.MAGIC) + 2 + size])


def test_new_passphrase_vaults_use_scrypt_2_17_and_old_ones_still_open(tmp_path: Path) -> None:
    new, old = tmp_path / "new.vault", tmp_path / "old.vault"
    ProfileVault.seal(b"history", new, PassphraseKeyProvider("correct horse"))
    ProfileVault.seal(b"history", old, PassphraseKeyProvider("correct horse", n=2**15))
    kdf = _header(new)["kdf"]
    assert isinstance(kdf, dict) and (kdf["name"], kdf["n"], kdf["r"], kdf["p"]) == ("scrypt", 2**17, 8, 1)
    reader = PassphraseKeyProvider("correct horse")
    assert ProfileVault.open(new, reader) == ProfileVault.open(old, reader) == b"history"


def test_a_sealed_history_trains_and_everything_derived_stays_sealed(
    tiny_bpe_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_KEY, KEY.hex())
    sealed = tmp_path / "history.vault"
    ProfileVault.seal(FIXTURE_USERS.read_bytes(), sealed, StaticKeyProvider(KEY))
    nodes = node_configs(tiny_bpe_model, tmp_path)
    for node in nodes:
        node["data-file"] = str(sealed)
    config = run_config(tiny_bpe_model, tmp_path, **{"dp-steps": 1, "personal-steps": 1})
    summary, _ = run_in_process(config, nodes)
    (only,) = summary["rounds"]
    assert only["replies"] == 2 and not only["refusals"], only  # it was a UnicodeDecodeError, sent to the server

    provider = device_key_provider(sealed)
    assert provider is not None
    first_body = json.loads(FIXTURE_USERS.read_text().splitlines()[0])["profile"][0]["body"].strip()[:40]
    for i in range(2):
        state = tmp_path / f"device{i}"
        weights = state / "personal" / "adapter_model.safetensors"
        assert weights.read_bytes().startswith(vault.MAGIC)
        assert json.loads((state / "personal" / "manifest.json").read_text())["sealed"] is True
        assert not (state / "rounds.jsonl").exists()
        events = [r["event"] for r in read_sealed_log(state / "rounds.vault", provider)]
        assert events == ["train", "evaluate"]
        # Nothing of the history or of the personal loss is readable in the device's files.
        for path in state.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                assert first_body.encode() not in data and b"personal_loss" not in data, path

        # Inference on the device opens the sealed personal adapter with the same key, and only with it.
        base = load_causal_lm(str(tiny_bpe_model), progress=False)
        with pytest.raises(AdapterError, match="sealed"):
            load_device_specialist(base, state)
        lm, version = load_device_specialist(base, state, unseal=unseal_file(provider))
        assert version == 1 and lm.name.endswith("+global-v1+personal")


def test_a_sealed_history_seals_its_ledger_and_refuses_one_that_does_not_verify(
    tiny_bpe_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The ε ledger of a sealed history was plaintext JSON: anyone with the files read its history
    (whose sampling rate tells the history's size) and could edit it or put an older copy back,
    and the device spent its budget again. It is now sealed with the history's key, counted by a
    sealed counter beside it, and a ledger that does not verify stops the device from training."""
    monkeypatch.setenv(ENV_KEY, KEY.hex())
    sealed = tmp_path / "history.vault"
    ProfileVault.seal(FIXTURE_USERS.read_bytes(), sealed, StaticKeyProvider(KEY))
    (node,) = node_configs(tiny_bpe_model, tmp_path, 1, **{"data-file": str(sealed)})
    config = run_config(tiny_bpe_model, tmp_path, **{"dp-steps": 1, "personal-steps": 1, "min-clients": 1})
    state = tmp_path / "device0"
    ledger, counter = state / "ledger.json", state / "ledger.json.seq"
    provider = device_key_provider(sealed)
    assert provider is not None

    def run() -> list[str]:
        summary, _ = run_in_process(config, [node])
        (only,) = summary["rounds"]
        return list(only["refusals"])

    def last_cause() -> str:
        (refused, *_) = [r for r in reversed(read_sealed_log(state / "rounds.vault", provider)) if "cause" in r]
        return str(refused["cause"])

    assert run() == []
    assert ledger.read_bytes().startswith(vault.MAGIC) and counter.read_bytes().startswith(vault.MAGIC)
    for path in (ledger, counter):
        assert b"epsilon" not in path.read_bytes() and b"history" not in path.read_bytes()
    first = read_ledger_file(ledger, provider)
    assert first is not None and len(first.rounds) == 1 and first.seal_seq == 1
    # `privacy budget` and `federation status` open it with the environment's key, and only with it.
    assert read_ledger_file(ledger) == first
    assert privacy_main(["budget", "--state-dir", str(state), "--json"]) == 0
    monkeypatch.delenv(ENV_KEY)
    assert privacy_main(["budget", "--state-dir", str(state)]) == 1
    assert "is sealed: set SPECSTEER_VAULT_PASSPHRASE" in capsys.readouterr().err
    monkeypatch.setenv(ENV_KEY, KEY.hex())
    old = ledger.read_bytes()
    assert run() == []
    assert len(Ledger.load(ledger, epsilon_budget=8, delta=1e-5, key_provider=provider).rounds) == 2
    newest = ledger.read_bytes()

    # Every ledger that does not verify is a refusal before anything is read or spent.
    forged = {"format": 1, "epsilon_budget": 8, "delta": 1e-5, "accountant": "rdp", "epsilon_spent": 0,
              "history": [], "rounds": [], "refusals": 0}  # fmt: skip
    other = tmp_path / "other"
    Ledger(other / "ledger.json", 8, 1e-5, key_provider=provider).save()
    cases = [
        (newest[:-1] + bytes([newest[-1] ^ 1]), "fails authentication"),  # edited
        (old, "was rolled back: it holds write 1 of 2"),  # an older copy put back
        (json.dumps(forged).encode(), "is in plaintext, but 2 sealed write(s) were made"),
        ((other / "ledger.json").read_bytes(), "not the one this device wrote"),  # another ledger's
        (None, "is missing, but 2 sealed write(s) were made"),  # deleted
    ]
    for content, cause in cases:
        if content is None:
            ledger.unlink()
        else:
            ledger.write_bytes(content)
        assert run() == [UNAVAILABLE], cause
        assert cause in last_cause()
    ledger.write_bytes(newest)
    counter.unlink()
    assert run() == [UNAVAILABLE] and "lost its counter of writes" in last_cause()

    # A plaintext ledger from before ledgers were sealed (no counter) is read and sealed at its next write.
    ledger.write_text(json.dumps({**forged, "history": [[1.0, 0.2, 3]]}))
    assert run() == []
    migrated = read_ledger_file(ledger, provider)
    assert ledger.read_bytes().startswith(vault.MAGIC) and counter.exists()
    assert migrated is not None and migrated.history[0] == (1.0, 0.2, 3) and len(migrated.history) == 2
