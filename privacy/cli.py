"""`privacy`: DP budgets, leakage measurement, and the encrypted profile vault.

    privacy budget [--state-dir D] [--device NAME|DIR] [--json]
    privacy leakage-report --data FILE --audit-log DIR [--server-transcript FILE] [--canaries FILE]
                           [--user ID] [--tokenizer MODEL] [--ngram N] [--json]
    privacy seal PROFILE --out VAULT [--force]  passphrase from $SPECSTEER_VAULT_PASSPHRASE or a prompt;
                                                an existing VAULT is refused unless --force

Exit status: 0 on success, 1 when an input is unusable (one sentence on stderr), 2 for usage errors.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import logging
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from specsteer.core.cli import EXIT_ERROR, EXIT_OK, add_quiet, command_parser, whole_number
from specsteer.core.cli import Parser as _Parser
from specsteer.core.errors import SpecSteerError
from specsteer.core.logs import configure_cli_logging

__all__ = ["budget_report", "main", "read_ledger"]

DEFAULT_STATE = Path.home() / ".specsteer" / "federation"
logger = logging.getLogger("specsteer.privacy.cli")

LEDGER_FILE = "ledger.json"  # privacy.accounting.LEDGER_FILE: the CLI imports nothing heavy at start


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("privacy", "DP budgets, uplink leakage measurement, encrypted profile vault")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    b = sub.add_parser("budget", help="the federation's ε ledger of each device")
    b.add_argument(
        "--state-dir",
        type=Path,
        default=DEFAULT_STATE,
        help=f"federation state, or one device's folder (default {DEFAULT_STATE})",
    )
    b.add_argument("--device", help="one device: its folder name under STATE/devices, or its folder")
    b.add_argument("--json", action="store_true", help="print one JSON object")

    r = sub.add_parser("leakage-report", help="what the uplink reveals, measured on what the cloud received")
    r.add_argument("--data", type=Path, required=True, help="the dataset JSONL the profiles came from (with trailers)")
    r.add_argument("--audit-log", type=Path, required=True, help="the device's audit log directory")
    r.add_argument("--server-transcript", type=Path, help="only count uplinks the server logged receiving")
    r.add_argument("--canaries", type=Path, help="the canary file of the planted canaries")
    r.add_argument("--user", help="the user whose history and identities to look for (default: every user)")
    r.add_argument(
        "--tokenizer", help="the Specialist (model folder, .gguf or name; default: the embedded default Specialist)"
    )
    r.add_argument("--ngram", type=whole_number(1), default=8, help="verbatim run length in tokens (default 8)")
    r.add_argument("--json", action="store_true", help="print the report as one JSON object")

    s = sub.add_parser("seal", help="encrypt a profile file into a vault (AES-256-GCM, scrypt passphrase)")
    s.add_argument("profile", type=Path, metavar="PROFILE", help="the plaintext profile (JSON/JSONL) to encrypt")
    s.add_argument("--out", type=Path, required=True, metavar="VAULT", help="the vault file to write (a new file)")
    s.add_argument("--force", action="store_true", help="replace VAULT if it exists (by default it is refused)")
    for command in (b, r, s):
        add_quiet(command, "notes (what seal wrote, the libraries' progress)")
    return parser


# --- budget ----------------------------------------------------------------------------------------


def read_ledger(path: Path) -> dict[str, Any]:
    """A device's ε ledger, parsed by `privacy.accounting` (the one parser); ε is recomputed when possible."""
    from specsteer.privacy.accounting import epsilon_of, read_ledger_file
    from specsteer.privacy.data import PrivacyError

    data = read_ledger_file(path)
    if data is None:
        raise PrivacyError(f"there is no privacy ledger at {path}")
    spent, recomputed = data.epsilon_stored, False
    # The ledger keeps the whole composition history so that ε can be recomputed, not trusted;
    # the accountant (Opacus) is an optional extra of the device install.
    with contextlib.suppress(ImportError):
        spent, recomputed = epsilon_of(data.history, data.delta, data.accountant), True
    when = data.rounds[-1].get("time") if data.rounds else None
    return {
        "ledger": str(path),
        "epsilon_spent": spent,
        "epsilon_stored": data.epsilon_stored,
        "recomputed": recomputed,
        "consistent": abs(spent - data.epsilon_stored) <= 1e-6 * max(1.0, data.epsilon_stored),
        "epsilon_budget": data.epsilon_budget,
        "epsilon_remaining": max(0.0, data.epsilon_budget - spent),
        "delta": data.delta,
        "accountant": data.accountant,
        "dp_rounds": len(data.rounds),
        "dp_steps": sum(s for _, _, s in data.history),
        "refusals": data.refusals,
        "last_round": datetime.fromtimestamp(when, UTC).isoformat() if isinstance(when, int | float) else None,
    }


