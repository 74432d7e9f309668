"""Everything the Flower apps do to a Specialist: adapters, data, DP training, evaluation.

"Thin apps, fat task": `client_app.py` and `server_app.py` only move records around; the work
is here so it can be tested without Flower.

The Specialist carries two LoRA adapters (FedPer / FDLoRA pattern):

* ``global`` — federated. Each round the device trains it with DP-SGD (Opacus) on its history,
  with the personal adapter *disabled*, so the arrays it sends are a DP release of its data
  whatever the personal adapter holds. Only this adapter's arrays leave the device.
* ``personal`` — trained on the device on top of the (frozen) global adapter, never sent.

The training task is the product's own: given a subject line, write the body. A personal
training sequence is exactly what inference feeds the Specialist in slm-rag mode — the retrieved
context and `task_prompt(subject)` through `render_prompt` — followed by the body and an end
token; the loss covers the body only and is averaged per sequence.

The global adapter's DP-SGD trains on sequences without retrieved context: each holds exactly one
commit, so one DP "example" is one commit and the ledger's ε is commit-level. (With context, one
commit would appear in up to ``context-entries + 1`` sequences and the per-sequence ε would
understate a commit's.) The personal adapter, which never leaves the device, keeps the context.
"""

from __future__ import annotations

import json
import math
import random
import secrets
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

from specsteer.core.errors import ConfigError, ProfileError
from specsteer.core.models import DEFAULT_SPECIALIST, CausalLM, load_causal_lm
from specsteer.core.prompts import render_prompt, task_prompt
from specsteer.federation.adapters import base_fingerprint
from specsteer.federation.budget_ledger import Ledger
from specsteer.federation.errors import UpdateNotFinite
from specsteer.privacy.profile_format import DatasetUser, read_users
from specsteer.privacy.vault import KeyProvider
from specsteer.sdk.context import Profile, ProfileEntry, ProfileIndex, fit_context

if TYPE_CHECKING:
    from peft.tuners.tuners_utils import BaseTuner

__all__ = [
    "ADAPTERS",
    "ALL_LINEAR",
    "MAX_GRAD_NORM",
    "MAX_LR",
    "MAX_NOISE_MULTIPLIER",
    "DPRoundResult",
    "DeviceData",
    "DeviceDatasets",
    "Example",
    "SpecialistWithAdapters",
    "TaskConfig",
    "all_finite",
    "build_examples",
    "evaluate_loss",
    "load_user",
    "per_sequence_loss",
    "train_global_dp",
    "train_personal",
]

GLOBAL = "global"
PERSONAL = "personal"
ADAPTERS = (GLOBAL, PERSONAL)
_MIN_TARGET_TOKENS = 8
ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# The largest learning rate a run may set (global and personal; a device cuts the personal one
# further, `federation.participant`): with SGD-momentum or AdamW a larger one only destroys weights.
MAX_LR = 10.0
# The largest clipping norm and noise multiplier a run may set. DP holds for any finite values, but
# the noise (σ·C per coordinate and step) must stay a finite float32: max-grad-norm inf or 1e30
# sent arrays of NaN, after the ledger had charged the round.
MAX_GRAD_NORM = 100.0
MAX_NOISE_MULTIPLIER = 1000.0


