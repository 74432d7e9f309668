"""In-process simulation: the real ServerApp and ClientApp objects, joined by an in-memory Grid.

Flower's own simulation engine needs Ray, which would start a cluster on a 2-core machine for a
handful of devices. `LocalGrid` implements Flower's `Grid` interface instead: messages pushed by
the ServerApp's strategy are delivered to each node's ClientApp (Flower's dispatch, mods and all)
in this process, one after another, and the replies come back through `pull_messages`. Every
reply is deflated into the exact objects Flower would push over the network, so tests can
inspect (and count) what a device sends.

A node can be made to drop out: ``dropout(message) -> True`` makes it vanish for that message
(no reply, like a phone that loses its connection), and a ClientApp that raises is turned into an
error reply, as a SuperNode does.

A run can be cancelled (``cancelled``, an event `federation schedule` sets when an attempt
overruns its deadline): the grid then delivers no further message and hands back no further
reply, raising `AttemptRevoked` into the ServerApp, which stops there. A device already inside
its ClientApp finishes that message (a thread cannot be killed); its reply is dropped.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flwr.app import Context, Error, Message, RecordDict
from flwr.app.message import make_message
from flwr.clientapp import ClientApp
from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode
from flwr.serverapp import Grid, ServerApp
from flwr.supercore.inflatable.inflatable_object import InflatableObject, get_all_nested_objects
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity

from specsteer.federation.errors import AttemptRevoked

__all__ = ["LocalGrid", "SimNode", "deflated_bytes", "run_in_process"]

log = logging.getLogger("specsteer.federation.simulation")


def deflated_bytes(obj: InflatableObject) -> list[bytes]:
    """The serialized objects Flower pushes for `obj` (a message: itself, its records, its arrays)."""
    return [child.deflate() for child in get_all_nested_objects(obj).values()]


@dataclass
class SimNode:
    """One simulated SuperNode: a ClientApp with its node config and its run-long context state."""

    node_id: int
    node_config: dict[str, Any]
    app: ClientApp
    dropout: Callable[[Message], bool] | None = None
    state: RecordDict = field(default_factory=RecordDict)


@dataclass
class Delivery:
    """A message as delivered and, unless the node dropped out, its reply and the reply's bytes."""

    message: Message
    reply: Message | None
    sent_bytes: list[bytes]


class LocalGrid(Grid):
    """A Flower `Grid` whose SuperNodes are ClientApps in this process."""

    def __init__(
        self,
        nodes: Sequence[SimNode],
        *,
        run_id: int,
        run_config: Mapping[str, Any],
        cancelled: threading.Event | None = None,
    ) -> None:
        self.nodes = {n.node_id: n for n in nodes}
        self.cancelled = cancelled
        self.run_config = dict(run_config)
        self._run = Run.create_empty(run_id)
        self._pending: dict[str, Message] = {}
        self._replies: dict[str, Message] = {}
        self.deliveries: list[Delivery] = []

    def set_run(self, run: Run) -> None:
        self._run = run

    @property
    def run(self) -> Run:
        return self._run

    def create_message(
        self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str, ttl: float | None = None
    ) -> Message:
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.nodes)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for msg in messages:
            if msg.metadata.dst_node_id not in self.nodes:
                raise ValueError(f"no node {msg.metadata.dst_node_id} in this simulation")
            message_id = uuid.uuid4().hex
            # Flower's grids stamp these fields the same way (the Message API has no setters for them).
            msg.metadata.__dict__["_message_id"] = message_id
            msg.metadata.__dict__["_run_id"] = self._run.run_id
            msg.metadata.__dict__["_src_node_id"] = SUPERLINK_NODE_ID
            self._pending[message_id] = msg
            ids.append(message_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        out = []
        for message_id in message_ids:
            if message_id in self._pending:
                self._deliver(message_id, self._pending.pop(message_id))
            if message_id in self._replies:
                out.append(self._replies.pop(message_id))
        return out

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        # Delivery is synchronous, so one pull collects every reply there will ever be; a node that
        # dropped out simply has none, exactly as if the timeout had expired.
        return list(self.pull_messages(list(self.push_messages(messages))))

    def _check_cancelled(self) -> None:
        if self.cancelled is not None and self.cancelled.is_set():
            raise AttemptRevoked("The run was cancelled: its attempt overran its deadline.")

    def _deliver(self, message_id: str, msg: Message) -> None:
        self._check_cancelled()
        node = self.nodes[msg.metadata.dst_node_id]
        if node.dropout is not None and node.dropout(msg):
            self.deliveries.append(Delivery(msg, None, []))
            return
        # Each node gets its own copy, as it would after the network: no shared Python objects.
        delivered = make_message(copy.deepcopy(msg.metadata), copy.deepcopy(msg.content))
        context = Context(
            run_id=self._run.run_id,
            node_id=node.node_id,
            node_config=dict(node.node_config),
            state=node.state,
            run_config=dict(self.run_config),
        )
        try:
            reply = node.app(delivered, context)
        except Exception as exc:  # a crashing ClientApp becomes an error reply, as on a SuperNode
            reason = f"{type(exc).__name__}: {exc}"
            # The round reports the reason as a refusal; the traceback is for debugging (--verbose).
            log.debug("node %d's ClientApp raised", node.node_id, exc_info=True)
            reply = Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=reason), reply_to=delivered)
        self._check_cancelled()  # a device that finished after the cancel: its reply never arrives
        reply.metadata.__dict__["_message_id"] = uuid.uuid4().hex
        self._replies[message_id] = reply
        self.deliveries.append(Delivery(msg, reply, deflated_bytes(reply)))


