"""Privacy benchmark: what the cloud received with the egress guard off and on, on the dev users.

    python -m bench.privacy_report [--data ../shared/data/commit-bodies-dev.jsonl] [--users 3]
                                   [--queries-per-user 2] [--max-new-tokens 48] [--limit N]
                                   [--membership-pairs 100] [--out docs/results] [--work DIR]

Every generation runs on `--specialist` -> `--generalist` (the embedded default pair unless given;
greedy, SpecSteer's default SessionParams unless a configuration says otherwise) against a real
verifier: `server.grpc_server.create_server` with a throwaway PKI, gRPC over mutual TLS on loopback, one
server (and one server transcript) per generation. The device records every uplink and downlink in
its own signed audit log (`audit.recorder.EgressRecorder`, the SDK's egress tap), and every
number below is computed from those logs, restricted to the uplinks the server's transcript says
arrived (`privacy.data.read_uplinks`, `privacy.report.leakage_report`), never from the device's
token lists.

For each (user, query) of the selection, with the user's canary planted in the history entry BM25
retrieves first for the query (so it sits in the Specialist's private context):

    off / on / keep-local                 the real profile; guard off, placeholder, keep-local
    on/padded                             as `on`, the session declaring padded frames (one Round size on the wire)
    off/swapped, on/swapped               the same prompt with another dev user's profile
    off/non-member, on/non-member         the real profile without the canary-bearing entry
    control/off, control/on               a deliberately leaky control (see CONTROL_PROMPT)

and reports canary exposure, counterfactual n-gram leakage (n = 4, 8), membership AUROC and TPR at
1 % FPR (from those pairs, and from `--membership-pairs` more scored without generating: see
`likelihood_membership`), personal-data hits, the per-round size channel (and the constant-size padded codec,
measured offline), and the guard's quality cost (ROUGE-L against the real commit body), as
docs/results/privacy.{md,json,png} (written by `bench.privacy_page`; the cases and configurations
are `bench.privacy_cases`'s). Finished generations are appended to docs/results/privacy.runs.jsonl,
so an interrupted run resumes where it stopped; the audit logs, server transcripts and the canary
file stay in --work (default ~/.cache/specsteer/bench-privacy).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import sys
import tempfile
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

# gRPC logs every TLS handshake problem on stderr; failures surface as exceptions anyway.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")

import torch
from rouge_score import rouge_scorer

from bench.dataset import first_users
from bench.privacy_cases import CONFIGS, CONTROL_PARAMS, CONTROL_PROMPT, SPACE, Case, Config, build_cases
from bench.privacy_page import adapter_canary_summary, summarize, write_page
from specsteer.audit.errors import VerificationFailed
from specsteer.audit.identity import DeviceIdentity
from specsteer.audit.log import AuditLog
from specsteer.audit.note import SigningKey
from specsteer.audit.recorder import EgressRecorder
from specsteer.audit.transcript import ServerTranscript
from specsteer.audit.verify import verify
from specsteer.core.gguf_cache import default_cache_dir
from specsteer.core.model_registry import DEFAULT_GENERALIST, DEFAULT_SPECIALIST
from specsteer.core.models import CausalLM, load_causal_lm
from specsteer.core.prompts import context_text, render_prompt, task_prompt
from specsteer.core.session_types import SessionParams
from specsteer.privacy.data import Canary, read_uplinks, write_canaries
from specsteer.privacy.membership import MembershipProbe, draft_likelihood_attack
from specsteer.privacy.report import leakage_report
from specsteer.sdk.context import Profile, ProfileEntry, ProfileIndex, fit_context
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from specsteer.sdk.remote import RemoteVerifier, TlsIdentity
from specsteer.sdk.uplink_guard import guard_for_profile
from specsteer.server.config import ServerConfig
from specsteer.server.grpc_server import create_server
from specsteer.server.pki import init_pki, issue_device
from specsteer.server.session import CloudVerifier

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "commit-bodies-dev.jsonl"
RUNS_LOG = "privacy.runs.jsonl"


# --- one generation over the wire -------------------------------------------------------------------


class Loopback:
    """A throwaway PKI and audit key; `serve()` starts a verifier with its own transcript."""

    def __init__(self, root: Path, cloud: CloudVerifier) -> None:
        self.pki = init_pki(root / "pki")
        cert, key = issue_device(self.pki.directory, "bench")
        self.identity = TlsIdentity.from_files(self.pki.pins, cert, key)
        self.cloud = cloud
        self.key = SigningKey.generate("device.bench/privacy")

    @contextlib.contextmanager
    def serve(self, transcript: Path) -> Iterator[int]:
        config = ServerConfig(
            host="127.0.0.1",
            port=0,
            cert=self.pki.server_cert,
            key=self.pki.server_key,
            client_ca=self.pki.device_ca,
            seed=0,
        )
        server, port = create_server(config, cloud=self.cloud, transcript=ServerTranscript.open(transcript))
        server.start()
        try:
            yield port
        finally:
            server.stop(grace=0)


def run_one(
    case: Case,
    config: Config,
    *,
    lm: CausalLM,
    loopback: Loopback,
    run_dir: Path,
    data: Path,
    canary_file: Path,
    options: DecodeOptions,
    seed: int,
    scorer: rouge_scorer.RougeScorer,
) -> dict[str, Any]:
    """Generate once through the loopback verifier, then measure the run's audit log."""
    if run_dir.exists():
        shutil.rmtree(run_dir)  # a run interrupted before its row was written starts over
    run_dir.mkdir(parents=True)
    log_dir, transcript = run_dir / "audit-log", run_dir / "server-transcript.jsonl"
    profile = Profile.from_obj(case.profile_obj(config.profile), source=case.user_id)
    specialist = Specialist(lm, profile)
    tok = lm.tokenizer
    guard = None
    if config.guard is not None:
        canaries = [] if config.profile == "swapped" else [case.canary]
        guard = guard_for_profile(profile, tok, config.guard, canaries=canaries)
    control = config.profile == "control"
    prompt = CONTROL_PROMPT if control else case.prompt
    params = replace(CONTROL_PARAMS if control else SessionParams(), padded_frames=config.padded)
    with (
        loopback.serve(transcript) as port,
        AuditLog.open(log_dir, loopback.key, device=DeviceIdentity.from_pem(loopback.identity.cert_chain)) as log,
        RemoteVerifier(
            f"127.0.0.1:{port}",
            loopback.identity,
            vocab_size=lm.vocab_size,
            connect_timeout=30.0,
            round_timeout=600.0,  # a busy shared CPU; fallback=False turns a timeout into an error, not a local run
            tap=EgressRecorder(log),
        ) as verifier,
    ):
        out = generate(specialist, prompt, params, options, verifier, fallback=False, guard=guard)
    try:
        report = verify(log_dir, key=loopback.key.verifier, server_transcript=transcript)
        failed: list[str] = []
    except VerificationFailed as exc:
        report = exc.report
        failed = [f"{c.name}: {c.summary}" for c in report.checks if not c.ok]
    leak = leakage_report(
        data=data,
        audit_log=log_dir,
        tokenizer=tok,
        server_transcript=transcript,
        canaries=canary_file,
        user=case.user_id,
    )
    uplinks = read_uplinks(log_dir, server_transcript=transcript)
    scores = scorer.score(case.query["target"], out.text)
    context = context_text(specialist.context_for(prompt))
    return {
        "user": case.user_id,
        "subject": case.query["subject"],
        "config": config.label,
        "max_new_tokens": options.max_new_tokens,
        "seed": seed,
        "profile_user": case.partner["user_id"] if config.profile == "swapped" else case.user_id,
        "canary_in_context": case.canary in context,
        "rouge1": scores["rouge1"].fmeasure,
        "rougeL": scores["rougeL"].fmeasure,
        "text": out.text,
        "stats": out.stats.as_dict(),
        "audit": {
            "verified": report.ok,
            "records": report.records,
            "failed": failed,
            "guard": [list(g) for g in report.guard],
        },
        "leakage": leak,
        "sessions": [
            {
                "prompt_ids": s.prompt_ids,
                "rounds": [[c, d] for c, d in s.rounds],
                "accepted": s.accepted,
                "round_sizes": s.round_sizes,
            }
            for s in uplinks.sessions
        ],
        "run_dir": str(run_dir),
    }


