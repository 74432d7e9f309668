"""The Python API an app embeds: open a client once, generate many times, stream text as it commits.

    from specsteer.sdk import ClientConfig, Profile, SpecSteerClient

    config = ClientConfig.from_file("device.toml")   # [verifier], [device] and [audit] tables
    with SpecSteerClient.from_config(config, profile=Profile.from_file("profile.json")) as client:
        result = client.generate("Write the body of a commit message for: refs: speed up lookups")
        print(result.text, result.stats.as_dict())
        for piece in client.stream("Another prompt"):     # text as each token commits
            print(piece, end="", flush=True)

`from_config` builds what `sdk generate --server` builds: the Specialist on its drafter (a model
bundle, or the embedded default's bundle in the cache), the audit log when one is configured, and
the pinned mutual-TLS channel. `connect` takes a Specialist built by the app instead.

One TLS channel serves every generation (and concurrent ones from several threads). If the
verifier is lost, a generation finishes on the device and `result.stats.fallback` says why; the
next generation dials again. With `fallback=False` the loss is raised as `VerifierLost` instead.
A verifier that fails TLS or pinning raises `VerifierRefused`, always. Every round passes the
egress guard first (`ClientConfig.guard`, "placeholder" by default; see `sdk/uplink_guard.py`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, Unpack, cast

from specsteer.core.device_lm import DeviceLM, SpecialistLM
from specsteer.core.errors import ConfigError, SpecSteerError
from specsteer.core.model_registry import DEFAULT_SPECIALIST
from specsteer.core.onnx_cache import ONNX_PRECISIONS
from specsteer.core.session_types import CandidatePolicy, Method, SessionParams, check_setting_types
from specsteer.core.tomlfile import load_dataclass
from specsteer.privacy.guard import EgressGuard, placeholder_labels
from specsteer.sdk.audited import AuditedTap, WitnessRequired, check_audit_settings, open_audit_tap
from specsteer.sdk.cloud_plugins import local_verifier_factory
from specsteer.sdk.context import Profile
from specsteer.sdk.decoding import DecodeOptions, Generation, Specialist, generate
from specsteer.sdk.drafters import DEFAULT_DRAFTER, DRAFTERS
from specsteer.sdk.egress import EgressTap
from specsteer.sdk.prompt_guard import check_prompt_policy
from specsteer.sdk.remote import RemoteVerifier, TlsIdentity, split_target
from specsteer.sdk.specialists import DEFAULT_CONTEXT_ENTRIES, load_specialist
from specsteer.sdk.transport import Verifier
from specsteer.sdk.uplink_guard import DEFAULT_GUARD_SETTING, check_guard_setting, guard_setting

if TYPE_CHECKING:  # the device process that drafts on another backend never imports torch
    from specsteer.core.models import CausalLM

__all__ = ["ClientConfig", "GenerationSettings", "GenerationStream", "SpecSteerClient"]

log = logging.getLogger("sdk")


class GenerationSettings(TypedDict, total=False):
    """The keyword overrides `generate` and `stream` take: the fields of `SessionParams` and `DecodeOptions`.

    Spelled out so a type checker rejects a misspelt setting (`gama=0.1`) before it runs; at run
    time an unknown name still raises `ConfigError`. tests/sdk/test_public_api.py keeps this in step
    with the two dataclasses.
    """

    # SessionParams: declared to the cloud. The method and policy may be named as the CLI names them
    # ("slm", "literal").
    method: Method | str
    sampling: bool
    gamma: float
    alpha: float
    top_k: int
    draft_len: int
    policy: CandidatePolicy | str
    bonus: bool
    adapter_version: int
    padded_frames: bool
    certainty: float  # the certainty gate (docs/algorithm.md); 0, the default, is the paper's rule
    gamma_uncertain: float
    gamma_form: float | None  # the form rule (docs/algorithm.md); None, the default, is the paper's rule
    # DecodeOptions: stay on the device.
    max_new_tokens: int
    temperature: float
    seed: int
    no_repeat_ngram: int  # the device's repetition stop (docs/algorithm.md); 0, the default, is off


@dataclass(frozen=True)
class ClientConfig:
    """Where the verifier is and how the device proves itself and checks the verifier.

    In a TOML file, the same keys go in `[verifier]`, `[device]` and `[audit]` tables; relative
    paths are relative to the file:

        [verifier]
        server = "127.0.0.1:50051"
        pins = "pki/pins.txt"            # pins + anchor certificates (`server pki init` writes it)
        cert = "pki/devices/alice.pem"
        key = "pki/devices/alice.key"
        # anchors = "anchors.pem"        # extra anchor bundle, if the pins file has no certificates
        # server_name = "localhost"      # verify this name instead of the address's host
        # connect_timeout = 10.0
        # round_timeout = 30.0
        # fallback = true                # finish locally if the verifier is lost
        # guard = "placeholder"          # egress guard: placeholder, keep-local or off
        # prompt_guard = "redact"        # the prompt's sensitive spans: redact, refuse or allow
        # padded_frames = true           # constant-size rounds (false: ~5x fewer uplink bytes)
        # placeholder_labels = "generic" # one "<PRIVATE>" for every held span, or "by-kind" ("<EMAIL>")

        [device]                         # what `SpecSteerClient.from_config` drafts with
        # bundle = "models/qwen-int4"    # a model bundle (`sdk models build`); or:
        # specialist = "qwen2.5-coder-0.5b-instruct"  # an embedded name, a model folder or a .gguf
        # drafter = "onnx"               # onnx, torch or llamacpp
        # drafter_precision = "int4"     # int4, int8 or fp32 (onnx)
        # federation_state = "state"     # this device's federated global + personal adapters
        # context_entries = 3            # how many history entries retrieval puts in the prompt
        # cache_dir = "cache"            # converted models (default: $SPECSTEER_CACHE or the user cache)

        [audit]                          # the signed log of every byte sent and received
        # log = "audit-log"              # the log's folder
        # key = "keys/device.key"        # its signing key (`audit keygen`)
        # witness_key = "witness.pub"    # the verifier's witness key: prove Closes from its cosignatures
        # witness_policy = "witnesses.toml"  # witnesses (k of n) the log's checkpoints must reach
        # require_witness = false        # true: an error when the cloud misbehaves or the quorum is missed
    """

    server: str
    pins: Path
    cert: Path
    key: Path
    anchors: Path | None = None
    server_name: str | None = None
    connect_timeout: float = field(default=10.0, metadata={"toml": "a number of seconds"})
    round_timeout: float = field(default=30.0, metadata={"toml": "a number of seconds"})
    fallback: bool = True
    guard: str = DEFAULT_GUARD_SETTING
    prompt_guard: str = "redact"
    padded_frames: bool = True
    placeholder_labels: str = "generic"
    # [device]
    specialist: str = DEFAULT_SPECIALIST
    bundle: Path | None = None
    drafter: str = DEFAULT_DRAFTER
    drafter_precision: str | None = None
    federation_state: Path | None = None
    context_entries: int = DEFAULT_CONTEXT_ENTRIES
    cache_dir: Path | None = None
    # [audit]
    audit_log: Path | None = None
    audit_key: Path | None = None
    witness_key: Path | None = None
    witness_policy: Path | None = None
    require_witness: bool = False

    def __post_init__(self) -> None:
        # Required strings and paths, then the optional ones where given.
        strings = ["server"] + (["server_name"] if self.server_name is not None else [])
        optional = (
            "anchors",
            "bundle",
            "federation_state",
            "cache_dir",
            "audit_log",
            "audit_key",
            "witness_key",
            "witness_policy",
        )
        paths = ["pins", "cert", "key"] + [name for name in optional if getattr(self, name) is not None]
        for name in strings:
            value = getattr(self, name)
            if not (isinstance(value, str) and value):
                raise ConfigError(f"{name} must be a non-empty string; got {type(value).__name__} {value!r}")
        for name in paths:
            value = getattr(self, name)
            if not isinstance(value, str | os.PathLike) or not os.fspath(value) or "\0" in os.fspath(value):
                raise ConfigError(f"{name} must be a file path; got {type(value).__name__} {value!r}")
        check_guard_setting(self.guard)
        check_prompt_policy(self.prompt_guard)
        placeholder_labels(self.placeholder_labels)
        for name in ("connect_timeout", "round_timeout"):
            value = getattr(self, name)
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if not (number and math.isfinite(value) and value > 0):
                raise ConfigError(f"{name} must be a positive number of seconds; got {value!r}")
        # A config built in code is checked as one read from TOML: `fallback="false"` is no bool
        # (and would have kept the fallback on), a number is no server address.
        check_setting_types(type(self), vars(self))
        if self.drafter not in DRAFTERS:
            raise ConfigError(f"unknown drafter {self.drafter!r}; choose one of: {', '.join(DRAFTERS)}")
        if self.drafter_precision is not None and self.drafter_precision not in ONNX_PRECISIONS:
            raise ConfigError(
                f"unknown drafter precision {self.drafter_precision!r}; choose one of: {', '.join(ONNX_PRECISIONS)}"
            )
        if self.context_entries < 0:
            raise ConfigError(f"context_entries must be 0 or more; got {self.context_entries}")
        if self.bundle is not None and self.specialist != DEFAULT_SPECIALIST:
            raise ConfigError("name the device's model once: [device] bundle or specialist, not both")
        check_audit_settings(
            self.audit_log, self.audit_key, self.witness_key, self.witness_policy, self.require_witness
        )

    def identity(self) -> TlsIdentity:
        """Read and check the pin set and the device's certificate and key (fails closed)."""
        split_target(self.server)
        return TlsIdentity.from_files(self.pins, self.cert, self.key, anchors=self.anchors)

    @classmethod
    def from_file(cls, path: str | Path, **overrides: Any) -> ClientConfig:
        """Read `[verifier]` from a TOML file; keyword overrides that are not None win."""
        return load_dataclass(cls, path, _LAYOUT, overrides)


