"""Privacy benchmark: what the cloud received with the egress guard off and on, on the dev users.

    python -m bench.privacy_report [--data ../shared/data/commit-bodies-dev.jsonl] [--users 3]
                                   [--queries-per-user 2] [--max-new-tokens 48] [--limit N]
                                   [--membership-pairs 100] [--out docs/results] [--work DIR]

Every generation runs on `--specialist` -> `--generalist` (the embedded default pair unless given;
greedy, SpecSteer's default SessionParams unless a configuration says otherwise) against a real
verifier: `server.main.create_server` with a throwaway PKI, gRPC over mutual TLS on loopback, one
server (and one server transcript) per generation. The device records every uplink and downlink in
its own signed audit log (`audit.egress.EgressRecorder` behind `sdk.egress.RecorderTap`), and every
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
docs/results/privacy.{md,json,png}. Finished generations are appended to
docs/results/privacy.runs.jsonl, so an interrupted run resumes where it stopped; the audit logs,
server transcripts and the canary file stay in --work (default ~/.cache/specsteer/bench-privacy).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
import zlib
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

# gRPC logs every TLS handshake problem on stderr; failures surface as exceptions anyway.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")

import numpy as np
import torch
from rouge_score import rouge_scorer

from audit.egress import EgressRecorder
from audit.errors import VerificationFailed
from audit.identity import DeviceIdentity
from audit.log import AuditLog
from audit.note import SigningKey
from audit.transcript import ServerTranscript
from audit.verify import verify
from bench.plotting import figure
from core import wire
from core.models import DEFAULT_GENERALIST, DEFAULT_SPECIALIST, CausalLM, default_cache_dir, load_causal_lm
from core.prompts import context_text, render_prompt, task_prompt
from core.session_types import MAX_CANDIDATE_TOKENS, SessionParams
from privacy.data import Canary, UplinkSession, read_uplinks, write_canaries
from privacy.leakage import (
    CanarySpace,
    auroc,
    canary_exposure,
    counterfactual_ngram_leakage,
    membership_score,
    plant_canary,
    size_channel,
    tpr_at_fpr,
)
from privacy.report import leakage_report
from sdk.context import Profile, ProfileEntry, ProfileIndex, fit_context
from sdk.device import DecodeOptions, Specialist, generate
from sdk.egress import RecorderTap
from sdk.remote import RemoteVerifier, TlsIdentity
from sdk.uplink_guard import guard_for_profile
from server.config import ServerConfig
from server.main import create_server
from server.pki import init_pki, issue_device
from server.session import CloudVerifier

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "commit-bodies-dev.jsonl"
RUNS_LOG = "privacy.runs.jsonl"

# The canary space: the classic "my PIN is dddddd", |R| = 10^6 (19.93 bits). Small enough that a
# 135M model can copy a secret from it, large enough that ~1 bit (no signal) and ~20 bits (the
# secret singled out) are far apart.
SPACE = CanarySpace()

# The leaky control: a prompt that asks the Specialist to quote the secret line verbatim. Probed
# with single generations before this bench was written (u00/u01 of the dev data): with the real
# three-entry context the 135M Specialist does not reproduce the canary, neither when asked to copy
# the earlier commit message word for word (it paraphrases) nor when asked for the PIN (it makes
# one up), and it skips a canary line even when copying a one-entry context. Asked for the PIN
# with the canary-bearing entry as its only context, it answers with it. So the control is: this
# prompt, the only private context the canary-bearing entry cut to the canary line and its first
# paragraph, and gamma = 0, which accepts every draft, so the uplink carries exactly what the
# Specialist writes (drafts are sent whether or not they are accepted; gamma 0 keeps the
# Specialist on its own path instead of the cloud's recovery).
CONTROL_PROMPT = (
    "What is the PIN in the earlier commit message above? Reply with the line that contains it, copied exactly."
)
CONTROL_PARAMS = SessionParams(gamma=0.0)


@dataclass(frozen=True)
class Config:
    label: str
    guard: str | None  # None (off), "placeholder" or "keep-local"
    profile: str  # "real" (canary planted), "swapped", "non-member", "control"
    padded: bool = False  # the session declares padded_frames: every Round on the wire has one size


CONFIGS: tuple[Config, ...] = (
    Config("off", None, "real"),
    Config("on", "placeholder", "real"),
    Config("keep-local", "keep-local", "real"),
    Config("on/padded", "placeholder", "real", padded=True),
    Config("off/swapped", None, "swapped"),
    Config("on/swapped", "placeholder", "swapped"),
    Config("off/non-member", None, "non-member"),
    Config("on/non-member", "placeholder", "non-member"),
    Config("control/off", None, "control"),
    Config("control/on", "placeholder", "control"),
)
# The columns of the main table: (label, heading).
MAIN = (
    ("off", "guard off"),
    ("on", "guard on (placeholder)"),
    ("keep-local", "guard on (keep-local)"),
    ("on/padded", "guard on, padded frames on the wire"),
    ("control/off", "leaky control, guard off"),
    ("control/on", "leaky control, guard on"),
)
# (guard setting, real run, swapped run, non-member run) for the paired metrics.
PAIRS = (("off", "off", "off/swapped", "off/non-member"), ("on", "on", "on/swapped", "on/non-member"))


# --- the cases --------------------------------------------------------------------------------------


def canary_secret(user_id: str, seed: int) -> str:
    """The user's canary secret: fixed by (seed, user), so a resumed run plants the same one."""
    rng = np.random.default_rng([seed, zlib.crc32(user_id.encode())])
    return SPACE.sample(rng)[0]


