"""`audit`: check a device's egress log, for compliance auditors.

    audit verify LOG [--key PUBKEY] [--checkpoint PREVIOUS] [--server-transcript FILE|DIR ...] [--device NAME]
                     [--witness-key WITNESS.pub ...] [--witness-state FILE] [--json]
    audit show LOG [--json]                         the sessions in a log, one line each
    audit prove-inclusion LOG --index N [--size N] [--key PUBKEY] [--json]   (or LOG N)
    audit export LOG --out DIR [--key PUBKEY] [--checkpoint PREVIOUS] [--server-transcript FILE|DIR]
    audit keygen --name NAME --out DIR              a device log key pair (NAME.key, NAME.pub)
    audit rotate-key LOG --key OLD.key --new-key NEW.key   hand the log to a new key (same name)
    audit witness keygen --name NAME --out DIR      a witness key pair (NAME.witness.key, .witness.pub)
    audit witness serve --key K --state DB --logs FILE --listen HOST:PORT --tls-cert C --tls-key K
                                                    a C2SP tlog-witness over HTTPS, anyone can run
    audit monitor DIR --state DB [--logs FILE] [--witness-policy FILE] [--witness-key W.pub ...]
                      [--witness-state FILE ...] [--once] [--interval S] [--json]
                                                    follow published checkpoints: split views, rollbacks, quorum

Exit status: 0 when everything holds, 1 when a check fails or an input is unusable (one sentence on
stderr), 2 for a usage error, 3 when every check passes but no `--key` was given (verdict UNPROVEN:
the log was checked against the key it declares itself, so its authenticity is not proven).
`verify` exits 0 (VERIFIED) only if every check passes against the key the auditor holds.
With `--json`, an input that cannot be used still prints one JSON object: `"ok": false` and the
sentence as `"error"` (`verify` adds `"verdict": "ERROR"`). A reader that closes stdout early
(`audit show LOG | head -1`) ends the command quietly with 141 (128 + SIGPIPE), as a shell reports it.
`monitor --once` exits 0 when every followed log is consistent and 1 with one sentence per alarm;
without `--once` it checks every `--interval` seconds until SIGTERM or SIGINT, and exits 0.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import logging
import shutil
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from specsteer.audit import merkle, records
from specsteer.audit.cosignature import load_witness_key, load_witness_signer, write_witness_key_pair
from specsteer.audit.errors import AuditError, LogHandedOver, VerificationFailed
from specsteer.audit.files import read_regular
from specsteer.audit.log import CHECKPOINTS_FILE, SEGMENTS_DIR, TORN_DIR, AuditLog, scan_log, verifier_of
from specsteer.audit.note import (
    MAX_NOTE_BYTES,
    Checkpoint,
    NoteError,
    VerifierKey,
    load_signing_key,
    load_verifier_key,
    open_checkpoint,
    write_key_pair,
)
from specsteer.audit.policy import load_policy
from specsteer.audit.verify import UNPROVEN, Report, inspect, latest_checkpoint, verify
from specsteer.core.cli import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNPROVEN,
    add_quiet,
    command_parser,
    number,
    stdout_closed,
    whole_number,
)
from specsteer.core.cli import Parser as _Parser
from specsteer.core.errors import SpecSteerError
from specsteer.core.logs import configure_cli_logging

logger = logging.getLogger("specsteer.audit.cli")

# A reader that closed the pipe (`audit show LOG | head -1`): 128 + SIGPIPE, as a shell reports a
# command SIGPIPE ended. Never 1, which says a check failed.
# `verify --json`'s verdict when the log could not be checked at all (exit 1, with "error").
ERROR = "ERROR"


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("audit", "check a SpecSteer device's tamper-evident egress log")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def evidence_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--key", type=Path, metavar="PUBKEY", help="the device log's verifier key file you hold")
        p.add_argument("--checkpoint", type=Path, metavar="PREVIOUS", help="a checkpoint of this log you kept before")
        p.add_argument(
            "--server-transcript",
            type=Path,
            metavar="FILE|DIR",
            action="append",
            help="the verifier's transcript of what each device sent (its witness); repeat for several replicas, "
            "or give the fleet's transcript folder (the report names the replicas it compared)",
        )
        p.add_argument(
            "--device",
            metavar="NAME",
            help="whose log this is: the common name of the device's certificate, as you know it (with "
            "--server-transcript; the witness state names it where it pinned this log's key)",
        )
        p.add_argument(
            "--witness-key",
            type=Path,
            metavar="WITNESS.pub",
            action="append",
            default=[],
            help="a witness's public key: it must have cosigned this log, every cosignature must verify and "
            "match the records (repeatable)",
        )
        p.add_argument(
            "--witness-state",
            type=Path,
            metavar="FILE",
            help="the witness's own record of what it cosigned (its witness-state.json): catches deleted cosignatures",
        )
        p.add_argument(
            "--witness-policy",
            type=Path,
            metavar="FILE",
            help="a witness policy (TOML: witnesses and a quorum k of n): a checkpoint vouches for records only "
            "when k of its witnesses cosigned it; sessions beyond that are UNPROVEN",
        )

    v = sub.add_parser("verify", help="check signatures, history, every uplink and downlink, and session order")
    v.add_argument("log", type=Path, metavar="LOG", help="the audit log directory")
    evidence_options(v)
    v.add_argument("--json", action="store_true", help="print the report as one JSON object")

    s = sub.add_parser("show", help="list the sessions in a log")
    s.add_argument("log", type=Path, metavar="LOG", help="the audit log directory")
    s.add_argument("--json", action="store_true", help="print the sessions as one JSON object")

    pi = sub.add_parser("prove-inclusion", help="an RFC 9162 inclusion proof of one record under a signed checkpoint")
    pi.add_argument("log", type=Path, metavar="LOG", help="the audit log directory")
    pi.add_argument("--index", type=whole_number(0), metavar="N", help="the record's index (0 is the first)")
    # The index was once positional; `LOG N` still works (with N right after LOG: argparse fills an
    # optional positional at its first chance).
    pi.add_argument(
        "index_word", nargs="?", type=whole_number(0), metavar="N", help="the same, without --index, right after LOG"
    )
    pi.add_argument("--size", type=whole_number(0), help="the checkpoint's tree size (default: the latest checkpoint)")
    pi.add_argument("--key", type=Path, metavar="PUBKEY", help="the device log's verifier key file you hold")
    pi.add_argument("--json", action="store_true", help="print the proof as one JSON object")

    e = sub.add_parser("export", help="write an evidence bundle: log, checkpoints, public key, report")
    e.add_argument("log", type=Path, metavar="LOG", help="the audit log directory")
    e.add_argument("--out", type=Path, required=True, help="a new (or empty) directory for the bundle")
    evidence_options(e)

    k = sub.add_parser("keygen", help="create a device log key pair")
    k.add_argument("--name", required=True, help="the key name, also the log's origin (no spaces or '+')")
    k.add_argument("--out", type=Path, required=True, help="directory for NAME.key (private) and NAME.pub")

    r = sub.add_parser("rotate-key", help="hand a log to a new key: a handover record signed by the key in force")
    r.add_argument("log", type=Path, metavar="LOG", help="the audit log directory (not in use by a device)")
    r.add_argument("--key", type=Path, required=True, help="the log's signing key in force (NAME.key)")
    r.add_argument("--new-key", type=Path, required=True, help="the new signing key, of the same name (audit keygen)")

    w = sub.add_parser("witness", help="run a witness of device logs (C2SP tlog-witness over HTTPS)")
    wsub = w.add_subparsers(dest="witness_command", required=True, parser_class=_Parser)
    wk = wsub.add_parser("keygen", help="create a witness key pair")
    wk.add_argument("--name", required=True, help="the witness's name, e.g. witness.example/w1 (no spaces or '+')")
    wk.add_argument("--out", type=Path, required=True, help="directory for NAME.witness.key and NAME.witness.pub")
    ws = wsub.add_parser("serve", help="serve add-checkpoint over HTTPS until interrupted")
    ws.add_argument("--key", type=Path, required=True, help="the witness's signing key (NAME.witness.key, mode 0600)")
    ws.add_argument("--state", type=Path, required=True, help="its SQLite database (created if missing)")
    ws.add_argument(
        "--logs",
        type=Path,
        required=True,
        help="the logs it witnesses: one verifier key (.pub line) each, re-read on change",
    )
    ws.add_argument("--listen", required=True, metavar="HOST:PORT", help="where to listen (port 0: any free port)")
    ws.add_argument("--tls-cert", type=Path, required=True, help="its HTTPS certificate chain (PEM)")
    ws.add_argument("--tls-key", type=Path, required=True, help="its HTTPS private key (PEM)")
    ws.add_argument("--prefix", default="", help="the submission prefix's path (default: none)")

    m = sub.add_parser("monitor", help="follow published checkpoints and witness states; raise split views, rollbacks")
    m.add_argument("published", type=Path, metavar="DIR", help="one subfolder per device log (`audit export` bundles)")
    m.add_argument("--state", type=Path, required=True, help="the monitor's own SQLite database (created if missing)")
    m.add_argument("--logs", type=Path, help="follow only these logs: one verifier key (.pub line) each")
    m.add_argument(
        "--witness-policy",
        type=Path,
        metavar="FILE",
        help="raise a missing quorum (k of n) on each log's latest checkpoint",
    )
    m.add_argument(
        "--witness-key",
        type=Path,
        metavar="W.pub",
        action="append",
        default=[],
        help="a witness key to count (repeatable)",
    )
    m.add_argument(
        "--witness-state",
        type=Path,
        metavar="FILE",
        action="append",
        default=[],
        help="a witness's state: its SQLite database (audit witness serve) or witness-state.json (repeatable)",
    )
    m.add_argument("--once", action="store_true", help="one pass, then exit (0 consistent, 1 an alarm)")
    m.add_argument(
        "--interval", type=number(positive=True), default=60.0, metavar="S", help="seconds between passes (60)"
    )
    m.add_argument("--json", action="store_true", help="print each pass as one JSON object")
    for command in (v, s, pi, e, k, r, wk, ws, m):
        # The hint after an unproven verdict is a note: the exit code (3) and the report say it too.
        add_quiet(command, "notes (the hint after an unproven verdict)")
    return parser


def _read_text(path: Path, what: str) -> str:
    data = read_regular(path, what, MAX_NOTE_BYTES)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AuditError(f"cannot read {what} {path}: {exc}") from None


def _key(path: Path | None) -> VerifierKey | None:
    return None if path is None else load_verifier_key(path)


def _run_checks(args: argparse.Namespace) -> tuple[Report, bool]:
    kwargs = {
        "key": _key(args.key),
        "previous_checkpoint": None if args.checkpoint is None else _read_text(args.checkpoint, "checkpoint"),
        "server_transcript": args.server_transcript,
        "witness_keys": [load_witness_key(path) for path in args.witness_key],
        "witness_policy": None if args.witness_policy is None else load_policy(args.witness_policy),
        "witness_state": args.witness_state,
        "device": args.device,
    }
    try:
        return verify(args.log, **kwargs), True
    except VerificationFailed as exc:
        return exc.report, False


def _cmd_verify(args: argparse.Namespace) -> int:
    report, ok = _run_checks(args)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        sys.stdout.write(report.render())
    if not ok:
        failed = ", ".join(c.name for c in report.checks if not c.ok)
        print(f"audit: verification failed ({failed}); see the report above", file=sys.stderr)
        return EXIT_FAILED
    if report.verdict == UNPROVEN:
        logger.info("every check passed but authenticity is unproven: give --key PUBKEY")
        return EXIT_UNPROVEN
    return EXIT_OK


def _cmd_show(args: argparse.Namespace) -> int:
    report = inspect(args.log)
    if args.json:
        print(
            json.dumps(
                {"log": report.log, "records": report.records, "sessions": [s.as_dict() for s in report.sessions]},
                indent=2,
            )
        )
        return EXIT_OK
    print(f"audit log {report.log}: {report.records} records, {len(report.sessions)} session(s)")
    for s in report.sessions:
        print(
            f"  session {s.session_id}  records {s.first_record}-{s.last_record}  vocab {s.vocab_size}  k {s.k}  "
            f"rounds {s.rounds}  up {s.uplinks} msg / {s.uplink_bytes} B  down {s.downlinks} msg / "
            f"{s.downlink_bytes} B  ended: {s.ended}"
        )
    if not report.ok:
        print("  (this log does not verify; run `audit verify` for the details)")
    return EXIT_OK


def _cmd_prove_inclusion(args: argparse.Namespace) -> int:
    scan = scan_log(args.log)
    key = _key(args.key) or verifier_of(args.log)
    leaves = [r.leaf for r in scan.records]
    checkpoints = []
    for stored in scan.checkpoints:
        try:
            checkpoints.append(open_checkpoint(stored.note, key))
        except NoteError:
            continue  # `audit verify` reports bad checkpoints; a proof needs one good one
    # Roots at every checkpoint's size in one pass: a log signed at every session end has many.
    sizes = {cp.size for cp in checkpoints if cp.size <= len(leaves)}
    roots: dict[int, bytes] = {0: merkle.EMPTY_ROOT}
    acc = merkle.Accumulator()
    for i, leaf in enumerate(leaves, start=1):
        acc.append(leaf)
        if i in sizes:
            roots[i] = acc.root()
    usable = [cp for cp in checkpoints if roots.get(cp.size) == cp.root]
    if args.size is not None:
        usable = [cp for cp in usable if cp.size == args.size]
        if not usable:
            raise AuditError(f"no valid signed checkpoint of size {args.size} matches this log")
    usable = [cp for cp in usable if cp.size > args.index]
    if not usable:
        raise AuditError(f"no valid signed checkpoint covers record {args.index}")
    cp = max(usable, key=lambda c: c.size)
    proof = merkle.inclusion_proof(args.index, leaves[: cp.size])
    merkle.verify_inclusion(args.index, cp.size, leaves[args.index], proof, cp.root)
    note = next(s.note for s in scan.checkpoints if _opens_to(s.note, key, cp))
    try:
        rec = records.parse(scan.records[args.index].data).describe()
    except records.RecordError as exc:
        rec = f"record {args.index} (unreadable: {exc})"
    out = {
        "index": args.index,
        "record": rec,
        "leaf_hash": base64.b64encode(leaves[args.index]).decode(),
        "tree_size": cp.size,
        "root": base64.b64encode(cp.root).decode(),
        "proof": [base64.b64encode(h).decode() for h in proof],
        "checkpoint": note,
        # Without the auditor's key the checkpoint was opened with the key the log names itself,
        # which anyone who rewrote the log could have put there: the proof then says nothing of who.
        "key_pinned": args.key is not None,
    }
    # The same rule as `audit verify`: no key of the auditor's, no pass (exit 3).
    code = EXIT_OK if args.key is not None else EXIT_UNPROVEN
    unproven = (
        "the proof holds against the key the log names itself, so it is unproven who signed it: give --key PUBKEY"
    )
    if args.json:
        print(json.dumps(out, indent=2))
        if code != EXIT_OK:
            logger.info("%s", unproven)
        return code
    print(f"{rec} is included in the log's signed tree of size {cp.size} (proof verified, RFC 9162 §2.1.3)")
    print(f"leaf hash  {out['leaf_hash']}")
    print(f"root hash  {out['root']}")
    for i, h in enumerate(out["proof"]):
        print(f"proof[{i}]   {h}")
    print("checkpoint:")
    sys.stdout.write(note)
    if code != EXIT_OK:
        logger.info("%s", unproven)
    return code


def _opens_to(note: str, key: VerifierKey, cp: Checkpoint) -> bool:
    try:
        return open_checkpoint(note, key) == cp
    except NoteError:
        return False


def _cmd_export(args: argparse.Namespace) -> int:
    out: Path = args.out
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise AuditError(f"{out} exists and is not an empty directory; the bundle needs a fresh one")
    scan = scan_log(args.log)  # refuses early if LOG is not a log
    report, ok = _run_checks(args)
    out.mkdir(parents=True, exist_ok=True)
    log_out = out / "log"
    shutil.copytree(args.log / SEGMENTS_DIR, log_out / SEGMENTS_DIR)
    for extra in (CHECKPOINTS_FILE, TORN_DIR):
        src = args.log / extra
        if src.is_dir():
            shutil.copytree(src, log_out / extra)
        elif src.exists():
            shutil.copy2(src, log_out / extra)
    cp_dir = out / "checkpoints"
    cp_dir.mkdir()
    for stored in scan.checkpoints:
        (cp_dir / f"{stored.number:06d}.note").write_text(stored.note, encoding="utf-8")
    key = _key(args.key) or verifier_of(args.log)
    # The largest valid checkpoint that matches the records, not the file's last line (anyone can
    # append an old one): the auditor passes it as --checkpoint next time.
    latest = latest_checkpoint(scan, key)
    if latest is not None:
        (out / "latest.note").write_text(latest, encoding="utf-8")
    (out / "device.pub").write_text(f"{key}\n", encoding="utf-8")
    (out / "report.txt").write_text(report.render(), encoding="utf-8")
    (out / "report.json").write_text(json.dumps(report.as_dict(), indent=2) + "\n", encoding="utf-8")
    manifest = []
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        manifest.append(f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path.relative_to(out)}")
    (out / "MANIFEST.sha256").write_text("\n".join(manifest) + "\n", encoding="utf-8")
    if not ok:
        print(f"audit: bundle written to {out}, but the log does not verify (see report.txt)", file=sys.stderr)
        return EXIT_FAILED
    if report.verdict == UNPROVEN:
        logger.info("bundle written to %s; its authenticity is unproven without --key", out)
        return EXIT_UNPROVEN
    print(f"evidence bundle written to {out}: the log verifies ({report.records} records)")
    return EXIT_OK


def _cmd_keygen(args: argparse.Namespace) -> int:
    private, public = write_key_pair(args.name, args.out)
    print(f"signing key  {private} (keep it on the device)\nverifier key {public} (give it to auditors)")
    return EXIT_OK


def _cmd_rotate_key(args: argparse.Namespace) -> int:
    old, new = load_signing_key(args.key), load_signing_key(args.new_key)
    try:
        with AuditLog.open(args.log, old) as log:
            position = log.rotate_key(new)
    except LogHandedOver as exc:
        if str(exc.new_key) != str(new.verifier):
            raise
        position = exc.position  # run again after a crash: the handover to this key stands (and is complete)
    print(f"record {position}: the log is handed over to {new.verifier}; sign with {args.new_key} from now on")
    return EXIT_OK


def _cmd_witness(args: argparse.Namespace) -> int:
    if args.witness_command == "keygen":
        private, public = write_witness_key_pair(args.name, args.out)
        print(f"signing key  {private} (keep it with the witness)\nwitness key  {public} (for witness policies)")
        return EXIT_OK
    from specsteer.audit.witness_service import KnownLogs, TlogWitness, serve

    host, sep, port = args.listen.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise AuditError(f"--listen {args.listen!r} is not HOST:PORT")
    witness = TlogWitness(load_witness_signer(args.key), args.state, KnownLogs(args.logs))
    server = serve(witness, host.strip("[]") or "127.0.0.1", int(port), args.tls_cert, args.tls_key, prefix=args.prefix)
    bound_host, bound_port = server.server_address[:2]
    where = f"https://{bound_host!s}:{bound_port}{args.prefix}"
    print(f"witness {witness.signer.key} listening on {where}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        witness.close()
    return EXIT_OK


def _cmd_monitor(args: argparse.Namespace) -> int:
    from specsteer.audit.monitor import Monitor, dumps, render
    from specsteer.audit.witness_service import KnownLogs

    known = KnownLogs(args.logs) if args.logs is not None else None
    policy = None if args.witness_policy is None else load_policy(args.witness_policy)
    keys = [load_witness_key(path) for path in args.witness_key]
    monitor = Monitor(args.state, witness_keys=keys, policy=policy, known_logs=known.get if known else None)
    stop = threading.Event()
    try:
        if args.once:
            result = monitor.check(args.published, args.witness_state)
            sys.stdout.write(dumps(result) + "\n" if args.json else render(result))
            if result.alarms:
                print(f"audit: {len(result.alarms)} alarm(s); see above", file=sys.stderr)
                return EXIT_FAILED
            return EXIT_OK
        # As a service: SIGTERM (or Ctrl-C) ends the wait between passes, never a pass half-kept.
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        while not stop.is_set():
            try:
                result = monitor.check(args.published, args.witness_state)
            except SpecSteerError as exc:
                logger.error("monitor: this pass could not run: %s", exc)  # the next one may
            else:
                sys.stdout.write(dumps(result) + "\n" if args.json else render(result))
                sys.stdout.flush()
            stop.wait(args.interval)
        return EXIT_OK
    finally:
        monitor.close()


def _record_index(parser: argparse.ArgumentParser, option: int | None, word: int | None) -> int:
    """The record `prove-inclusion` proves: `--index N`, or the bare `N` older scripts pass."""
    if option is not None:
        if word is not None and word != option:
            parser.error(f"prove-inclusion got two record indexes: --index {option} and {word}")
        return option
    if word is None:
        parser.error("prove-inclusion needs the record's index: --index N")
    return word


COMMANDS = {
    "verify": _cmd_verify,
    "show": _cmd_show,
    "prove-inclusion": _cmd_prove_inclusion,
    "export": _cmd_export,
    "keygen": _cmd_keygen,
    "rotate-key": _cmd_rotate_key,
    "witness": _cmd_witness,
    "monitor": _cmd_monitor,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_cli_logging("audit", quiet=args.quiet)
    if args.command == "prove-inclusion":
        args.index = _record_index(parser, args.index, args.index_word)
    try:
        code = COMMANDS[args.command](args)
        sys.stdout.flush()  # a reader gone away (`audit show LOG | head -1`) shows here, not at exit
        return code
    except BrokenPipeError:
        # Before OSError, which it is: a closed stdout is no failed check, and no input it could not use.
        return stdout_closed()
    except SpecSteerError as exc:
        return _error(args, str(exc))
    except OSError as exc:
        where = f" {exc.filename}" if exc.filename else ""
        return _error(args, f"cannot use{where}: {exc.strerror or exc}")


def _error(args: argparse.Namespace, message: str) -> int:
    """Exit 1 with `message` as one sentence on stderr; with `--json`, also as one JSON object on stdout,
    so a script that parses the output gets an answer rather than nothing."""
    if getattr(args, "json", False):
        answer: dict[str, object] = {"ok": False, "error": message}
        if args.command == "verify":
            answer = {"log": str(args.log), "verdict": ERROR, **answer}
        try:
            print(json.dumps(answer, indent=2), flush=True)
        except BrokenPipeError:
            stdout_closed()
    print(f"audit: {message}", file=sys.stderr)
    return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
