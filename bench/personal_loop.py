"""The loop the federation exists for: federated adapters, then SpecSteer, scored on ROUGE and on style.

    python -m bench.personal_loop [--data ../shared/data/commit-bodies-dev.jsonl] [--users 8]
        [--queries-per-user 3] [--history 48] [--rounds 2] [--dp-steps 2] [--personal-steps 4]
        [--max-len 128] [--max-new-tokens 64] [--threads 1] [--dp | --no-dp]
        [--drafter onnx|torch|llamacpp] [--drafter-precision P] [--guard G] [--cache-dir CACHE]
        [--gammas G,...] [--rows LABEL ...] [--skip-v0-eval]
        [--work WORK] [--runs RUNS.jsonl] [--out OUT]
    python -m bench.personal_loop --report-only --runs RUNS.jsonl --work WORK --out OUT

Style split (`bench.style_split`, issue #51). A fixed hash rule puts about one history entry in
four into each author's style part: the style measures are fitted on it and nothing else sees
it. Training and retrieval use the rest (the device part).

Training. One simulated device per author (the first `--users` of the data file), each holding
the newest `--history` entries of its device part (the newest 4 of them held out for the
federation's own evaluation). Training sequences must fit the prompt and a body: at
`--max-len 64` the 0.5B's prompt alone fills them and every device skips ("no usable sequence").
The federation trains exactly as `federation run --simulation` does: the same
`RunOptions`, the real ServerApp and ClientApps through `federation.simulation.run_in_process`,
every device's own DP policy and ledger (with `--no-dp` the simulated devices' policy allows
plain SGD, as the CLI's `--no-dp` does). Each round is one run, like a periodic `federation
schedule`: the devices keep their personal adapters and ledgers between runs, and a restarted
benchmark resumes after the last finished round (a round cut short runs again; the devices that
had trained in it keep the ε they spent). Before the first round every device evaluates
the untrained adapter (v0, the base model), so the held-out losses have their starting point.
Training runs in a child process, which frees its model before generation starts. Its state
stays in ``WORK/<dp|no-dp>/`` and is reused; a WORK folder trained with other settings is refused.

Generation. Every author's held-out queries (newer than their whole history, never trained on)
are generated greedily with the base Specialist (`slm-rag`), the cloud alone (`llm`) and
SpecSteer (`specsteer`, gamma 0.5); and with the device's adapters (`slm-rag+adapters`,
`specsteer+adapters`), built exactly as `sdk generate --federation-state DEVICE_STATE` builds them:
by default on the shipped device path, `sdk.specialists.load_specialist` with the SDK's default
drafter and precision (onnx int4: the base model's bundle, or the device's merged adapters
converted once per device into CACHE/USER) behind the default egress guard; `--drafter torch`
merges with `core.adapters.load_device_specialist` into the torch model (the path before issue
#51). The registered in-process verifier's generic Specialist merges only the global version the
session declares. Retrieval uses the device part of each author's history in every row.
Every row records its device path (drafter, precision, guard).
Each finished generation is appended to the runs log at once, and a rerun skips what is there.

Scores. ROUGE-L / ROUGE-1 against the real body, and an authorship score (`bench.attribution`:
character n-gram TF-IDF + logistic regression fitted on the authors' style part): the
probability of the true author and whether that author ranks first; and a second, independent
measure (`bench.attribution.ProfileDistance`: Burrows's Delta over function words and
punctuation, fitted on the same part): the share of the other authors farther from the text than
its author. Both are calibrated on the real held-out bodies (the ceiling), beside what a copy of
the device's newest history entries scores (the gaming the split prevents) and `llm`'s score (a
model that never sees the history). Writes a frontier plot, ROUGE-L against each style measure.
Paired differences over the same queries with 95 % bootstrap intervals
(`bench.quality.bootstrap_ci`). Writes OUT/personal_loop.{md,json}.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import logging
import multiprocessing
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rouge_score import rouge_scorer  # type: ignore[import-untyped]

from bench.dataset import first_users
from bench.personal_loop_report import (
    ALPHA,
    GAMMA,
    HOLDOUT,
    LLM,
    SLM_RAG,
    SPECSTEER,
    TOP_K,
    VARIANTS,
    Gate,
    adapter_label,
    loss_table,
    stopped_device_label,
    sweep_label,
    write_report,
)
from bench.quality import RunsLog
from bench.style_split import RULE, device_part
from specsteer.core.errors import ConfigError, SpecSteerError
from specsteer.core.models import DEFAULT_GENERALIST, DEFAULT_SPECIALIST
from specsteer.sdk.drafters import DEFAULT_DRAFTER, DRAFTERS, ONNX_PRECISIONS
from specsteer.sdk.specialists import DEFAULT_CONTEXT_ENTRIES
from specsteer.sdk.uplink_guard import DEFAULT_GUARD_SETTING, GUARD_SETTINGS

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "commit-bodies-dev.jsonl"
# --- training ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainSpec:
    """What a training folder was trained with; a folder is only reused for the same spec."""

    data_sha256: str
    users: tuple[str, ...]
    model: str
    dp: bool
    history: int
    rounds: int
    dp_steps: int
    personal_steps: int
    max_len: int
    style_split: str = ""  # `bench.style_split.RULE`: the history part the devices never see

    @property
    def variant(self) -> str:
        return "dp" if self.dp else "no-dp"


@dataclass
class Training:
    """One variant's training folder: the devices' data, the federation state, the spec."""

    root: Path
    spec: TrainSpec
    threads: int = 1
    evaluate_v0: bool = True  # the base model's held-out loss on every device before round 1

    @property
    def data(self) -> Path:
        return self.root / "devices.jsonl"

    @property
    def state(self) -> Path:
        return self.root / "federation"

    def options(self) -> Any:
        from specsteer.federation.run_options import RunOptions

        # One round per run: resumable after each, as periodic `federation schedule` runs are.
        return RunOptions(
            state_dir=self.state,
            rounds=1,
            clients=len(self.spec.users),
            data=self.data,
            model=self.spec.model,
            dp=self.spec.dp,
            dp_steps=self.spec.dp_steps,
            personal_steps=self.spec.personal_steps,
            max_len=self.spec.max_len,
        )

    def nodes(self) -> list[dict[str, Any]]:
        nodes = self.options().simulation_nodes()
        for node in nodes:
            node["threads"] = self.threads
        return nodes

    def device_states(self) -> dict[str, Path]:
        """Each author's device state folder (what `sdk generate --federation-state` is given)."""
        return {str(n["user-id"]): Path(n["state-dir"]) for n in self.nodes()}

    def rounds_done(self) -> list[dict[str, Any]]:
        """The server's summaries of the finished runs (one round each)."""
        from specsteer.federation.rounds import RUN_LOG

        log = self.options().server_dir / RUN_LOG
        if not log.is_file():
            return []
        return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]

    def finished(self) -> bool:
        return len(self.rounds_done()) >= self.spec.rounds

    def prepare(self, users: Sequence[dict[str, Any]]) -> None:
        """Write the devices' data (newest `history` entries, no queries) and the spec, or check them."""
        spec_file = self.root / "spec.json"
        wanted = json.loads(json.dumps(asdict(self.spec)))
        if spec_file.is_file():
            have = json.loads(spec_file.read_text(encoding="utf-8"))
            if have != wanted:
                differ = sorted(k for k in wanted if have.get(k) != wanted[k])
                raise ConfigError(
                    f"{self.root} was trained with other settings ({', '.join(differ)}); use another --work folder."
                )
            return
        self.root.mkdir(parents=True, exist_ok=True)
        # The device part only (`bench.style_split`): the style measures' part is never trained on.
        lines = [
            json.dumps({"user_id": u["user_id"], "profile": device_part(u)["profile"][-self.spec.history :]}) + "\n"
            for u in users
        ]
        self.data.write_text("".join(lines), encoding="utf-8")
        spec_file.write_text(json.dumps(wanted, indent=1) + "\n", encoding="utf-8")

    def summary(self) -> dict[str, Any]:
        """Per device: ε spent (its ledger), the held-out losses of each evaluation (its own log)."""
        from specsteer.federation.participant import Device

        config = self.options().run_config()
        devices = []
        for node in self.nodes():
            device = Device.from_configs(node, config)
            status = device.status()
            events = _read_jsonl(device.state_dir / "rounds.jsonl")
            evaluations = [e for e in events if e.get("event") == "evaluate"]
            trains = [e for e in events if e.get("event") == "train"]
            devices.append(
                {
                    "user": node["user-id"],
                    "epsilon": status["epsilon_spent"] if self.spec.dp else None,
                    "delta": status["delta"],
                    "accountant": status["accountant"],
                    "dp_rounds": status["dp_rounds"],
                    "global_versions": status["global_versions"],
                    "dp_steps": [e.get("dp_steps") for e in trains],
                    # A device that could not afford a round sits it out (it replies all the same).
                    "skipped": [e.get("reason") for e in events if e.get("event") == "skipped"],
                    "losses": [
                        {
                            "round": e.get("server_round"),
                            "version": e.get("adapter_version"),
                            "global": e.get("loss-global"),
                            "personal": e.get("loss-personal"),
                        }
                        for e in evaluations
                    ],
                }
            )
        rounds = self.rounds_done()
        return {
            "variant": self.spec.variant,
            "spec": asdict(self.spec),
            "run_config": {k: v for k, v in config.items() if k != "server-state-dir"},
            "rounds": [
                {
                    "version_out": r.get("version_out"),
                    "seconds": r.get("seconds"),
                    "replies": [x.get("replies") for x in r.get("rounds", [])],
                    "refusals": [x.get("refusals") for x in r.get("rounds", [])],
                }
                for r in rounds
            ],
            "devices": devices,
        }


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def train(training: Training) -> None:
    """Evaluate v0 on every device (once), then run the rounds still missing, one run each."""
    import torch

    from specsteer.federation.offline import go_offline, quiet_flower
    from specsteer.federation.participant import Device, EligibilityPolicy
    from specsteer.federation.rounds import ServerSettings
    from specsteer.federation.server_app import ensure_initial_version
    from specsteer.federation.simulation import run_in_process
    from specsteer.federation.store import AdapterStore
    from specsteer.federation.task import TaskConfig

    go_offline()
    quiet_flower(False)
    # Flower's logging setup shows every library's debug lines; BM25 logs one per retrieval.
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    torch.set_num_threads(training.threads)
    options = training.options()
    config = options.run_config()
    nodes = training.nodes()
    if training.evaluate_v0 and not training.rounds_done() and not (training.root / "v0-evaluated").is_file():
        start = ensure_initial_version(ServerSettings.from_run_config(config), TaskConfig.from_run_config(config))
        arrays = AdapterStore(options.server_dir / "adapters").arrays(start)
        for node in nodes:
            t0 = time.perf_counter()
            device = Device.from_configs(node, config)
            got = device.evaluate_round(arrays, start, policy=EligibilityPolicy(), run_id=0, server_round=0)
            _say(
                f"{node['user-id']}: held-out loss of v{start} {got['loss-global']:.3f} "
                f"({time.perf_counter() - t0:.0f}s)"
            )
        (training.root / "v0-evaluated").write_text("done\n", encoding="utf-8")
    while not training.finished():
        number = len(training.rounds_done()) + 1
        t0 = time.perf_counter()
        _say(f"{training.spec.variant}: round {number}/{training.spec.rounds} on {len(nodes)} devices")
        summary, _ = run_in_process(config, nodes)
        for r in summary.get("rounds", []):
            refused = f", refused: {r['refusals'][0]}" if r.get("refusals") else ""
            _say(
                f"{training.spec.variant}: round {number} done in {time.perf_counter() - t0:.0f}s: "
                f"{r.get('replies', 0)} trained, v{r.get('version_out')}{refused}"
            )