def budget_report(state_dir: Path, device: str | None = None) -> list[dict[str, Any]]:
    """Ledgers of every device under `state_dir` (federation layout), or of one device."""
    from specsteer.privacy.data import PrivacyError

    root = state_dir.expanduser()
    if device is not None:
        candidates = [Path(device).expanduser(), root / "devices" / device, root / device]
        folder = next((c for c in candidates if (c / LEDGER_FILE).is_file()), None)
        if folder is None:
            raise PrivacyError(f"no device {device!r} with a privacy ledger under {root}")
        folders = [folder]
    elif (root / LEDGER_FILE).is_file():
        folders = [root]
    else:
        # `federation run --simulation` keeps devices under STATE/devices/<name>; a real SuperNode's
        # default is ~/.specsteer/federation/device-<user>, a direct subfolder.
        folders = sorted(
            p
            for parent in (root / "devices", root)
            if parent.is_dir()
            for p in parent.iterdir()
            if (p / LEDGER_FILE).is_file()
        )
        if not folders:
            raise PrivacyError(
                f"no device privacy ledgers under {root} (looked for devices/*/{LEDGER_FILE} and */{LEDGER_FILE})"
            )
    out = []
    for folder in folders:
        entry = read_ledger(folder / LEDGER_FILE)
        entry["device"] = folder.name
        out.append(entry)
    return out