@dataclass
class Case:
    """One (user, query) with its profile variants."""

    user: dict[str, Any]
    partner: dict[str, Any]  # the next dev user in the data file: the swapped profile
    query: dict[str, Any]
    secret: str
    top: int  # the history entry BM25 retrieves first for the query
    planted_body: str
    control_body: str

    @property
    def user_id(self) -> str:
        return str(self.user["user_id"])

    @property
    def canary(self) -> str:
        return SPACE.render(self.secret)

    @property
    def prompt(self) -> str:
        return task_prompt(self.query["subject"])

    def profile_obj(self, variant: str) -> dict[str, Any]:
        entries = list(self.user["profile"])
        entry = {**entries[self.top], "body": self.planted_body}
        if variant == "real":
            entries[self.top] = entry
        elif variant == "non-member":
            del entries[self.top]
        elif variant == "swapped":
            return self.partner
        elif variant == "control":
            entries = [{**entry, "body": self.control_body}]
        else:
            raise ValueError(f"unknown profile variant {variant!r}")
        return {"user_id": self.user_id, "profile": entries}

    def member_document(self) -> str:
        """The entry that the non-member profile lacks, as the Specialist reads it (canary included)."""
        return f"{self.user['profile'][self.top]['subject']}\n\n{self.planted_body}"


def build_cases(path: Path, users: int, per_user: int, seed: int) -> list[Case]:
    everyone = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    cases: list[Case] = []
    for i, user in enumerate(everyone[:users]):
        partner = everyone[(i + 1) % len(everyone)]
        secret = canary_secret(user["user_id"], seed)
        canary = SPACE.render(secret)
        profile = Profile.from_obj(user, source=user["user_id"])
        index = ProfileIndex(profile)
        for query in user["queries"][:per_user]:
            best = index.retrieve(task_prompt(query["subject"]), 1)[0]
            top = profile.entries.index(best)
            body = str(user["profile"][top].get("body", "")).strip("\n")
            # plant_canary appends its line to the text it is given. Given the whole body, the line
            # would land past the context budget (fit_context trims long bodies from the end), so
            # it is planted into the first paragraph: its own line, right after it.
            head, sep, rest = body.partition("\n\n")
            (planted_head,), _ = plant_canary([head], canary, np.random.default_rng(seed))
            cases.append(
                Case(
                    user=user,
                    partner=partner,
                    query=query,
                    secret=secret,
                    top=top,
                    planted_body=planted_head + (sep + rest if sep else ""),
                    control_body=f"{canary}\n\n{head}" if head else canary,
                )
            )
    return cases


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
            tap=RecorderTap(EgressRecorder(log)),
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


# --- what the cloud received, per run ---------------------------------------------------------------


def sessions_of(row: dict[str, Any]) -> list[UplinkSession]:
    out = []
    for s in row["sessions"]:
        session = UplinkSession("", list(s["prompt_ids"]))
        session.rounds = [(list(c), list(d)) for c, d in s["rounds"]]
        session.accepted = list(s["accepted"])
        session.round_sizes = list(s["round_sizes"])
        out.append(session)
    return out


def views(row: dict[str, Any]) -> list[list[int]]:
    """Every token sequence the cloud saw in this run (committed text, each rejected draft in context)."""
    return [v for s in sessions_of(row) for v in s.views()]


def prompts(row: dict[str, Any]) -> list[list[int]]:
    return [list(s["prompt_ids"]) for s in row["sessions"]]


def uplink_stream(row: dict[str, Any], tok: Any) -> str:
    """The decoded uplink exactly as `leakage_report` scores canaries against it."""
    return "\n".join(
        tok.decode(list(v), skip_special_tokens=True, clean_up_tokenization_spaces=False) for v in views(row)
    )


# --- membership without generating ------------------------------------------------------------------
#
# The paired runs above measure membership from generations: a real profile and the same profile
# without one entry, each a full generation through the verifier, so n pairs cost 2n generations
# (about 40 s each here) and the report has as many pairs as queries. The attack below needs no
# generation, so it scales to hundreds of pairs in minutes. Along the real commit body y (the text
# being written, teacher-forced), the device with private context c drafts, at every position t,
# its greedy token d_t = argmax P_S(. | c, x, y<t): the first token of the draft that goes up after
# y<t is committed. The attacker is the cloud, which holds the public Specialist's weights (it runs
# P_S^0). To test whether a history entry e was in the device's context, it scores the drafts by
# how much better e explains them than no context at all:
#
#     score = mean_t [ log P_S(d_t | e, x, y<t) - log P_S(d_t | x, y<t) ]
#
# Members: the profile's entry BM25 retrieves first for the query (so it is in the context c);
# non-members: the same entry, scored on the drafts of the profile without it. Four forward passes
# per pair, no sampling; the guard is off (it can only withhold drafted tokens).


