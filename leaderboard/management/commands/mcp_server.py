"""`manage.py mcp_server`: the read-only MCP server of the public data, streamable HTTP at
/mcp, beside the site (docs/api.md "MCP")."""

from __future__ import annotations

import django
import uvicorn
from django.core.management.base import BaseCommand, CommandError


def app_factory():
    """The ASGI app in a uvicorn process (a worker process starts from a fresh interpreter:
    Django is set up first; DJANGO_SETTINGS_MODULE comes from manage.py's environment)."""
    django.setup()
    from leaderboard.mcp_server import asgi_app

    return asgi_app()


class Command(BaseCommand):
    help = "Serve the public data as a read-only MCP server (streamable HTTP at /mcp)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
        parser.add_argument("--port", type=int, default=8001, help="port (default 8001)")
        parser.add_argument(
            "--workers", type=int, default=1, help="processes (stateless: any number)"
        )

    def handle(self, *args, host: str, port: int, workers: int, **options) -> None:
        if not 0 < port < 65536:
            raise CommandError(f"--port: {port} is not a port number")
        if workers < 1:
            raise CommandError("--workers: at least 1")
        self.stdout.write(f"MCP server on http://{host}:{port}/mcp", ending="\n")
        self.stdout.flush()
        uvicorn.run(
            "leaderboard.management.commands.mcp_server:app_factory",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level="warning",
            access_log=False,
        )
