"""The pool-host runtime: what runs next to the hardware and nowhere else (docs/architecture.md
"Packages"). The Celery worker that executes a run (`worker`), the launchers that bring a
deployment up (`launchers`), power telemetry (`telemetry`), the simulator's real-time HTTP
server (`simulator`) and the checks that need a live server or the sandbox (`verification`).
It imports the domain package (agentperf/), never Django or a web app; no web app imports it."""