_DEVICE_KEYS = (
    "specialist",
    "bundle",
    "drafter",
    "drafter_precision",
    "federation_state",
    "context_entries",
    "cache_dir",
)
_AUDIT_KEYS = {
    "log": "audit_log",
    "key": "audit_key",
    "witness_key": "witness_key",
    "witness_policy": "witness_policy",
    "require_witness": "require_witness",
}
_LAYOUT = {
    "verifier": {
        f.name: f.name
        for f in fields(ClientConfig)
        if f.name not in _DEVICE_KEYS and f.name not in _AUDIT_KEYS.values()
    },
    "device": {name: name for name in _DEVICE_KEYS},
    "audit": _AUDIT_KEYS,
}


def _check_prompt(prompt: object) -> None:
    if not isinstance(prompt, str):
        raise ConfigError(f"the prompt must be a string; got {type(prompt).__name__}")


class _Cancelled(Exception):
    """Raised inside a generation whose stream the app closed."""


class GenerationStream:
    """Text pieces as tokens commit; iterate it, then read `result`. `close()` stops the generation."""

    def __init__(self, run: Callable[[Callable[[list[int]], None]], Generation], decode: Callable[[list[int]], str]):
        self._decode = decode
        self._pieces: queue.Queue[str | BaseException | None] = queue.Queue()
        self._ids: list[int] = []
        self._emitted = ""
        self._cancel = threading.Event()
        self._result: Generation | None = None
        self._thread = threading.Thread(target=self._work, args=(run,), name="specsteer-stream", daemon=True)
        self._thread.start()

    def _on_commit(self, tokens: list[int]) -> None:
        if self._cancel.is_set():
            raise _Cancelled
        self._ids.extend(tokens)
        text = self._decode(self._ids)
        # A token can end inside a multi-byte character; hold it back until the character completes.
        if text.endswith("\ufffd") or not text.startswith(self._emitted):
            return
        piece, self._emitted = text[len(self._emitted) :], text
        if piece:
            self._pieces.put(piece)

    def _work(self, run: Callable[[Callable[[list[int]], None]], Generation]) -> None:
        try:
            self._result = run(self._on_commit)
            tail = self._result.text[len(self._emitted) :] if self._result.text.startswith(self._emitted) else ""
            if tail:
                self._pieces.put(tail)
            self._pieces.put(None)
        except _Cancelled:
            self._pieces.put(None)
        except BaseException as exc:  # handed to the consumer, re-raised there
            self._pieces.put(exc)

    def __iter__(self) -> Iterator[str]:
        while True:
            item = self._pieces.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    @property
    def result(self) -> Generation:
        """The finished generation (text, token IDs, stats); waits for it."""
        self._thread.join()
        if self._result is None:
            raise SpecSteerError("the generation did not finish (it was closed or failed)")
        return self._result

    def close(self) -> None:
        self._cancel.set()
        self._thread.join()


