"""Federated LoRA tuning of per-device Specialists (Flower + Opacus + peft).

See docs/federation.md. Importing the package changes nothing in the process: the entry points
that start a run (`federation.cli.main`, `federation.simulation.run_in_process`, the Flower apps'
handlers, and the Flower processes `federation.deploy` starts) call `federation.offline.go_offline`
to make Flower and Hugging Face strictly offline.
"""
