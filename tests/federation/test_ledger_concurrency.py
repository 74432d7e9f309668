"""Two runs on one device, in two processes, never lose a ledger update."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from specsteer.federation.budget_ledger import Ledger
from tests.test_architecture import ROOT

WRITER = """
import sys, time
from specsteer.federation.budget_ledger import Ledger
path, tag, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ledger = Ledger.load(path, epsilon_budget=1e6, delta=1e-5)  # loaded once, as a long-lived device would
open(path + f".ready{tag}", "w").close()
while not all(__import__("os").path.exists(path + f".ready{t}") for t in (0, 1)):
    time.sleep(0.01)
for i in range(n):
    ledger.record(run_id=tag, server_round=i, adapter_version_in=0, history=[(1.0 + tag, 0.01, 1)], max_grad_norm=1.0)
"""


def test_two_concurrent_writers_keep_every_round(tmp_path: Path) -> None:
    path = tmp_path / "dev" / "ledger.json"
    path.parent.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    n = 8
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(tag), str(n)], env=env, cwd=ROOT)
        for tag in (0, 1)
    ]
    assert [w.wait(timeout=300) for w in writers] == [0, 0]

    data = json.loads(path.read_text())
    rounds = sorted((r["run_id"], r["server_round"]) for r in data["rounds"])
    assert rounds == sorted((tag, i) for tag in (0, 1) for i in range(n)), "a concurrent update was lost"
    assert sorted(map(tuple, data["history"])) == sorted([(1.0, 0.01, 1)] * n + [(2.0, 0.01, 1)] * n)
    # The stored total is the ε of the whole merged history, and the file parses as a ledger.
    ledger = Ledger.load(path, epsilon_budget=1e6, delta=1e-5)
    assert ledger.epsilon_spent == data["epsilon_spent"]
    assert not [p.name for p in path.parent.iterdir() if p.name.startswith(".tmp-")]
