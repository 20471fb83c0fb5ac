"""The catalog: served models, hardware systems, SLO tier sets and datasets: the bottom layer every other app reads (docs/architecture.md)."""