@dataclass(frozen=True)
class MembershipPair:
    user_id: str
    prompt: str
    target: str  # the real commit body: the committed text the drafts are made along
    profile: Profile  # the member side; the non-member side is the same profile without `entry`
    entry: ProfileEntry  # the document whose membership is tested


def membership_pairs(path: Path, count: int) -> list[MembershipPair]:
    """Up to `count` pairs, one per (user, query), taking the users of the data file in turn."""
    everyone = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
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


def _next_token_logprobs(lm: CausalLM, prefix: Sequence[int], target: Sequence[int]) -> torch.Tensor:
    """log P(. | prefix, target[:t]) for every t: one forward pass, rows aligned with `target`."""
    ids = torch.tensor([[*prefix, *target]], dtype=torch.long)
    with torch.inference_mode():
        logits = lm.model(input_ids=ids).logits[0, len(prefix) - 1 : len(prefix) + len(target) - 1]
    return torch.log_softmax(logits.float(), dim=-1)


def draft_membership_score(drafts: torch.Tensor, with_entry: torch.Tensor, without: torch.Tensor) -> float:
    """Mean log-likelihood ratio of the drafted tokens under the attacker's model with the entry
    as its context vs with none (rows: positions; columns: the vocabulary)."""
    picked = drafts.unsqueeze(-1)
    return float((with_entry.gather(-1, picked) - without.gather(-1, picked)).mean())


def likelihood_membership(lm: CausalLM, pairs: Sequence[MembershipPair], max_tokens: int) -> dict[str, Any]:
    """AUROC and TPR at 1 % FPR of the draft likelihood-ratio attack over `pairs` (no generation)."""
    tok = lm.tokenizer
    member: list[float] = []
    non: list[float] = []
    changed = positions = 0
    started = time.perf_counter()
    for pair in pairs:
        target = list(tok.encode(pair.target, add_special_tokens=False))[:max_tokens]
        if not target:
            continue
        device = Specialist(lm, pair.profile)
        without_entry = replace(pair.profile, entries=tuple(e for e in pair.profile.entries if e is not pair.entry))
        drafts_member = _next_token_logprobs(lm, device.private_prompt_ids(pair.prompt, with_context=True), target)
        drafts_non = _next_token_logprobs(
            lm, Specialist(lm, without_entry).private_prompt_ids(pair.prompt, with_context=True), target
        )
        d_member, d_non = drafts_member.argmax(-1), drafts_non.argmax(-1)
        context = fit_context([pair.entry], max_chars=device.context_chars)
        with_entry = _next_token_logprobs(lm, render_prompt(lm, pair.prompt, context), target)
        without = _next_token_logprobs(lm, render_prompt(lm, pair.prompt), target)
        member.append(draft_membership_score(d_member, with_entry, without))
        non.append(draft_membership_score(d_non, with_entry, without))
        changed += int((d_member != d_non).sum())
        positions += len(target)
    if not member:
        return {"pairs": 0}
    return {
        "pairs": len(member),
        "users": len({p.user_id for p in pairs}),
        "tokens_per_text": max_tokens,
        "auroc": auroc(member, non),
        "tpr_at_1pct_fpr": tpr_at_fpr(member, non, 0.01),
        "member_score_mean": _mean(member),
        "non_member_score_mean": _mean(non),
        "drafts_changed_share": changed / positions,
        "member_scores": member,
        "non_member_scores": non,
        "seconds": round(time.perf_counter() - started, 1),
        "score": "mean over the drafted tokens of log P_S(d | entry, x, y<t) - log P_S(d | x, y<t)",
    }


# --- summary ----------------------------------------------------------------------------------------


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else math.nan


def _encode_texts(tok: Any, texts: Sequence[str]) -> list[list[int]]:
    texts = [t for t in texts if t]
    return list(tok(texts, add_special_tokens=False)["input_ids"]) if texts else []


def _history_texts(user: dict[str, Any]) -> list[str]:
    return [t for e in user["profile"] for t in (e.get("subject", ""), e.get("body", "")) if t]