@dataclass(frozen=True)
class TaskConfig:
    """Training settings shared by the server and every device of a run (Flower's run config).

    In the run config keys are spelled with hyphens (``lora-rank``); `from_run_config` maps them.
    """

    model: str = DEFAULT_SPECIALIST
    lora_rank: int = 8
    lora_alpha: int = 16
    lora_targets: str = ",".join(ALL_LINEAR)
    max_len: int = 256  # tokens per training sequence, prompt + body
    context_entries: int = 3  # retrieved profile entries, as in slm-rag inference
    context_chars: int = 600  # smaller than inference's 1800 to keep CPU training affordable
    holdout: int = 4  # newest profile entries kept out of training for on-device evaluation
    batch_size: int = 4  # expected DP batch (Poisson sampling) and the personal batch
    dp: bool = True
    dp_steps: int = 4  # DP-SGD steps on the global adapter per round
    lr: float = 0.02
    noise_multiplier: float = 1.0
    max_grad_norm: float = 1.0
    delta: float = 1e-5
    accountant: str = "rdp"
    personal_steps: int = 8
    personal_lr: float = 0.002
    seed: int = 0

    @classmethod
    def from_run_config(cls, config: Mapping[str, Any]) -> TaskConfig:
        """Read the fields this class knows from a Flower run config; unknown keys belong to others."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            key = f.name.replace("_", "-")
            if key not in config:
                continue
            raw = config[key]
            default = getattr(cls, f.name)
            try:
                if isinstance(default, bool):
                    value: Any = raw if isinstance(raw, bool) else str(raw).lower() in ("1", "true", "yes")
                elif isinstance(default, int):
                    value = int(raw)
                elif isinstance(default, float):
                    value = float(raw)
                else:
                    value = str(raw)
            except (TypeError, ValueError):
                raise ConfigError(f"Run config {key!r} must be a {type(default).__name__}, not {raw!r}.") from None
            values[f.name] = value
        cfg = cls(**values)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        positive = ("lora_rank", "lora_alpha", "max_len", "batch_size", "max_grad_norm", "noise_multiplier")
        for name in positive:
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name.replace('_', '-')} must be positive, not {getattr(self, name)!r}.")
        bounded = (
            ("lr", MAX_LR),
            ("personal_lr", MAX_LR),
            ("max_grad_norm", MAX_GRAD_NORM),
            ("noise_multiplier", MAX_NOISE_MULTIPLIER),
        )
        for name, most in bounded:
            # NaN compares false both ways, so the test is written to fail on it; lr 0 would train nothing.
            if not 0 < getattr(self, name) <= most:
                raise ConfigError(f"{name.replace('_', '-')} must be in (0, {most:g}], not {getattr(self, name)!r}.")
        for name in ("dp_steps", "personal_steps", "holdout", "context_entries"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name.replace('_', '-')} must be 0 or more, not {getattr(self, name)!r}.")
        if not 0 < self.delta < 1:
            raise ConfigError(f"delta must be strictly between 0 and 1, not {self.delta!r}.")
        if not self.targets:
            raise ConfigError("lora-targets names no module.")

    @property
    def targets(self) -> list[str]:
        return [t.strip() for t in self.lora_targets.split(",") if t.strip()]

    def as_run_config(self) -> dict[str, bool | int | float | str]:
        return {f.name.replace("_", "-"): getattr(self, f.name) for f in fields(self)}


# --- data ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceData:
    """One user's data as a device holds it: the private history, and (dataset files) queries."""

    user_id: str | None
    profile: Profile
    queries: tuple[dict[str, Any], ...] = ()


def load_user(
    path: str | Path,
    *,
    user_id: str | None = None,
    index: int | None = None,
    shards: int | None = None,
    key_provider: KeyProvider | None = None,
) -> DeviceData:
    """One user from a profile file or a dataset file (JSONL, one user object per line).

    A multi-user file needs `user_id` or `index` (Flower's ``partition-id``) to pick the device's
    user. A single-user file with ``shards=n`` and ``index=i`` gives every n-th entry from the
    i-th: a quick way to simulate several devices from one demo history. A file sealed with
    `privacy seal` is decrypted in memory with `key_provider`.
    """
    p = Path(path)
    users = read_users(p, key_provider=key_provider, what="the device data")
    if len(users) > 1:
        return _pick(users, p, user_id, index)
    data = _as_device_data(users[0])
    if user_id is not None and data.user_id is not None and data.user_id != user_id:
        raise ProfileError(f"User {user_id!r} is not in {p}.")
    if shards is not None and shards > 1:
        if index is None or not 0 <= index < shards:
            raise ProfileError(f"A device of a {shards}-way split needs a partition-id in 0..{shards - 1}.")
        part = Profile(data.profile.user_id, data.profile.entries[index::shards])
        return DeviceData(f"{data.user_id or 'user'}#{index}", part, data.queries[index::shards])
    return data


def _pick(users: list[DatasetUser], path: Path, user_id: str | None, index: int | None) -> DeviceData:
    if user_id is not None:
        chosen = [u for u in users if u.user_id == user_id]
        if not chosen:
            raise ProfileError(f"User {user_id!r} is not in {path}.")
        return _as_device_data(chosen[0])
    if index is not None:
        if not 0 <= index < len(users):
            raise ProfileError(f"{path} holds {len(users)} users; there is no user number {index}.")
        return _as_device_data(users[index])
    raise ProfileError(f"{path} holds {len(users)} users; say which one this device is (user-id or partition-id).")