def _train_child(root: str, spec: dict[str, Any], threads: int, evaluate_v0: bool) -> None:
    """The training process: exits 1 with one line on a project error."""
    training = Training(Path(root), TrainSpec(**{**spec, "users": tuple(spec["users"])}), threads, evaluate_v0)
    try:
        train(training)
    except SpecSteerError as exc:
        print(f"bench.personal_loop: error: training: {exc}", file=sys.stderr, flush=True)
        sys.exit(1)


def train_in_child(training: Training) -> bool:
    """Train in a fresh process (its model and activations are freed when it ends); True if it finished."""
    ctx = multiprocessing.get_context("spawn")
    process = ctx.Process(
        target=_train_child,
        args=(str(training.root), asdict(training.spec), training.threads, training.evaluate_v0),
        name="personal-loop",
    )
    process.start()
    process.join()
    return process.exitcode == 0 and training.finished()


# --- generation --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    label: str
    method: str  # slm-rag, llm or specsteer
    variant: str | None  # the training whose adapters the device uses (None: the base weights)
    gamma: float = GAMMA  # specsteer's ratio-test threshold
    alpha: float = ALPHA  # specsteer's recovery weight
    gate: Gate | None = None  # specsteer's certainty gate (certainty, gamma_uncertain); None: the paper's rule
    gamma_form: float | None = None  # specsteer's form rule; None: the paper's rule
    top_k: int = TOP_K  # specsteer's steering candidates per recovery
    no_repeat: int = 0  # the device's repetition stop (DecodeOptions.no_repeat_ngram); 0: off


