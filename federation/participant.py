"""One device's side of a round: eligibility, its state folder, and what it trains and sends.

The device's state folder (node config ``state-dir``) survives restarts::

    ledger.json        the ε ledger (federation.budget_ledger), which also fixes the device's DP policy;
                       sealed when the history is, with its counter of writes (ledger.json.seq)
    personal/          the personal adapter — never sent anywhere (sealed if the history is)
    global/v<N>/       the global adapter versions it received (the newest few)
    rounds.jsonl       its own log: what it trained, its held-out losses, why it refused (stays
                       local; ``rounds.vault``, sealed, when the history is sealed)

Node config (``flower-supernode --node-config``), all optional except the data:

    data-file          the user's history: a profile file, or a dataset JSONL with one user a line,
                       plaintext or sealed with `privacy seal` (key from $SPECSTEER_VAULT_KEY or
                       $SPECSTEER_VAULT_PASSPHRASE)
    user-id            which user of a multi-user file (or ``partition-id``, as Flower's simulation sets)
    num-partitions     with a single-user file: split its history this many ways (simulation only)
    state-dir          the folder above (default: ~/.specsteer/federation/device-<user>)
    eligibility-file   JSON {"idle": bool, "charging": bool, "unmetered": bool, "reported_at": time},
                       re-read every message, as the embedding app writes it (`federation.eligibility`:
                       `report_state`, or `federation device-state`); without it, the
                       ``eligibility.json`` such a report wrote in ``state-dir``, if there is one
    eligibility-max-age   seconds a reported state stays good (default 900); an older one, one
                       dated in the future or one that cannot be read is not eligible
    idle, charging, unmetered   the same flags given directly (used when there is no file)
    threads            torch threads for training

The device's DP policy, also node config, fixed in the ledger when it is created (a run cannot
change it, and a later node config that differs is refused):

    epsilon-budget       total ε this device will ever spend (default 8)
    delta                the δ every ε of this device is stated at (default 1e-5)
    min-noise-multiplier the least DP-SGD noise multiplier it trains with (default 1.0)
    dp-required          false lets runs train without DP (default true; simulations with --no-dp)
    accountant           rdp or prv (default rdp)

and, not fixed in the ledger, the device's limits on what a run may ask of it (a server sets the
run config, so everything in it that costs the device memory, time or its own adapters is bounded
here, before anything is loaded):

    model                the one model this device trains (default the embedded Specialist): a run
                         naming another is refused (it would download or convert any model or path)
    lora-targets         the modules a run's LoRA adapters may sit on (default the attention and MLP
                         projections; never the embeddings or the LM head unless listed here)
    max-lora-rank        the largest LoRA rank a run may ask (default 64; 10^6 grew memory by GBs)
    max-batch-size       the largest batch a run may ask (default 64)
    max-dp-steps         the most DP steps one round may take (default 64)
    max-personal-steps   the most personal steps (default 64; more are cut to it)
    max-len              the most tokens per training sequence (default 1024; cut to it)
    max-context-entries, max-context-chars   retrieved context per personal sequence (default 8
                         and 1800, inference's; cut to them)
    max-personal-lr      the largest personal learning rate (default 0.01; cut to it): the
                         personal adapter has no copy elsewhere, and lr 1000 ruined it
    min-holdout          the newest entries never trained on (default 4; a run's smaller holdout
                         is raised to it)
    max-sample-rate      the largest DP sampling rate a round may train at (default 0.5); at a
                         larger one it takes no private step (cover steps only, nothing spent):
                         at rate 1 two steps cost ε 7.08 where rate 1/6 costs 3.14 (σ 1, δ 1e-5)
    max-epsilon-per-round  the most ε one round may add to the ledger (default: the ε budget / 2,
                         so that the budget lasts at least 2 rounds; docs/federation.md has the
                         arithmetic): a round proposing more trains fewer private steps, the most
                         that stay within it, found with the ledger's own accountant, and runs the
                         rest as cover steps (``dp-steps 10000`` spent ε 7.96 of 8 in one round)
    require-idle, require-charging, require-unmetered   the eligibility flags this device needs
                         set before it takes part (default true each): a run's ``require-…``
                         may add to them, never waive them (the device's floor, not the server's)
    secagg-required      take part only in SecAgg+ rounds (default false)
    secagg-min-cohort    the fewest devices a SecAgg+ round may mask its update among (default 3;
                         the threshold must also be more than half the shares: `federation.secagg_terms`)
    max-version-jump     how far past its newest global version a message's may be (default 1000):
                         the device's newest version is the one its inference declares, and one
                         message at 2^31-1 kept it there for good
    round-time-quantum   seconds (default 0: off): a training round replies only at the next
                         multiple of it since the round began, so its wall time reads as a count
                         of quanta and no longer as the history's size (`round_wait`)

A run asking for more is refused with one fixed sentence (`federation.errors`). The run's
``dp-steps`` is only a proposal: the device trains as many steps, up to it and ``max-dp-steps``,
as its budget affords for its own history, and runs the rest as cover steps (the same batches
through the model, an update of noise alone, no ε spent), so that a device's round takes the same
time and sends an update of the same size whatever its history's size.

A run asking for less privacy (no DP, less noise, another δ) is refused with one fixed sentence
too: the detail (the device's own minimum, its δ) goes to its own log, since the figures would
tell devices apart.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from specsteer.core.errors import ConfigError
from specsteer.core.fileio import append_line
from specsteer.core.models import DEFAULT_SPECIALIST
from specsteer.federation.adapters import AdapterError, load_tensors, read_adapter, write_adapter
from specsteer.federation.atrest import append_sealed_log, device_key_provider, read_sealed_log, seal_file, unseal_file
from specsteer.federation.budget_ledger import Ledger, WriteCounter
from specsteer.federation.eligibility import (
    DEFAULT_MAX_AGE_S,
    FLAGS,
    STATE_FILE,
    AlwaysEligible,
    EligibilitySource,
    FileEligibility,
    FixedEligibility,
)
from specsteer.federation.errors import MessageRefusal, NotEligible, PolicyRefusal, RunConfigRefusal, UpdateNotFinite
from specsteer.federation.store import AdapterStore, version_dir
from specsteer.federation.task import (
    ALL_LINEAR,
    GLOBAL,
    MAX_LR,
    PERSONAL,
    DeviceData,
    DeviceDatasets,
    DPRoundResult,
    SpecialistWithAdapters,
    TaskConfig,
    all_finite,
    device_datasets,
    dp_sample_rate,
    evaluate_loss,
    load_user,
    noise_only_update,
    specialist_for,
    train_global_dp,
    train_personal,
)
from specsteer.privacy.accounting import ACCOUNTANTS
from specsteer.privacy.vault import KeyProvider

__all__ = [
    "DEFAULT_EPSILON_BUDGET",
    "TRAINED",
    "Device",
    "DevicePolicy",
    "EligibilityPolicy",
    "NotEligible",
    "PolicyRefusal",
    "round_outcome",
]

DEFAULT_EPSILON_BUDGET = 8.0
DEFAULT_DELTA = 1e-5
DEFAULT_MIN_NOISE = 1.0
DEFAULT_MAX_DP_STEPS = 64
DEFAULT_MAX_PERSONAL_STEPS = 64
DEFAULT_MAX_LEN = 1024
DEFAULT_MAX_LORA_RANK = 64
DEFAULT_MAX_BATCH_SIZE = 64
DEFAULT_MAX_CONTEXT_ENTRIES = 8
DEFAULT_MAX_CONTEXT_CHARS = 1800  # what slm-rag inference retrieves
DEFAULT_MAX_PERSONAL_LR = 0.01
DEFAULT_MIN_HOLDOUT = 4
DEFAULT_MAX_VERSION_JUMP = 1000
# A history of two batches trains at q = 1/2; one of a single batch (q = 1: the whole history in
# every step, no amplification by subsampling) takes no private step: two steps at q = 1 cost
# ε 7.08 of a budget of 8, against 3.14 at q = 1/6 (σ 1, δ 1e-5). docs/federation.md.
DEFAULT_MAX_SAMPLE_RATE = 0.5
# The default most ε one round may add is the budget / this: a budget lasts at least this many
# rounds. Not 20: at σ 1 (the default noise) a single step at q = 1/6 costs ε 2.63 at δ 1e-5, so
# budget / 20 = 0.4 would forbid every private step (docs/federation.md has the table).
DEFAULT_ROUNDS_PER_BUDGET = 2
DEFAULT_SECAGG_MIN_COHORT = 3
# Off by default: a quantum worth having is a little above the device's own round time (minutes
# for the embedded Specialist, a second for the tests' tiny model), which only its operator knows.
DEFAULT_ROUND_TIME_QUANTUM = 0.0
MAX_ROUND_TIME_QUANTUM = 86400.0  # a day: above it a typo, not a policy
KEEP_GLOBAL_VERSIONS = 3
SEALED_LOG = "rounds.vault"
PLAIN_LOG = "rounds.jsonl"
TRAINED = "trained"


@dataclass(frozen=True)
class DevicePolicy:
    """The device's own terms (node config): its DP policy, fixed in its ledger when that is
    created, and its limits on what a run may ask of it (not fixed: its operator may change them)."""

    epsilon_budget: float = DEFAULT_EPSILON_BUDGET
    delta: float = DEFAULT_DELTA
    min_noise_multiplier: float = DEFAULT_MIN_NOISE
    dp_required: bool = True
    accountant: str = "rdp"
    # The most DP steps one round may take, whatever the run proposes (compute and pacing; not fixed in the ledger).
    max_dp_steps: int = DEFAULT_MAX_DP_STEPS
    # The most personal steps and tokens per training sequence a run may ask (the device's memory and time).
    max_personal_steps: int = DEFAULT_MAX_PERSONAL_STEPS
    max_len: int = DEFAULT_MAX_LEN
    # What the run may not choose for the device (module docstring): its model, its adapters' shape, its work.
    model: str = DEFAULT_SPECIALIST
    lora_targets: tuple[str, ...] = ALL_LINEAR
    max_lora_rank: int = DEFAULT_MAX_LORA_RANK
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE
    max_context_entries: int = DEFAULT_MAX_CONTEXT_ENTRIES
    max_context_chars: int = DEFAULT_MAX_CONTEXT_CHARS
    max_personal_lr: float = DEFAULT_MAX_PERSONAL_LR
    min_holdout: int = DEFAULT_MIN_HOLDOUT
    max_version_jump: int = DEFAULT_MAX_VERSION_JUMP
    max_sample_rate: float = DEFAULT_MAX_SAMPLE_RATE
    # The most ε one round may add to the ledger; None: the ledger's budget / DEFAULT_ROUNDS_PER_BUDGET.
    max_epsilon_per_round: float | None = None
    # The eligibility flags the device itself requires; a run may require more, never fewer.
    require_idle: bool = True
    require_charging: bool = True
    require_unmetered: bool = True
    # SecAgg+ on the device's terms (federation.secagg_terms), not only on the server's settings.
    secagg_required: bool = False
    secagg_min_cohort: int = DEFAULT_SECAGG_MIN_COHORT
    # A round's reply waits for the next multiple of this many seconds (`round_wait`; 0: off).
    round_time_quantum: float = DEFAULT_ROUND_TIME_QUANTUM

    @classmethod
    def from_node_config(cls, node: Mapping[str, Any]) -> DevicePolicy:
        try:
            policy = cls(
                epsilon_budget=float(node.get("epsilon-budget", DEFAULT_EPSILON_BUDGET)),
                delta=float(node.get("delta", DEFAULT_DELTA)),
                min_noise_multiplier=float(node.get("min-noise-multiplier", DEFAULT_MIN_NOISE)),
                dp_required=_as_bool(node.get("dp-required", True)),
                accountant=str(node.get("accountant", "rdp")),
                max_dp_steps=int(node.get("max-dp-steps", DEFAULT_MAX_DP_STEPS)),
                max_personal_steps=int(node.get("max-personal-steps", DEFAULT_MAX_PERSONAL_STEPS)),
                max_len=int(node.get("max-len", DEFAULT_MAX_LEN)),
                model=str(node.get("model", DEFAULT_SPECIALIST)).strip(),
                lora_targets=tuple(_names(node.get("lora-targets", ",".join(ALL_LINEAR)))),
                max_lora_rank=int(node.get("max-lora-rank", DEFAULT_MAX_LORA_RANK)),
                max_batch_size=int(node.get("max-batch-size", DEFAULT_MAX_BATCH_SIZE)),
                max_context_entries=int(node.get("max-context-entries", DEFAULT_MAX_CONTEXT_ENTRIES)),
                max_context_chars=int(node.get("max-context-chars", DEFAULT_MAX_CONTEXT_CHARS)),
                max_personal_lr=float(node.get("max-personal-lr", DEFAULT_MAX_PERSONAL_LR)),
                min_holdout=int(node.get("min-holdout", DEFAULT_MIN_HOLDOUT)),
                max_version_jump=int(node.get("max-version-jump", DEFAULT_MAX_VERSION_JUMP)),
                max_sample_rate=float(node.get("max-sample-rate", DEFAULT_MAX_SAMPLE_RATE)),
                max_epsilon_per_round=(
                    float(node["max-epsilon-per-round"]) if "max-epsilon-per-round" in node else None
                ),
                require_idle=_as_bool(node.get("require-idle", True)),
                require_charging=_as_bool(node.get("require-charging", True)),
                require_unmetered=_as_bool(node.get("require-unmetered", True)),
                secagg_required=_as_bool(node.get("secagg-required", False)),
                secagg_min_cohort=int(node.get("secagg-min-cohort", DEFAULT_SECAGG_MIN_COHORT)),
                round_time_quantum=float(node.get("round-time-quantum", DEFAULT_ROUND_TIME_QUANTUM)),
            )
        except (TypeError, ValueError, OverflowError):
            raise ConfigError("The device's policy in its node config holds a value that is not a number.") from None
        counts = (policy.max_dp_steps, policy.max_personal_steps, policy.max_context_entries, policy.max_context_chars)
        if min(counts) < 0 or policy.min_holdout < 0 or policy.max_version_jump < 0:
            raise ConfigError(
                "The device's max-dp-steps, max-personal-steps, max-context-entries, max-context-chars, "
                "min-holdout and max-version-jump must be 0 or more."
            )
        if min(policy.max_len, policy.max_lora_rank, policy.max_batch_size) < 1:
            raise ConfigError("The device's max-len, max-lora-rank and max-batch-size must be at least 1.")
        if not 0 < policy.max_personal_lr <= MAX_LR or not 0 < policy.max_sample_rate <= 1:
            raise ConfigError(
                f"The device's max-personal-lr must be in (0, {MAX_LR:g}] and its max-sample-rate in (0, 1]."
            )
        cap = policy.max_epsilon_per_round
        if cap is not None and not (cap > 0 and math.isfinite(cap)):
            raise ConfigError("The device's max-epsilon-per-round must be a positive number.")
        if not (0 <= policy.round_time_quantum <= MAX_ROUND_TIME_QUANTUM):
            raise ConfigError(
                f"The device's round-time-quantum must be between 0 (off) and {MAX_ROUND_TIME_QUANTUM:g} seconds."
            )
        if policy.secagg_min_cohort < 2:
            raise ConfigError("The device's secagg-min-cohort must be at least 2: SecAgg+ among one hides nothing.")
        if not policy.model or not policy.lora_targets:
            raise ConfigError("The device's model and lora-targets must name something.")
        if policy.accountant not in ACCOUNTANTS:
            raise ConfigError(f"The device's accountant must be one of {', '.join(ACCOUNTANTS)}.")
        return policy

    def round_epsilon_cap(self, epsilon_budget: float) -> float:
        """The most ε one round may add to a ledger of `epsilon_budget` (``max-epsilon-per-round``)."""
        if self.max_epsilon_per_round is not None:
            return self.max_epsilon_per_round
        return epsilon_budget / DEFAULT_ROUNDS_PER_BUDGET

    def refuse_less(self, cfg: TaskConfig) -> None:
        """Raise `PolicyRefusal` if the run's DP settings give less than this policy demands.

        The exception's text (the device's log) names the figures; the server reads only the
        class's fixed sentence, since a device's minimum and δ would tell it from others.
        """
        if not cfg.dp:
            if self.dp_required:
                raise PolicyRefusal(
                    "Refused: this device trains only with differential privacy; the run asks for none."
                )
            return
        if cfg.noise_multiplier < self.min_noise_multiplier:
            raise PolicyRefusal(
                f"Refused: the run's noise multiplier {cfg.noise_multiplier:g} is below this device's "
                f"minimum of {self.min_noise_multiplier:g}."
            )
        if cfg.delta != self.delta:
            raise PolicyRefusal(
                f"Refused: the run asks for δ={cfg.delta:g}; this device's δ is fixed at {self.delta:g}."
            )

    def bound(self, cfg: TaskConfig) -> TaskConfig:
        """The run's settings as this device will train them, or `RunConfigRefusal`.

        Checked from the settings alone, before any model or data is loaded. What fixes the shape
        of the adapter the server aggregates (model, rank, targets) or the DP accounting (batch
        size) cannot be cut, so asking for more is refused; what only costs the device work or
        touches its own adapter (sequence length, context, personal steps and learning rate) is
        cut to the device's limit; the holdout is raised to the device's minimum.
        """
        if cfg.model.strip() != self.model:
            raise RunConfigRefusal(f"Refused: the run trains {cfg.model!r}; this device trains {self.model!r} only.")
        if cfg.lora_rank > self.max_lora_rank:
            raise RunConfigRefusal(f"Refused: the run's lora-rank {cfg.lora_rank} is above {self.max_lora_rank}.")
        outside = [t for t in cfg.targets if t not in self.lora_targets]
        if outside:
            raise RunConfigRefusal(f"Refused: the run puts LoRA on {', '.join(outside)}, which this device does not.")
        if cfg.batch_size > self.max_batch_size:
            raise RunConfigRefusal(f"Refused: the run's batch-size {cfg.batch_size} is above {self.max_batch_size}.")
        return replace(
            cfg,
            personal_steps=min(cfg.personal_steps, self.max_personal_steps),
            max_len=min(cfg.max_len, self.max_len),
            context_entries=min(cfg.context_entries, self.max_context_entries),
            context_chars=min(cfg.context_chars, self.max_context_chars),
            personal_lr=min(cfg.personal_lr, self.max_personal_lr),
            holdout=max(cfg.holdout, self.min_holdout),
        )


@dataclass(frozen=True)
class EligibilityPolicy:
    """Which eligibility flags a run requires (run config ``require-idle`` etc.).

    Only ever added to the device's own (`DevicePolicy.require_idle` etc.): a run cannot waive them.
    """

    idle: bool = True
    charging: bool = True
    unmetered: bool = True

    @classmethod
    def from_run_config(cls, config: Mapping[str, Any]) -> EligibilityPolicy:
        return cls(**{flag: _as_bool(config.get(f"require-{flag}", True)) for flag in FLAGS})


@dataclass
class Device:
    """A device's configuration and state folder; methods run one round's work on it."""

    data_file: Path
    state_dir: Path
    cfg: TaskConfig
    user_id: str | None = None
    partition_id: int | None = None
    num_partitions: int | None = None
    dp_policy: DevicePolicy = DevicePolicy()
    eligibility_file: Path | None = None
    flags: dict[str, bool] | None = None
    cache_dir: Path | None = None
    # An app running the device in its own process may hand it its own source (the OS's state, live).
    eligibility_source: EligibilitySource | None = None
    eligibility_max_age: float = DEFAULT_MAX_AGE_S
    # The sealed ledger's count of writes, where the app keeps it (`federation.budget_ledger.WriteCounter`).
    ledger_counter: WriteCounter | None = None
    # Node config ``identity-dir``: the device's node key, endorsement and enrollment key
    # (`federation.identity`); with it, every SecAgg+ round must bind each member's keys to one.
    identity_dir: Path | None = None

    @classmethod
    def from_configs(cls, node_config: Mapping[str, Any], run_config: Mapping[str, Any]) -> Device:
        """The device of `node_config` set up for the run of `run_config` (`for_run`)."""
        return cls.from_node_config(node_config).for_run(run_config)

    @classmethod
    def from_node_config(cls, node_config: Mapping[str, Any]) -> Device:
        """The device alone, before any run: its terms, its state folder and its log."""
        if "data-file" not in node_config:
            raise ConfigError("This SuperNode has no data-file in its node config; a device needs its history.")
        policy = DevicePolicy.from_node_config(node_config)
        user_id = node_config.get("user-id")
        partition = node_config.get("partition-id")
        default_state = Path.home() / ".specsteer" / "federation" / f"device-{user_id or partition or 'default'}"
        flags = {f: _as_bool(node_config[f]) for f in FLAGS if f in node_config} or None
        try:
            max_age = float(node_config.get("eligibility-max-age", DEFAULT_MAX_AGE_S))
        except (TypeError, ValueError):
            max_age = math.nan
        if not (max_age > 0 and math.isfinite(max_age)):
            raise ConfigError("The device's eligibility-max-age must be a positive number of seconds.")
        threads = node_config.get("threads")
        if threads is not None and int(threads) > 0:
            torch.set_num_threads(int(threads))
        return cls(
            data_file=Path(str(node_config["data-file"])).expanduser(),
            state_dir=Path(str(node_config.get("state-dir", default_state))).expanduser(),
            cfg=TaskConfig(model=policy.model),
            user_id=str(user_id) if user_id is not None else None,
            partition_id=int(partition) if partition is not None else None,
            num_partitions=int(node_config["num-partitions"]) if "num-partitions" in node_config else None,
            dp_policy=policy,
            eligibility_file=Path(str(node_config["eligibility-file"])) if "eligibility-file" in node_config else None,
            flags=flags,
            cache_dir=Path(str(node_config["cache-dir"])) if "cache-dir" in node_config else None,
            eligibility_max_age=max_age,
            identity_dir=Path(str(node_config["identity-dir"])).expanduser() if "identity-dir" in node_config else None,
        )

    def for_run(self, run_config: Mapping[str, Any]) -> Device:
        """This device with the run's settings as it will train them, or a `RunConfigRefusal`.

        The run proposes the work; the device bounds what it costs it (`DevicePolicy.bound`), from
        the settings alone, before any model or data is loaded.
        """
        try:
            cfg = TaskConfig.from_run_config(run_config)
        except ConfigError as exc:  # a value no device accepts (NaN, inf, out of range): the run's fault
            raise RunConfigRefusal(str(exc)) from None
        return replace(self, cfg=self.dp_policy.bound(cfg))

    # --- state ---------------------------------------------------------------------------------

    @property
    def ledger_path(self) -> Path:
        return self.state_dir / "ledger.json"

    @property
    def personal_dir(self) -> Path:
        return self.state_dir / PERSONAL

    @property
    def global_dir(self) -> Path:
        return self.state_dir / GLOBAL

    @property
    def key_provider(self) -> KeyProvider | None:
        """The key of a sealed history, which also seals the personal adapter and the round log."""
        return device_key_provider(self.data_file)

    def ledger(self) -> Ledger:
        p = self.dp_policy
        return Ledger.load(
            self.ledger_path,
            epsilon_budget=p.epsilon_budget,
            delta=p.delta,
            accountant=p.accountant,
            dp_required=p.dp_required,
            min_noise_multiplier=p.min_noise_multiplier,
            key_provider=self.key_provider,  # sealed, with its counter, when the history is
            counter=self.ledger_counter,
        )

    def check_eligible(self, policy: EligibilityPolicy) -> None:
        """Raise `NotEligible` unless every flag the run or the device requires is set right now.

        The run may only add to the device's own requirements (node config ``require-…``): a
        server that sent ``require-charging = false`` trained a device on battery that asked not to.
        """
        flags = self.read_flags()
        own = self.dp_policy
        missing = [f for f in FLAGS if (getattr(policy, f) or getattr(own, f"require_{f}")) and not flags.get(f, False)]
        if missing:
            raise NotEligible(f"Device not eligible for this round: not {', not '.join(missing)}.")

    def eligibility(self) -> EligibilitySource:
        """Where this device reads its flags: the app's own source, the ``eligibility-file``, the
        node config's flags, a state reported in its state folder, or none (every flag set)."""
        if self.eligibility_source is not None:
            return self.eligibility_source
        if self.eligibility_file is not None:
            return FileEligibility(self.eligibility_file, self.eligibility_max_age)
        if self.flags is not None:
            return FixedEligibility(self.flags)
        reported = self.state_dir / STATE_FILE
        if reported.exists():
            return FileEligibility(reported, self.eligibility_max_age)
        return AlwaysEligible()  # no status source configured: a plugged-in test machine

    def read_flags(self) -> dict[str, bool]:
        flags = self.eligibility().flags()
        return {f: flags.get(f, False) is True for f in FLAGS}

    # --- rounds --------------------------------------------------------------------------------

    def _load(self) -> DeviceData:
        """The device's history, read (and unsealed) but not tokenized."""
        return load_user(
            self.data_file,
            user_id=self.user_id,
            index=self.partition_id,
            shards=self.num_partitions,
            key_provider=self.key_provider,
        )

    def check_version(self, version: int) -> None:
        """Refuse a message whose version jumps more than ``max-version-jump`` past the device's newest.

        The newest global version a device holds is the one its inference declares; the server
        numbers versions, and one message at 2^31-1 stayed the newest for good. A device that
        missed more versions than the bound refuses until its operator raises it or clears
        ``global/`` (a bound a server cannot walk past in one message, not a proof it is honest).
        """
        newest = AdapterStore(self.global_dir).latest()
        if newest is not None and version > newest + self.dp_policy.max_version_jump:
            raise MessageRefusal(
                f"the message's adapter version {version} is more than {self.dp_policy.max_version_jump} "
                f"past this device's newest, v{newest}"
            )

    def _prepare(
        self, arrays: Mapping[str, np.ndarray], version: int, data: DeviceData | None = None, base: str | None = None
    ) -> tuple[SpecialistWithAdapters, DeviceDatasets]:
        """The model with the message's global adapter and the device's personal one, and the data.

        Everything about the message is checked before anything is stored: the server's base model
        is the device's, the arrays are exactly this adapter's LoRA matrices (keys, shapes, finite
        values), the personal adapter fits this base. Only then is the version kept. (A version of
        another base was stored first, and the device's inference could never load it again.)
        """
        sw = specialist_for(self.cfg, cache_dir=self.cache_dir)
        if base is not None and base != sw.fingerprint:
            raise MessageRefusal(
                f"the message's adapter is for the base model {base}; this device's is {sw.fingerprint}"
            )
        try:
            sw.set_adapter_weights(GLOBAL, arrays)
        except ConfigError as exc:
            raise MessageRefusal(str(exc)) from None
        self._load_personal(sw)
        sets = device_datasets(sw, data if data is not None else self._load(), self.cfg)
        self._keep_global(arrays, version, sw)
        return sw, sets

    def train_round(
        self,
        arrays: Mapping[str, np.ndarray],
        version: int,
        *,
        policy: EligibilityPolicy,
        run_id: int,
        server_round: int,
        base: str | None = None,
    ) -> DPRoundResult:
        """Train personal (kept) then global with DP (returned), as many DP steps as the device affords.

        Refuses if ineligible or if the run asks for less privacy than the device's policy: both
        decided from the run and the device's settings alone, before its history is read. The
        run's ``dp-steps`` is only a proposal: the device trains the most steps, up to it and its
        own ``max-dp-steps``, that stay within its ε budget for its own history, and runs the rest
        as cover steps (noise only, nothing spent; a device that can afford none runs only those).
        So whether a device takes part, what its reply looks like, how large its update is and how
        long the round takes say nothing about the size of its history. The run's δ and accountant
        are the device's own (checked). `base` is the server's base-model fingerprint, if it sent one.
        """
        self.check_eligible(policy)
        self.check_version(version)
        started = time.monotonic()
        try:
            return self._train_round(arrays, version, run_id=run_id, server_round=server_round, base=base)
        finally:
            # Whatever the round ended with (a result, a skip, an error), its reply leaves on the quantum.
            time.sleep(round_wait(time.monotonic() - started, self.dp_policy.round_time_quantum))

    def _train_round(
        self, arrays: Mapping[str, np.ndarray], version: int, *, run_id: int, server_round: int, base: str | None
    ) -> DPRoundResult:
        # The ledger fixes the policy when it is created; a later node config cannot loosen it.
        ledger = self.ledger() if self.cfg.dp or self.dp_policy.dp_required or self.ledger_path.exists() else None
        fixed = self.dp_policy if ledger is None else ledger_policy(ledger)
        fixed.refuse_less(self.cfg)
        steps = min(self.cfg.dp_steps, self.dp_policy.max_dp_steps)
        if not self.cfg.dp:
            return self._train(arrays, version, None, steps, run_id=run_id, server_round=server_round, base=base)
        assert ledger is not None
        # The lock is held for the whole round: two runs on one device cannot both pass the budget check.
        with ledger.hold():
            return self._train(arrays, version, ledger, steps, run_id=run_id, server_round=server_round, base=base)

    def _train(
        self,
        arrays: Mapping[str, np.ndarray],
        version: int,
        ledger: Ledger | None,
        steps: int,
        *,
        run_id: int,
        server_round: int,
        base: str | None = None,
    ) -> DPRoundResult:
        cfg = self.cfg
        proposed = steps
        sw, sets = self._prepare(arrays, version, self._load(), base)
        n = len(sets.dp_train)  # entries with no room for a body at this max-len are not in it
        if ledger is not None:
            cfg = replace(cfg, delta=ledger.delta, accountant=ledger.accountant)
            steps = self._affordable(ledger, cfg, n, steps)
        if n == 0:
            return self._skip(
                arrays, ledger, "no usable sequence", run_id=run_id, server_round=server_round, cover_steps=proposed
            )
        if ledger is not None and proposed and not steps:
            ledger.count_refusal()
        # Every device runs all the proposed steps: the ones its budget does not afford for its
        # history are cover steps (the same batches through the model, an update of noise alone,
        # nothing spent). The time a round takes and the size of its update would otherwise tell
        # the server how many steps the device could afford, and so the size of its history.
        cfg = replace(cfg, dp_steps=proposed)
        seed = _device_seed(self, run_id, server_round)
        personal_loss = train_personal(sw, sets.personal_train, cfg, seed=seed)
        personal_kept = self._save_personal(sw, version)
        try:
            result = train_global_dp(
                sw,
                sets.dp_train,
                cfg,
                ledger,
                run_id=run_id,
                server_round=server_round,
                adapter_version=version,
                seed=seed,
                private_steps=steps,
            )
        except UpdateNotFinite:
            # Never sent, but charged (train_global_dp: the choice depends on the data): noise alone goes
            # out instead, a reply like any other, since a refusal would tell the server that this
            # history made the round diverge.
            why = "the DP update was not finite"
            return self._skip(arrays, ledger, why, run_id=run_id, server_round=server_round, cover_steps=proposed)
        self.log(
            {
                "event": "train",
                "run_id": run_id,
                "server_round": server_round,
                "adapter_version_in": version,
                "examples": n,
                "personal_loss": personal_loss,
                # False: it diverged (values that are not finite) and the device kept the old one.
                "personal_kept": personal_kept,
                "dp_steps": result.steps,
                "dp_steps_proposed": self.cfg.dp_steps,
                "cover_steps": proposed - result.steps,
                "epsilon": result.epsilon,
                "update_norm": result.update_norm,
            }
        )
        return result

    def _affordable(self, ledger: Ledger, cfg: TaskConfig, n: int, most: int) -> int:
        """The private steps this round may take for `n` sequences (the rest are cover steps).

        None when δ is not below 1/n (an ε at such a δ allows releasing a whole commit in the
        clear: node delta 0.2 was accepted for 21 commits), and none when the sampling rate is
        above the device's ``max-sample-rate`` (default 0.5). Either way the device answers as
        usual, with cover steps, so the server does not learn that its history is that small.
        Otherwise the most that stay within the budget and add at most ``max-epsilon-per-round``
        to the ledger (trimmed, not refused: a refusal would depend on the history's size).
        """
        if n == 0 or most == 0:
            return 0
        # The rate Opacus's Poisson loader will use for n sequences; ε grows with it.
        rate = dp_sample_rate(n, cfg.batch_size)
        if ledger.delta * n >= 1 or rate > self.dp_policy.max_sample_rate:
            return 0
        cap = self.dp_policy.round_epsilon_cap(ledger.epsilon_budget)
        return ledger.affordable_steps(cfg.noise_multiplier, rate, most, per_round=cap)

    def _skip(
        self,
        arrays: Mapping[str, np.ndarray],
        ledger: Ledger | None,
        why: str,
        *,
        run_id: int,
        server_round: int,
        cover_steps: int = 0,
    ) -> DPRoundResult:
        """Sit the round out in the shape of a trained reply: under DP, `cover_steps` of noise alone
        on the adapter received (an unchanged one would say the device sat out); else it unchanged."""
        self.log({"event": "skipped", "reason": why, "run_id": run_id, "server_round": server_round})
        if self.cfg.dp and cover_steps:
            sent = noise_only_update(arrays, self.cfg, cover_steps)
            if not all_finite(sent):  # settings alone decide this, not data
                raise UpdateNotFinite("The noise-only update holds values that are not finite.")
        else:
            sent = {k: np.array(v, dtype=np.float32) for k, v in arrays.items()}
        return DPRoundResult(
            arrays=sent,
            steps=0,
            sample_rate=0.0,
            noise_multiplier=self.cfg.noise_multiplier,
            epsilon=ledger.epsilon_spent if ledger is not None else math.inf,
            delta=ledger.delta if ledger is not None else self.cfg.delta,
            accountant=ledger.accountant if ledger is not None else "none",
            update_norm=0.0,
        )

    def evaluate_round(
        self,
        arrays: Mapping[str, np.ndarray],
        version: int,
        *,
        policy: EligibilityPolicy,
        run_id: int,
        server_round: int,
        base: str | None = None,
    ) -> dict[str, float]:
        """Keep the new global version and measure held-out loss with and without the personal adapter."""
        self.check_eligible(policy)
        self.check_version(version)
        sw, sets = self._prepare(arrays, version, base=base)
        metrics = {
            "loss-global": evaluate_loss(sw, sets.held_out, [GLOBAL]),
            "loss-personal": evaluate_loss(sw, sets.held_out, [GLOBAL, PERSONAL]),
            "eval-examples": float(len(sets.held_out)),
        }
        self.log(
            {"event": "evaluate", "run_id": run_id, "server_round": server_round, "adapter_version": version, **metrics}
        )
        return metrics

    def status(self) -> dict[str, Any]:
        """The device's state as its owner sees it (read only: the ledger's policy is whatever it fixed)."""
        from specsteer.privacy.accounting import epsilon_of, read_ledger_file

        data = read_ledger_file(self.ledger_path)
        personal = None
        if (self.personal_dir / "manifest.json").is_file():
            personal = read_adapter(self.personal_dir, kind=PERSONAL).manifest
        p = self.dp_policy
        return {
            "state_dir": str(self.state_dir),
            "global_versions": AdapterStore(self.global_dir).versions(),
            "personal": personal,
            "epsilon_spent": epsilon_of(data.history, data.delta, data.accountant) if data else 0.0,
            "epsilon_budget": data.epsilon_budget if data else p.epsilon_budget,
            "delta": data.delta if data else p.delta,
            "accountant": data.accountant if data else p.accountant,
            "dp_rounds": len(data.rounds) if data else 0,
            "refusals": data.refusals if data else 0,
        }

    # --- helpers ---------------------------------------------------------------------------------

    def _keep_global(self, arrays: Mapping[str, np.ndarray], version: int, sw: SpecialistWithAdapters) -> None:
        folder = version_dir(self.global_dir, version)
        if (folder / "manifest.json").is_file():
            return
        self.global_dir.mkdir(parents=True, exist_ok=True)
        write_adapter(folder, arrays, sw.lora_config_dict(), kind=GLOBAL, base=sw.fingerprint, version=version)
        for old in AdapterStore(self.global_dir).versions()[:-KEEP_GLOBAL_VERSIONS]:
            shutil.rmtree(version_dir(self.global_dir, old), ignore_errors=True)

    def _load_personal(self, sw: SpecialistWithAdapters) -> None:
        if (self.personal_dir / "manifest.json").is_file():
            folder = read_adapter(self.personal_dir, kind=PERSONAL)
            if folder.base != sw.fingerprint:
                raise AdapterError(f"The personal adapter in {self.personal_dir} belongs to another base model.")
            sw.set_adapter_weights(PERSONAL, load_tensors(folder, unseal_file(self.key_provider)))
        else:
            # The shared in-process model may hold another device's personal weights: start fresh.
            sw.reset_adapter(PERSONAL, seed=_device_seed(self, 0, 0))

    def _save_personal(self, sw: SpecialistWithAdapters, version: int) -> bool:
        """Keep the personal adapter just trained, unless it diverged (then the old one stays; False).

        A diverged adapter no longer aborts the round: whether personal training diverges depends
        on the history, and a refusal would have told the server so. The global adapter trains with
        the personal one disabled, so the round goes on unaffected.
        """
        weights = sw.get_adapter(PERSONAL)
        if not all_finite(weights):
            return False
        write_adapter(
            self.personal_dir,
            weights,
            sw.lora_config_dict(),
            kind=PERSONAL,
            base=sw.fingerprint,
            extra={"trained_on_global_version": version},
            seal=None if self.key_provider is None else seal_file(self.key_provider),
        )
        return True

    def log(self, record: dict[str, Any]) -> None:
        """Append to the device's own round log (sealed with the history's key when that is sealed)."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
        provider = self.key_provider
        if provider is not None:
            append_sealed_log(self.state_dir / SEALED_LOG, provider, {"time": time.time(), **clean})
            return
        append_line(self.state_dir / PLAIN_LOG, json.dumps({"time": time.time(), **clean}))

    def read_log(self) -> list[dict[str, Any]]:
        """The device's own round log, oldest first (unsealed in memory when it is sealed)."""
        provider = self.key_provider
        if provider is not None:
            return read_sealed_log(self.state_dir / SEALED_LOG, provider)
        path = self.state_dir / PLAIN_LOG
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def round_wait(elapsed: float, quantum: float) -> float:
    """Seconds a round that has run `elapsed` seconds waits before it replies: up to the next
    multiple of `quantum` (0: no wait).

    Padding every DP step to the same rows makes the training's work independent of the history's
    size, but the accountant's projection and building the datasets still grow with it (about a
    second between 2 and 36 commits on the tests' tiny model, docs/federation.md), and a server
    times each reply. A floor hides what is below it; quanta also hide what a slow round adds above
    it, except at a quantum's edge. Every round lasts at least one quantum.
    """
    if quantum <= 0:
        return 0.0
    return max(1, math.ceil(elapsed / quantum)) * quantum - elapsed


