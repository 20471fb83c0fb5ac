"""gunicorn's settings for every start of the site: `make web`, `make demo`
(demo/management/commands/demo.py), the runner-load benchmark's site and the tests' servers
(tests/support/webserver.py) pass `-c config/gunicorn.py`; the command line adds the address,
the worker and thread counts and the logs.

`preload_app`: the arbiter imports Django and the site once and forks its workers from it,
so each worker starts with the app loaded (no second import: about a CPU second and the
memory of its modules per worker; a worker that dies is replaced at once). Nothing opens a
connection at import (database, cache and broker connections are made on first use, in the
worker), so no socket is shared across the fork.
"""

preload_app = True