def summarize(rows: dict[tuple[str, str, str], dict[str, Any]], cases: list[Case], tok: Any) -> dict[str, Any]:
    """Per-config measurements, then the paired ones (n-gram counterfactual, membership)."""
    labels = [c.label for c in CONFIGS]
    by_config: dict[str, list[dict[str, Any]]] = {label: [] for label in labels}
    per_run: list[dict[str, Any]] = []
    for case in cases:
        for label in labels:
            row = rows.get((case.user_id, case.query["subject"], label))
            if row is None:
                continue
            # The secret itself (not only the rendered canary) anywhere in what the cloud saw.
            stream = uplink_stream(row, tok)
            # The exact rank among all of R, as `leakage_report` ranks it (also for rows logged by an
            # older run that sampled rivals).
            exact = [canary_exposure(SPACE, case.secret, stream)] if row["leakage"]["canaries"] else []
            row = {**row, "secret_in_uplink": case.secret in stream, "exposure": exact}
            by_config[label].append(row)
            per_run.append(
                {
                    "user": row["user"],
                    "query": row["subject"],
                    "config": label,
                    "exposure": row["exposure"],
                    "secret_in_uplink": row["secret_in_uplink"],
                    "rougeL": row["rougeL"],
                    "rounds": row["stats"]["rounds"],
                    "guard": row["audit"]["guard"],
                    "audit_verified": row["audit"]["verified"],
                }
            )
    commit_slots = max(
        [1] + [len(c) for rs in by_config.values() for r in rs for s in r["sessions"] for c, _ in s["rounds"]]
    )
    draft_slots = max(
        [SessionParams().draft_len, CONTROL_PARAMS.draft_len]
        + [len(d) for rs in by_config.values() for r in rs for s in r["sessions"] for _, d in s["rounds"]]
    )
    shape = {"commit_slots": max(commit_slots, MAX_CANDIDATE_TOKENS), "draft_slots": draft_slots}
    configs = {label: summarize_config(rs, draft_slots) for label, rs in by_config.items() if rs}

    paired: dict[str, Any] = {}
    for setting, real, swapped, non_member in PAIRS:
        ngram = {4: [], 8: []}
        member: list[float] = []
        non: list[float] = []
        for case in cases:
            key = (case.user_id, case.query["subject"])
            r, s, m = rows.get((*key, real)), rows.get((*key, swapped)), rows.get((*key, non_member))
            if r is None:
                continue
            if s is not None:
                real_profile = _encode_texts(tok, _history_texts(case.profile_obj("real")))
                swapped_profile = _encode_texts(tok, _history_texts(case.partner))
                for n, out in ngram.items():
                    out.append(
                        counterfactual_ngram_leakage(
                            views(r), views(s), real_profile, swapped_profile, prompts(r) + prompts(s), n=n
                        ).as_dict()
                    )
            if m is not None:
                doc = _encode_texts(tok, [case.member_document()])[0]
                member.append(membership_score(views(r), doc, n=4, exclude=prompts(r)))
                non.append(membership_score(views(m), doc, n=4, exclude=prompts(m)))
        entry: dict[str, Any] = {"ngram": {}, "membership": None}
        for n, results in ngram.items():
            if results:
                entry["ngram"][str(n)] = {
                    "pairs": len(results),
                    "leaked": sum(x["leaked"] for x in results),
                    "profile_specific": sum(x["profile_specific"] for x in results),
                    "uplink_ngrams": sum(x["uplink_ngrams"] for x in results),
                    "share_of_uplink": _mean([x["share_of_uplink"] for x in results]),
                    "share_of_profile": _mean([x["share_of_profile"] for x in results]),
                    "per_pair_leaked": [x["leaked"] for x in results],
                }
        if member:
            entry["membership"] = {
                "pairs": len(member),
                "auroc": auroc(member, non),
                "tpr_at_1pct_fpr": tpr_at_fpr(member, non, 0.01),
                "member_scores": member,
                "non_member_scores": non,
                "score": "share of the document's 4-grams (minus the prompt's) in the uplink views",
            }
        paired[setting] = entry

    quality: dict[str, Any] = {}
    base = {(r["user"], r["subject"]): r for r in by_config["off"]}
    for label in ("on", "keep-local", "on/padded"):
        diffs = [
            r["rougeL"] - base[(r["user"], r["subject"])]["rougeL"]
            for r in by_config.get(label, [])
            if (r["user"], r["subject"]) in base
        ]
        same = sum(
            r["text"] == base[(r["user"], r["subject"])]["text"]
            for r in by_config.get(label, [])
            if (r["user"], r["subject"]) in base
        )
        if diffs:
            quality[label] = {"pairs": len(diffs), "rougeL_delta_mean": _mean(diffs), "identical_texts": same}
    return {
        "canary_space": {**SPACE.as_dict(), "size": SPACE.size, "bits": SPACE.bits},
        "frame_shape": shape,
        "configs": configs,
        "paired": paired,
        "quality_cost": quality,
        "runs": per_run,
    }