class SpecSteerClient:
    """A Specialist (with the user's private profile) bound to one verifier connection."""

    def __init__(
        self,
        specialist: Specialist,
        verifier: Verifier,
        *,
        fallback: bool = True,
        params: SessionParams | None = None,
        options: DecodeOptions | None = None,
        guard: EgressGuard | str = DEFAULT_GUARD_SETTING,
        padded_frames: bool = True,
        placeholder_labels: str = "generic",
        prompt_guard: str = "redact",
    ) -> None:
        """`guard` is an `EgressGuard` or a setting of `GUARD_SETTINGS`; the uplink is guarded unless
        it says "off" in so many words (a privacy SDK fails closed: `None` is refused, not read as off).

        `placeholder_labels` ("generic" or "by-kind") is what a held span goes up as: one label for
        every kind by default, so the cloud does not learn what kind of private text was held. A
        built `guard` must carry the same labels (`guard_for_profile(..., labels=...)`), or it is
        refused: neither setting is silently dropped.

        `prompt_guard` ("redact", "refuse" or "allow", `sdk.prompt_guard`) decides what of a prompt's
        sensitive spans goes up in the Open; with `guard="off"` the prompt goes up as typed.

        `padded_frames`: every round on the wire has one size (`PaddedRound`), so a round's size does
        not show how many tokens it carries or where the guard held some back. The client decides
        the framing of every session it opens (a `SessionParams` passed in gets this value); only a
        `padded_frames=` keyword to `generate`/`stream` overrides it for one generation."""
        self.specialist = specialist
        self.verifier = verifier
        self.fallback = fallback
        self.guard = self._guard(guard, placeholder_labels)
        check_prompt_policy(prompt_guard)
        self.prompt_guard = prompt_guard
        if not isinstance(padded_frames, bool):
            raise ConfigError(f"padded_frames must be True or False; got {padded_frames!r}")
        self.padded_frames = padded_frames
        self.params = params or SessionParams()
        self.options = options or DecodeOptions()
        # What the client opened for itself (the audit log): closed with it.
        self._resources = contextlib.ExitStack()
        self._audited: AuditedTap | None = None
        self.require_witness = False  # `ClientConfig.require_witness`: see `_witnessed`

    def _guard(self, guard: EgressGuard | str, labels: str) -> EgressGuard | None:
        wanted = placeholder_labels(labels)  # checked even beside a built guard: a typo is not silently ignored
        if isinstance(guard, EgressGuard):
            # A built guard carries its own labels; the client's setting may not be silently ignored.
            if dict(guard.placeholders) != dict(wanted):
                raise ConfigError(
                    f"the guard passed labels its spans {sorted(set(guard.placeholders.values()))}, not what "
                    f"placeholder_labels={labels!r} asks: build it with labels={labels!r} (guard_for_profile) "
                    "or ask for the labels it has"
                )
            return guard
        if not isinstance(guard, str):
            raise ConfigError(f"guard must be an EgressGuard or one of placeholder, keep-local, off; got {guard!r}")
        return guard_setting(self.specialist.profile, self.specialist.lm.tokenizer, guard, labels)

    @classmethod
    def in_process(
        cls,
        specialist: Specialist | CausalLM,
        generalist: CausalLM,
        *,
        profile: Profile | None = None,
        guard: EgressGuard | str = DEFAULT_GUARD_SETTING,
        seed: int = 0,
        params: SessionParams | None = None,
        options: DecodeOptions | None = None,
        padded_frames: bool = True,
        placeholder_labels: str = "generic",
    ) -> SpecSteerClient:
        """A client whose verifier runs in this process (the `[cloud]` extra): the quick start, and a
        test bed. Frames still pass through the wire format, so the byte counts are real."""
        specialist = cls._specialist(specialist, profile)
        if isinstance(specialist.lm, DeviceLM):
            raise ConfigError(
                f"the in-process verifier runs a generic copy of the Specialist {specialist.lm.name}: "
                "load it with its weights (core.models.load_causal_lm)"
            )
        # Found by entry point, not imported: the device SDK holds no cloud code (docs/architecture.md).
        verifier = local_verifier_factory()(
            cast("CausalLM", specialist.lm), generalist, seed=seed, federation_state=None
        )
        return cls(
            specialist,
            verifier,
            params=params,
            options=options,
            guard=guard,
            padded_frames=padded_frames,
            placeholder_labels=placeholder_labels,
        )

    @staticmethod
    def _specialist(specialist: Specialist | SpecialistLM, profile: Profile | None) -> Specialist:
        if not isinstance(specialist, Specialist):
            return Specialist(specialist, profile)
        if profile is not None:
            raise ConfigError("pass the profile inside the Specialist or with a model, not both")
        return specialist

    @classmethod
    def from_config(
        cls,
        config: ClientConfig,
        *,
        profile: Profile | None = None,
        params: SessionParams | None = None,
        options: DecodeOptions | None = None,
        progress: bool = False,
    ) -> SpecSteerClient:
        """What `sdk generate --server` builds, from `config` alone: the Specialist on the drafter its
        `[device]` table names (a bundle drafts without torch), the audit log of its `[audit]`
        table, and the pinned mutual-TLS channel. The pins and identity are checked first, before
        any model loads."""
        config.identity()
        specialist = load_specialist(
            config.bundle or config.specialist,
            profile,
            drafter=config.drafter,
            precision=config.drafter_precision,
            federation_state=config.federation_state,
            context_entries=config.context_entries,
            cache_dir=config.cache_dir,
            progress=progress,
        )
        return cls.connect(specialist, config, params=params, options=options)

    @classmethod
    def connect(
        cls,
        specialist: Specialist | SpecialistLM,
        config: ClientConfig,
        *,
        profile: Profile | None = None,
        tap: EgressTap | None = None,
        params: SessionParams | None = None,
        options: DecodeOptions | None = None,
    ) -> SpecSteerClient:
        """Check the pin set and device identity now (fail fast); the channel dials on first use.

        With an audit log in `config`, the client opens it (and closes it on `close`); a `tap` of
        the caller's own is refused beside it, so neither is silently left out."""
        specialist = cls._specialist(specialist, profile)
        identity = config.identity()
        resources = contextlib.ExitStack()
        if config.audit_log is not None:
            if tap is not None:
                raise ConfigError("the config names an audit log: pass no tap of your own beside it")
            if config.audit_key is None:  # ClientConfig refuses this; a config changed since must not log unsigned
                raise ConfigError("an audit log needs its signing key")
            tap = resources.enter_context(
                open_audit_tap(
                    config.audit_log, config.audit_key, config.cert, config.witness_key, config.witness_policy
                )
            )
        with resources:
            verifier = RemoteVerifier(
                config.server,
                identity,
                vocab_size=specialist.lm.vocab_size,
                server_name=config.server_name,
                connect_timeout=config.connect_timeout,
                round_timeout=config.round_timeout,
                tap=tap,
            )
            client = cls(
                specialist,
                verifier,
                fallback=config.fallback,
                params=params,
                options=options,
                guard=config.guard,
                padded_frames=config.padded_frames,
                placeholder_labels=config.placeholder_labels,
                prompt_guard=config.prompt_guard,
            )
            client._audited = tap if isinstance(tap, AuditedTap) else None
            client.require_witness = config.require_witness
            client._resources = resources.pop_all()
        return client

    def _settings(
        self, params: SessionParams | None, options: DecodeOptions | None, overrides: GenerationSettings
    ) -> tuple[SessionParams, DecodeOptions]:
        params = replace(params or self.params, padded_frames=self.padded_frames)
        options = options or self.options
        if overrides:
            p_names = {f.name for f in fields(SessionParams)}
            o_names = {f.name for f in fields(DecodeOptions)}
            unknown = set(overrides) - p_names - o_names
            if unknown:
                raise ConfigError(f"unknown generation setting {sorted(unknown)[0]!r}")
            chosen: dict[str, Any] = dict(overrides)
            params = replace(params, **{k: v for k, v in chosen.items() if k in p_names})
            options = replace(options, **{k: v for k, v in chosen.items() if k in o_names})
        return params, options

    def generate(
        self,
        prompt: str,
        params: SessionParams | None = None,
        options: DecodeOptions | None = None,
        *,
        on_commit: Callable[[list[int]], None] | None = None,
        **overrides: Unpack[GenerationSettings],
    ) -> Generation:
        """One generation. `overrides` are SessionParams/DecodeOptions fields, e.g. gamma=0.1, max_new_tokens=64."""
        _check_prompt(prompt)
        params, options = self._settings(params, options, overrides)
        return self._run(prompt, params, options, on_commit)

    def stream(
        self,
        prompt: str,
        params: SessionParams | None = None,
        options: DecodeOptions | None = None,
        **overrides: Unpack[GenerationSettings],
    ) -> GenerationStream:
        """Like `generate`, but yields text pieces as tokens commit; `.result` holds the `Generation`."""
        _check_prompt(prompt)
        params, options = self._settings(params, options, overrides)

        return GenerationStream(lambda on_commit: self._run(prompt, params, options, on_commit), self.specialist.decode)

    def _run(
        self,
        prompt: str,
        params: SessionParams,
        options: DecodeOptions,
        on_commit: Callable[[list[int]], None] | None,
    ) -> Generation:
        result = generate(
            self.specialist,
            prompt,
            params,
            options,
            self.verifier,
            on_commit=on_commit,
            fallback=self.fallback,
            guard=self.guard,
            prompt_guard=self.prompt_guard,
        )
        return self._witnessed(result)

    def _witnessed(self, result: Generation) -> Generation:
        """The log's witnessing after a generation, in its stats (`witness_faults`, and with a policy
        `witness_cosigners`, `witness_quorum_met`); with `require_witness`, a `WitnessRequired`
        error when the cloud misbehaved as the witness or the quorum did not cosign."""
        if self._audited is None:
            return result
        report = self._audited.witness_report()
        result.stats.extra.update(report.stats())
        problem = report.problem()
        if problem is not None:
            log.warning("sdk: %s", problem)
            if self.require_witness:
                error = WitnessRequired(problem)
                error.generation = result
                raise error
        return result

    def close(self) -> None:
        close = getattr(self.verifier, "close", None)
        try:
            if callable(close):
                close()
        finally:
            self._resources.close()  # the audit log signs its last checkpoint after the channel is done

    def __enter__(self) -> SpecSteerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