def rows_for(
    variant: str,
    gammas: Sequence[float] = (),
    alphas: Sequence[float] = (),
    gates: Sequence[tuple[float, Gate]] = (),
    forms: Sequence[tuple[float, float]] = (),
    top_ks: Sequence[int] = (),
    no_repeats: Sequence[int] = (),
) -> list[list[Row]]:
    """This run's rows in passes over the queries: first the rows the issue's comparisons need
    (the adapters' first, they are what is new), then `specsteer` on the base weights, which only
    explains them, last; the sweep's `specsteer+adapters` rows before it); so a run cut short has
    the comparisons on as many queries as possible. Each gate ((gamma, (certainty, gamma_uncertain)))
    and each form rule ((gamma, gamma_form)) is swept with the adapters and on the base weights
    (beside `specsteer`); each repetition stop n too (at the default gamma and, with the adapters,
    every swept gamma), and with it `slm-rag` under the same stop."""
    passes = [
        [
            Row(adapter_label(SLM_RAG, variant), SLM_RAG, variant),
            Row(SLM_RAG, SLM_RAG, None),
            Row(adapter_label(SPECSTEER, variant), SPECSTEER, variant),
            Row(LLM, LLM, None),
        ],
    ]
    swept = [Row(sweep_label(variant, g), SPECSTEER, variant, g) for g in gammas]
    swept += [Row(sweep_label(variant, GAMMA, a), SPECSTEER, variant, GAMMA, a) for a in alphas if a != ALPHA]
    swept += [
        Row(sweep_label(variant, GAMMA, top_k=k), SPECSTEER, variant, GAMMA, top_k=k) for k in top_ks if k != TOP_K
    ]
    swept += [Row(sweep_label(variant, g, gate=gate), SPECSTEER, variant, g, gate=gate) for g, gate in gates]
    swept += [Row(sweep_label(variant, g, gamma_form=f), SPECSTEER, variant, g, gamma_form=f) for g, f in forms]
    for n in no_repeats:
        swept.append(Row(stopped_device_label(variant, n), SLM_RAG, variant, no_repeat=n))
        swept += [
            Row(sweep_label(variant, g, no_repeat=n), SPECSTEER, variant, g, no_repeat=n)
            for g in dict.fromkeys((GAMMA, *gammas))
        ]
    if swept:
        passes.append(swept)
    base = [Row(sweep_label(None, g, gate=gate), SPECSTEER, None, g, gate=gate) for g, gate in gates]
    base += [Row(sweep_label(None, g, gamma_form=f), SPECSTEER, None, g, gamma_form=f) for g, f in forms]
    for n in no_repeats:
        base += [
            Row(sweep_label(None, GAMMA, no_repeat=n), SPECSTEER, None, no_repeat=n),
            Row(stopped_device_label(None, n), SLM_RAG, None, no_repeat=n),
        ]
    passes.append([Row(SPECSTEER, SPECSTEER, None), *base])
    return passes