def summarize_config(rows: list[dict[str, Any]], draft_slots: int) -> dict[str, Any]:
    exposures = [e for r in rows for e in r["exposure"]]
    identity: Counter[str] = Counter()
    patterns: Counter[str] = Counter()
    stats_guard: Counter[str] = Counter()
    audit_guard: Counter[str] = Counter()
    for r in rows:
        identity.update(r["leakage"]["identity_hits"])
        patterns.update(r["leakage"]["pattern_hits"])
        stats_guard.update({k: int(v) for k, v in r["stats"].items() if k.startswith("guard_")})
        audit_guard.update({f"{d}/{p}": int(n) for d, p, n in r["audit"]["guard"]})
    # The size channel, pooled over this config's runs: each round's size against the run
    # (session) it belongs to and against the user; then the same rounds as constant-size frames.
    sizes, padded, run_of, user_of = [], [], [], []
    for i, r in enumerate(rows):
        for s in r["sessions"]:
            for j, ((commit, draft), size) in enumerate(zip(s["rounds"], s["round_sizes"], strict=True)):
                sizes.append(size)
                padded.append(len(wire.encode_round(j + 1, commit, draft, pad_to=draft_slots)))
                run_of.append(i)
                user_of.append(r["user"])
    drafted = sum(r["stats"]["drafted"] for r in rows)
    new_tokens = sum(r["stats"]["new_tokens"] for r in rows)

    def channel(values: list[int], labels: list[object]) -> dict[str, Any]:
        return size_channel(values, labels).as_dict() if values else {}

    return {
        "runs": len(rows),
        "audit_verified": sum(r["audit"]["verified"] for r in rows),
        "canary_in_context": sum(r["canary_in_context"] for r in rows),
        "exposure_mean": _mean(exposures),
        "exposure_max": max(exposures, default=math.nan),
        "exposures": exposures,
        "canary_verbatim_runs": sum(any(c["verbatim"] for c in r["leakage"]["canaries"]) for r in rows),
        "secret_in_uplink_runs": sum(r["secret_in_uplink"] for r in rows),
        "identity_hits": dict(sorted(identity.items())),
        "pattern_hits": dict(sorted(patterns.items())),
        "verbatim_history_runs": sum(r["leakage"]["verbatim_runs"]["runs"] for r in rows),
        "verbatim_history_tokens": sum(r["leakage"]["verbatim_runs"]["tokens"] for r in rows),
        "rounds": len(sizes),
        "round_bytes_mean": _mean(sizes),
        "size_channel": {
            "distinct_sizes": len(set(sizes)),
            "per_run_bits_about_session": _mean([r["leakage"]["round_sizes"]["bits_about_session"] for r in rows]),
            "bits_about_session": channel(sizes, run_of).get("mutual_information_bits", 0.0),
            "bits_about_user": channel(sizes, user_of).get("mutual_information_bits", 0.0),
        },
        "padded": {
            "round_bytes": len(wire.encode_round(1, [], [], pad_to=draft_slots)),
            "distinct_sizes": len(set(padded)),
            "bits_about_session": channel(padded, run_of).get("mutual_information_bits", 0.0),
            "bits_about_user": channel(padded, user_of).get("mutual_information_bits", 0.0),
        },
        "rougeL": _mean([r["rougeL"] for r in rows]),
        "rouge1": _mean([r["rouge1"] for r in rows]),
        "guard_stats": dict(sorted(stats_guard.items())),
        "guard_audit": dict(sorted(audit_guard.items())),
        "fallbacks": dict(Counter(str(r["stats"]["fallback"]) for r in rows if r["stats"]["fallback"])),
        "acceptance": sum(r["stats"]["accepted"] for r in rows) / drafted if drafted else math.nan,
        "uplink_bytes_per_token": sum(r["leakage"]["uplink_bytes"] for r in rows) / max(1, new_tokens),
        "seconds_mean": _mean([r["stats"]["seconds"] for r in rows]),
    }


# --- report -----------------------------------------------------------------------------------------


def _fmt(x: float, spec: str = ".2f") -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def _hits(d: dict[str, int]) -> str:
    total = sum(d.values())
    return f"{total}" + (f" ({', '.join(f'{k} {v}' for k, v in d.items())})" if d else "")