def _as_device_data(user: DatasetUser) -> DeviceData:
    return DeviceData(user.user_id, Profile.from_data(user.data), user.queries)


@dataclass(frozen=True)
class Example:
    """One training sequence: prompt tokens then target tokens (the body and an end token)."""

    input_ids: tuple[int, ...]
    target_start: int


def split_profile(profile: Profile, holdout: int) -> tuple[list[ProfileEntry], list[ProfileEntry]]:
    """(training entries, evaluation entries): the newest `holdout` entries are never trained on."""
    entries = [e for e in profile.entries if e.body.strip()]
    if holdout <= 0 or len(entries) <= holdout:
        return entries, []
    return entries[:-holdout], entries[-holdout:]


def build_examples(
    lm: CausalLM,
    entries: Sequence[ProfileEntry],
    retrieval: Sequence[ProfileEntry],
    cfg: TaskConfig,
) -> list[Example]:
    """Tokenized (prompt, body) pairs in the inference format.

    The context of an entry is retrieved from `retrieval` exactly as `sdk.decoding.Specialist`
    does (BM25 over the task prompt, `fit_context`), minus the entry itself: training on a
    context that contains the answer would teach copying, not style. When a sequence would exceed
    `max_len`, the body is cut to half the budget and the context shrinks until the prompt fits.
    """
    index = ProfileIndex(Profile(None, tuple(retrieval))) if retrieval and cfg.context_entries > 0 else None
    end = _end_token(lm)
    examples: list[Example] = []
    for entry in entries:
        prompt = task_prompt(entry.subject)
        room = cfg.max_len - len(render_prompt(lm, prompt))
        if room < _MIN_TARGET_TOKENS:
            continue  # even the bare prompt leaves no room for a body: max_len is too small
        body = list(lm.tokenizer.encode(entry.body.strip(), add_special_tokens=False))
        cap = min(room, cfg.max_len // 2)
        # A body that fits ends with the end token (the model must learn to stop); a cut one does not.
        target = [*body, end] if len(body) < cap else body[:cap]
        budget = cfg.max_len - len(target)
        context_entries: list[ProfileEntry] = []
        if index is not None:
            got = index.retrieve(prompt, cfg.context_entries + 1)
            context_entries = [e for e in got if e is not entry and e != entry][: cfg.context_entries]
        chars = cfg.context_chars
        ids: list[int] | None = None
        while True:
            context = fit_context(context_entries, max_chars=chars) if context_entries and chars >= 40 else []
            candidate = render_prompt(lm, prompt, context)
            if len(candidate) <= budget:
                ids = candidate
                break
            if not context:
                break
            chars //= 2
        if ids is None:
            continue
        examples.append(Example(tuple(ids + target), len(ids)))
    return examples


def to_dataset(examples: Sequence[Example], pad_id: int, max_len: int) -> TensorDataset:
    """Fixed-width tensors (Opacus's Poisson loader needs a map-style dataset of equal shapes)."""
    n = len(examples)
    ids = torch.full((n, max_len), pad_id, dtype=torch.long)
    attention = torch.zeros((n, max_len), dtype=torch.long)
    target = torch.zeros((n, max_len), dtype=torch.float32)
    for i, ex in enumerate(examples):
        length = len(ex.input_ids)
        ids[i, :length] = torch.tensor(ex.input_ids, dtype=torch.long)
        attention[i, :length] = 1
        target[i, ex.target_start : length] = 1.0
    return TensorDataset(ids, attention, target)


def _end_token(lm: CausalLM) -> int:
    eos = lm.tokenizer.eos_token_id
    if isinstance(eos, int) and eos in lm.eos_ids:
        return eos
    if lm.eos_ids:
        return min(lm.eos_ids)
    raise ConfigError(f"The model {lm.name} has no end-of-sequence token to end a training target with.")


def _pad_id(lm: CausalLM) -> int:
    pad = lm.tokenizer.pad_token_id
    return int(pad) if isinstance(pad, int) else _end_token(lm)


# --- the model with two adapters ---------------------------------------------------------------


class SpecialistWithAdapters:
    """A base Specialist with the ``global`` and ``personal`` LoRA adapters attached (peft)."""

    def __init__(self, lm: CausalLM, cfg: TaskConfig) -> None:
        from peft import LoraConfig, get_peft_model

        self.lm = lm
        self.cfg = cfg
        self.fingerprint = base_fingerprint(lm.model)
        self.lora_config = LoraConfig(
            r=cfg.lora_rank,
            lora_alpha=cfg.lora_alpha,
            target_modules=cfg.targets,
            lora_dropout=0.0,  # dropout would make Opacus's per-sample gradients noisier for nothing
            bias="none",
            task_type="CAUSAL_LM",
        )
        # Opacus snag: the model must sit on its final device before the adapters are created and
        # before make_private, or the optimizer holds stale parameters and the adapters never move.
        lm.model.to("cpu")  # type: ignore[arg-type]  # transformers types `to` as an unbound wrapper
        # Opacus snag: gradient checkpointing re-runs forward in backward and breaks its hooks.
        if getattr(lm.model, "is_gradient_checkpointing", False):
            lm.model.gradient_checkpointing_disable()
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(cfg.seed)  # every party builds the same initial global adapter
                self.peft = get_peft_model(lm.model, self.lora_config, adapter_name=GLOBAL)
                self.peft.add_adapter(PERSONAL, self.lora_config)
        except ValueError as exc:
            raise ConfigError(f"Cannot put LoRA adapters on {lm.name}: {' '.join(str(exc).split())[:200]}.") from None
        self.peft.eval()

    def lora_config_dict(self) -> dict[str, Any]:
        data = self.lora_config.to_dict()
        return {k: (sorted(v) if isinstance(v, set) else v) for k, v in data.items()}

    def activate(self, adapters: Sequence[str], trainable: str | None = None) -> None:
        """Make exactly `adapters` take part in forward passes; only `trainable` gets gradients."""
        # peft types `base_model` as a plain Module; under a LoRA config it is peft's tuner model.
        cast("BaseTuner", self.peft.base_model).set_adapter(list(adapters))
        for name, param in self.peft.named_parameters():
            param.requires_grad = trainable is not None and f".{trainable}." in name and "lora_" in name

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.peft.parameters() if p.requires_grad]

    def get_adapter(self, name: str) -> dict[str, np.ndarray]:
        """Adapter `name`'s LoRA matrices (A and B), and nothing else.

        peft's default (``save_embedding_layers="auto"``) adds the *full* embedding or LM-head
        matrix when a target names one: an "adapter" that replaced the LM head through one evaluate
        message. Only low-rank deltas are exported, and `set_adapter_weights` takes only those.
        """
        from peft import get_peft_model_state_dict

        state = get_peft_model_state_dict(self.peft, adapter_name=name, save_embedding_layers=False)
        return {k: v.detach().to(torch.float32).cpu().numpy().copy() for k, v in state.items() if _is_lora_matrix(k)}

    def set_adapter_weights(self, name: str, arrays: Mapping[str, np.ndarray]) -> None:
        """Load `arrays` into adapter `name`; the keys and shapes must be exactly this adapter's
        LoRA matrices (no base weight, no embedding or LM-head matrix, nothing else)."""
        from peft import set_peft_model_state_dict

        foreign = sorted(k for k in arrays if not _is_lora_matrix(k))
        if foreign:
            raise ConfigError(f"The {name} adapter arrays hold more than LoRA matrices: {foreign[:2]}.")
        expected = {k: v.shape for k, v in self.get_adapter(name).items()}
        got = {k: tuple(np.asarray(v).shape) for k, v in arrays.items()}
        if set(got) != set(expected) or any(tuple(expected[k]) != got[k] for k in got):
            missing = ", ".join(sorted(set(expected) - set(got))[:2]) or "none"
            raise ConfigError(
                f"The {name} adapter arrays do not fit this Specialist "
                f"({len(got)} arrays for {len(expected)} expected; missing: {missing})."
            )
        state = {k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in arrays.items()}
        for k, tensor in state.items():  # NaN in a global adapter would train into the personal one
            if not bool(torch.isfinite(tensor).all()):
                raise ConfigError(f"The {name} adapter array {k} holds values that are not finite numbers.")
        result = set_peft_model_state_dict(self.peft, state, adapter_name=name)
        unexpected = getattr(result, "unexpected_keys", [])
        if unexpected:
            raise ConfigError(f"The {name} adapter arrays have keys this Specialist lacks: {unexpected[:2]}.")

    def reset_adapter(self, name: str, seed: int) -> None:
        """Fresh LoRA weights for `name` (random A, zero B), reproducible from `seed`."""
        from peft.tuners.lora import LoraLayer

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            for module in self.peft.modules():
                if isinstance(module, LoraLayer) and name in module.lora_A:
                    module.reset_lora_parameters(name, True)