def round_outcome(record: Mapping[str, Any]) -> str | None:
    """What a record of the device's log says it did with a train message it answered: `TRAINED`
    (it took steps that learnt from its data), why it took none, or None (another record).

    A device that takes no such step still answers like one that trained (cover steps, an update
    of noise alone), so the server cannot tell the two apart; only the device's log can.
    """
    if record.get("event") == "skipped":
        return str(record.get("reason") or "skipped")
    if record.get("event") != "train":
        return None
    if (record.get("dp_steps") or 0) > 0:
        return TRAINED
    if not record.get("dp_steps_proposed"):
        return "the run proposed no step"
    return "no private step within its ε budget, its ε per round, δ or sampling-rate limit"


def ledger_policy(ledger: Ledger) -> DevicePolicy:
    """The DP policy a ledger fixed when it was created."""
    return DevicePolicy(
        epsilon_budget=ledger.epsilon_budget,
        delta=ledger.delta,
        min_noise_multiplier=ledger.min_noise_multiplier,
        dp_required=ledger.dp_required,
        accountant=ledger.accountant,
    )


def _device_seed(device: Device, run_id: int, server_round: int) -> int:
    import hashlib

    key = f"{device.user_id}|{device.partition_id}|{device.state_dir}|{run_id}|{server_round}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:4], "big")


def _names(value: Any) -> list[str]:
    return [t.strip() for t in str(value).split(",") if t.strip()]


def _as_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value != 0
    return str(value).strip().lower() in ("1", "true", "yes", "on")
