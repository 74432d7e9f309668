"""Canary exposure of a canary that went up in full in another form than the template's."""

from __future__ import annotations

import pytest

from specsteer.privacy.leakage import CanarySpace, canary_exposure


@pytest.mark.parametrize(
    "stream",
    [
        "note: my PIN is 4 0 2 9 1 3 ok",  # spaced out
        "note: my PIN is 402-913 ok",  # a separator
        "my PIN is 319204 (reversed)",  # backwards
        "my PIN is four zero two nine one three",  # number words
        "MY PIN IS 402913",  # another case
    ],
)
def test_a_canary_sent_in_full_in_another_form_is_fully_exposed(stream: str) -> None:
    space = CanarySpace()
    assert canary_exposure(space, "402913", stream) == pytest.approx(space.bits)


def test_the_other_readings_do_not_expose_what_is_not_there() -> None:
    space = CanarySpace()
    assert canary_exposure(space, "402913", "nothing relevant here") == pytest.approx(1.0, abs=0.01)
    # Another secret's digits, in any form, single out that one, not this one.
    assert canary_exposure(space, "402913", "my PIN is 5 1 7 7 0 8, or 807715 backwards") < 3.0