def markdown(summary: dict[str, Any], meta: dict[str, Any]) -> str:
    cfg = summary["configs"]
    paired = summary["paired"]
    space = summary["canary_space"]
    cols = [(label, head) for label, head in MAIN if label in cfg]

    def row(name: str, cell: Any) -> str:
        return f"| {name} | " + " | ".join(cell(label, cfg[label]) for label, _ in cols) + " |"

    def pair_cell(label: str, fn: Any) -> str:
        setting = {"off": "off", "on": "on"}.get(label)
        return fn(paired[setting]) if setting in paired else "—"

    def ngram(n: int) -> Any:
        def cell(label: str, _: dict[str, Any]) -> str:
            def f(p: dict[str, Any]) -> str:
                g = p["ngram"].get(str(n))
                if not g:
                    return "—"
                return f"{g['leaked']} of {g['uplink_ngrams']} ({g['share_of_uplink']:.1%})"

            return pair_cell(label, f)

        return cell

    def membership(key: str, spec: str) -> Any:
        def cell(label: str, _: dict[str, Any]) -> str:
            return pair_cell(label, lambda p: _fmt(p["membership"][key], spec) if p["membership"] else "—")

        return cell

    def rouge(label: str, c: dict[str, Any]) -> str:
        if label.startswith("control"):
            return "n/a (extraction prompt)"
        q = summary["quality_cost"].get(label)
        delta = (
            f" (Δ {q['rougeL_delta_mean']:+.3f}; {q['identical_texts']}/{q['pairs']} texts identical to off)"
            if q
            else ""
        )
        return f"{c['rougeL']:.3f}{delta}"

    def decisions(d: dict[str, int]) -> str:
        return ", ".join(f"{k} {v}" for k, v in d.items()) or "none"

    n_pairs = max((p["membership"] or {}).get("pairs", 0) for p in paired.values()) if paired else 0
    lines = [
        f"# Privacy: what the cloud received, guard off and on (commit-bodies-dev, {meta['specialist']} -> "
        f"{meta['generalist']})",
        "",
        f"`{meta['command']}` — {meta['queries']} queries from {meta['users']} users ({', '.join(meta['user_ids'])}), "
        f"max {meta['max_new_tokens']} new tokens, greedy, Specialist `{meta['specialist']}`, "
        f"Generalist `{meta['generalist']}`; SessionParams defaults (gamma 0.5, alpha 1, k 10, K 4) except the "
        "control.",
        "",
        "Every generation ran through a real verifier (gRPC, mutual TLS, loopback, throwaway PKI) and was "
        "recorded in the device's signed audit log; every number is computed from those logs, restricted to "
        "the uplinks the server's transcript says it received (`privacy.report.leakage_report`, "
        "`privacy.data.read_uplinks`).",
        "",
        "| metric | " + " | ".join(head for _, head in cols) + " |",
        "|---|" + "---|" * len(cols),
        row(
            "generations (audit logs VERIFIED against the server transcript)",
            lambda _, c: f"{c['runs']} ({c['audit_verified']})",
        ),
        row("canary in the Specialist's private context", lambda _, c: f"{c['canary_in_context']}/{c['runs']}"),
        row(
            f"canary exposure, mean [max] bits (of {space['bits']:.2f})",
            lambda _, c: f"{_fmt(c['exposure_mean'])} [{_fmt(c['exposure_max'])}]",
        ),
        row(
            "runs with the canary's secret in the uplink (with its template)",
            lambda _, c: f"{c['secret_in_uplink_runs']}/{c['runs']} ({c['canary_verbatim_runs']}/{c['runs']})",
        ),
        row("counterfactual 4-gram leakage: leaked of uplink 4-grams (mean share)", ngram(4)),
        row("counterfactual 8-gram leakage: leaked of uplink 8-grams (mean share)", ngram(8)),
        row(f"membership AUROC ({n_pairs} pairs)", membership("auroc", ".3f")),
        row("membership TPR at 1% FPR", membership("tpr_at_1pct_fpr", ".2f")),
        row("identity hits (trailer names/emails)", lambda _, c: _hits(c["identity_hits"])),
        row("personal-data pattern hits", lambda _, c: _hits(c["pattern_hits"])),
        row(
            "verbatim history runs of 8+ tokens (tokens)",
            lambda _, c: f"{c['verbatim_history_runs']} ({c['verbatim_history_tokens']})",
        ),
        row(
            "round sizes: distinct / bits about the session / about the user",
            lambda _, c: (
                f"{c['size_channel']['distinct_sizes']} / {c['size_channel']['bits_about_session']:.2f} / "
                f"{c['size_channel']['bits_about_user']:.2f}"
            ),
        ),
        row(
            "padded codec (offline): distinct / bits / bytes per round (actual mean)",
            lambda _, c: (
                f"{c['padded']['distinct_sizes']} / {c['padded']['bits_about_session']:.2f} / "
                f"{c['padded']['round_bytes']} ({c['round_bytes_mean']:.1f})"
            ),
        ),
        row("ROUGE-L vs the real body", rouge),
        row("guard decisions (device stats.extra)", lambda _, c: decisions(c["guard_stats"])),
        row("guard decisions (audit log records)", lambda _, c: decisions(c["guard_audit"])),
        row("acceptance rate", lambda _, c: _fmt(c["acceptance"])),
        row("uplink bytes per new token", lambda _, c: _fmt(c["uplink_bytes_per_token"], ".1f")),
        row("seconds per generation (shared CPU)", lambda _, c: _fmt(c["seconds_mean"], ".0f")),
        *membership_lines(summary.get("membership_likelihood")),
        "",
        "Leaky control, run by run (what the cloud received, from the audit log):",
        "",
        "| user | query | guard off: exposure, secret in uplink | guard on: exposure, secret in uplink | "
        "guard on: decisions |",
        "|---|---|---|---|---|",
        *control_rows(summary),
        "",
        "Auxiliary runs (the other halves of the paired metrics; the canary is not in these contexts, so their "
        "exposure is the no-signal baseline):",
        "",
        "| run | generations | canary in context | exposure mean [max] | identity / pattern hits | ROUGE-L |",
        "|---|---|---|---|---|---|",
    ]
    for label in ("off/swapped", "on/swapped", "off/non-member", "on/non-member"):
        if label in cfg:
            c = cfg[label]
            lines.append(
                f"| {label} | {c['runs']} | {c['canary_in_context']}/{c['runs']} | "
                f"{_fmt(c['exposure_mean'])} [{_fmt(c['exposure_max'])}] | "
                f"{sum(c['identity_hits'].values())} / {sum(c['pattern_hits'].values())} | {c['rougeL']:.3f} |"
            )
    shape = summary["frame_shape"]
    lines += [
        "",
        "How to read it:",
        "",
        f"* Canary: `{space['template']}` with {space['length']} symbols from `{space['alphabet']}` "
        f"(|R| = {space['size']:,}, {space['bits']:.2f} bits), one per user, planted as its own line after the first "
        "paragraph of the history entry BM25 retrieves first for the query, and registered in the guard of the "
        "guarded runs. Exposure = log2|R| − log2(rank), the canary's exact rank among all |R| secrets by how "
        "well the audit log's uplink stream supports each (`privacy.leakage.canary_exposure`, the function "
        f"`privacy leakage-report` uses): ~1 bit says nothing, {space['bits']:.2f} means the canary is singled "
        "out; four leaked digits of six, for instance, leave 100 tied candidates, about 14.3 bits, not 19.93.",
        f'* Leaky control: the prompt is "{CONTROL_PROMPT}"; the only private context is the canary-bearing entry, '
        "cut to the canary line and its first paragraph; gamma = 0 (every draft accepted, so the uplink is exactly "
        "what the Specialist writes). The real Specialist does not reproduce the canary from its normal "
        "three-entry context even when asked to (see docs/results/README.md), so the control narrows the "
        "context until it does. It exists to show that the measurement sees a leak when there is one, and what "
        "the guard does with it; its ROUGE is meaningless.",
        "* Counterfactual n-grams: n-grams of the real (planted) profile that are in neither the swapped profile "
        "(the next dev user's) nor the prompts, found in the real run's uplink and not in the swapped run's "
        "(`privacy.leakage.counterfactual_ngram_leakage` over the uplink views rebuilt from the audit log).",
        f"* Membership: each pair is the real profile vs the same profile without the canary-bearing entry; the "
        f"attacker's score is the share of that entry's 4-grams (minus the prompt's) in the uplink. {n_pairs} "
        f"pairs give {n_pairs} positives and {n_pairs} negatives: the AUROC moves in steps of "
        f"1/{max(1, n_pairs * n_pairs)} and TPR at 1% FPR means TPR with no false positive at all.",
        "* Size channel: every Round uplink's byte size against the run it belongs to (and the user), plug-in "
        "mutual information pooled over the config's runs (biased upward on few rounds, so it errs toward "
        "reporting a channel). The wire's padded codec (`core.wire` PaddedRound, "
        f"commit_slots={shape['commit_slots']}, draft_slots={shape['draft_slots']}) re-encodes the same rounds "
        "offline; the `on/padded` column sent them on the wire (the session declared padded_frames), so its "
        "round sizes are what the cloud saw. The number of rounds per session is still visible either way.",
        "* Personal-data hits: the user's trailer names/emails and `PiiDetector` patterns in the decoded uplink, "
        "and runs of 8+ tokens copied from the user's history (`leakage_report`).",
        "* Guard decisions: the device's `stats.extra` counters and the guard-decision records of the audit logs "
        "(`audit.verify`); spans are never logged, only their kind.",
        *adapter_canary_lines(summary.get("adapter_canary", [])),
    ]
    if meta.get("report_command"):
        lines += ["", f"This page was rendered from `privacy.json` by `{meta['report_command']}`."]
    return "\n".join(lines) + "\n"


