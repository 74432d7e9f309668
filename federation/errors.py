"""The federation's errors, in one place, under `core.errors.SpecSteerError` so one `except` in a CLI catches all.

    SpecSteerError              core.errors: the root every package's errors hang from
    ├── ConfigError             a bad option, run config or node config
    │   ├── AdapterError        core.errors: an adapter folder that is missing, damaged or for another model
    │   ├── Refusal             a device's decision not to take part; the server reads only its `public` sentence
    │   │   ├── BudgetExhausted     training this round would push the device's ε past its budget
    │   │   ├── NotEligible         the device's eligibility flags say it must not take part right now
    │   │   ├── PolicyRefusal       the run asks for less privacy than the device's policy allows
    │   │   ├── RunConfigRefusal    a run asking for another model, a larger adapter, more work, or bad values
    │   │   ├── MessageRefusal      a message whose adapter arrays or version the device does not accept
    │   │   └── SecAggRefusal       secure-aggregation settings or stages that do not meet the device's terms
    │   └── LedgerError         privacy.errors: a device's DP ledger is damaged (also a PrivacyError)
    ├── ModelLoadError          core.errors: a model path or name that cannot be loaded
    ├── AttemptRevoked          a scheduled attempt that lost its right to publish (it timed out)
    ├── UpdateNotFinite         a DP round whose update is not finite (never sent, but charged)
    ├── RunFailed               a run in which no device trained (each device's cause is in its own log)
    └── ProfileError            core.errors: a device's data file cannot be read or parsed

A device refuses a round with a `Refusal`; they are defined here (`federation.budget_ledger` and
`federation.participant` still export the older ones). What the server reads of a refusal is its
class's fixed `public` sentence, never the exception text: the text names the device's own terms
(its minimum noise multiplier, its δ, which eligibility flag is off), and those would tell one
device from another. The text goes to the device's own log. The others come
from the layers below and are gathered here, so a caller imports its `except` clauses from one module.
"""

from __future__ import annotations

from specsteer.core.errors import AdapterError, ConfigError, ModelLoadError, ProfileError, SpecSteerError
from specsteer.privacy.errors import LedgerError

__all__ = [
    "AdapterError",
    "AttemptRevoked",
    "BudgetExhausted",
    "ConfigError",
    "LedgerError",
    "MessageRefusal",
    "ModelLoadError",
    "NotEligible",
    "PolicyRefusal",
    "ProfileError",
    "Refusal",
    "RunConfigRefusal",
    "RunFailed",
    "SecAggRefusal",
    "SpecSteerError",
    "UpdateNotFinite",
]


class Refusal(ConfigError):
    """A device's decision not to take part in a round or a stage of one.

    ``str(exc)`` is the detail for the device's own log; `public` is the one fixed sentence the
    server may read. A sentence per class, never a figure: whatever varies with the device's terms
    would fingerprint it (and the server knows what it asked for).
    """

    public = "The device could not take part in this round; the cause is in its own log."


class BudgetExhausted(Refusal):
    """Training this round would push the device's ε past its budget."""

    public = "Privacy budget exhausted: this round would exceed the device's ε budget."


class NotEligible(Refusal):
    """The device's eligibility flags say it must not take part right now."""

    public = "Device not eligible for this round."


class PolicyRefusal(Refusal):
    """The run asks for less privacy than the device's policy allows."""

    public = "Refused: the run asks for less privacy than this device's policy allows."


class RunConfigRefusal(Refusal):
    """The run asks for another model, a larger adapter or more work than the device allows, or
    sets a value no device accepts (a learning rate of NaN, an infinite clipping norm)."""

    public = "Refused: the run's settings are outside what this device accepts."


class MessageRefusal(Refusal):
    """A message whose adapter (keys, shapes, values, version, base) the device does not accept."""

    public = "Refused: the message's adapter is not one this device accepts."


class SecAggRefusal(Refusal):
    """Secure-aggregation settings or stages that do not meet the device's terms (or none, where it requires it)."""

    public = "Refused: the run's secure aggregation does not meet this device's terms."


class AttemptRevoked(SpecSteerError):
    """A scheduled attempt's right to publish was revoked (it overran its deadline or was superseded)."""


class UpdateNotFinite(SpecSteerError):
    """A DP round's update holds values that are not finite: the device sends noise alone instead
    (`federation.participant`), and the round is charged all the same, since whether training diverges
    depends on the data."""


class RunFailed(SpecSteerError):
    """A run in which no device trained in any round: every device refused, failed or (in a
    simulation, whose devices' logs say so) sat out, so no version learnt from any device's data."""