_RUN_IDS = itertools.count(1)
_IDENTITY_LOCK = threading.Lock()
_IDENTITY_USERS = 0
_IDENTITY_SAVED = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)


@contextlib.contextmanager
def _server_identity(run_id: int) -> Iterator[None]:
    """Flower's process-wide task identity, set while any simulation runs and restored after the last.

    Flower stamps new messages with it. A simulation abandoned by the scheduler may still be
    running when the retry starts: restoring the saved identity as each run ends would unset it
    under the other (``TaskIdentity.run_id is not set``), so only the last one out restores it.
    `LocalGrid` stamps each message's run id itself, so overlapping runs never mix their ids.
    """
    global _IDENTITY_USERS, _IDENTITY_SAVED
    with _IDENTITY_LOCK:
        if _IDENTITY_USERS == 0:
            _IDENTITY_SAVED = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)
        _IDENTITY_USERS += 1
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = run_id, SUPERLINK_NODE_ID, 0
    try:
        yield
    finally:
        with _IDENTITY_LOCK:
            _IDENTITY_USERS -= 1
            if _IDENTITY_USERS == 0:
                TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = _IDENTITY_SAVED


def run_in_process(
    run_config: Mapping[str, Any],
    node_configs: Sequence[Mapping[str, Any]],
    *,
    server_app: ServerApp | None = None,
    client_app: ClientApp | None = None,
    run_id: int | None = None,
    dropouts: Mapping[int, Callable[[Message], bool]] | None = None,
    cancelled: threading.Event | None = None,
) -> tuple[dict[str, Any], LocalGrid]:
    """Run the ServerApp against one ClientApp per node config; returns (run summary, grid).

    `dropouts` maps a node's index to a predicate that makes it vanish for a message; setting
    `cancelled` stops the run at its next message (`AttemptRevoked`).
    """
    from specsteer.federation.client_app import app as default_client
    from specsteer.federation.offline import go_offline
    from specsteer.federation.server_app import RUN_LOG
    from specsteer.federation.server_app import app as default_server

    go_offline()
    client = client_app or default_client
    server = server_app or default_server
    rid = run_id if run_id is not None else int(uuid.uuid4().int % 2**62) or next(_RUN_IDS)
    nodes = [
        SimNode(node_id=1000 + i, node_config=dict(cfg), app=client, dropout=(dropouts or {}).get(i))
        for i, cfg in enumerate(node_configs)
    ]
    grid = LocalGrid(nodes, run_id=rid, run_config=run_config, cancelled=cancelled)
    context = Context(
        run_id=rid, node_id=SUPERLINK_NODE_ID, node_config={}, state=RecordDict(), run_config=dict(run_config)
    )
    # Flower stamps new messages with the identity of the process's task; in a deployment the
    # runtime sets it, here this process is the ServerApp's task.
    with _server_identity(rid):
        server(grid, context)
    log = Path(str(run_config["server-state-dir"])).expanduser() / RUN_LOG
    summaries = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]
    mine = [s for s in summaries if s.get("run_id") == rid]
    return (mine[-1] if mine else {}), grid