# --- membership without generating ------------------------------------------------------------------
#
# The paired runs above measure membership from generations, so n pairs cost 2n generations (about
# 40 s each here) and the report has as many pairs as queries. `privacy.membership`'s draft
# likelihood attack needs no generation. Its pairs: members, the profile's entry BM25 retrieves
# first for the query (so it is in the device's context); non-members, the same entry, scored on the
# drafts of the profile without it; the text drafted along is the query's real commit body.


@dataclass(frozen=True)
class MembershipPair:
    user_id: str
    prompt: str
    target: str  # the real commit body: the committed text the drafts are made along
    profile: Profile  # the member side; the non-member side is the same profile without `entry`
    entry: ProfileEntry  # the document whose membership is tested


def membership_pairs(path: Path, count: int) -> list[MembershipPair]:
    """Up to `count` pairs, one per (user, query), taking the users of the data file in turn."""
    everyone = first_users(path)
    queues = [[(u, q) for q in u["queries"] if q.get("target")] for u in everyone]
    order = [queue[i] for i in range(max((len(q) for q in queues), default=0)) for queue in queues if i < len(queue)]
    indexes: dict[str, tuple[Profile, ProfileIndex]] = {}
    pairs = []
    for user, query in order[:count]:
        uid = str(user["user_id"])
        if uid not in indexes:
            profile = Profile.from_obj(user, source=uid)
            indexes[uid] = (profile, ProfileIndex(profile))
        profile, index = indexes[uid]
        prompt = task_prompt(query["subject"])
        pairs.append(MembershipPair(uid, prompt, str(query["target"]), profile, index.retrieve(prompt, 1)[0]))
    return pairs


