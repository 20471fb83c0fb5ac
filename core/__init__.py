"""What every app shares: the API error shape, input limits, storage, the shared cache, environment parsing, queue names, health (docs/architecture.md)."""