def adapter_canary_summary(result: dict[str, Any]) -> dict[str, Any]:
    """The part of a `bench.adapter_canary` result this page reports: the released global adapter's
    exposure of each planted canary beside the controls' and the ε the devices' ledgers claim."""
    settings = result["settings"]
    epsilons = {
        key: [d["epsilon"] for d in run.get("devices", []) if d.get("epsilon") is not None]
        for key, run in result["runs"].items()
    }
    losses = {
        key: [d["held_out_loss"] for d in run.get("devices", []) if d.get("held_out_loss") is not None]
        for key, run in result["runs"].items()
    }
    return {
        "command": result["command"],
        "model": settings["model"],
        "lr": settings["lr"],
        "rounds": settings["rounds"],
        "dp_steps": settings["dp_steps"],
        "bits": result["canary"]["bits"],
        "labels": {key: model["label"] for key, model in result["models"].items()},
        "planted": result["planted"],
        "controls_mean": {key: model["controls_summary"]["mean"] for key, model in result["models"].items()},
        "epsilon": epsilons,
        "held_out_loss": losses,
    }


def adapter_canary_lines(results: list[dict[str, Any]]) -> list[str]:
    if not results:
        return []
    lines = [
        "",
        "## The released global adapter: Secret-Sharer canaries (`bench.adapter_canary`)",
        "",
        "Canaries planted in one device's history, real federated rounds with and without DP-SGD, then every "
        "secret of the canary space ranked by the likelihood the model with the released global adapter gives "
        "it (details: `adapter_canary.md`). Exposure in bits; a model that knows nothing scores about 1.44 on "
        "average.",
        "",
        "| run | lr | model version | planted canary exposure (rank) | controls, mean | ε the ledgers claim | "
        "held-out loss |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for key, label in r["labels"].items():
            planted = ", ".join(f"{c['exposure'][key]:.2f} ({c['rank'][key]:.0f})" for c in r["planted"])
            eps = ", ".join(f"{e:.2f}" for e in r["epsilon"].get(key, [])) or "—"
            loss = ", ".join(f"{x:.2f}" for x in r["held_out_loss"].get(key, [])) or "—"
            lines.append(
                f"| {r['model']}, {r['rounds']} round(s) x {r['dp_steps']} steps | {r['lr']} | {label} | {planted} | "
                f"{r['controls_mean'][key]:.2f} | {eps} | {loss} |"
            )
    lines.append("")
    lines += [f"- `{r['command']}`" for r in results]
    return lines


def membership_lines(m: dict[str, Any] | None) -> list[str]:
    """The draft likelihood attack's table (see `likelihood_membership`), if it ran."""
    if not m or not m.get("pairs"):
        return []
    n = m["pairs"]
    return [
        "",
        f"Membership without generating: {n} member/non-member pairs from {m['users']} users (one per query; "
        f"the entry BM25 retrieves first, in the context or removed from the profile), the first "
        f"{m['tokens_per_text']} tokens of each real commit body as the committed text, guard off. The attacker "
        "scores the device's greedy drafts along it by the mean log-likelihood ratio of the entry as the "
        "public Specialist's context vs no context (`likelihood_membership`: no sampling, four forward passes "
        f"per pair, {m['seconds']:.0f} s in all). AUROC resolution 1/{n * n}; TPR at 1% FPR allows "
        f"{int(0.01 * n)} false positive(s) of {n}.",
        "",
        "| pairs | AUROC | TPR at 1% FPR | mean score, members / non-members | drafted tokens changed by the entry |",
        "|---|---|---|---|---|",
        f"| {n} | {m['auroc']:.3f} | {m['tpr_at_1pct_fpr']:.2f} | {m['member_score_mean']:+.3f} / "
        f"{m['non_member_score_mean']:+.3f} | {m['drafts_changed_share']:.1%} |",
    ]


def control_rows(summary: dict[str, Any]) -> list[str]:
    runs = {(r["user"], r["query"], r["config"]): r for r in summary["runs"]}
    out = []
    queries = list(dict.fromkeys((r["user"], r["query"]) for r in summary["runs"]))
    for user, query in queries:
        off, on = runs.get((user, query, "control/off")), runs.get((user, query, "control/on"))
        if off is None and on is None:
            continue

        def cell(r: dict[str, Any] | None) -> str:
            if r is None:
                return "—"
            return f"{_fmt(max(r['exposure'], default=math.nan))} bits, {'yes' if r['secret_in_uplink'] else 'no'}"

        guard = ", ".join(f"{d} {p} x{n}" for d, p, n in on["guard"]) if on and on["guard"] else "none"
        number = sum(1 for u, _ in queries[: queries.index((user, query)) + 1] if u == user)
        out.append(f"| {user} | {number} | {cell(off)} | {cell(on)} | {guard} |")
    return out


def plot(summary: dict[str, Any], path: Path) -> None:
    cfg = summary["configs"]
    paired = summary["paired"]
    with figure(path, (15, 4.2)) as ax:
        fig = ax.figure
        fig.clear()
        axes = fig.subplots(1, 4)
        labels = [c.label for c in CONFIGS if c.label in cfg]
        x = np.arange(len(labels))
        axes[0].bar(x, [cfg[label]["exposure_mean"] for label in labels], color="#4c72b0", alpha=0.6)
        for i, label in enumerate(labels):
            axes[0].scatter([i] * len(cfg[label]["exposures"]), cfg[label]["exposures"], color="black", s=10, zorder=3)
        axes[0].axhline(summary["canary_space"]["bits"], color="#c44e52", ls="--", lw=1)
        axes[0].set_xticks(x, labels, rotation=40, ha="right", fontsize=7)
        axes[0].set_ylabel("bits")
        axes[0].set_title("canary exposure (dashed: log2|R|)", fontsize=9)

        settings = [s for s in ("off", "on") if s in paired]
        for j, n in enumerate(("4", "8")):
            values = [paired[s]["ngram"].get(n, {}).get("share_of_uplink", 0.0) for s in settings]
            axes[1].bar(np.arange(len(settings)) + 0.4 * j - 0.2, values, 0.4, label=f"n={n}")
        axes[1].set_xticks(np.arange(len(settings)), [f"guard {s}" for s in settings])
        axes[1].set_ylabel("leaked share of uplink n-grams")
        axes[1].set_title("counterfactual n-gram leakage", fontsize=9)
        axes[1].legend(fontsize=8)

        for i, s in enumerate(settings):
            m = paired[s]["membership"]
            if not m:
                continue
            axes[2].scatter([i - 0.1] * len(m["member_scores"]), m["member_scores"], color="#c44e52", s=14)
            axes[2].scatter([i + 0.1] * len(m["non_member_scores"]), m["non_member_scores"], color="#4c72b0", s=14)
            axes[2].annotate(
                f"AUROC {m['auroc']:.2f}", (i, 0), xytext=(0, -14), textcoords="offset points", ha="center"
            )
        axes[2].set_xticks(range(len(settings)), [f"guard {s}" for s in settings])
        axes[2].set_xlim(-0.6, len(settings) - 0.4)
        scores = [
            x
            for st in settings
            for key in ("member_scores", "non_member_scores")
            for x in (paired[st]["membership"] or {}).get(key, [])
        ]
        top = max([0.1, *scores])
        axes[2].set_ylim(-0.15 * top, 1.2 * top)
        axes[2].set_ylabel("attacker score (red: member, blue: not)")
        axes[2].set_title("membership of the canary-bearing entry", fontsize=9)

        q = [label for label in ("off", "on", "keep-local") if label in cfg]
        axes[3].bar(range(len(q)), [cfg[label]["rougeL"] for label in q], color="#55a868")
        axes[3].set_xticks(range(len(q)), q)
        axes[3].set_ylabel("ROUGE-L vs the real body")
        axes[3].set_title("quality cost of the guard", fontsize=9)


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


def write_page(out: Path, meta: dict[str, Any], summary: dict[str, Any]) -> None:
    """privacy.json (meta and summary), privacy.md and privacy.png in `out`."""
    (out / "privacy.json").write_text(json.dumps({"meta": meta, "summary": summary}, indent=2) + "\n")
    (out / "privacy.md").write_text(markdown(summary, meta))
    plot(summary, out / "privacy.png")
    print(f"wrote {out}/privacy.md, privacy.json, privacy.png")


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
