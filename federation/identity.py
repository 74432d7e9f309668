"""Device identities that SecAgg+ keys are bound to (issue #50, finding 2).

SecAgg+ keys were not authenticated: a server that filled a cohort with nodes of its own (Sybils)
held their secret keys, decrypted the shares an honest device sent them, and removed every mask
(one real device, two Sybils, threshold 2 of 3: the device's update recovered to within 4e-6).

The binding. `federation deploy` (`federation.deploy.provision_deployment`) makes an *enrollment
key* (ECDSA P-384) and, for each device, signs the device's node public key with it (the
*endorsement*, ``node.endorsement``); the device keeps the enrollment public key
(``enrollment.pub``) beside its node key pair, the one Flower's node authentication uses. In a
SecAgg+ round the device signs, with its node key, its two SecAgg+ public keys together with the
run, the round and its node id (`NodeIdentity.bind`), and sends the signature, its node public
key and its endorsement with them. The server relays each device's binding with its keys
(`federation.secagg.IdentityRelayGrid`); before sending any share, every device checks each
neighbour's binding (`NodeIdentity.check_cohort`): the endorsement verifies under the enrollment
key, the signature under the endorsed node key, over that neighbour's keys, run, round and node
id; no node key appears twice; and the number of distinct endorsed nodes reaches the threshold
and the device's minimum cohort. Anything else is a refusal, before a share leaves.

Trust: a server can now only seat a node in a cohort if it holds an endorsed node key. The
enrollment key is the operator's provisioning secret, to be kept away from the running server
(offline, or on the machine that provisions devices); whoever holds it can endorse Sybils. The
node keys of real devices live on the devices.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from specsteer.core.errors import ConfigError
from specsteer.core.fileio import create_private
from specsteer.federation.errors import SecAggRefusal

__all__ = [
    "ENDORSEMENT",
    "ENROLLMENT_PUBLIC_KEY",
    "IDENTITY_KEY",
    "NodeIdentity",
    "byte_list",
    "endorse",
    "load_enrollment_key",
    "write_enrollment_key",
]

IDENTITY_KEY = "identity"  # the config-record key of a device's binding, in its setup reply
ENDORSEMENT = "node.endorsement"
ENROLLMENT_PUBLIC_KEY = "enrollment.pub"
ENROLLMENT_KEY = "enrollment.key"
_ENDORSE = b"specsteer/node-endorsement/v1\x00"
_BIND = b"specsteer/secagg-keys/v1\x00"
_HASH = hashes.SHA384()


def byte_list(value: object) -> list[bytes] | None:
    """`value` as a list of bytes (a config-record value), or None if it is not one."""
    if isinstance(value, list) and all(isinstance(part, bytes) for part in value):
        return [part for part in value if isinstance(part, bytes)]
    return None


def _public_der(key: ec.EllipticCurvePublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _load_public(data: bytes) -> ec.EllipticCurvePublicKey:
    key = serialization.load_der_public_key(data)
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise ValueError("not an EC public key")
    return key


def write_enrollment_key(folder: str | Path) -> tuple[Path, Path]:
    """The deployment's enrollment key pair in `folder` (``enrollment.key``, 0600, and ``enrollment.pub``).

    A key already there is kept: the devices' endorsements depend on it."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    private, public = out / ENROLLMENT_KEY, out / ENROLLMENT_PUBLIC_KEY
    if private.is_file():
        key = load_enrollment_key(private)
    else:
        key = ec.generate_private_key(ec.SECP384R1())
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        create_private(private, pem)
    public.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return private, public


