"""Federated LoRA tuning of per-device Specialists (Flower + Opacus + peft).

See docs/federation.md. Importing the package changes nothing in the process: the entry points
that start a run (`federation.cli.main`, `federation.simulation.run_in_process`, the Flower apps'
handlers, and the Flower processes `federation.deploy` starts) call `federation.offline.go_offline`
to make Flower and Hugging Face strictly offline.

The other modules:

- `federation.adapters`: Writing adapter folders; reading them and merging them into a model is
  `core.adapters`.
- `federation.atrest`: A federation device's data at rest: one key provider for its history, personal adapter
  and log.
- `federation.attempts`: A scheduled run's right to publish: one attempt holds it at a time, and one that
  times out loses it.
- `federation.budget_ledger`: The device's privacy ledger: every DP-SGD step it ever took, and the ε that adds
  up to.
- `federation.client_app`: The Flower ClientApp: one SuperNode is one device with its own private history.
- `federation.eligibility`: Whether the device may take part now: the state the embedding app reports, and how
  fresh it is.
- `federation.errors`: The federation's errors, in one place, under `core.errors.SpecSteerError` so one
  `except` in a CLI catches all.
- `federation.identity`: Device identities that SecAgg+ keys are bound to (issue #50, finding 2).
- `federation.participant`: One device's side of a round: eligibility, its state folder, and what it trains
  and sends.
- `federation.rounds`: What both server workflows share: the run's settings, one round's record, and
  versioning.
- `federation.run_options`: What one federated run asks for: the Flower run config and, for a simulation, its
  devices.
- `federation.secagg`: Secure aggregation: Flower's SecAgg+ over the devices' global adapters.
- `federation.secagg_terms`: The device's terms for SecAgg+: what Flower's `secaggplus_mod` would otherwise
  take from the server.
- `federation.server_app`: The Flower ServerApp: FedAvg over the devices' global adapters, one stored version
  per round.
- `federation.store`: The server's versioned global adapters: ``<state>/adapters/v<N>/``, one folder per
  version.
- `federation.task`: Everything the Flower apps do to a Specialist: adapters, data, DP training, evaluation.
"""