class Generator:
    """The models, loaded once; per author, the device and verifier `sdk generate` would build."""

    def __init__(
        self,
        specialist: str,
        generalist: str,
        *,
        drafter: str = DEFAULT_DRAFTER,
        precision: str | None = None,
        guard: str = DEFAULT_GUARD_SETTING,
        cache_dir: Path | None = None,
    ) -> None:
        from specsteer.core.models import load_causal_lm

        self.specialist_name = specialist
        self.drafter, self.precision, self.guard, self.cache_dir = drafter, precision, guard, cache_dir
        # The torch Specialist: the in-process verifier's generic copy (and the torch drafter's).
        self.s_lm = load_causal_lm(specialist, progress=False)
        self.g_lm = load_causal_lm(generalist, progress=False)
        self._local: dict[tuple[str, str | None], tuple[Any, Any, int]] = {}

    def local(self, profile: Any, state: Path | None) -> tuple[Any, Any, int]:
        """(Specialist, in-process verifier, declared global version) for this author, as `sdk generate
        [--federation-state STATE]` builds them: the library calls of `sdk.cli.build_local` and
        `declared_adapter_version` (a benchmark may not import a command line, docs/architecture.md).
        Cached for one author at a time: the merged models are large."""
        from specsteer.core.adapter_files import state_folders
        from specsteer.core.adapters import load_device_specialist
        from specsteer.sdk.cloud_plugins import local_verifier_factory
        from specsteer.sdk.decoding import Specialist
        from specsteer.sdk.specialists import load_specialist

        key = (str(profile.user_id), None if state is None else str(state))
        if key not in self._local:
            if any(k[0] != key[0] for k in self._local):
                self._local = {}
                gc.collect()  # the previous author's merged copies (2 GiB each for the 0.5B) go first
            if self.drafter == "torch":
                # The device's newest global + personal adapters merged in, and the version it declares.
                device_lm, version = (self.s_lm, 0) if state is None else load_device_specialist(self.s_lm, state)
                specialist = Specialist(device_lm, profile, context_entries=DEFAULT_CONTEXT_ENTRIES)
            else:
                # What ships: `sdk generate`'s own loader (the base model's bundle, or the merged
                # adapters converted for the drafter), with the version the device declares.
                cache = None if self.cache_dir is None else self.cache_dir / key[0]
                specialist = load_specialist(
                    self.specialist_name,
                    profile,
                    drafter=self.drafter,
                    precision=self.precision,
                    federation_state=state,
                    context_entries=DEFAULT_CONTEXT_ENTRIES,
                    cache_dir=cache,
                    progress=False,
                )
                version = 0 if state is None else state_folders(state)[0] or 0
            # The cloud's generic Specialist gets the global versions the device holds, by declared number only.
            verifier = local_verifier_factory()(self.s_lm, self.g_lm, seed=0, federation_state=state)
            self._local[key] = (specialist, verifier, version)
        return self._local[key]

    def generate(
        self, user: dict[str, Any], query: dict[str, Any], row: Row, state: Path | None, max_new_tokens: int
    ) -> dict[str, Any]:
        from specsteer.core.prompts import task_prompt
        from specsteer.core.session_types import Method, SessionParams
        from specsteer.sdk.context import Profile
        from specsteer.sdk.decoding import DecodeOptions, generate
        from specsteer.sdk.uplink_guard import guard_setting

        # Retrieval sees the device part of the history only (`bench.style_split`).
        profile = Profile.from_obj(device_part(user), source=str(user["user_id"]))
        specialist, cloud, version = self.local(profile, state)
        if row.method == SLM_RAG:
            params, verifier = SessionParams(method=Method.SLM_RAG, adapter_version=version), None
        elif row.method == LLM:
            params, verifier = SessionParams(method=Method.LLM, draft_len=0, alpha=0.0), cloud
        else:
            certainty, gamma_uncertain = row.gate or (0.0, SessionParams.gamma_uncertain)
            params = SessionParams(
                gamma=row.gamma,
                alpha=row.alpha,
                certainty=certainty,
                gamma_uncertain=gamma_uncertain,
                gamma_form=row.gamma_form,
                top_k=row.top_k,
                adapter_version=version,
            )
            verifier = cloud
        guard = None if verifier is None else guard_setting(profile, specialist.lm.tokenizer, self.guard)
        options = DecodeOptions(max_new_tokens, no_repeat_ngram=row.no_repeat)
        out = generate(specialist, task_prompt(query["subject"]), params, options, verifier, guard=guard)
        scores = _SCORER.score(query["target"], out.text)
        return {
            "config": row.label,
            "user": user["user_id"],
            "subject": query["subject"],
            "specialist": self.specialist_name,
            "drafter": self.drafter,
            "drafter_precision": self.precision if self.drafter != "onnx" else self.precision or _onnx_default(),
            # The deployment's setting; a device-only row sends nothing for it to guard.
            "guard": self.guard,
            "max_new_tokens": max_new_tokens,
            "no_repeat_ngram": row.no_repeat,
            "variant": row.variant,
            "adapter_version": version,
            "rouge1": scores["rouge1"].fmeasure,
            "rougeL": scores["rougeL"].fmeasure,
            "text": out.text,
            **out.stats.as_dict(),
        }


