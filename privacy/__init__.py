"""privacy: the uplink's egress guard, leakage measurement, DP budgets, and the profile at rest.

privacy.guard       EgressGuard, GuardVerdict, GuardPolicy: the detectors composed, and what of a draft may go up
privacy.spans       Span, Detector, Tokenizer, the kinds of span: what the detectors share
privacy.pii         PiiDetector: personal-data patterns
privacy.canaries    CanaryDetector, identities_from_trailers: registered strings and their variants
privacy.ngrams      VerbatimNgramDetector: verbatim runs of the private history
privacy.leakage     canary exposure, n-gram leakage, membership AUROC / TPR@FPR, size channel, padded frames
privacy.vault       ProfileVault (AES-256-GCM), KeyProvider, PassphraseKeyProvider (scrypt), raw-key providers
privacy.data        dataset users for the report (with trailers), canary files, uplinks from an audit log
privacy.report      the leakage report over one audit log (what `privacy leakage-report` prints)
privacy.cli         `privacy budget | leakage-report | seal`

The other modules:

- `privacy.accounting`: The device's ε ledger format: one parser, one writer, and the ε it adds up to.
- `privacy.adapter_exposure`: Canary exposure of a released model's weights (Carlini et al., "The Secret
  Sharer", 2019).
- `privacy.errors`: The privacy package's errors, under `core.errors.SpecSteerError` so one `except` in a CLI
  catches all.
- `privacy.context_ids`: Identifiers their context gives away: a licence plate after a vehicle word, a date of
  birth right after a name (issue #49).
- `privacy.history_secrets`: Every secret the user's own history shows, registered (`HistorySecretDetector`,
  issue 30).
- `privacy.membership`: Membership inference without generating: the draft likelihood-ratio attack.
- `privacy.normalize`: One normal form for every detector: what a text says, not how its characters are
  spelled.
- `privacy.profile_format`: The profile and dataset file format: JSON, JSONL or dataset user objects, sealed or
  not (its one reader).
- `privacy.recognizers`: Recognition by the libraries made for each kind, behind the guard's own streaming
  (issue 30).
- `privacy.registered`: The forms a registered string can take on its way out, computed from the string
  itself.
- `privacy.special`: Special categories of personal data (GDPR Art. 9) by a shipped vocabulary and patterns
  (`SpecialCategoryRecognizer`, issue #49).
- `privacy.uplinked`: What of each secret has already gone up in one session (`UplinkRecord`), so a secret
  sent a few characters at a time, far apart, is held once its...
"""
