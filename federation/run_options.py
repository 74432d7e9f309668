"""What one federated run asks for: the Flower run config and, for a simulation, its devices.

`federation run` (and `schedule`) turn their options into `RunOptions`; a benchmark that runs the
same simulation builds them directly. Both then get the same run config (shared by the ServerApp
and every ClientApp) and the same node configs of the simulated devices.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import ConfigError

__all__ = ["RunOptions"]


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
            from federation.device import DEFAULT_SECAGG_MIN_COHORT  # torch and all: only for this check

            if self.clients < DEFAULT_SECAGG_MIN_COHORT:
                # Every device refuses a SecAgg+ cohort below its secagg-min-cohort: the run would train nothing.
                raise ConfigError(f"--secagg needs at least {DEFAULT_SECAGG_MIN_COHORT} devices (--clients).")
        return config

    def simulation_nodes(self, log: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
        """Node configs of the simulated devices: one user each, or shards of a single user's history.

        Without `data` the SDK's demo user is split among the devices (`log` is told so).
        """
        from federation.atrest import device_key_provider
        from federation.task import _users_in

        data = self.data
        if data is None:
            from sdk.context import demo_profile_path

            data = demo_profile_path()
            if log is not None:
                log(f"no --data: splitting the SDK's demo history {self.clients} ways, one part per device")
        data = Path(data).expanduser()
        if not data.is_file():
            raise ConfigError(f"The data file {data} does not exist.")
        if data.stat().st_size == 0:  # every device would refuse, in a run that looks like one
            raise ConfigError(f"The data file {data} is empty: no device would have a history to train on.")
        users = _users_in(data, device_key_provider(data))
        nodes: list[dict[str, Any]] = []
        for i in range(self.clients):
            node: dict[str, Any] = {"data-file": str(data.resolve()), "partition-id": i}
            if len(users) > 1:
                if self.clients > len(users):
                    raise ConfigError(
                        f"{data} holds {len(users)} users, fewer than the {self.clients} devices asked for."
                    )
                node["user-id"] = str(users[i].get("user_id"))
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
        return nodes
