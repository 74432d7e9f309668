"""The TypeScript device against the live default pair: the same queries, greedy, on the Python
device and the TypeScript device in turn, one real verifier serving both; are their texts equal?

    python -m bench.sdk_js_live                          # the demo prompt + 12 dev queries, 64 tokens
    python -m bench.sdk_js_live --queries 12 --max-new-tokens 64 --threads 2
    python -m bench.sdk_js_live --from-json docs/results/sdk_js_live.json   # the page again

A benchmark, run by hand (not in CI): it needs the default bundle (`make install` builds it), the
default Generalist and Specialist in the cache (`server serve` converts them once), and the
TypeScript build (`cd sdk-js && npm run build`: the child is sdk-js/dist/test/live-generate.js).

One verifier: `server serve` (`python -m specsteer.server.cli serve`) with its defaults, the
Generalist qwen2.5-coder-1.5b-instruct and the generic Specialist qwen2.5-coder-0.5b-instruct,
loaded once, over mutual TLS with a throwaway PKI (`server.pki`, as sdk-js/test/live/live_python.py
prepares it): the Python device presents `bob`'s certificate, the TypeScript device `alice`'s, and
both trust exactly the pins file's anchors. Two device processes stay up for the whole run, each
with the default bundle's int4 ONNX Specialist loaded once: the Python device
(`python -m bench.sdk_js_live --python-child`: `sdk.decoding.generate` over
`sdk.remote.RemoteVerifier`, as live_python.py `device` does) and the TypeScript device
(`node sdk-js/dist/test/live-generate.js`: `generate` of src/session.ts over `GrpcTransport`).
For each query the Python device generates, then the TypeScript device: greedy,
`SessionParams()` defaults (specsteer, gamma 0.5, alpha 1, top-k 10, 4-token drafts, bonus),
`--max-new-tokens` at most.

The queries: the demo prompt (the demo user's query 0 with the demo profile, as `python -m demo`
asks it), then the first `--queries` of the dev data as bench.personal_loop plans them (one query
of each author in file order, then the second of each, ...): the prompt is
`core.prompts.task_prompt(subject)` and the profile is the author's device part of the history
(`bench.style_split.device_part`, what the personal loop's retrieval sees). Each device retrieves
over the profile and renders its private prompt itself (Python: `sdk.decoding.Specialist`;
TypeScript: `ProfileIndex`, `fitContext`, `PromptRenderer`), 3 entries in 1800 characters, so the
rendered IDs are compared too. Both devices run the egress guard `sdk generate` runs (`--guard`,
default what ships: `placeholder`), each building it from the author's profile (its history and
trailer identities) and redacting the prompt; the guard's decisions are compared as well.
`--guard off` is the unguarded run (docs/results/sdk_js_live_unguarded.md, before the TypeScript
device had a guard).

Writes docs/results/sdk_js_live.{md,json} (or `--out`) after every query, so an interrupted run
leaves the queries it finished.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from specsteer.sdk.uplink_guard import DEFAULT_GUARD_SETTING, GUARD_SETTINGS

__all__ = ["compare", "main", "markdown", "summarize"]

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "results" / "sdk_js_live"
SDK_JS = ROOT / "sdk-js"
TS_CHILD = SDK_JS / "dist" / "test" / "live-generate.js"
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "commit-bodies-dev.jsonl"
ROUND_TIMEOUT_S = 120.0  # the demo's: the verifier shares the CPU with the devices (demo/run.py)


_KEPT = ("token_ids", "text", "examples", "stats", "guard", "wall_s")  # of each device's answer, per query


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- the Python device child ------------------------------------------------------------------------


def _python_child(target: str, pki: str, threads: int, round_timeout: float, guard_name: str) -> None:
    """The Python device: the bundle loaded once, then one generation per job line on stdin."""
    from specsteer.core.model_registry import DEFAULT_SPECIALIST
    from specsteer.core.session_types import SessionParams
    from specsteer.sdk.bundles import default_bundle_path, load_bundle
    from specsteer.sdk.context import Profile
    from specsteer.sdk.decoding import DecodeOptions, Specialist, generate, vocabulary_width
    from specsteer.sdk.prompt_guard import guard_prompt
    from specsteer.sdk.remote import RemoteVerifier, TlsIdentity
    from specsteer.sdk.uplink_guard import guard_setting

    start = time.perf_counter()
    lm, drafter = load_bundle(default_bundle_path(DEFAULT_SPECIALIST), threads=threads)
    p = Path(pki)
    identity = TlsIdentity.from_files(p / "pins.txt", p / "devices" / "bob.pem", p / "devices" / "bob.key")
    ready = {
        "ready": True,
        "load_s": time.perf_counter() - start,
        "eos_ids": sorted(lm.eos_ids),
        "vocab_size": lm.vocab_size,
        "width": vocabulary_width(lm),
    }
    print(json.dumps(ready), flush=True)
    with RemoteVerifier(target, identity, vocab_size=lm.vocab_size, round_timeout=round_timeout) as verifier:
        for line in sys.stdin:
            if not line.strip():
                continue
            job = json.loads(line)
            profile = Profile.from_obj(job["user"], source=job["id"])
            specialist = Specialist(
                lm, profile, context_entries=job["context_entries"], context_chars=job["context_chars"], drafter=drafter
            )
            guard = guard_setting(profile, lm.tokenizer, guard_name)  # as `sdk generate` builds it
            shown = job["prompt"] if guard is None else guard_prompt(guard, job["prompt"]).public  # what goes up
            t = time.perf_counter()
            g = generate(
                specialist, job["prompt"], SessionParams(), DecodeOptions(job["max_new_tokens"]), verifier, guard=guard
            )
            wall = time.perf_counter() - t
            s = g.stats
            counts = {k[len("guard_") :]: v for k, v in s.extra.items() if k.startswith("guard_")}
            out = {
                "id": job["id"],
                "token_ids": list(g.token_ids),
                "text": g.text,
                "private_ids": specialist.private_prompt_ids(job["prompt"], with_context=True),
                "public_ids": specialist.public_prompt_ids(shown),
                "examples": [e.subject for e in specialist.context_for(job["prompt"])],
                "stats": {
                    "rounds": s.rounds,
                    "drafted": s.drafted,
                    "accepted": s.accepted,
                    "fallback": s.fallback,
                    "resumed": getattr(s, "resumed", 0),
                },
                "guard": {k: v for k, v in counts.items() if k not in ("checks", "lookahead_tokens")},
                "wall_s": wall,
            }
            print(json.dumps(out), flush=True)


# --- the parent -------------------------------------------------------------------------------------


class _Child:
    """A device process answering one JSON line per job line."""

    def __init__(self, name: str, argv: list[str], cwd: Path, err: IO[bytes]) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            argv, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, bufsize=1
        )

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"the {self.name} device exited ({self.proc.wait()}) without answering")
            if line.startswith("{"):  # a runtime's stray print is not an answer
                got: dict[str, Any] = json.loads(line)
                return got

    def ask(self, job: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def _queries(data: Path, count: int) -> list[dict[str, Any]]:
    """The demo prompt, then the dev queries in bench.personal_loop's order."""
    from bench.dataset import first_users
    from bench.personal_loop import planned_queries
    from bench.style_split import device_part
    from specsteer.core.prompts import task_prompt
    from specsteer.sdk.context import demo_profile_path

    demo = json.loads(demo_profile_path().read_text(encoding="utf-8"))
    jobs = [
        {
            "id": "demo-0",
            "source": f"{demo_profile_path().name}, query 0",
            "subject": demo["queries"][0]["subject"],
            "prompt": task_prompt(demo["queries"][0]["subject"]),
            "user": {k: v for k, v in demo.items() if k != "queries"},
        }
    ]
    users = first_users(data)
    per_user = -(-count // max(len(users), 1))
    for user, query in planned_queries(users, per_user)[:count]:
        index = user["queries"].index(query)
        jobs.append(
            {
                "id": f"{user['user_id']}-q{index}",
                "source": f"{data.name}, author {user['user_id']}, query {index}",
                "subject": query["subject"],
                "prompt": task_prompt(query["subject"]),
                "user": device_part(user),
            }
        )
    return jobs


def _profile_entries(user: dict[str, Any], source: str) -> list[dict[str, str]]:
    """The profile's entries as the Python device reads them (`sdk.context.Profile`), for the TS device."""
    from specsteer.sdk.context import Profile

    return [{"subject": e.subject, "body": e.body} for e in Profile.from_obj(user, source=source).entries]


def _agreement(a: Sequence[int], b: Sequence[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def compare(py: dict[str, Any], ts: dict[str, Any]) -> dict[str, Any]:
    """One query's verdict: equal token IDs and text, the common prefix, the first divergence."""
    a, b = py["token_ids"], ts["token_ids"]
    prefix = _agreement(a, b)
    out: dict[str, Any] = {
        "ids_equal": a == b,
        "text_equal": py["text"] == ts["text"],
        "private_ids_equal": py["private_ids"] == ts["private_ids"],
        "public_ids_equal": py["public_ids"] == ts["public_ids"],
        "examples_equal": py["examples"] == ts["examples"],
        "guard_equal": py.get("guard", {}) == ts.get("guard", {}),
        "prefix": prefix,
        "total": max(len(a), len(b)),
    }
    if a != b:
        out["first_divergence"] = {
            "index": prefix,
            "python": a[prefix] if prefix < len(a) else None,
            "typescript": b[prefix] if prefix < len(b) else None,
        }
    return out


def _total_decisions(rows: list[dict[str, Any]]) -> dict[str, int]:
    """The Python device's guard decisions over `rows`, by kind."""
    total: dict[str, int] = {}
    for r in rows:
        for kind, n in r["python"].get("guard", {}).items():
            total[kind] = total.get(kind, 0) + n
    return dict(sorted(total.items()))


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    done = [r for r in rows if "compare" in r]
    return {
        "run": len(done),
        "ids_equal": sum(r["compare"]["ids_equal"] for r in done),
        "text_equal": sum(r["compare"]["text_equal"] for r in done),
        "private_ids_equal": sum(r["compare"]["private_ids_equal"] for r in done),
        "public_ids_equal": sum(r["compare"]["public_ids_equal"] for r in done),
        "guard_equal": sum(r["compare"].get("guard_equal", True) for r in done),
        "guard_decisions": _total_decisions(done),
        "tokens_agreeing": sum(r["compare"]["prefix"] for r in done),
        "tokens_total": sum(r["compare"]["total"] for r in done),
        "python_wall_s": round(sum(r["python"]["wall_s"] for r in done), 1),
        "typescript_wall_s": round(sum(r["typescript"]["wall_s"] for r in done), 1),
        "fallbacks": sum(
            (r["python"]["stats"]["fallback"] is not None) + (r["typescript"]["stats"]["fallback"] is not None)
            for r in done
        ),
    }


def _write(result: dict[str, Any], out: Path) -> None:
    result["summary"] = summarize(result["queries"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    out.with_suffix(".md").write_text(markdown(result), encoding="utf-8")


def run(args: argparse.Namespace) -> dict[str, Any]:
    from demo.run import verifier_process  # the demo's way of running `server serve` on loopback
    from specsteer.core.model_registry import DEFAULT_GENERALIST, DEFAULT_SPECIALIST
    from specsteer.sdk.bundles import default_bundle_path
    from specsteer.server import pki as pki_mod

    if not TS_CHILD.is_file():
        built = TS_CHILD.relative_to(ROOT)
        raise SystemExit(f"no {built}: build the TypeScript device first (cd sdk-js && npm run build)")
    bundle = default_bundle_path(DEFAULT_SPECIALIST)
    jobs = _queries(args.data, args.queries)
    result: dict[str, Any] = {
        "command": " ".join(["python -m bench.sdk_js_live", *args.argv]),
        "machine": {
            "platform": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}",
            "load_average_before": round(os.getloadavg()[0], 2),
            "shared": "yes: a long benchmark ran on the same 2 cores meanwhile",
        },
        "generalist": DEFAULT_GENERALIST,
        "cloud_specialist": DEFAULT_SPECIALIST,
        "bundle": str(bundle),
        "max_new_tokens": args.max_new_tokens,
        "params": "SessionParams() defaults: specsteer, greedy, gamma 0.5, alpha 1, top-k 10, draft 4, bonus",
        "context": {"entries": args.context_entries, "chars": args.context_chars},
        "round_timeout_s": args.round_timeout,
        "threads": args.threads,
        "guard": args.guard,
        "queries": [],
    }
    with tempfile.TemporaryDirectory(prefix="specsteer-sdk-js-live-") as tmp_name:
        tmp = Path(tmp_name)
        p = pki_mod.init_pki(tmp / "pki")
        pki_mod.issue_device(p.directory, "alice")  # the TypeScript device
        pki_mod.issue_device(p.directory, "bob")  # the Python device
        _log(f"starting the verifier ({DEFAULT_GENERALIST} + {DEFAULT_SPECIALIST}, mutual TLS)")
        t = time.perf_counter()
        serve = argparse.Namespace(seed=0, generalist=DEFAULT_GENERALIST, specialist=DEFAULT_SPECIALIST, cache_dir=None)
        extra = [] if args.server_threads is None else ["--torch-threads", str(args.server_threads)]
        children: list[_Child] = []
        with (
            verifier_process(serve, p.directory, extra=extra) as ready,
            (tmp / "python.err").open("wb") as py_err,
            (tmp / "typescript.err").open("wb") as ts_err,
        ):
            port = ready()
            result["verifier_load_s"] = round(time.perf_counter() - t, 1)
            _log(f"verifier serving on 127.0.0.1:{port} after {result['verifier_load_s']} s")
            try:
                target = f"127.0.0.1:{port}"
                python = _Child(
                    "Python",
                    [
                        sys.executable,
                        "-m",
                        "bench.sdk_js_live",
                        "--python-child",
                        target,
                        str(p.directory),
                        str(args.threads),
                        str(args.round_timeout),
                        args.guard,
                    ],
                    ROOT,
                    py_err,
                )
                children.append(python)
                hello = python.read()
                _log(f"Python device ready in {hello['load_s']:.1f} s")
                config = {
                    "bundle": str(bundle),
                    "target": target,
                    "pins": str(p.pins),
                    "cert": str(p.device_cert("alice")),
                    "key": str(p.device_key("alice")),
                    "eos_ids": hello["eos_ids"],
                    "vocab_size": hello["vocab_size"],
                    "width": hello["width"],
                    "threads": args.threads,
                    "round_timeout_ms": int(args.round_timeout * 1000),
                    "guard": args.guard,
                }
                (tmp / "ts-config.json").write_text(json.dumps(config), encoding="utf-8")
                ts = _Child("TypeScript", ["node", str(TS_CHILD), str(tmp / "ts-config.json")], SDK_JS, ts_err)
                children.append(ts)
                ts_hello = ts.read()
                _log(f"TypeScript device ready in {ts_hello['load_s']:.1f} s")
                result["device_load_s"] = {
                    "python": round(hello["load_s"], 2),
                    "typescript": round(ts_hello["load_s"], 2),
                }
                for n, job in enumerate(jobs, 1):
                    common = {
                        "id": job["id"],
                        "prompt": job["prompt"],
                        "context_entries": args.context_entries,
                        "context_chars": args.context_chars,
                        "max_new_tokens": args.max_new_tokens,
                    }
                    got_py = python.ask({**common, "user": job["user"]})
                    _log(
                        f"[{n}/{len(jobs)}] {job['id']} Python: {len(got_py['token_ids'])} tokens, "
                        f"{got_py['stats']['rounds']} rounds, {got_py['wall_s']:.1f} s"
                    )
                    got_ts = ts.ask(
                        {
                            **common,
                            "profile": _profile_entries(job["user"], job["id"]),
                            "guard_items": job["user"]["profile"],  # the raw entries: trailers and all
                        }
                    )
                    verdict = compare(got_py, got_ts)
                    _log(
                        f"[{n}/{len(jobs)}] {job['id']} TypeScript: {len(got_ts['token_ids'])} tokens, "
                        f"{got_ts['stats']['rounds']} rounds, {got_ts['wall_s']:.1f} s; equal: {verdict['ids_equal']} "
                        f"({verdict['prefix']}/{verdict['total']})"
                    )
                    result["queries"].append(
                        {
                            "id": job["id"],
                            "source": job["source"],
                            "subject": job["subject"],
                            "public_tokens": len(got_py["public_ids"]),
                            "private_tokens": len(got_py["private_ids"]),
                            "compare": verdict,
                            "python": {k: got_py[k] for k in _KEPT},
                            "typescript": {k: got_ts[k] for k in _KEPT},
                        }
                    )
                    result["machine"]["load_average_after"] = round(os.getloadavg()[0], 2)
                    _write(result, args.out)
            finally:
                for c in children:
                    c.close()
                if any(c.proc.returncode not in (0, None) for c in children):
                    # A device that failed: its own last lines, and the verifier's (demo.run's server.log).
                    for name in ("python.err", "typescript.err", "server.log"):
                        tail = (tmp / name).read_text(errors="replace").strip().splitlines()[-3:]
                        if tail:
                            _log(f"{name}: " + " | ".join(tail))
    return result


def _short(text: str, n: int = 90) -> str:
    flat = " ".join(text.split()).replace("|", "\\|")
    return flat if len(flat) <= n else flat[: n - 1] + "…"


def _guard_sentence(setting: str) -> str:
    if setting == "off":
        return "Neither device runs an egress guard (`--guard off`): the public prompt goes up as typed."
    return (
        f"Both devices run the egress guard `sdk generate` runs (`{setting}`), each building it from the "
        "author's profile (history and trailer identities) and redacting the prompt before it goes up."
    )


def _guard_counts(s: dict[str, Any]) -> str:
    """The guard's part of the summary line (absent from runs before it was compared)."""
    if "guard_equal" not in s:
        return ""
    decisions = ", ".join(f"{k} {v}" for k, v in s["guard_decisions"].items()) or "none"
    return (
        f"; public prompt IDs equal: {s['public_ids_equal']} of {s['run']}; guard decisions equal: "
        f"{s['guard_equal']} of {s['run']} (the Python device's, all queries: {decisions})"
    )


def markdown(result: dict[str, Any]) -> str:
    s, m = result["summary"], result["machine"]
    lines = [
        "# The TypeScript device on the live default pair",
        "",
        f"`PYTHONPATH=. nice -n 5 {result['command']}`",
        "",
        f"One verifier (`server serve`: the Generalist {result['generalist']}, the cloud's generic Specialist "
        f"{result['cloud_specialist']}, fp32 on the CPU, mutual TLS with a throwaway PKI, both devices trusting the "
        f"pins file's anchors only), loaded once in {result.get('verifier_load_s', '?')} s. Two devices, each with "
        f"the default bundle's int4 ONNX Specialist ({result['bundle']}) loaded once: the Python device "
        "(`sdk.decoding.generate` over `sdk.remote.RemoteVerifier`) and the TypeScript device (`generate` of "
        "sdk-js/src/session.ts over `GrpcTransport`, `sdk-js/test/live-generate.ts`). Per query, the Python "
        f"device generates, then the TypeScript device: {result['params']}, at most {result['max_new_tokens']} "
        f"new tokens. Each device retrieves {result['context']['entries']} profile entries "
        f"({result['context']['chars']} characters) and renders its private prompt itself. "
        f"{_guard_sentence(result.get('guard', 'off'))} "
        f"{m['platform']}; shared: {m['shared']} (load average {m['load_average_before']} before, "
        f"{m.get('load_average_after', '?')} after), so the wall times are slow and noisy.",
        "",
        f"**Texts equal: {s['text_equal']} of {s['run']}** (token IDs equal: {s['ids_equal']} of {s['run']}; "
        f"rendered private prompt IDs equal: {s['private_ids_equal']} of {s['run']}{_guard_counts(s)}); tokens "
        f"agreeing before the first divergence: {s['tokens_agreeing']} of {s['tokens_total']}. Wall time, all "
        f"queries: Python {s['python_wall_s']} s, TypeScript {s['typescript_wall_s']} s; fallbacks: {s['fallbacks']}.",
        "",
        "| query | subject | prompt tokens (public / private) | equal | agreeing prefix | rounds (Py / TS) | "
        "accepted (Py / TS) | wall s (Py / TS) | first divergence |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["queries"]:
        c, py, ts = r["compare"], r["python"], r["typescript"]
        div = c.get("first_divergence")
        where = "-" if div is None else f"token {div['index']}: Py {div['python']}, TS {div['typescript']}"
        extra = "" if c["private_ids_equal"] else " (private IDs differ)"
        extra += "" if c.get("guard_equal", True) else " (guard decisions differ)"
        lines.append(
            f"| {r['id']} | {_short(r['subject'], 60)} | {r['public_tokens']} / {r['private_tokens']} | "
            f"{'yes' if c['ids_equal'] and c['text_equal'] else 'NO'}{extra} | {c['prefix']}/{c['total']} | "
            f"{py['stats']['rounds']} / {ts['stats']['rounds']} | "
            f"{py['stats']['accepted']}/{py['stats']['drafted']} / "
            f"{ts['stats']['accepted']}/{ts['stats']['drafted']} | "
            f"{py['wall_s']:.1f} / {ts['wall_s']:.1f} | {where} |"
        )
    lines += ["", "The texts (the Python device's; the TypeScript device's where it differs):", ""]
    for r in result["queries"]:
        lines.append(f"- **{r['id']}** ({r['source']}): {_short(r['python']['text'], 240)}")
        if not r["compare"]["text_equal"]:
            lines.append(f"  - TypeScript: {_short(r['typescript']['text'], 240)}")
    dl = result.get("device_load_s", {})
    lines += [
        "",
        f"Device load (bundle hashes, tokenizer, ONNX session): Python {dl.get('python', '?')} s, TypeScript "
        f"{dl.get('typescript', '?')} s. A device's wall time is one generation: retrieval and rendering, the "
        "private prompt's prefill, every round trip to the verifier (whose 1.5B Generalist verifies on the same "
        "2 cores) and the drafting. Round timeout "
        f"{result['round_timeout_s']:g} s on both devices.",
    ]
    return "\n".join(lines) + "\n"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.sdk_js_live", description=__doc__.split("\n")[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the dev data (JSONL, one author a line)")
    p.add_argument("--queries", type=int, default=12, help="dev queries after the demo prompt")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--context-entries", type=int, default=3, help="profile entries retrieved (sdk generate's default)")
    p.add_argument("--context-chars", type=int, default=1800, help="their character budget (Specialist's default)")
    p.add_argument("--threads", type=int, default=2, help="intra-op threads of each device's ONNX runtime")
    p.add_argument("--server-threads", type=int, default=None, help="the verifier's --torch-threads (default torch's)")
    p.add_argument("--round-timeout", type=float, default=ROUND_TIMEOUT_S, help="seconds per round trip, both devices")
    p.add_argument(
        "--guard",
        choices=GUARD_SETTINGS,
        default=DEFAULT_GUARD_SETTING,
        help="both devices' egress guard (default: what ships)",
    )
    p.add_argument("--out", type=Path, default=OUT, help="writes OUT.md and OUT.json")
    p.add_argument("--from-json", type=Path, default=None, help="render the page of an earlier result only")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["--python-child"]:  # target pki threads round_timeout: the Python device, for the parent
        os.environ.setdefault("GRPC_VERBOSITY", "NONE")
        _python_child(words[1], words[2], int(words[3]), float(words[4]), words[5])
        return 0
    args = _parser().parse_args(words)
    args.argv = words
    if args.from_json is not None:
        result = json.loads(args.from_json.read_text(encoding="utf-8"))
        print(markdown(result), end="")
        return 0
    result = run(args)
    print(markdown(result), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
