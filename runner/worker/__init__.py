"""The pool worker's side of a run: everything here runs without database access.

A run spec comes in through the broker; the worker starts the launcher, runs the
qualification probes and the engine's search, and reports back only through the runner API
(`runner.worker.api_client`) with the run's own token. Nothing in this package imports
Django models or opens a database connection.
"""
