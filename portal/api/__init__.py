"""The vendor REST API (/api/v1/): token or session auth, everything scoped to the caller's org."""
