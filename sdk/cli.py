"""`sdk`: run SpecSteer and its baselines from the command line.

    sdk generate --prompt TEXT [--profile FILE] [--method specsteer] [--json] ...
    sdk generate --prompt TEXT --server HOST:PORT --pins FILE --cert FILE --key FILE ...
    sdk generate --prompt TEXT --client-config FILE      # the same, from a TOML [verifier] table
    sdk demo [--in-process]       # a personalized generation for the shipped demo user

With `--server` (or a client config) the cloud verifier is remote, over mutual TLS with pinned
anchors; only the Specialist is loaded here. Without it, the verifier runs in this process
(through the wire format). `sdk demo` makes a throwaway PKI, starts `server serve` on loopback,
generates over TLS, prints the text and stats, and stops the server; `--in-process` skips all that.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from core.errors import ConfigError, SpecSteerError
from core.models import DEFAULT_GENERALIST, DEFAULT_SPECIALIST, CausalLM, default_cache_dir, load_causal_lm
from core.prompts import task_prompt
from core.session_types import WIRE_MAX_TOP_K, CandidatePolicy, Method, SessionParams
from sdk.client import ClientConfig, SpecSteerClient
from sdk.context import Profile
from sdk.device import DecodeOptions, Generation, Specialist, generate
from sdk.egress import EgressTap, RecorderTap
from sdk.transport import InProcessVerifier
from sdk.uplink_guard import GUARD_SETTINGS, guard_setting

EXIT_ERROR = 1
EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if math.isnan(value):
        raise argparse.ArgumentTypeError("NaN is not allowed")
    return value


def _add_decoding_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--method", default="specsteer", choices=[m.value for m in Method], help="decoding method")
    p.add_argument("--gamma", type=_float, default=0.5, help="acceptance threshold (0 = accept all, inf = none)")
    p.add_argument("--alpha", type=_float, default=1.0, help="steering strength")
    p.add_argument("--top-k", type=int, default=10, help="steering candidates per recovery")
    p.add_argument("--draft-len", type=int, default=4, help="K, tokens drafted per round")
    p.add_argument("--policy", default="guardrail", choices=[c.value for c in CandidatePolicy])
    p.add_argument("--no-bonus", action="store_true", help="no steered token after a fully accepted draft")
    p.add_argument("--sampling", action="store_true", help="sample instead of greedy decoding")
    p.add_argument(
        "--padded-frames", action="store_true", help="constant-size uplink rounds (hide how many tokens each carries)"
    )
    p.add_argument("--temperature", type=_float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--specialist", default=DEFAULT_SPECIALIST, help="folder, .gguf file or embedded name")
    p.add_argument("--generalist", default=DEFAULT_GENERALIST, help="folder, .gguf file or embedded name")
    p.add_argument("--cache-dir", type=Path, default=None, help="where converted models are kept")
    p.add_argument(
        "--quantize", choices=["fp32", "int8"], default="fp32", help="models' Linear layers (int8: dynamic, AVX2)"
    )
    p.add_argument("--context-entries", type=int, default=3, help="profile entries retrieved as context")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--guard",
        choices=GUARD_SETTINGS,
        default=None,
        help="egress guard for sensitive spans in the uplink (default placeholder; see docs/privacy.md)",
    )


def _add_fault_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--no-fallback", action="store_true", help="fail instead of finishing locally if the verifier is lost"
    )
    p.add_argument("--round-timeout", type=_float, default=None, help="seconds to wait for each verdict (default 30)")
    p.add_argument("--connect-timeout", type=_float, default=None, help="seconds to connect (default 10)")


def _add_remote_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--server", metavar="HOST:PORT", help="the remote verifier (mutual TLS)")
    p.add_argument("--pins", type=Path, help="pin set: sha256/<base64 SPKI> lines and the anchor certificates")
    p.add_argument("--anchors", type=Path, help="anchor certificates, if not in the pins file")
    p.add_argument("--cert", type=Path, help="this device's client certificate (PEM)")
    p.add_argument("--key", type=Path, help="this device's private key (PEM)")
    p.add_argument("--server-name", help="verify the server certificate for this name instead of HOST")
    p.add_argument("--client-config", type=Path, help="TOML file with a [verifier] table (flags override it)")
    p.add_argument("--audit-log", type=Path, help="append every uplink and downlink to this tamper-evident log")
    p.add_argument("--audit-key", type=Path, help="the device's log signing key (`audit keygen` makes one)")
    _add_fault_options(p)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="sdk", description="SpecSteer on-device SDK")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    gen = sub.add_parser("generate", help="generate text for a prompt")
    gen.add_argument("--prompt", required=True, help="the public prompt (sent to the cloud as token IDs)")
    gen.add_argument("--profile", type=Path, help="the user's private history (JSON/JSONL; stays on the device)")
    gen.add_argument(
        "--federation-state",
        type=Path,
        help="this device's federation folder: use its newest global adapter (declared to the verifier) "
        "and its personal adapter",
    )
    _add_decoding_options(gen)
    _add_remote_options(gen)
    demo = sub.add_parser("demo", help="personalized generation for the demo user shipped with the SDK")
    demo.add_argument("--query", type=int, default=0, help="which of the demo user's queries (0-2)")
    demo.add_argument("--in-process", action="store_true", help="run the verifier in this process, no TLS")
    demo.add_argument(
        "--audit-dir",
        type=Path,
        help="where the demo keeps its audit log and key (default: a new folder under the cache directory)",
    )
    _add_decoding_options(demo)
    _add_fault_options(demo)
    demo.set_defaults(max_new_tokens=64)
    return parser


def session_params(args: argparse.Namespace) -> SessionParams:
    """Map CLI options to session parameters; fusion and llm decide every token in the cloud (K = 0)."""
    method = Method(args.method)
    return SessionParams(
        method=method,
        sampling=args.sampling,
        gamma=args.gamma,
        alpha=0.0 if method is Method.LLM else args.alpha,
        top_k=args.top_k,
        draft_len=0 if method in (Method.FUSION, Method.LLM) else args.draft_len,
        policy=CandidatePolicy(args.policy),
        bonus=not args.no_bonus,
        adapter_version=declared_adapter_version(args),
        padded_frames=args.padded_frames,
    )


def declared_adapter_version(args: argparse.Namespace) -> int:
    """The federated global adapter version this device holds (0: none, the base weights)."""
    state = getattr(args, "federation_state", None)
    if state is None:
        return 0
    from federation.store import AdapterStore

    return AdapterStore(Path(state) / "global").latest() or 0


@dataclass
class LocalRun:
    """Specialist and, when the method needs it, an in-process cloud verifier."""

    specialist: Specialist
    verifier: InProcessVerifier | None


def build_local(
    specialist_lm: CausalLM,
    generalist_lm: CausalLM | None,
    profile: Profile | None,
    seed: int,
    context_entries: int,
    federation_state: Path | None = None,
) -> LocalRun:
    device_lm = device_specialist(specialist_lm, federation_state)
    specialist = Specialist(device_lm, profile, context_entries=context_entries)
    if generalist_lm is None:
        return LocalRun(specialist, None)
    # Device code never imports the server; the in-process mode is the one place that joins them.
    from server.main import GlobalAdapters
    from server.session import CloudVerifier

    # The cloud's generic Specialist copy has the same base weights: in one process, share them
    # (and its global adapters: the device's copies of the federated versions).
    adapters = None if federation_state is None else GlobalAdapters(specialist_lm, Path(federation_state) / "global")
    cloud = CloudVerifier(generalist_lm, specialist_lm, seed=seed, global_adapters=adapters)
    return LocalRun(specialist, InProcessVerifier(cloud.open, vocab_size=specialist_lm.vocab_size))


def device_specialist(base: CausalLM, federation_state: Path | None) -> CausalLM:
    """The base Specialist, or with the device's federated global + personal adapters merged in."""
    if federation_state is None:
        return base
    from federation.store import load_device_specialist

    return load_device_specialist(base, federation_state)[0]


