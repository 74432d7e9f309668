"""privacy: the uplink's egress guard, leakage measurement, DP budgets, and the profile at rest.

privacy.guard       EgressGuard, GuardVerdict, GuardPolicy: the detectors composed, and what of a draft may go up
privacy.spans       Span, Detector, Tokenizer, the kinds of span: what the detectors share
privacy.pii         PiiDetector: personal-data patterns
privacy.canaries    CanaryDetector, identities_from_trailers: registered strings and their variants
privacy.ngrams      VerbatimNgramDetector: verbatim runs of the private history
privacy.leakage     canary exposure, n-gram leakage, membership AUROC / TPR@FPR, size channel, padded frames
privacy.vault       ProfileVault (AES-256-GCM), KeyProvider, PassphraseKeyProvider (scrypt), raw-key providers
privacy.data        raw dataset users (with trailers), canary files, uplinks rebuilt from an audit log
privacy.report      the leakage report over one audit log (what `privacy leakage-report` prints)
privacy.cli         `privacy budget | leakage-report | seal`
"""
