"""The federation's errors, in one place, under `core.errors.SpecSteerError` so one `except` in a CLI catches all.

    SpecSteerError              core.errors: the root every package's errors hang from
    ├── ConfigError             a bad option, run config or node config
    │   ├── AdapterError        core.errors: an adapter folder that is missing, damaged or for another model
    │   ├── BudgetExhausted     training this round would push the device's ε past its budget
    │   ├── NotEligible         the device's eligibility flags say it must not take part right now
    │   ├── PolicyRefusal       the run asks for less privacy than the device's policy allows
    │   └── LedgerError         privacy.errors: a device's DP ledger is damaged (also a PrivacyError)
    ├── ModelLoadError          core.errors: a model path or name that cannot be loaded
    ├── AttemptRevoked          a scheduled attempt that lost its right to publish (it timed out)
    ├── RunFailed               a run in which no device trained (each device's cause is in its own log)
    └── ProfileError            core.errors: a device's data file cannot be read or parsed

A device refuses a round with `BudgetExhausted`, `NotEligible` or `PolicyRefusal`; they are
defined here (`federation.ledger` and `federation.device` still export them). The others come
from the layers below and are gathered here, so a caller imports its `except` clauses from one module.
"""

from __future__ import annotations

from core.errors import AdapterError, ConfigError, ModelLoadError, ProfileError, SpecSteerError
from privacy.errors import LedgerError

__all__ = [
    "AdapterError",
    "AttemptRevoked",
    "BudgetExhausted",
    "ConfigError",
    "LedgerError",
    "ModelLoadError",
    "NotEligible",
    "PolicyRefusal",
    "ProfileError",
    "RunFailed",
    "SpecSteerError",
]


class BudgetExhausted(ConfigError):
    """Training this round would push the device's ε past its budget."""


class NotEligible(ConfigError):
    """The device's eligibility flags say it must not take part right now."""


class PolicyRefusal(ConfigError):
    """The run asks for less privacy than the device's policy allows."""


class AttemptRevoked(SpecSteerError):
    """A scheduled attempt's right to publish was revoked (it overran its deadline or was superseded)."""


class RunFailed(SpecSteerError):
    """A run in which no device trained in any round: every device refused or failed (each
    device's cause is in its own log), so no new global adapter was made."""
