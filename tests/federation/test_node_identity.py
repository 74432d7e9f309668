"""Issue #50, findings 1 and 2: `federation deploy` provisions what node authentication and the
SecAgg+ binding need (the real SuperLink refusing a stranger is `test_deployment.py`'s)."""

from __future__ import annotations

import io
import json
import stat
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from specsteer.core.errors import ConfigError
from specsteer.federation.cli import main
from specsteer.federation.identity import NodeIdentity


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def test_deploy_provisions_node_keys_endorsements_and_an_allow_list(tmp_path: Path) -> None:
    code, out, _ = _run(["deploy", str(tmp_path / "fed"), "--devices", "phone-1,phone-2", "--json"])
    assert code == 0
    made = json.loads(out)
    assert "--enable-supernode-auth" in made["superlink"]  # node authentication is the default
    keys = []
    for name in ("phone-1", "phone-2"):
        folder = Path(made["devices"][name])
        assert stat.S_IMODE((folder / "node.key").stat().st_mode) == 0o600
        key = serialization.load_ssh_private_key((folder / "node.key").read_bytes(), None)
        assert key.curve.name == "secp384r1"  # type: ignore[union-attr]
        keys.append((folder / "node.pub").read_text())
        NodeIdentity.load(folder)  # the endorsement verifies under the enrollment key
        command = made["supernodes"][name]
        assert command[command.index("--auth-supernode-private-key") + 1] == str(folder / "node.key")
        assert f'identity-dir="{folder.resolve()}"' in command[-1]
    assert Path(made["allow_list"]).read_text() == "".join(keys)
    # A re-run keeps every key (the SuperLink registered them) and adds a new device.
    code, out, _ = _run(["deploy", str(tmp_path / "fed"), "--devices", "phone-3", "--json"])
    assert code == 0
    assert Path(made["allow_list"]).read_text().count("ecdsa-sha2-nistp384") == 3
    assert all(k in Path(made["allow_list"]).read_text() for k in keys)
    code, out, _ = _run(["deploy", str(tmp_path / "plain"), "--devices", "a", "--json", "--no-node-auth"])
    assert "--enable-supernode-auth" not in json.loads(out)["superlink"]


@pytest.mark.parametrize("devices", ["", "a,a", "../escape", "a b"])
def test_deploy_refuses_bad_device_names_in_one_sentence(tmp_path: Path, devices: str) -> None:
    code, out, err = _run(["deploy", str(tmp_path), "--devices", devices])
    assert code != 0 and out == ""
    assert err.startswith("federation: error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_register_nodes_without_an_allow_list_is_one_sentence(tmp_path: Path) -> None:
    code, _, err = _run(
        ["register-nodes", "--superlink", "127.0.0.1:9", "--insecure", "--allow-list", str(tmp_path / "none.txt")]
    )
    assert code != 0 and "cannot be read" in err and err.count("\n") == 1


def test_an_identity_whose_endorsement_is_not_the_enrollment_keys_is_refused(tmp_path: Path) -> None:
    _run(["deploy", str(tmp_path / "a"), "--devices", "one"])
    _run(["deploy", str(tmp_path / "b"), "--devices", "two"])
    mixed = tmp_path / "a" / "devices" / "one"
    (mixed / "node.endorsement").write_bytes((tmp_path / "b" / "devices" / "two" / "node.endorsement").read_bytes())
    with pytest.raises(ConfigError, match="not the enrollment key's"):
        NodeIdentity.load(mixed)
    with pytest.raises(ConfigError, match="cannot be read"):
        NodeIdentity.load(tmp_path / "nowhere")
