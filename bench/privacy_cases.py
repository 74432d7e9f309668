"""The privacy benchmark's cases: the canary space, the leaky control, the configurations each
(user, query) runs under, and the cases themselves (`bench.privacy_report` runs them,
`bench.privacy_page` summarizes what they produced).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.dataset import first_users
from specsteer.core.prompts import task_prompt
from specsteer.core.session_types import SessionParams
from specsteer.privacy.leakage import CanarySpace, plant_canary
from specsteer.sdk.context import Profile, ProfileIndex

__all__ = [
    "CONFIGS",
    "CONTROL_PARAMS",
    "CONTROL_PROMPT",
    "PAIRS",
    "SPACE",
    "Case",
    "Config",
    "build_cases",
    "canary_secret",
]

# The canary space: the classic "my PIN is dddddd", |R| = 10^6 (19.93 bits). Small enough that a
# 135M model can copy a secret from it, large enough that ~1 bit (no signal) and ~20 bits (the
# secret singled out) are far apart.
SPACE = CanarySpace()

# The leaky control: a prompt that asks the Specialist to quote the secret line verbatim. Probed
# with single generations before this bench was written (u00/u01 of the dev data): with the real
# three-entry context the 135M Specialist does not reproduce the canary, neither when asked to copy
# the earlier commit message word for word (it paraphrases) nor when asked for the PIN (it makes
# one up), and it skips a canary line even when copying a one-entry context. Asked for the PIN
# with the canary-bearing entry as its only context, it answers with it. So the control is: this
# prompt, the only private context the canary-bearing entry cut to the canary line and its first
# paragraph, and gamma = 0, which accepts every draft, so the uplink carries exactly what the
# Specialist writes (drafts are sent whether or not they are accepted; gamma 0 keeps the
# Specialist on its own path instead of the cloud's recovery).
CONTROL_PROMPT = (
    "What is the PIN in the earlier commit message above? Reply with the line that contains it, copied exactly."
)
CONTROL_PARAMS = SessionParams(gamma=0.0)


@dataclass(frozen=True)
class Config:
    label: str
    guard: str | None  # None (off), "placeholder" or "keep-local"
    profile: str  # "real" (canary planted), "swapped", "non-member", "control"
    padded: bool = False  # the session declares padded_frames: every Round on the wire has one size


CONFIGS: tuple[Config, ...] = (
    Config("off", None, "real"),
    Config("on", "placeholder", "real"),
    Config("keep-local", "keep-local", "real"),
    Config("on/padded", "placeholder", "real", padded=True),
    Config("off/swapped", None, "swapped"),
    Config("on/swapped", "placeholder", "swapped"),
    Config("off/non-member", None, "non-member"),
    Config("on/non-member", "placeholder", "non-member"),
    Config("control/off", None, "control"),
    Config("control/on", "placeholder", "control"),
)
# (guard setting, real run, swapped run, non-member run) for the paired metrics.
PAIRS = (("off", "off", "off/swapped", "off/non-member"), ("on", "on", "on/swapped", "on/non-member"))


def canary_secret(user_id: str, seed: int) -> str:
    """The user's canary secret: fixed by (seed, user), so a resumed run plants the same one."""
    rng = np.random.default_rng([seed, zlib.crc32(user_id.encode())])
    return SPACE.sample(rng)[0]


@dataclass
class Case:
    """One (user, query) with its profile variants."""

    user: dict[str, Any]
    partner: dict[str, Any]  # the next dev user in the data file: the swapped profile
    query: dict[str, Any]
    secret: str
    top: int  # the history entry BM25 retrieves first for the query
    planted_body: str
    control_body: str

    @property
    def user_id(self) -> str:
        return str(self.user["user_id"])

    @property
    def canary(self) -> str:
        return SPACE.render(self.secret)

    @property
    def prompt(self) -> str:
        return task_prompt(self.query["subject"])

    def profile_obj(self, variant: str) -> dict[str, Any]:
        entries = list(self.user["profile"])
        entry = {**entries[self.top], "body": self.planted_body}
        if variant == "real":
            entries[self.top] = entry
        elif variant == "non-member":
            del entries[self.top]
        elif variant == "swapped":
            return self.partner
        elif variant == "control":
            entries = [{**entry, "body": self.control_body}]
        else:
            raise ValueError(f"unknown profile variant {variant!r}")
        return {"user_id": self.user_id, "profile": entries}

    def member_document(self) -> str:
        """The entry that the non-member profile lacks, as the Specialist reads it (canary included)."""
        return f"{self.user['profile'][self.top]['subject']}\n\n{self.planted_body}"


def build_cases(path: Path, users: int, per_user: int, seed: int) -> list[Case]:
    everyone = first_users(path)
    cases: list[Case] = []
    for i, user in enumerate(everyone[:users]):
        partner = everyone[(i + 1) % len(everyone)]
        secret = canary_secret(user["user_id"], seed)
        canary = SPACE.render(secret)
        profile = Profile.from_obj(user, source=user["user_id"])
        index = ProfileIndex(profile)
        for query in user["queries"][:per_user]:
            best = index.retrieve(task_prompt(query["subject"]), 1)[0]
            top = profile.entries.index(best)
            body = str(user["profile"][top].get("body", "")).strip("\n")
            # plant_canary appends its line to the text it is given. Given the whole body, the line
            # would land past the context budget (fit_context trims long bodies from the end), so
            # it is planted into the first paragraph: its own line, right after it.
            head, sep, rest = body.partition("\n\n")
            (planted_head,), _ = plant_canary([head], canary, np.random.default_rng(seed))
            cases.append(
                Case(
                    user=user,
                    partner=partner,
                    query=query,
                    secret=secret,
                    top=top,
                    planted_body=planted_head + (sep + rest if sep else ""),
                    control_body=f"{canary}\n\n{head}" if head else canary,
                )
            )
    return cases