def _is_lora_matrix(key: str) -> bool:
    """A LoRA A or B weight in peft's state-dict naming (``....q_proj.lora_A.weight``)."""
    return key.endswith((".lora_A.weight", ".lora_B.weight"))


# --- training and evaluation ---------------------------------------------------------------------


def per_sequence_loss(
    model: torch.nn.Module, ids: torch.Tensor, attention: torch.Tensor, target: torch.Tensor
) -> torch.Tensor:
    """Mean token cross-entropy over each sequence's target, one value per sequence.

    Averaging per sequence (not over all tokens of the batch) keeps each sequence's contribution
    independent of the others, which is what DP-SGD's per-example clipping assumes.
    """
    width = int(attention.sum(dim=1).max().item()) if attention.numel() else 1
    ids, attention, target = ids[:, :width], attention[:, :width], target[:, :width]
    # Keyword inputs are fine with Opacus's default "hooks" grad sampler (the "ew" one fails on them).
    logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1]
    labels = ids[:, 1:]
    mask = target[:, 1:]
    ce = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1), reduction="none"
    ).view(labels.shape)
    return (ce * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)


@dataclass(frozen=True)
class DPRoundResult:
    arrays: dict[str, np.ndarray]
    steps: int
    sample_rate: float
    noise_multiplier: float
    epsilon: float  # the device's total ε after this round
    delta: float
    accountant: str
    update_norm: float  # L2 norm of (new - old) global adapter: zero means nothing was learned


