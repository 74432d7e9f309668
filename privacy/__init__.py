"""privacy: the uplink's egress guard, leakage measurement, DP budgets, and the profile at rest.

privacy.detectors   Span, PiiDetector, VerbatimNgramDetector, CanaryDetector, EgressGuard, GuardVerdict
privacy.leakage     canary exposure, n-gram leakage, membership AUROC / TPR@FPR, size channel, padded frames
privacy.vault       ProfileVault (AES-256-GCM), KeyProvider, PassphraseKeyProvider (scrypt), raw-key providers
privacy.data        raw dataset users (with trailers), canary files, uplinks rebuilt from an audit log
privacy.report      the leakage report over one audit log (what `privacy leakage-report` prints)
privacy.cli         `privacy budget | leakage-report | seal`
"""