_SCORER = rouge_scorer.RougeScorer(["rouge1", "rougeL"], use_stemmer=True)


def _onnx_default() -> str:
    from specsteer.sdk.drafters import DEFAULT_ONNX_PRECISION

    return DEFAULT_ONNX_PRECISION


def append_row(runs: RunsLog, row: dict[str, Any]) -> None:
    """Append one finished generation to the runs log (the format `bench.quality.RunsLog` reads)."""
    with runs.path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
    runs.done[(row["user"], row["subject"], row["config"], row["max_new_tokens"])] = row


# --- data --------------------------------------------------------------------------------------


def planned_queries(users: Sequence[dict[str, Any]], per_user: int) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Round-robin: every author's first query before any second one, so a partial run has every author."""
    return [(u, u["queries"][i]) for i in range(per_user) for u in users if i < len(u["queries"])]


# --- the command -------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench.personal_loop", description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="dataset JSONL, one author a line")
    # Sized for 2 shared cores (docs/results/README.md): one 0.5B LoRA step (batch 4, 128 tokens, 1 thread)
    # took about 40 s there, so 8 devices x 2 rounds x (4 personal + 2 DP steps) is about an hour per
    # training; the history costs no step time (batches are fixed), only a lower DP sample rate.
    p.add_argument("--users", type=int, default=8, help="authors (the first of the data file), one device each")
    p.add_argument("--queries-per-user", type=int, default=3, help="held-out queries per author")
    p.add_argument("--history", type=int, default=48, help="newest history entries each device trains on (4 held out)")
    p.add_argument("--rounds", type=int, default=2, help="federated rounds (one run each)")
    p.add_argument("--dp-steps", type=int, default=2, help="global-adapter steps a round proposes to each device")
    p.add_argument("--personal-steps", type=int, default=4, help="personal-adapter steps per device and round")
    p.add_argument("--max-len", type=int, default=128, help="tokens per training sequence")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=1, help="torch threads (training and generation)")
    p.add_argument(
        "--dp",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="train the global adapter with each device's default DP policy (--no-dp: plain SGD)",
    )
    p.add_argument("--specialist", default=DEFAULT_SPECIALIST)
    p.add_argument(
        "--drafter", choices=DRAFTERS, default=DEFAULT_DRAFTER, help="the device's forwards (default: what ships)"
    )
    p.add_argument("--drafter-precision", choices=ONNX_PRECISIONS, default=None, help="onnx drafter: its default")
    p.add_argument(
        "--guard", choices=GUARD_SETTINGS, default=DEFAULT_GUARD_SETTING, help="the egress guard (default: what ships)"
    )
    p.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="one model cache per device under it, CACHE/USER (each with the models, or a link to them), as each "
        "device has its own disk: a device keeps one merged conversion, so one shared cache would convert again "
        "at every change of author (default: the SDK's cache, shared)",
    )
    p.add_argument("--generalist", default=DEFAULT_GENERALIST)
    p.add_argument("--work", type=Path, default=Path("personal-loop-work"), help="training state, reused")
    p.add_argument("--runs", type=Path, default=None, help="the runs log (default: OUT/personal_loop.runs.jsonl)")
    p.add_argument("--out", type=Path, default=Path("docs/results"))
    p.add_argument(
        "--gammas",
        type=_gammas,
        default=(),
        help="also run specsteer+adapters at these gammas (comma-separated; the lever of its style trade-off)",
    )
    p.add_argument(
        "--alphas",
        type=_alphas,
        default=(),
        help=f"also run specsteer+adapters at gamma {GAMMA:g} with these recovery weights alpha (comma-separated; "
        f"the default {ALPHA:g} is the plain row)",
    )
    p.add_argument(
        "--top-ks",
        type=_top_ks,
        default=(),
        help=f"also run specsteer+adapters at gamma {GAMMA:g} with these candidate counts k (comma-separated; "
        f"the default {TOP_K} is the plain row)",
    )
    p.add_argument(
        "--gates",
        type=_gates,
        default=(),
        help="also run specsteer (with the adapters and on the base weights) under the certainty gate: "
        "comma-separated GAMMA:CERTAINTY:GAMMA_UNCERTAIN (docs/algorithm.md, 'The certainty gate')",
    )
    p.add_argument(
        "--forms",
        type=_forms,
        default=(),
        help="also run specsteer (with the adapters and on the base weights) under the form rule: "
        "comma-separated GAMMA:GAMMA_FORM (docs/algorithm.md, 'The form rule')",
    )
    p.add_argument(
        "--no-repeats",
        type=_no_repeats,
        default=(),
        help=f"also run slm-rag and specsteer (gamma {GAMMA:g} and, with the adapters, each of --gammas; with the "
        "adapters and on the base weights) under the device's repetition stop: comma-separated n-gram lengths "
        "(sdk generate --no-repeat-ngram)",
    )
    p.add_argument(
        "--rows",
        nargs="+",
        default=None,
        metavar="LABEL",
        help="generate only these rows (labels as in the tables); with no adapters' row among them nothing trains",
    )
    p.add_argument(
        "--skip-v0-eval",
        action="store_true",
        help="no held-out loss of the base model before round 1 (a device's evaluation costs minutes on shared cores)",
    )
    p.add_argument("--train-only", action="store_true", help="train (or finish training), generate nothing")
    p.add_argument("--report-only", action="store_true", help="write the report from the runs log and WORK")
    return p