def client_config(args: argparse.Namespace) -> ClientConfig | None:
    """The remote verifier's settings from --client-config and flags, or None to run in-process."""
    flags = {
        "server": getattr(args, "server", None),
        "pins": getattr(args, "pins", None),
        "anchors": getattr(args, "anchors", None),
        "cert": getattr(args, "cert", None),
        "key": getattr(args, "key", None),
        "server_name": getattr(args, "server_name", None),
        "connect_timeout": args.connect_timeout,
        "round_timeout": args.round_timeout,
        "fallback": False if args.no_fallback else None,
        "guard": args.guard,
    }
    path = getattr(args, "client_config", None)
    if path is not None:
        return ClientConfig.from_file(path, **flags)
    if flags["server"] is None:
        named = [f"--{k.replace('_', '-')}" for k in ("pins", "anchors", "cert", "key", "server_name") if flags[k]]
        if named:
            raise ConfigError(f"{named[0]} is for a remote verifier: add --server HOST:PORT")
        return None
    missing = [f"--{k}" for k in ("pins", "cert", "key") if flags[k] is None]
    if missing:
        raise ConfigError(f"--server needs {', '.join(missing)} (mutual TLS with pinned anchors)")
    return ClientConfig(**{k: v for k, v in flags.items() if v is not None})


