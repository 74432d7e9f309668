"""A witness policy: which witnesses a log's checkpoints go to, and how many must cosign (k of n).

    quorum = 2                                   # k: cosignatures a checkpoint needs to count
    [[witness]]
    key = "witness.example/w1+1a2b3c4d+BASE64"   # the witness's cosignature/v1 key (its .witness.pub)
    url = "https://w1.example:8443"              # its C2SP tlog-witness submission prefix
    ca = "w1-ca.pem"                             # optional: the CA its HTTPS certificate chains to
    [[witness]]
    key = "verifier.example/witness+..."         # no url: the verifier's own witness, asked by the Close

The device sends each checkpoint to every witness with a URL itself (never through the verifier, whose
log is the one being held to account) and asks the one witness without a URL through its Closes.
`audit verify --witness-policy FILE` counts a checkpoint as witnessed only when `quorum` of the listed
keys cosigned it (or a larger checkpoint consistent with it). Relative paths are the file's folder's.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from specsteer.audit.cosignature import WitnessKey
from specsteer.audit.errors import AuditError
from specsteer.audit.files import read_regular

__all__ = ["PolicyWitness", "WitnessPolicy", "load_policy", "parse_policy"]

MAX_POLICY_BYTES = 64 * 1024
MAX_WITNESSES = 32


@dataclass(frozen=True)
class PolicyWitness:
    key: WitnessKey
    url: str | None = None  # None: the verifier's own witness, reached through the Close
    ca: Path | None = None

    @property
    def name(self) -> str:
        return self.key.name


@dataclass(frozen=True)
class WitnessPolicy:
    witnesses: tuple[PolicyWitness, ...]
    quorum: int

    @property
    def keys(self) -> tuple[WitnessKey, ...]:
        return tuple(w.key for w in self.witnesses)

    @property
    def via_verifier(self) -> PolicyWitness | None:
        """The witness the Close asks (the verifier's own), if the policy names one."""
        return next((w for w in self.witnesses if w.url is None), None)

    @property
    def direct(self) -> tuple[PolicyWitness, ...]:
        return tuple(w for w in self.witnesses if w.url is not None)

    def describe(self) -> str:
        return f"{self.quorum} of {len(self.witnesses)} ({', '.join(w.name for w in self.witnesses)})"


def _problem(where: str, message: str) -> AuditError:
    return AuditError(f"witness policy {where}: {message}")


def parse_policy(text: str, where: str, base: Path) -> WitnessPolicy:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _problem(where, f"not TOML ({exc})") from None
    unknown = set(raw) - {"quorum", "witness"}
    if unknown:
        raise _problem(where, f"unknown setting {sorted(unknown)[0]!r} (quorum and [[witness]] only)")
    entries = raw.get("witness")
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise _problem(where, "it lists no witnesses (one [[witness]] table each)")
    if len(entries) > MAX_WITNESSES:
        raise _problem(where, f"it lists more than {MAX_WITNESSES} witnesses")
    witnesses: list[PolicyWitness] = []
    for i, entry in enumerate(entries, 1):
        extra = set(entry) - {"key", "url", "ca"}
        if extra:
            raise _problem(where, f"witness {i} has an unknown setting {sorted(extra)[0]!r} (key, url and ca only)")
        key_text, url, ca = entry.get("key"), entry.get("url"), entry.get("ca")
        if not isinstance(key_text, str):
            raise _problem(where, f"witness {i} has no key (its .witness.pub line)")
        try:
            key = WitnessKey.parse(key_text)
        except AuditError as exc:
            raise _problem(where, f"witness {i}: {exc}") from None
        if url is not None:
            if not isinstance(url, str):
                raise _problem(where, f"witness {key.name}: url must be a string")
            parts = urlsplit(url)
            # Plain HTTP would show the log's size and root to the network and let anyone answer.
            if parts.scheme != "https" or not parts.hostname or parts.query or parts.fragment:
                raise _problem(where, f"witness {key.name}: url {url!r} is not an https:// submission prefix")
        if ca is not None and (not isinstance(ca, str) or url is None):
            raise _problem(where, f"witness {key.name}: ca is a file path, and only for a witness with a url")
        witnesses.append(PolicyWitness(key, url.rstrip("/") if url else None, None if ca is None else base / ca))
    names = [w.name for w in witnesses]
    if len(set(names)) != len(names) or len({w.key.public_key for w in witnesses}) != len(witnesses):
        raise _problem(where, "a witness is listed twice (by name or key): each counts once toward the quorum")
    if sum(w.url is None for w in witnesses) > 1:
        raise _problem(where, "only one witness can be asked through the verifier's Close (no url)")
    quorum = raw.get("quorum", len(witnesses))
    if not isinstance(quorum, int) or isinstance(quorum, bool) or not 1 <= quorum <= len(witnesses):
        raise _problem(where, f"quorum must be a whole number from 1 to {len(witnesses)}; got {quorum!r}")
    return WitnessPolicy(tuple(witnesses), quorum)


def load_policy(path: Path) -> WitnessPolicy:
    data = read_regular(Path(path), "the witness policy", MAX_POLICY_BYTES)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise _problem(str(path), "not UTF-8 text") from None
    return parse_policy(text, str(path), Path(path).parent)