def _numbers(text: str, name: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None
    if any(not 0 <= v < float("inf") for v in values):
        raise argparse.ArgumentTypeError(f"every {name} must be 0 or more and finite: {text!r}")
    return values


def _gammas(text: str) -> tuple[float, ...]:
    return _numbers(text, "gamma")


def _alphas(text: str) -> tuple[float, ...]:
    return _numbers(text, "alpha")


def _gates(text: str) -> tuple[tuple[float, Gate], ...]:
    out = []
    for item in text.split(","):
        values = _numbers(item.replace(":", ","), "gate") if item.count(":") == 2 else ()
        if not values or not 0 < values[1] <= 1:
            raise argparse.ArgumentTypeError(
                f"a gate is GAMMA:CERTAINTY:GAMMA_UNCERTAIN, certainty in (0, 1]: {item!r}"
            )
        out.append((values[0], (values[1], values[2])))
    return tuple(out)


def _whole_numbers(text: str, least: int, name: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of whole numbers: {text!r}") from None
    if any(v < least for v in values):
        raise argparse.ArgumentTypeError(f"every {name} must be at least {least}: {text!r}")
    return values


def _top_ks(text: str) -> tuple[int, ...]:
    return _whole_numbers(text, 1, "candidate count k")


def _no_repeats(text: str) -> tuple[int, ...]:
    return _whole_numbers(text, 2, "repetition stop's n-gram length")


def _forms(text: str) -> tuple[tuple[float, float], ...]:
    out = []
    for item in text.split(","):
        values = _numbers(item.replace(":", ","), "form rule") if item.count(":") == 1 else ()
        if not values:
            raise argparse.ArgumentTypeError(f"a form rule is GAMMA:GAMMA_FORM: {item!r}")
        out.append((values[0], values[1]))
    return tuple(out)


def _sweeps(args: argparse.Namespace) -> tuple[Sequence[Any], ...]:
    """`rows_for`'s sweeps from the command line, in its order."""
    return args.gammas, args.alphas, args.gates, args.forms, args.top_ks, args.no_repeats


def _say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _main(args, argv)
    except SpecSteerError as exc:
        print(f"bench.personal_loop: error: {exc}", file=sys.stderr)
        return 1


def _main(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    if not args.data.is_file():
        raise ConfigError(f"There is no data file at {args.data}.")
    least = {"--users": 2, "--queries-per-user": 1, "--rounds": 1, "--history": HOLDOUT + 2, "--threads": 1}
    least.update({"--max-new-tokens": 1, "--dp-steps": 0, "--personal-steps": 0})
    for option, smallest in least.items():
        if getattr(args, option[2:].replace("-", "_")) < smallest:
            raise ConfigError(f"{option} must be at least {smallest}.")
    users = first_users(args.data, args.users)
    if len(users) < args.users:
        raise ConfigError(f"{args.data} holds {len(users)} authors, fewer than --users {args.users}.")
    queries = planned_queries(users, args.queries_per_user)
    args.out.mkdir(parents=True, exist_ok=True)
    runs = RunsLog(args.runs if args.runs is not None else args.out / "personal_loop.runs.jsonl", "config")
    command = "python -m bench.personal_loop " + " ".join(argv if argv is not None else sys.argv[1:])
    spec = TrainSpec(
        data_sha256=hashlib.sha256(args.data.read_bytes()).hexdigest(),
        users=tuple(str(u["user_id"]) for u in users),
        model=str(args.specialist),
        dp=args.dp,
        history=args.history,
        rounds=args.rounds,
        dp_steps=args.dp_steps,
        personal_steps=args.personal_steps,
        max_len=args.max_len,
        style_split=RULE,
    )
    training = Training(args.work / spec.variant, spec, args.threads, not args.skip_v0_eval)

    every = [r for rows in rows_for(spec.variant, *_sweeps(args)) for r in rows]
    wanted = [r for r in every if args.rows is None or r.label in args.rows]
    if args.rows is not None and not wanted:
        raise ConfigError(f"none of --rows {' '.join(args.rows)} is a row of this run.")
    if not args.report_only and any(r.variant is not None for r in wanted):
        training.prepare(users)
        if not training.finished():
            _say(f"training ({spec.variant}): {len(users)} devices, {spec.rounds} rounds, state in {training.root}")
            if not train_in_child(training):
                raise ConfigError("The federated training did not finish (its log is above).")
        _say(f"training ({spec.variant}) done: {json.dumps(loss_table(training.summary()))}")
    if not args.report_only and not args.train_only:
        _generate(args, users, queries, runs, training, command)
    trainings = {}
    for variant in VARIANTS:
        other = Training(args.work / variant, spec, args.threads)
        if (other.root / "spec.json").is_file():
            stored = json.loads((other.root / "spec.json").read_text(encoding="utf-8"))
            other.spec = TrainSpec(**{**stored, "users": tuple(stored["users"])})
            trainings[variant] = other.summary()
    write_report(args, users, queries, runs, trainings, command)
    _say(f"wrote {args.out}/personal_loop.md, personal_loop.json")
    return 0


def _generate(
    args: argparse.Namespace,
    users: list[dict[str, Any]],
    queries: list[tuple[dict[str, Any], dict[str, Any]]],
    runs: RunsLog,
    training: Training,
    command: str,
) -> None:
    import torch

    torch.set_num_threads(args.threads)
    passes = [
        [r for r in rows if args.rows is None or r.label in args.rows]
        for rows in rows_for(training.spec.variant, *_sweeps(args))
    ]
    passes = [rows for rows in passes if rows]
    states = training.device_states() if any(r.variant is not None for rows in passes for r in rows) else {}
    generator: Generator | None = None
    trainings = {training.spec.variant: training.summary()} if (training.root / "spec.json").is_file() else {}
    plan = [(n, uq, rows) for rows in passes for n, uq in enumerate(queries, 1)]
    for step, (number, (user, query), rows) in enumerate(plan, 1):
        for row in rows:
            key = (user["user_id"], query["subject"], row.label, args.max_new_tokens)
            if key in runs.done:
                continue
            if generator is None:
                _say(f"loading {args.specialist} and {args.generalist}")
                generator = Generator(
                    args.specialist,
                    args.generalist,
                    drafter=args.drafter,
                    precision=args.drafter_precision,
                    guard=args.guard,
                    cache_dir=args.cache_dir,
                )
            state = states[str(user["user_id"])] if row.variant is not None else None
            got = generator.generate(user, query, row, state, args.max_new_tokens)
            append_row(runs, got)
            _say(
                f"step {step}/{len(queries) * len(passes)} query {number} {user['user_id']} {row.label:28s} "
                f"R-L {got['rougeL']:.3f} acc {got['acceptance_rate']:.2f} {got['new_tokens']} tok "
                f"{got['seconds']:.0f}s"
            )
        write_report(args, users, queries, runs, trainings, command)


if __name__ == "__main__":
    sys.exit(main())