def step_rows(batch_size: int) -> int:
    """The rows every DP-SGD step runs through the model, whatever the history (issue #50, finding 4).

    A Poisson batch holds about n·q rows, n/⌈n/b⌉ for n sequences at batch size b: 2 for a history
    of 2, 4 for one of 36, so the time of a round told the two apart (0.82-1.00 s against
    1.52-1.75 s, never overlapping). Every batch is padded to this public number of rows, each
    `max-len` wide, with rows that carry no target (their loss and per-sample gradient are zero, so
    the update and its clipping are unchanged). Three times b: a Poisson batch exceeds it with
    probability below 4e-4 per step at b = 4 (Poisson(4) above 12); one that does is padded to the
    next multiple of it (`_fixed_rows`), a rare step that costs more.
    """
    return 3 * batch_size


def _fixed_rows(
    ids: torch.Tensor, attention: torch.Tensor, target: torch.Tensor, rows: int, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The batch padded to a multiple of `rows` rows (at least one), with rows that have no target.

    The padding rows attend to every position, so `per_sequence_loss` runs the full width too:
    the width of a batch (its longest sequence) grew with the number of rows sampled.
    """
    real, width = ids.shape[0], ids.shape[1]
    total = rows * max(1, math.ceil(real / rows))
    extra = total - real
    return (
        torch.cat([ids, torch.full((extra, width), pad_id, dtype=ids.dtype)]),
        torch.cat([attention, torch.ones((extra, width), dtype=attention.dtype)]),
        torch.cat([target, torch.zeros((extra, width), dtype=target.dtype)]),
    )


def dp_sample_rate(n: int, batch_size: int) -> float:
    """Opacus's Poisson sample rate for a loader of `n` examples in batches of `batch_size`."""
    return 1.0 / max(1, math.ceil(n / batch_size))


def train_global_dp(
    sw: SpecialistWithAdapters,
    dataset: TensorDataset,
    cfg: TaskConfig,
    ledger: Ledger | None,
    *,
    run_id: int = 0,
    server_round: int = 0,
    adapter_version: int = 0,
    seed: int = 0,
    private_steps: int | None = None,
) -> DPRoundResult:
    """Train the global adapter (personal disabled) with DP-SGD and record it in the ledger.

    With ``cfg.dp`` false (``--no-dp``) this is plain SGD and the ledger is untouched. The ledger
    refuses (`BudgetExhausted`) before any data is read if the round would exceed the budget.
    Of the ``cfg.dp_steps`` steps, only the first ``private_steps`` (default: all) learn from the
    data; the rest are cover steps: the same batch through the model and its per-sample
    gradients (the same work), then an update of the mechanism's noise alone, which reads no data,
    so neither the accountant nor the ledger counts it. The private steps are charged once the
    data was read, before anything decides what is sent: an update that is not finite
    (`UpdateNotFinite`, never sent) or a round that fails part-way is charged too.
    """
    from opacus import PrivacyEngine

    n = len(dataset)
    if n == 0:
        raise ConfigError("This device has no usable training sequences (empty history or max-len too small).")
    before = sw.get_adapter(GLOBAL)
    sw.activate([GLOBAL], trainable=GLOBAL)
    params = sw.trainable_parameters()
    rate = dp_sample_rate(n, cfg.batch_size)
    learning = cfg.dp_steps if private_steps is None else private_steps
    if not 0 <= learning <= cfg.dp_steps or (learning < cfg.dp_steps and not cfg.dp):
        raise ConfigError(f"private_steps must be 0 to dp-steps ({cfg.dp_steps}), and below it only with DP.")
    if cfg.dp and learning > 0:
        if ledger is None:
            raise ConfigError("DP training needs a privacy ledger.")
        ledger.check(cfg.noise_multiplier, rate, learning)
    generator = torch.Generator().manual_seed(seed)
    loader = DataLoader(dataset, batch_size=cfg.batch_size, shuffle=True, generator=generator)
    optimizer: torch.optim.Optimizer = torch.optim.SGD(params, lr=cfg.lr, momentum=0.9)
    module: Any = sw.peft
    engine = None
    sw.peft.train()  # Opacus validates the module in training mode
    if cfg.dp:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Secure RNG turned off")
            # secure_mode needs torchcsprng, which has no build for this torch; instead the batch
            # sampling and the noise use generators freshly seeded from the OS each round. They must
            # never be seeded from configuration: predictable noise would void the guarantee.
            engine = PrivacyEngine(accountant=cfg.accountant, secure_mode=False)
        engine.secure_rng = _os_seeded_generator()  # Opacus samples Poisson batches with this one
        # Opacus's DPOptimizer (opacus ships no types: Any), the optimizer from here on.
        module, private, loader = engine.make_private(
            module=sw.peft,
            optimizer=optimizer,
            data_loader=loader,
            noise_multiplier=cfg.noise_multiplier,
            max_grad_norm=cfg.max_grad_norm,
            poisson_sampling=True,
            grad_sample_mode="hooks",
            noise_generator=_os_seeded_generator(),
        )
        # Opacus divides the noisy sum by its expected batch size, n x q: a number of the private
        # history's size, which the update's scale then gave away (its norm told n = 5 from n = 6
        # in one round, cover steps included). A public constant divides it instead; the
        # accountant's figures (noise multiplier, sample rate, steps) are unchanged.
        private.expected_batch_size = cfg.batch_size
        optimizer = private
    module.train()
    charge = cfg.dp and engine is not None and ledger is not None and learning > 0
    finished = False
    rows, pad = step_rows(cfg.batch_size), _pad_id(sw.lm)
    try:
        for step, batch in enumerate(_cycle(loader, cfg.dp_steps)):
            optimizer.zero_grad(set_to_none=True)
            # Padded (an empty Poisson batch too): the work of a step does not depend on how many
            # rows the history's sampling rate drew. The mean runs over the padded rows; Opacus
            # scales per-sample gradients by the same count, so each real row's gradient is unchanged.
            real = int(batch[0].shape[0])
            ids, attention, target = _fixed_rows(*batch, rows, pad)
            with warnings.catch_warnings():
                # Opacus's hooks fire on module outputs because the frozen inputs need no grad: expected.
                warnings.filterwarnings("ignore", message="Full backward hook is firing")
                losses = per_sequence_loss(module, ids, attention, target)
                # Plain SGD (no engine) averages over the real rows, as before the padding: a mean over
                # the padded rows would shrink its steps by real/rows. Opacus's mean reduction is undone
                # per sample by the same row count, so under DP the mean over every row is the right one.
                (losses.mean() if engine is not None else losses.sum() / max(real, 1)).backward()
            if step < learning:
                optimizer.step()
            else:
                _cover_step(optimizer, params)
        finished = True
    finally:
        module.eval()
        if engine is not None:
            module._close()  # drop Opacus's hooks so personal training and evaluation run plain
        sw.peft.eval()
        if charge:
            # Charged as soon as the data was read, before anything decides what is sent: whether
            # the update is finite (else noise alone goes out), or whether training fails at all,
            # depends on the data, so that choice is itself a release of this round's mechanism.
            # A round that did not finish is charged the whole round its budget check allowed.
            assert engine is not None and ledger is not None
            taken = list(engine.accountant.history) if finished else [(cfg.noise_multiplier, rate, learning)]
            entry = ledger.record(
                run_id=run_id,
                server_round=server_round,
                adapter_version_in=adapter_version,
                history=taken,
                max_grad_norm=cfg.max_grad_norm,
            )
    after = sw.get_adapter(GLOBAL)
    if not all_finite(after):
        # Checked after the ledger is charged: these arrays are never sent (the caller sends noise
        # alone instead), but the choice between them and noise depends on the data.
        raise UpdateNotFinite("The DP update of the global adapter holds values that are not finite.")
    norm = math.sqrt(sum(float(np.sum((after[k] - before[k]) ** 2)) for k in after))
    epsilon = entry.epsilon_after if charge else (0.0 if ledger is None else ledger.epsilon_spent)
    return DPRoundResult(
        arrays=after,
        steps=learning,
        sample_rate=rate if cfg.dp else 0.0,
        noise_multiplier=cfg.noise_multiplier if cfg.dp else 0.0,
        epsilon=epsilon if cfg.dp else math.inf,
        delta=cfg.delta,
        accountant=cfg.accountant if cfg.dp else "none",
        update_norm=norm,
    )


def all_finite(arrays: Mapping[str, Any]) -> bool:
    """Whether every array of an adapter holds finite values only (one that does not is never sent
    or kept)."""
    return all(np.isfinite(np.asarray(a)).all() for a in arrays.values())


def noise_only_update(arrays: Mapping[str, np.ndarray], cfg: TaskConfig, steps: int) -> dict[str, np.ndarray]:
    """`steps` cover steps on `arrays` that need no model: the mechanism's noise (σ·C over the batch
    size) through SGD with momentum, as `train_global_dp` takes them. What a device with no usable
    sequence sends: echoing the arrays it received told the server that none of its entries fits
    at this `max-len` (a server stepping `max-len` learnt its shortest entry's length)."""
    params = [torch.tensor(np.array(v, dtype=np.float32), requires_grad=True) for v in arrays.values()]
    optimizer = torch.optim.SGD(params, lr=cfg.lr, momentum=0.9)
    generator = _os_seeded_generator()
    std = cfg.noise_multiplier * cfg.max_grad_norm
    for _ in range(steps):
        for p in params:
            p.grad = torch.normal(0.0, std, p.shape, generator=generator) / cfg.batch_size
        optimizer.step()
    return {k: p.detach().numpy() for k, p in zip(arrays, params, strict=True)}


def _cover_step(optimizer: Any, params: Sequence[torch.nn.Parameter]) -> None:
    """One DP-SGD step with every per-sample gradient zero: Opacus's noise, scaled as it scales it.

    The update depends on no data, so it costs no privacy; stepping the wrapped optimizer directly
    keeps Opacus's accountant (a hook on the DP optimizer's step) from counting it.
    """
    optimizer.zero_grad(set_to_none=True)  # drop the per-sample gradients just computed
    std = optimizer.noise_multiplier * optimizer.max_grad_norm
    for p in params:
        noise = torch.normal(0.0, std, p.shape, generator=optimizer.generator, dtype=p.dtype)
        p.grad = noise / optimizer.expected_batch_size  # one backward per step, as Opacus scales it
    optimizer.original_optimizer.step()


def train_personal(sw: SpecialistWithAdapters, dataset: TensorDataset, cfg: TaskConfig, *, seed: int = 0) -> float:
    """Train the personal adapter on top of the frozen global one; returns the last batch's loss.

    Not DP: these weights never leave the device (they are as private as the history itself).
    """
    n = len(dataset)
    if n == 0 or cfg.personal_steps == 0:
        return math.nan
    sw.activate([GLOBAL, PERSONAL], trainable=PERSONAL)
    params = sw.trainable_parameters()
    optimizer = torch.optim.AdamW(params, lr=cfg.personal_lr, weight_decay=0.0)
    rng = random.Random(seed)
    pad = _pad_id(sw.lm)
    order: list[int] = []
    loss_value = math.nan
    sw.peft.train()
    try:
        for _ in range(cfg.personal_steps):
            if len(order) < cfg.batch_size:
                fresh = list(range(n))
                rng.shuffle(fresh)
                order.extend(fresh)
            batch = [order.pop() for _ in range(min(cfg.batch_size, n))]
            # Always batch-size rows at full width (a history smaller than a batch ran fewer);
            # the padding rows carry no target and stay out of the mean.
            picked = dataset[batch]
            ids, attention, target = _fixed_rows(picked[0], picked[1], picked[2], cfg.batch_size, pad)
            optimizer.zero_grad(set_to_none=True)
            loss = per_sequence_loss(sw.peft, ids, attention, target)[: len(batch)].mean()
            loss.backward()
            optimizer.step()
            loss_value = float(loss.item())
    finally:
        sw.peft.eval()
    return loss_value


@torch.no_grad()
def evaluate_loss(
    sw: SpecialistWithAdapters, dataset: TensorDataset, adapters: Sequence[str], batch_size: int = 4
) -> float:
    """Mean per-sequence loss on `dataset` with exactly `adapters` active."""
    if len(dataset) == 0:
        return math.nan
    sw.activate(adapters, trainable=None)
    sw.peft.eval()
    total = 0.0
    for start in range(0, len(dataset), batch_size):
        ids, attention, target = dataset[start : start + batch_size]
        total += float(per_sequence_loss(sw.peft, ids, attention, target).sum().item())
    return total / len(dataset)


def _os_seeded_generator() -> torch.Generator:
    return torch.Generator().manual_seed(secrets.randbits(63))


def _cycle(loader: Any, steps: int) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    done = 0
    while done < steps:
        for batch in loader:
            if done >= steps:
                return
            done += 1
            yield batch[0], batch[1], batch[2]


# --- model loading, cached per process ------------------------------------------------------------

_MODELS: dict[tuple[str, str], SpecialistWithAdapters] = {}


def specialist_for(cfg: TaskConfig, *, cache_dir: Path | None = None) -> SpecialistWithAdapters:
    """The Specialist with both adapters, loaded once per process and model.

    In the in-process simulation every device shares it: each message loads that device's
    adapters into it before use, so no device ever sees another's weights.
    """
    key = (cfg.model, json.dumps([cfg.lora_rank, cfg.lora_alpha, cfg.targets, cfg.seed]))
    if key not in _MODELS:
        lm = load_causal_lm(cfg.model, cache_dir=cache_dir, progress=False)
        _MODELS[key] = SpecialistWithAdapters(lm, cfg)
    return _MODELS[key]


@dataclass(frozen=True)
class DeviceDatasets:
    """One device's tensors: what DP-SGD trains the global adapter on, the personal set, the held-out set."""

    dp_train: TensorDataset  # one commit per sequence (no retrieved context): ε is commit-level
    personal_train: TensorDataset  # the inference format, with retrieved context
    held_out: TensorDataset


def device_datasets(sw: SpecialistWithAdapters, data: DeviceData, cfg: TaskConfig) -> DeviceDatasets:
    """The training sets and the held-out evaluation set of one device."""
    train_entries, eval_entries = split_profile(data.profile, cfg.holdout)
    pad = _pad_id(sw.lm)
    dp = build_examples(sw.lm, train_entries, (), cfg)  # no retrieval: each sequence is one commit
    train = build_examples(sw.lm, train_entries, train_entries, cfg)
    held = build_examples(sw.lm, eval_entries, train_entries, cfg)
    return DeviceDatasets(
        to_dataset(dp, pad, cfg.max_len), to_dataset(train, pad, cfg.max_len), to_dataset(held, pad, cfg.max_len)
    )