def _check(args: argparse.Namespace, prompt: str, *, remote: bool = False) -> tuple[SessionParams, DecodeOptions]:
    params = session_params(args)
    if remote and params.method.uses_cloud and params.top_k > WIRE_MAX_TOP_K:
        raise ConfigError(f"top-k must be at most {WIRE_MAX_TOP_K} with a remote verifier; got {params.top_k}")
    options = DecodeOptions(max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=args.seed)
    if args.context_entries < 0:
        raise ConfigError(f"context-entries must be 0 or more; got {args.context_entries}")
    if not prompt.strip():
        raise ConfigError("the prompt is empty")
    return params, options


def load_specialist(args: argparse.Namespace, profile: Profile | None) -> Specialist:
    _log(args, f"loading Specialist {args.specialist}")
    lm = load_causal_lm(args.specialist, cache_dir=args.cache_dir, quantize=getattr(args, "quantize", "fp32"))
    lm = device_specialist(lm, getattr(args, "federation_state", None))
    return Specialist(lm, profile, context_entries=args.context_entries)


def run_remote(
    args: argparse.Namespace, prompt: str, specialist: Specialist, config: ClientConfig, tap: EgressTap | None = None
) -> Generation:
    """Generate against a remote verifier: only the Specialist (and the private profile) live here."""
    params, options = _check(args, prompt)
    with SpecSteerClient.connect(specialist, config, tap=tap) as client:
        _log(args, f"generating with {params.method.value} against {config.server} (mutual TLS, pinned)")
        result = client.generate(prompt, params, options)
    if result.stats.fallback is not None:
        _log(args, f"{result.fallback_detail}; the Specialist finished the text on this device")
    return result


@contextmanager
def audit_tap(log_dir: Path | None, key_path: Path | None) -> Iterator[EgressTap | None]:
    """The egress tap that writes the device's audit log, if one is asked for."""
    if log_dir is None:
        if key_path is not None:
            raise ConfigError("--audit-key is for an audit log: add --audit-log DIR")
        yield None
        return
    if key_path is None:
        raise ConfigError("--audit-log needs --audit-key (create one with: audit keygen --name NAME --out DIR)")
    # Device code that writes the log; the auditor's side of audit/ is never needed here.
    from audit.egress import EgressRecorder
    from audit.errors import AuditError
    from audit.log import AuditLog
    from audit.note import load_signing_key

    try:
        with AuditLog.open(log_dir, load_signing_key(key_path)) as log:
            yield RecorderTap(EgressRecorder(log))
    except AuditError as exc:
        raise ConfigError(f"audit log {log_dir}: {exc}") from None


def run(args: argparse.Namespace, prompt: str, profile: Profile | None) -> Generation:
    config = client_config(args) if args.command == "generate" else None
    if config is not None:
        _check(args, prompt, remote=True)
        config.identity()  # a bad pin set or certificate fails now, before the model loads
        with audit_tap(args.audit_log, args.audit_key) as tap:
            return run_remote(args, prompt, load_specialist(args, profile), config, tap)
    if getattr(args, "audit_log", None) is not None:
        raise ConfigError("--audit-log records what crosses the network: add --server HOST:PORT")
    params, options = _check(args, prompt)
    _log(args, f"loading Specialist {args.specialist}")
    s_lm = load_causal_lm(args.specialist, cache_dir=args.cache_dir, quantize=getattr(args, "quantize", "fp32"))
    g_lm = None
    if params.method.uses_cloud:
        _log(args, f"loading Generalist {args.generalist}")
        g_lm = load_causal_lm(args.generalist, cache_dir=args.cache_dir, quantize=getattr(args, "quantize", "fp32"))
    local = build_local(s_lm, g_lm, profile, args.seed, args.context_entries, getattr(args, "federation_state", None))
    guard = guard_setting(profile, s_lm.tokenizer, args.guard or "placeholder")
    _log(args, f"generating with {params.method.value}")
    return generate(local.specialist, prompt, params, options, local.verifier, guard=guard)


def _log(args: argparse.Namespace, message: str) -> None:
    print(f"sdk: {message}", file=sys.stderr, flush=True)


