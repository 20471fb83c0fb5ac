"""What a vendor uses: the vendor REST API and the portal, on top of submissions, runs and results (docs/architecture.md)."""