def _print_budget(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        note = "" if r["consistent"] else f" (the ledger's stored total says {r['epsilon_stored']:.3f})"
        print(
            f"{r['device']}: ε {r['epsilon_spent']:.3f} of {r['epsilon_budget']:g} spent, "
            f"{r['epsilon_remaining']:.3f} left (δ={r['delta']:g}, {r['accountant']}), "
            f"{r['dp_rounds']} DP round(s), {r['refusals']} refusal(s){note}"
        )


# --- leakage report --------------------------------------------------------------------------------


def _load_tokenizer(spec: str | None) -> Any:
    path = Path(spec).expanduser() if spec is not None else None
    if path is not None and path.is_dir():
        from transformers import AutoTokenizer

        from specsteer.privacy.data import PrivacyError

        try:
            return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        except (OSError, ValueError) as exc:
            raise PrivacyError(f"cannot load a tokenizer from {path}: {str(exc).splitlines()[0]}") from None
    from specsteer.core.models import DEFAULT_SPECIALIST, load_causal_lm

    return load_causal_lm(spec or DEFAULT_SPECIALIST, progress=False).tokenizer


def _print_leakage(r: dict[str, Any]) -> None:
    print(f"{r['sessions']} session(s), {r['rounds']} round(s), {r['uplink_tokens']} device tokens uplinked")
    hits = ", ".join(f"{k} {v}" for k, v in r["identity_hits"].items()) or "none"
    print(f"identity hits (trailer names/emails): {hits}")
    pats = ", ".join(f"{k} {v}" for k, v in r["pattern_hits"].items()) or "none"
    print(f"personal-data patterns: {pats}")
    found = ", ".join(f"{k} {v}" for k, v in r["detector_hits"].items()) or "none"
    print(f"guard detectors (what the device's guard would stop): {found}")
    pieces = ", ".join(f"{k} {v}" for k, v in r["split_hits"].items()) or "none"
    print(f"secrets in pieces across rounds, rejected drafts and sessions: {pieces}")
    if r["prompt_hits"]:
        print("in the prompts (sent as they are): " + ", ".join(f"{k} {v}" for k, v in r["prompt_hits"].items()))
    if r["prompt_decisions"]:
        print("the device's prompt guard: " + ", ".join(f"{k} {v}" for k, v in r["prompt_decisions"].items()))
    if r["prompt_hits_unaccounted"]:
        unaccounted = ", ".join(f"{k} {v}" for k, v in r["prompt_hits_unaccounted"].items())
        print("in prompts the device recorded no allow for: " + unaccounted)
    v = r["verbatim_runs"]
    print(f"verbatim history runs of {v['n']}+ tokens: {v['runs']} ({v['tokens']} tokens)")
    for c in r["canaries"]:
        print(f"canary of {c['user_id']}: exposure {c['exposure']:.2f} of {c['max_exposure']:.2f} bits")
    rs = r["round_sizes"]
    # Sizes against the session they belong to say nothing with one session (0 bits whatever they are).
    bits = f"{rs['bits_about_session']:.3f}" if r["sessions"] > 1 else "n/a (one session)"
    print(f"round sizes: {rs['distinct']} distinct, bits about the session: {bits}")
    if r["guard_decisions"]:
        print("guard: " + ", ".join(f"{k} {n}" for k, n in r["guard_decisions"].items()))
    for p in r["problems"]:
        print(f"note: {p}")


# --- seal ------------------------------------------------------------------------------------------


def _passphrase() -> str:
    from specsteer.privacy.data import PrivacyError
    from specsteer.privacy.vault import ENV_PASSPHRASE

    value = os.environ.get(ENV_PASSPHRASE)
    if value:
        return value
    if not sys.stdin.isatty():
        raise PrivacyError(f"no passphrase: set {ENV_PASSPHRASE} or run in a terminal to be asked for one")
    first = getpass.getpass("vault passphrase: ")
    if first != getpass.getpass("again: "):
        raise PrivacyError("the two passphrases differ")
    return first


def _seal(profile: Path, out: Path, *, force: bool = False) -> int:
    from specsteer.privacy.data import PrivacyError
    from specsteer.privacy.profile_format import read_profile
    from specsteer.privacy.vault import PassphraseKeyProvider, ProfileVault, is_vault

    if is_vault(profile):  # a vault inside a vault: the device would open it to ciphertext, not a profile
        raise PrivacyError(f"{profile} is already a sealed vault")
    # Parse first: sealing a file the SDK cannot read would only fail later, on the device.
    parsed = read_profile(profile)
    if out.resolve() == profile.resolve():
        raise PrivacyError("the vault must not overwrite the profile it seals")
    if not force and (out.exists() or out.is_symlink()):  # before the passphrase prompt, not after it
        raise PrivacyError(f"{out} already exists; give --force to replace it")
    # Without --force the vault also refuses a VAULT that appears while the key is derived.
    ProfileVault.seal(profile.read_bytes(), out, PassphraseKeyProvider(_passphrase), replace=force)
    logger.info("sealed %d entries into %s; the plaintext %s is still there", len(parsed.entries), out, profile)
    return EXIT_OK


# --- entry point -----------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_cli_logging("privacy", quiet=args.quiet)
    try:
        if args.command == "budget":
            rows = budget_report(args.state_dir, args.device)
            if args.json:
                print(json.dumps({"devices": rows}, indent=2))
            else:
                _print_budget(rows)
            return EXIT_OK
        if args.command == "leakage-report":
            from specsteer.privacy.report import leakage_report

            report = leakage_report(
                data=args.data,
                audit_log=args.audit_log,
                tokenizer=_load_tokenizer(args.tokenizer),
                server_transcript=args.server_transcript,
                canaries=args.canaries,
                user=args.user,
                ngram=args.ngram,
            )
            if args.json:
                print(json.dumps(report, indent=2))
            else:
                _print_leakage(report)
            return EXIT_OK
        return _seal(args.profile, args.out, force=args.force)
    except SpecSteerError as exc:
        print(f"privacy: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("privacy: interrupted", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
