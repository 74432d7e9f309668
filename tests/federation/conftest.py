"""Fixtures for the federation tests: tiny Specialists saved as folders, small run configs.

The ClientApp loads its model by path (as a SuperNode would), so the tiny models are written to
disk once per session. Training runs single-threaded: on a shared 2-core machine, torch's
thread pool spins against other processes and a tiny model trains 100x slower with 2 threads.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.common.constant import SUPERLINK_NODE_ID
from transformers import PreTrainedTokenizerFast

from tests.tinymodels import save_tiny

FIXTURE_USERS = Path(__file__).resolve().parents[1] / "fixtures" / "users.jsonl"


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_bpe_model(tmp_path_factory: pytest.TempPathFactory, bpe_tok: PreTrainedTokenizerFast) -> Path:
    """A tiny Llama over the 400-token BPE (no chat template): the fastest model to train."""
    return save_tiny(tmp_path_factory.mktemp("models"), bpe_tok, seed=3, name="tiny-bpe", hidden=32, heads=2)


@pytest.fixture(scope="session")
def tiny_chat_model(tmp_path_factory: pytest.TempPathFactory, smol_tok: PreTrainedTokenizerFast) -> Path:
    """A tiny Llama over SmolLM2's real tokenizer and chat template, like the embedded Specialist."""
    return save_tiny(tmp_path_factory.mktemp("models"), smol_tok, seed=4, name="tiny-chat", hidden=32, heads=2)


def run_config(model: Path, state: Path, **overrides: Any) -> dict[str, Any]:
    """A run config small enough for the fast tier: 2 DP steps, 2 personal steps, rank 2.

    Sequences are 256 tokens because the byte-level test BPE spends ~130 on the prompt alone.
    """
    config: dict[str, Any] = {
        "model": str(model),
        "max-len": 256,
        "context-chars": 200,
        "dp-steps": 2,
        "personal-steps": 2,
        "lora-rank": 2,
        "lora-alpha": 4,
        "lora-targets": "q_proj,v_proj",
        "batch-size": 4,
        "lr": 0.05,
        "personal-lr": 0.01,
        "server-state-dir": str(state / "server"),
        "num-server-rounds": 1,
        "min-clients": 2,
        "round-timeout": 60.0,
    }
    config.update(overrides)
    return config


def node_configs(model: Path, state: Path, n: int = 2, **extra: Any) -> list[dict[str, Any]]:
    """One device per fixture user, each with its own state folder, training `model` (a device
    trains only the model its node config names)."""
    return [
        {
            "data-file": str(FIXTURE_USERS),
            "partition-id": i,
            "state-dir": str(state / f"device{i}"),
            "model": str(model),
            **extra,
        }
        for i in range(n)
    ]


def deliver(
    content: RecordDict,
    message_type: str,
    node_config: dict[str, Any],
    run_config: dict[str, Any],
    *,
    node_id: int = 1000,
    state: RecordDict | None = None,
    run_id: int = 7,
) -> Message:
    """One message from a (possibly malicious) server to the real ClientApp, as a SuperNode hands it
    over (Flower's dispatch and mods, the metadata `LocalGrid` stamps), and the device's reply."""
    from specsteer.federation.client_app import app
    from specsteer.federation.simulation import _server_identity

    with _server_identity(run_id):
        msg = Message(content, node_id, message_type, group_id="1")
        msg.metadata.__dict__["_message_id"] = uuid.uuid4().hex
        msg.metadata.__dict__["_run_id"] = run_id
        msg.metadata.__dict__["_src_node_id"] = SUPERLINK_NODE_ID
        context = Context(
            run_id=run_id,
            node_id=node_id,
            node_config=dict(node_config),
            state=state if state is not None else RecordDict(),
            run_config=dict(run_config),
        )
        return app(msg, context)


def train_content(arrays: dict[str, np.ndarray], **config: Any) -> RecordDict:
    """A Message-API train or evaluate message's content, as `VersionedFedAvg` sends it."""
    record = ArrayRecord({k: Array(np.ascontiguousarray(arrays[k])) for k in sorted(arrays)})
    return RecordDict({"arrays": record, "config": ConfigRecord({"adapter-version": 0, "server-round": 1, **config})})


def v0_arrays(config: dict[str, Any]) -> tuple[dict[str, np.ndarray], str]:
    """A run's global adapter v0 and base fingerprint, as the server builds them (a fresh model:
    the process-wide one holds whatever the last device trained into it)."""
    from specsteer.core.models import load_causal_lm
    from specsteer.federation.task import GLOBAL, SpecialistWithAdapters, TaskConfig

    cfg = TaskConfig.from_run_config(config)
    sw = SpecialistWithAdapters(load_causal_lm(cfg.model, progress=False), cfg)
    return sw.get_adapter(GLOBAL), sw.fingerprint