def membership_probe(lm: CausalLM, pair: MembershipPair) -> MembershipProbe:
    """The token IDs the attack scores for `pair`: the device's private prompts with and without the
    entry (its own retrieval and prompt format), and the attacker's with the entry as context and bare."""
    device = Specialist(lm, pair.profile)
    without_entry = replace(pair.profile, entries=tuple(e for e in pair.profile.entries if e is not pair.entry))
    context = fit_context([pair.entry], max_chars=device.context_chars)
    return MembershipProbe(
        user_id=pair.user_id,
        target=list(lm.tokenizer.encode(pair.target, add_special_tokens=False)),
        member_prompt=device.private_prompt_ids(pair.prompt, with_context=True),
        non_member_prompt=Specialist(lm, without_entry).private_prompt_ids(pair.prompt, with_context=True),
        with_entry=render_prompt(lm, pair.prompt, context),
        without=render_prompt(lm, pair.prompt),
    )


def likelihood_membership(lm: CausalLM, pairs: Sequence[MembershipPair], max_tokens: int) -> dict[str, Any]:
    """AUROC and TPR at 1 % FPR of the draft likelihood-ratio attack over `pairs` (no generation)."""
    return draft_likelihood_attack(lm.model, (membership_probe(lm, p) for p in pairs), max_tokens)


# --- entry point ------------------------------------------------------------------------------------


