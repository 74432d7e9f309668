"""bench.device_work: the device's work around its forwards, each part timed alone on its own text."""

from __future__ import annotations

import json

from bench import device_work
from specsteer.core.recovery import choose, device_rng
from specsteer.sdk.context import Profile
from specsteer.sdk.decoding import Specialist
from specsteer.sdk.uplink_guard import guard_setting
from tests.tinymodels import save_tiny, tiny_lm

PROFILE = Profile.from_obj({"profile": [{"subject": "Earlier", "body": "Jane Doe wrote from jane@example.com."}]})


def test_the_device_text_is_what_a_generation_in_that_mode_draws(char_tok) -> None:
    specialist = Specialist(tiny_lm(char_tok, seed=1), PROFILE)
    text = device_work.device_text(specialist, "Write about tests", 6, sampling=True, seed=3)
    # The same draws, one by one, from the device's own sequence and generator.
    seq = specialist.sequence(specialist.private_prompt_ids("Write about tests", with_context=True))
    rng = device_rng(3)
    expected = []
    for _ in range(6):
        expected.append(choose(seq.next_logprobs(), sampling=True, generator=rng))
        seq.push(expected[-1:])
    assert text.tokens == expected
    assert text.row.shape == (char_tok.vocab_size,) and text.row.dtype.name == "float32"


def test_every_part_is_timed_and_without_a_guard_a_check_costs_nothing(char_tok) -> None:
    lm = tiny_lm(char_tok, seed=1)
    text = device_work.device_text(Specialist(lm, PROFILE), "Write about tests", 12, sampling=False)
    guard = guard_setting(PROFILE, char_tok, "placeholder")
    work = device_work.device_work_times(text, sampling=True, guard=guard, tokenizer=char_tok, draft_len=4, reps=3)
    assert work.greedy_pick > 0 and work.sampled_draw > 0 and work.guard_check > 0 and work.fuse > 0
    bare = device_work.device_work_times(text, sampling=True, guard=None, tokenizer=char_tok, draft_len=4, reps=3)
    assert bare.guard_check == 0.0
    assert set(work.as_dict()) == {"greedy_pick", "sampled_draw", "guard_check", "fuse"}


def test_the_command_writes_its_json_and_page(tmp_path, char_tok) -> None:
    folder = save_tiny(tmp_path, char_tok, seed=2, name="s")
    out = tmp_path / "out"
    argv = ["--specialist", str(folder), "--tokens", "8", "--reps", "3", "--out", str(out)]
    assert device_work.main(argv) == 0
    result = json.loads((out / "device_work.json").read_text())
    assert result["command"].startswith("python -m bench.device_work --specialist")
    assert all(v > 0 for v in result["seconds"].values())
    assert "a check of the egress guard" in (out / "device_work.md").read_text()
