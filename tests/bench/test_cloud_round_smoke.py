"""bench.cloud_round on tiny models: each method's live rounds timed beside its blocks alone, on
both KV engines, and the turns it takes between them."""

from __future__ import annotations

import itertools
import json

import pytest

from bench import cloud_round
from tests.tinymodels import save_tiny


@pytest.mark.parametrize("kv", ["dynamic", "slots"])
def test_cloud_round_times_each_method_beside_its_blocks(tmp_path, char_tok, kv: str, capsys) -> None:
    # Prepare
    s = save_tiny(tmp_path, char_tok, seed=1, name="s")
    g = save_tiny(tmp_path, char_tok, seed=2, name="g")
    out = tmp_path / "results"
    argv = ["--specialist", str(s), "--generalist", str(g), "--kv", kv, "--methods", "specsteer,fusion,sd"]
    # Execute
    code = cloud_round.main([*argv, "--sampling", "--rounds", "8", "--profile", "3", "--out", str(out)])
    # Assert
    assert code == 0
    data = json.loads((out / "cloud_round.json").read_text())
    rows = {r["method"]: r for r in data["rows"]}
    assert set(rows) == {"specsteer", "fusion", "sd"}
    assert [rows[m]["block_tokens"] for m in ("specsteer", "fusion", "sd")] == [5, 1, 5]
    assert rows["specsteer"]["reads_generic_specialist"] and not rows["sd"]["reads_generic_specialist"]
    assert rows["specsteer"]["sampling"] and not rows["sd"]["sampling"]  # sd verifies greedily only
    for row in rows.values():
        assert len(row["round_s"]) == 8 and len(row["blocks_alone_s"]) == cloud_round.CHUNKS
        assert row["round_vs_blocks"] == pytest.approx(row["round_median_s"] / row["blocks_s"])
    assert "| specsteer | 5 | P_G, P_S^0 |" in (out / "cloud_round.md").read_text()
    assert "ncalls" in capsys.readouterr().out  # the profile of the rounds


def test_rounds_and_blocks_take_turns_and_each_chunk_closes_its_session() -> None:
    events: list[str] = []

    def rounds():
        events.append("open")
        try:
            for i in itertools.count():
                events.append("round")
                yield float(i)
        finally:
            events.append("close")

    def blocks() -> float:
        events.append("blocks")
        return 1.0

    seconds, alone = cloud_round.round_against_blocks(rounds, blocks, count=6, chunks=3)
    assert len(seconds) == 6 and alone == [1.0, 1.0, 1.0]
    chunk = ["open", "round", "round", "round", "round", "close", "blocks"]  # two untimed, two timed
    assert events == chunk * 3


def test_an_unknown_method_is_refused_in_one_sentence(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cloud_round.main(["--methods", "specsteer,beam"])
    assert exit_info.value.code == 2
    assert "--methods takes specsteer, fusion, sd, llm; got 'specsteer,beam'" in capsys.readouterr().err
