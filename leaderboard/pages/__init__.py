"""What each public page shows, as plain (cacheable) data: tables, figures, provenance.

One module per page: `home`, `model`, `hardware`, `result`, `compare`, `history`,
`methodology`; `common` holds what several of them share (tier guides, result URLs, the
per-result chart points cache, the results and points tables). Importers name the module
(`from leaderboard.pages.result import result_page`); this package re-exports nothing.

Views stay thin: they parse the query string, fetch one of these through the cache and
render it (or export one of its tables as CSV). Every builder runs a fixed number of
queries whatever the number of results (tests/leaderboard/test_queries.py).
"""
