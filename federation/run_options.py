"""What one federated run asks for: the Flower run config and, for a simulation, its devices.

`federation run` (and `schedule`) turn their options into `RunOptions`; a benchmark that runs the
same simulation builds them directly. Both then get the same run config (shared by the ServerApp
and every ClientApp) and the same node configs of the simulated devices.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specsteer.core.errors import ConfigError

if TYPE_CHECKING:
    from specsteer.privacy.profile_format import DatasetUser

__all__ = ["SPLIT_FILE", "RunOptions"]

SPLIT_FILE = "simulation-split.json"  # in <state-dir>, beside devices/: how their data was split


@dataclass(frozen=True)
class RunOptions:
    """One run: `simulation` runs every device in this process; otherwise it goes to a SuperLink.

    None leaves a setting at the Flower app's default (pyproject.toml, [tool.flwr.app.config]).
    """

    state_dir: Path
    simulation: bool = True
    rounds: int = 1
    clients: int = 2  # simulated devices
    min_clients: int | None = None  # devices needed per round (default: all simulated, else 2)
    data: Path | None = None  # dataset JSONL or one user's profile (simulation; default: the SDK's demo user)
    model: str | None = None
    dp: bool = True
    secagg: bool = False
    epsilon: float | None = None  # each simulated device's total ε budget
    noise_multiplier: float | None = None
    dp_steps: int | None = None
    personal_steps: int | None = None
    max_len: int | None = None
    round_timeout: float | None = None

    def __post_init__(self) -> None:
        state = Path(self.state_dir).expanduser()
        if state.exists() and not state.is_dir():
            raise ConfigError(f"--state-dir {state} is a file; the federation's state needs a folder.")

    @property
    def server_dir(self) -> Path:
        """The server's state folder: adapter versions, the run log, a scheduled attempt's lease."""
        return (self.state_dir / "server").expanduser().resolve()

    def run_config(self) -> dict[str, Any]:
        """The Flower run config (shared by the ServerApp and every ClientApp) of this run."""
        config: dict[str, Any] = {
            "server-state-dir": str(self.server_dir),
            "num-server-rounds": self.rounds,
            "min-clients": self.min_clients or (self.clients if self.simulation else 2),
        }
        optional = {
            "model": self.model,
            "noise-multiplier": self.noise_multiplier,
            "dp-steps": self.dp_steps,
            "personal-steps": self.personal_steps,
            "max-len": self.max_len,
            "round-timeout": self.round_timeout,
        }
        config.update({k: v for k, v in optional.items() if v is not None})
        if not self.dp:
            config["dp"] = False
        if self.secagg:
            config["secagg"] = True
        if self.simulation and (self.min_clients or 0) > self.clients:
            raise ConfigError(f"--min-clients {self.min_clients} is more than the {self.clients} simulated devices.")
        if self.simulation and self.secagg:
            from specsteer.federation.participant import DEFAULT_SECAGG_MIN_COHORT  # torch and all: only for this check

            if self.clients < DEFAULT_SECAGG_MIN_COHORT:
                # Every device refuses a SecAgg+ cohort below its secagg-min-cohort: the run would train nothing.
                raise ConfigError(f"--secagg needs at least {DEFAULT_SECAGG_MIN_COHORT} devices (--clients).")
        return config

    def simulation_nodes(self, log: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
        """Node configs of the simulated devices: one user each, or shards of a single user's history.

        Without `data` the SDK's demo user is split among the devices (`log` is told so).
        """
        from specsteer.federation.atrest import device_key_provider
        from specsteer.privacy.profile_format import read_users

        data = self.data
        if data is None:
            from specsteer.sdk.context import demo_profile_path

            data = demo_profile_path()
            if log is not None:
                log(f"no --data: splitting the SDK's demo history {self.clients} ways, one part per device")
        data = Path(data).expanduser()
        if not data.is_file():
            raise ConfigError(f"The data file {data} does not exist.")
        if data.stat().st_size == 0:  # every device would refuse, in a run that looks like one
            raise ConfigError(f"The data file {data} is empty: no device would have a history to train on.")
        users = read_users(data, key_provider=device_key_provider(data), what="the data file")
        nodes: list[dict[str, Any]] = []
        for i in range(self.clients):
            node: dict[str, Any] = {"data-file": str(data.resolve()), "partition-id": i}
            if len(users) > 1:
                if self.clients > len(users):
                    raise ConfigError(
                        f"{data} holds {len(users)} users, fewer than the {self.clients} devices asked for."
                    )
                node["user-id"] = str(users[i].user_id)
            else:
                node["num-partitions"] = self.clients
            label = node.get("user-id") or f"part{i}"
            node["state-dir"] = str((self.state_dir / "devices" / label).expanduser().resolve())
            if self.model is not None:
                # A device trains only the model its node config names; the simulated devices' operator is the run's.
                node["model"] = self.model
            if self.epsilon is not None:
                node["epsilon-budget"] = self.epsilon
            if not self.dp:
                # In a simulation the operator owns the simulated devices, so their policy follows --no-dp.
                node["dp-required"] = False
            nodes.append(node)
        self._fix_split(data, users)
        return nodes

    def _fix_split(self, data: Path, users: list[DatasetUser]) -> None:
        """Record how the simulated devices were split, and refuse another split of this state-dir.

        Each simulated device's ledger is its state folder, named by user or by shard (``part<i>``):
        a later run that split the same history another way (``--clients 1`` then ``2``, or the
        data changed) would put entries that ``part0`` was charged for under ``part1``'s ledger,
        which never charged them, and their ε would compose past the budget unseen.
        """
        import hashlib
        import json

        from specsteer.core.fileio import atomic_write

        devices = (self.state_dir / "devices").expanduser().resolve()
        # What the devices read: the dataset's user objects, else (bare entries) the file itself.
        stored = [u.user_object for u in users if u.user_object is not None]
        try:
            content = json.dumps(stored, sort_keys=True, ensure_ascii=False, default=str).encode("utf-8")
            content = content if stored else data.read_bytes()
        except (OSError, ValueError) as exc:
            raise ConfigError(f"Cannot read the data file {data}: {exc}.") from None
        # By user, each ledger is its user's whatever the data holds; by shard, a part's entries
        # depend on the number of shards and on every entry of the history (entries[i::n]).
        split: dict[str, Any] = {"split": "by user"}
        if len(users) <= 1:
            split = {"split": f"{self.clients} shards", "data-sha256": hashlib.sha256(content).hexdigest()}
        path = devices.parent / SPLIT_FILE  # not in devices/, whose every entry is a device
        try:
            recorded = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
            earlier = devices.is_dir() and any(devices.iterdir())
        except (OSError, ValueError):
            recorded, earlier = {"unreadable": True}, True
        if recorded is None and earlier:
            raise ConfigError(
                f"--state-dir {self.state_dir} holds simulated devices whose split of the data was not "
                "recorded, so their ledgers cannot be matched to their data: start a new --state-dir."
            )
        if recorded is not None and recorded != split:
            raise ConfigError(
                f"--state-dir {self.state_dir} holds simulated devices split from other data or another "
                "number of devices (each device's ledger charged only its own part): use the same --data "
                "and --clients, or start a new --state-dir."
            )
        if recorded is None:
            try:
                devices.parent.mkdir(parents=True, exist_ok=True)
                atomic_write(path, json.dumps(split, indent=1) + "\n")
            except OSError as exc:
                raise ConfigError(
                    f"Cannot record the simulated devices' split in {path}: {exc.strerror or exc}."
                ) from None
