"""The pool worker's side of a run: everything here runs without database access.

A run spec comes in through the broker; the run's director (`runner.worker.director`)
starts the launcher, runs the qualification probes and the engine's search, and reports
through a `Reporter` (`runner.worker.reporter`): on a pool host only the runner API
(`runner.worker.api_client`) with the run's own token (docs/pipeline.md "The director
seam"). Nothing in this package imports Django models or opens a database connection.
"""