def load_enrollment_key(path: Path) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(Path(path).read_bytes(), None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ConfigError(f"{path} is not an EC private key.")
    return key


def endorse(enrollment: ec.EllipticCurvePrivateKey, node_public: ec.EllipticCurvePublicKey) -> bytes:
    """The enrollment key's signature over a node public key: what makes that node a device."""
    return enrollment.sign(_ENDORSE + _public_der(node_public), ec.ECDSA(_HASH))


def _binding(run_id: int, server_round: str, node_id: int, pk1: bytes, pk2: bytes) -> bytes:
    round_bytes = server_round.encode("utf-8")
    return b"".join(
        [
            _BIND,
            struct.pack(">QQ", run_id & (2**64 - 1), node_id & (2**64 - 1)),
            struct.pack(">I", len(round_bytes)),
            round_bytes,
            struct.pack(">I", len(pk1)),
            pk1,
            struct.pack(">I", len(pk2)),
            pk2,
        ]
    )


@dataclass(frozen=True)
class NodeIdentity:
    """A device's node key, its endorsement, and the enrollment key it checks its neighbours with."""

    key: ec.EllipticCurvePrivateKey
    endorsement: bytes
    enrollment: ec.EllipticCurvePublicKey

    @classmethod
    def load(cls, folder: str | Path) -> NodeIdentity:
        """The identity `provision_deployment` wrote to a device's folder (node config ``identity-dir``)."""
        from specsteer.federation.deploy import NODE_KEY

        out = Path(folder).expanduser()
        try:
            key = serialization.load_ssh_private_key((out / NODE_KEY).read_bytes(), None)
            endorsement = (out / ENDORSEMENT).read_bytes()
            enrollment = serialization.load_pem_public_key((out / ENROLLMENT_PUBLIC_KEY).read_bytes())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"The device identity in {out} cannot be read ({type(exc).__name__}).") from None
        if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(enrollment, ec.EllipticCurvePublicKey):
            raise ConfigError(f"The device identity in {out} is not a pair of EC keys.")
        identity = cls(key, endorsement, enrollment)
        try:
            enrollment.verify(endorsement, _ENDORSE + identity.public, ec.ECDSA(_HASH))
        except InvalidSignature:
            raise ConfigError(f"The endorsement in {out} is not the enrollment key's for this node key.") from None
        return identity

    @property
    def public(self) -> bytes:
        return _public_der(self.key.public_key())

    def bind(self, *, run_id: int, server_round: str, node_id: int, pk1: bytes, pk2: bytes) -> list[bytes]:
        """[node public key, endorsement, signature over the keys, run, round and node id]."""
        signature = self.key.sign(_binding(run_id, server_round, node_id, pk1, pk2), ec.ECDSA(_HASH))
        return [self.public, self.endorsement, signature]

    def check_cohort(
        self,
        entries: Mapping[int, Sequence[bytes]],
        *,
        run_id: int,
        server_round: str,
        own_node: int,
        least: int,
    ) -> dict[int, tuple[bytes, bytes]]:
        """Each neighbour's SecAgg+ keys, once every entry's binding is checked (module docstring).

        `entries` maps node ids to [pk1, pk2, node public key, endorsement, signature]. Raises
        `SecAggRefusal` unless every entry is bound to an endorsed node key, none twice, this
        device's own entry carries its own node key, and at least `least` distinct nodes remain.
        """
        keys: dict[int, tuple[bytes, bytes]] = {}
        seen: set[bytes] = set()
        for node_id, entry in entries.items():
            if len(entry) != 5 or not all(isinstance(part, bytes) for part in entry):
                raise SecAggRefusal(f"the SecAgg+ keys of node {node_id} carry no binding to a device identity")
            pk1, pk2, public, endorsement, signature = entry
            try:
                node_key = _load_public(public)
                self.enrollment.verify(endorsement, _ENDORSE + _public_der(node_key), ec.ECDSA(_HASH))
                node_key.verify(signature, _binding(run_id, server_round, node_id, pk1, pk2), ec.ECDSA(_HASH))
            except (InvalidSignature, ValueError):
                raise SecAggRefusal(
                    f"the SecAgg+ keys of node {node_id} are not bound to an enrolled device identity"
                ) from None
            canonical = _public_der(node_key)
            if canonical in seen:
                raise SecAggRefusal("two SecAgg+ entries are bound to one device identity")
            if node_id == own_node and canonical != self.public:
                raise SecAggRefusal("this device's SecAgg+ entry is bound to another identity")
            seen.add(canonical)
            keys[node_id] = (pk1, pk2)
        if len(seen) < least:
            raise SecAggRefusal(
                f"the SecAgg+ cohort holds {len(seen)} distinct enrolled devices, "
                f"fewer than this device requires ({least})"
            )
        return keys
