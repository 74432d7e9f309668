"""The demo's orchestration: a throwaway PKI, `server serve` on loopback, the device's generation
over mutual TLS with an audit log, then `audit verify` on that log, as an auditor would."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from specsteer.audit.cosignature import load_witness_key, write_witness_key_pair
from specsteer.audit.errors import AuditError
from specsteer.audit.note import load_verifier_key, write_key_pair
from specsteer.audit.verify import inspect
from specsteer.core.errors import ConfigError
from specsteer.core.gguf_cache import default_cache_dir
from specsteer.core.session_types import Method
from specsteer.sdk.cli import check_options, log, run, run_remote, session_params
from specsteer.sdk.client import ClientConfig, SpecSteerClient
from specsteer.sdk.context import Profile
from specsteer.sdk.decoding import Generation
from specsteer.sdk.specialists import load_specialist
from specsteer.server.pki import init_pki, issue_device

# The demo runs the verifier on the same CPU as the device (a real one has a GPU to itself), so a
# round, the first above all (the Open's prefill on both cloud models), can take longer than the
# client's 30 s default: the last demo run lost round 1 to it and resumed. `--round-timeout` still wins.
DEMO_ROUND_TIMEOUT = 120.0

__all__ = ["run_demo_over_tls", "verifier_process"]


@contextmanager
def verifier_process(
    args: argparse.Namespace, pki_dir: Path, transcript_dir: Path | None = None, extra: Sequence[str] = ()
) -> Iterator[Callable[[], int]]:
    """Start `server serve` on 127.0.0.1 (a free port) with the PKI in `pki_dir`; stop it on exit.

    Yields a function that waits until the verifier serves and returns its port, so the caller
    can load its own model meanwhile.
    """
    port_file = pki_dir.parent / "port"
    log_path = pki_dir.parent / "server.log"
    cmd = [sys.executable, "-m", "specsteer.server.cli", "serve", "--tls-dir", str(pki_dir), "--host", "127.0.0.1"]
    cmd += ["--port", "0", "--port-file", str(port_file), "--seed", str(args.seed or 0)]
    cmd += ["--generalist", args.generalist, "--specialist", args.specialist]
    if transcript_dir is not None:
        cmd += ["--transcript-dir", str(transcript_dir)]
    cmd += list(extra)
    if args.cache_dir is not None:
        cmd += ["--cache-dir", str(args.cache_dir)]
    env = {**os.environ, "GRPC_VERBOSITY": os.environ.get("GRPC_VERBOSITY", "ERROR")}
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(cmd, stdout=log_file, stderr=log_file, env=env, stdin=subprocess.DEVNULL)

    def ready() -> int:
        # The first run converts the embedded models (minutes); later runs load them in seconds.
        deadline = time.monotonic() + 1800
        while not port_file.exists():
            if proc.poll() is not None:
                lines = log_path.read_text(errors="replace").strip().splitlines() or ["(no output)"]
                raise ConfigError(f"the demo verifier did not start: {lines[-1]}")
            if time.monotonic() > deadline:
                raise ConfigError("the demo verifier did not start within 30 minutes")
            time.sleep(0.2)
        return int(port_file.read_text())

    try:
        yield ready
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def run_demo_over_tls(
    args: argparse.Namespace, prompt: str, profile: Profile, baselines: Sequence[Method] = ()
) -> tuple[Generation, dict[Method, Generation]]:
    """Throwaway PKI, `server serve` on loopback, the demo user's generation over mutual TLS with
    an audit log of everything that crossed, stop the verifier, then `audit verify` that log.

    `baselines` run on the same connection (a cloud method) or on the device alone, after the main
    generation, and are logged and verified like it. Returns the main result and each baseline's."""
    if not session_params(args).method.uses_cloud:
        return run(args, prompt, profile), {m: run_as(args, m, prompt, profile) for m in baselines}
    check_options(args, prompt, remote=True)
    audit_dir = args.audit_dir or default_cache_dir() / "demo-audit" / time.strftime("%Y%m%d-%H%M%S")
    if audit_dir.exists() and any(audit_dir.iterdir()):
        raise ConfigError(f"the demo's audit folder {audit_dir} is not empty; pick another with --audit-dir")
    audit_dir.mkdir(parents=True, exist_ok=True)
    try:
        private, public = write_key_pair("demo-device", audit_dir)
        # The verifier is also the log's witness: it cosigns each Close's checkpoint (docs/audit-format.md §8).
        witness_private, witness_public = write_witness_key_pair("demo-verifier/witness", audit_dir / "witness")
    except (AuditError, OSError) as exc:
        raise ConfigError(f"cannot create the demo's audit log key in {audit_dir}: {exc}") from None
    print(f"signing key  {private} (keep it on the device)\nverifier key {public} (give it to auditors)")
    log_dir, transcript_dir = audit_dir / "log", audit_dir / "server-transcript"
    with tempfile.TemporaryDirectory(prefix="specsteer-demo-") as tmp:
        pki = init_pki(Path(tmp) / "pki")
        issue_device(pki.directory, "demo-user")
        log(args, f"throwaway PKI in {pki.directory}; starting the verifier (server serve) on 127.0.0.1")
        witness = ["--witness-key", str(witness_private)]
        with verifier_process(args, pki.directory, transcript_dir, witness) as ready:
            # The device's Specialist (the default's bundle from the cache) while the verifier loads its models.
            specialist = load_specialist(
                args.specialist,
                profile,
                drafter=args.drafter,
                precision=args.drafter_precision,
                context_entries=args.context_entries,
                cache_dir=args.cache_dir,
            )
            port = ready()
            log(args, f"verifier up on 127.0.0.1:{port}: mutual TLS, pinned anchors, device cert 'demo-user'")
            round_timeout = DEMO_ROUND_TIMEOUT if args.round_timeout is None else args.round_timeout
            timeouts = {"round_timeout": round_timeout, "connect_timeout": args.connect_timeout}
            config = ClientConfig(
                server=f"127.0.0.1:{port}",
                pins=pki.pins,
                cert=pki.device_cert("demo-user"),
                key=pki.device_key("demo-user"),
                fallback=not args.no_fallback,
                guard=args.guard or "placeholder",
                audit_log=log_dir,
                audit_key=private,
                witness_key=witness_public,
                **{k: v for k, v in timeouts.items() if v is not None},
            )
            with SpecSteerClient.connect(specialist, config) as client:  # the client keeps the audit log
                result = run_remote(args, prompt, client)
                others = {m: run_remote(with_method(args, m), prompt, client) for m in baselines}
        log(args, "verifier stopped")
    log(args, f"audit log in {log_dir}; verifying it as an auditor would:")
    # `audit verify LOG --key PUB --server-transcript FILE --device demo-user --witness-key W.pub
    # --witness-state FILE`: every check, against the keys the auditor holds, for the device it audits.
    report = inspect(
        log_dir, key=load_verifier_key(public), server_transcript=transcript_dir / "server-transcript.jsonl",
        witness_keys=[load_witness_key(witness_public)], witness_state=witness_private.parent / "witness-state.json",
        device="demo-user",
    )  # fmt: skip
    # With --json, stdout carries only the result object; the auditor's report goes to stderr.
    (sys.stderr if args.json else sys.stdout).write(report.render())
    if not report.ok:
        failed = ", ".join(c.name for c in report.checks if not c.ok)
        raise ConfigError(f"audit verify failed on the demo's own log {log_dir} ({failed}); see the report above")
    return result, others


def with_method(args: argparse.Namespace, method: Method) -> argparse.Namespace:
    """The same options for another method (as `sdk generate --method` would take them); a method
    that drafts nothing (or has no alpha) takes its own K (and alpha), not the run's."""
    own: dict[str, object] = {"method": method.value}
    if method in (Method.FUSION, Method.LLM):
        own["draft_len"] = None
    if method is Method.LLM:
        own["alpha"] = None
    return argparse.Namespace(**{**vars(args), **own})


def run_as(args: argparse.Namespace, method: Method, prompt: str, profile: Profile) -> Generation:
    return run(with_method(args, method), prompt, profile)