def _read_log(path: Path) -> dict[tuple[str, str, str, int, int], dict[str, Any]]:
    done: dict[tuple[str, str, str, int, int], dict[str, Any]] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                done[(row["user"], row["subject"], row["config"], row["max_new_tokens"], row["seed"])] = row
    return done


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.privacy_report", description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--users", type=int, default=3)
    p.add_argument("--queries-per-user", type=int, default=2)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--limit", type=int, default=None, help="at most this many queries (a quick run)")
    p.add_argument("--configs", nargs="*", default=None, help="labels to run (default: all)")
    p.add_argument("--out", type=Path, default=Path("docs/results"))
    p.add_argument("--work", type=Path, default=None, help="audit logs, transcripts, canary file")
    p.add_argument("--specialist", default=DEFAULT_SPECIALIST)
    p.add_argument("--generalist", default=DEFAULT_GENERALIST)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--membership-pairs",
        type=int,
        default=100,
        help="member/non-member pairs of the draft likelihood attack, no generation (0: skip)",
    )
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own choice)")
    p.add_argument(
        "--adapter-canary",
        type=Path,
        nargs="*",
        default=[],
        help="bench.adapter_canary result JSONs to report beside (the released global adapter's exposure)",
    )
    p.add_argument(
        "--report-only",
        action="store_true",
        help="rewrite privacy.md/png from OUT/privacy.json and --adapter-canary; generate nothing",
    )
    args = p.parse_args(argv)
    try:
        adapter = [adapter_canary_summary(json.loads(path.read_text(encoding="utf-8"))) for path in args.adapter_canary]
    except (OSError, ValueError, KeyError) as exc:
        print(f"bench.privacy_report: error: cannot read an --adapter-canary result: {exc}", file=sys.stderr)
        return 1
    if args.report_only:
        command = " ".join(["python -m bench.privacy_report", *(argv if argv is not None else sys.argv[1:])])
        return report_only(args.out, adapter, command)
    if not args.data.is_file():
        print(f"bench.privacy_report: error: no data file at {args.data}", file=sys.stderr)
        return 1
    cases = build_cases(args.data, args.users, args.queries_per_user, args.seed)[: args.limit]
    configs = [c for c in CONFIGS if args.configs is None or c.label in args.configs]
    work = (args.work or default_cache_dir() / "bench-privacy").expanduser()
    args.out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    log_path = args.out / RUNS_LOG
    done = _read_log(log_path)

    canary_file = work / "canaries.json"
    users = {c.user_id: c.secret for c in cases}
    write_canaries(canary_file, SPACE, [Canary(uid, secret) for uid, secret in users.items()])

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    s_lm = load_causal_lm(args.specialist)
    tok = s_lm.tokenizer
    scorer = rouge_scorer.RougeScorer(["rouge1", "rougeL"], use_stemmer=True)
    options = DecodeOptions(max_new_tokens=args.max_new_tokens)
    started = time.perf_counter()
    todo = [
        (case, config)
        for case in cases
        for config in configs
        if (case.user_id, case.query["subject"], config.label, args.max_new_tokens, args.seed) not in done
    ]
    if todo:
        g_lm = load_causal_lm(args.generalist)
        cloud = CloudVerifier(g_lm, s_lm, max_top_k=ServerConfig().max_top_k, seed=0)
        with tempfile.TemporaryDirectory(prefix="specsteer-privacy-") as tmp:
            loopback = Loopback(Path(tmp), cloud)
            for case, config in todo:
                query_tag = f"{zlib.crc32(case.query['subject'].encode()):08x}"
                slug = f"{case.user_id}-{query_tag}-{config.label.replace('/', '-')}"
                row = run_one(
                    case,
                    config,
                    lm=s_lm,
                    loopback=loopback,
                    run_dir=work / "runs" / f"{slug}-t{args.max_new_tokens}-s{args.seed}",
                    data=args.data,
                    canary_file=canary_file,
                    options=options,
                    seed=args.seed,
                    scorer=scorer,
                )
                with log_path.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(row) + "\n")
                done[(row["user"], row["subject"], row["config"], row["max_new_tokens"], row["seed"])] = row
                exp = row["leakage"]["canaries"][0]["exposure"] if row["leakage"]["canaries"] else math.nan
                print(
                    f"{case.user_id} {config.label:15s} exposure {exp:5.2f} R-L {row['rougeL']:.3f} "
                    f"audit {'ok' if row['audit']['verified'] else 'FAILED'} {row['stats']['seconds']:.0f}s",
                    flush=True,
                )
    rows = {
        (r["user"], r["subject"], r["config"]): r
        for k, r in done.items()
        if k[3] == args.max_new_tokens and k[4] == args.seed and r["config"] in {c.label for c in configs}
    }
    summary = summarize(rows, cases, tok)
    summary["adapter_canary"] = adapter
    if args.membership_pairs > 0:
        pairs = membership_pairs(args.data, args.membership_pairs)
        summary["membership_likelihood"] = likelihood_membership(s_lm, pairs, args.max_new_tokens)
        m = summary["membership_likelihood"]
        print(f"membership, draft likelihood attack: {m['pairs']} pairs, AUROC {m.get('auroc', math.nan):.3f}")
    meta = {
        "command": " ".join(["python -m bench.privacy_report", *(argv if argv is not None else sys.argv[1:])]),
        "queries": len(cases),
        "users": len(users),
        "user_ids": sorted(users),
        "max_new_tokens": args.max_new_tokens,
        "specialist": args.specialist,
        "generalist": args.generalist,
        "seed": args.seed,
        "membership_pairs": args.membership_pairs,
        "control": {
            "prompt": CONTROL_PROMPT,
            "gamma": CONTROL_PARAMS.gamma,
            "context": "the canary-bearing entry only, cut to the canary line and its first paragraph",
        },
        "wall_seconds_this_run": round(time.perf_counter() - started, 1),
        "generation_seconds_sum": round(sum(r["stats"]["seconds"] for r in rows.values()), 1),
        "configs": [{"label": c.label, "guard": c.guard, "profile": c.profile} for c in configs],
    }
    write_page(args.out, meta, summary)
    print(f"audit logs under {work}")
    return 0


def report_only(out: Path, adapter: list[dict[str, Any]], command: str) -> int:
    """Rewrite the page and plot from `out/privacy.json`, with these adapter-canary summaries."""
    path = out / "privacy.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"bench.privacy_report: error: no readable results at {path}: {exc}", file=sys.stderr)
        return 1
    data["summary"]["adapter_canary"] = adapter
    data["meta"]["report_command"] = command
    write_page(out, data["meta"], data["summary"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