def _print(args: argparse.Namespace, result: Generation, extra: dict[str, object]) -> None:
    if args.json:
        print(
            json.dumps(
                {**extra, "text": result.text, "token_ids": result.token_ids, "stats": result.stats.as_dict()},
                ensure_ascii=False,
            )
        )
        return
    print(result.text)
    print()
    for key, value in result.stats.as_dict().items():
        print(f"  {key}: {value}")


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
    cmd = [sys.executable, "-m", "server.cli", "serve", "--tls-dir", str(pki_dir), "--host", "127.0.0.1"]
    cmd += ["--port", "0", "--port-file", str(port_file), "--seed", str(args.seed)]
    cmd += ["--generalist", args.generalist, "--specialist", args.specialist]
    if transcript_dir is not None:
        cmd += ["--transcript-dir", str(transcript_dir)]
    cmd += list(extra)
    if args.cache_dir is not None:
        cmd += ["--cache-dir", str(args.cache_dir)]
    env = {**os.environ, "GRPC_VERBOSITY": os.environ.get("GRPC_VERBOSITY", "ERROR")}
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=log, env=env, stdin=subprocess.DEVNULL)

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


def run_demo_over_tls(args: argparse.Namespace, prompt: str, profile: Profile) -> Generation:
    """Throwaway PKI, `server serve` on loopback, the demo user's generation over mutual TLS with
    an audit log of everything that crossed, stop the verifier, then `audit verify` that log."""
    if not session_params(args).method.uses_cloud:
        return run(args, prompt, profile)
    _check(args, prompt, remote=True)
    # Only the demo makes certificates and log keys on the device side; shipped device code
    # never holds server code.
    from audit.cli import main as audit_cli
    from server.pki import init_pki, issue_device

    audit_dir = args.audit_dir or default_cache_dir() / "demo-audit" / time.strftime("%Y%m%d-%H%M%S")
    if audit_dir.exists() and any(audit_dir.iterdir()):
        raise ConfigError(f"the demo's audit folder {audit_dir} is not empty; pick another with --audit-dir")
    audit_dir.mkdir(parents=True, exist_ok=True)
    if audit_cli(["keygen", "--name", "demo-device", "--out", str(audit_dir)]) != 0:
        raise ConfigError(f"cannot create the demo's audit log key in {audit_dir}")
    log_dir, transcript_dir = audit_dir / "log", audit_dir / "server-transcript"
    with tempfile.TemporaryDirectory(prefix="specsteer-demo-") as tmp:
        pki = init_pki(Path(tmp) / "pki")
        issue_device(pki.directory, "demo-user")
        _log(args, f"throwaway PKI in {pki.directory}; starting the verifier (server serve) on 127.0.0.1")
        with verifier_process(args, pki.directory, transcript_dir) as ready:
            specialist = load_specialist(args, profile)  # while the verifier loads its models
            port = ready()
            _log(args, f"verifier up on 127.0.0.1:{port}: mutual TLS, pinned anchors, device cert 'demo-user'")
            timeouts = {"round_timeout": args.round_timeout, "connect_timeout": args.connect_timeout}
            config = ClientConfig(
                server=f"127.0.0.1:{port}",
                pins=pki.pins,
                cert=pki.device_cert("demo-user"),
                key=pki.device_key("demo-user"),
                fallback=not args.no_fallback,
                guard=args.guard or "placeholder",
                **{k: v for k, v in timeouts.items() if v is not None},
            )
            with audit_tap(log_dir, audit_dir / "demo-device.key") as tap:
                result = run_remote(args, prompt, specialist, config, tap)
        _log(args, "verifier stopped")
    _log(args, f"audit log in {log_dir}; verifying it as an auditor would:")
    verify_args = ["verify", str(log_dir), "--key", str(audit_dir / "demo-device.pub")]
    verify_args += ["--server-transcript", str(transcript_dir / "server-transcript.jsonl")]
    # With --json, stdout carries only the result object; the auditor's report goes to stderr.
    with contextlib.redirect_stdout(sys.stderr if args.json else sys.stdout):
        verified = audit_cli(verify_args)
    if verified != 0:
        raise ConfigError(f"audit verify failed on the demo's own log {log_dir}")
    return result


def demo_profile_path() -> Path:
    return Path(str(resources.files("sdk").joinpath("data/demo_profile.json")))


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "demo":
            profile = Profile.from_file(demo_profile_path())
            queries = json.loads(demo_profile_path().read_text(encoding="utf-8"))["queries"]
            if not 0 <= args.query < len(queries):
                raise ConfigError(f"the demo user has queries 0 to {len(queries) - 1}; got {args.query}")
            prompt = task_prompt(queries[args.query]["subject"])
            if not args.json:
                print(f"Prompt (public):\n{prompt}\n\nGenerated ({args.method}):")
            result = run(args, prompt, profile) if args.in_process else run_demo_over_tls(args, prompt, profile)
            _print(args, result, {"method": args.method, "prompt": prompt})
        else:
            profile = Profile.from_file(args.profile) if args.profile is not None else None
            result = run(args, args.prompt, profile)
            _print(args, result, {"method": args.method})
    except SpecSteerError as exc:
        print(f"sdk: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("sdk: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
