"""The embedded profile's front: Debian's nginx before gunicorn (docs/security.md "Slow
clients").

gunicorn's threads read a request's headers and body themselves, so a dozen connections that
each send one header line every few seconds hold every thread of the site and time it out
(the hostile finding: 12 such connections, 2 workers × 4 threads). nginx reads each request
whole, on its event loop, before it reaches gunicorn: a slow client holds a connection of
nginx's, never a thread of the site; one that stalls past `client_header_timeout` /
`client_body_timeout` is dropped. It answers slow readers from its buffers the same way.

gunicorn then listens on a loopback port of its own and trusts one proxy
(`TRUSTED_PROXY_COUNT=1`): the throttles and the login lock count the address nginx saw.
"""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
from pathlib import Path

# the bodies the site takes: a runner's blob PUT (raw records, logs) on the embedded
# profile is the largest; Django refuses what is over its own limits
MAX_BODY = "1g"


def nginx_binary() -> str | None:
    found = shutil.which("nginx")
    if found:
        return found
    return "/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None


def front_conf(*, host: str, port: int, upstream_port: int, prefix: Path) -> str:
    """nginx.conf for the front: listen on host:port, pass everything to gunicorn on
    127.0.0.1:upstream_port once it arrived whole."""
    return f"""\
{_worker_user()}worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{
  worker_connections 4096;
}}
http {{
  access_log off;
  client_body_temp_path {prefix}/tmp/body;
  proxy_temp_path {prefix}/tmp/proxy;
  fastcgi_temp_path {prefix}/tmp/fastcgi;
  uwsgi_temp_path {prefix}/tmp/uwsgi;
  scgi_temp_path {prefix}/tmp/scgi;
  # a client gets this long for its headers, and between two reads of its body, then 408
  client_header_timeout 10s;
  client_body_timeout 30s;
  send_timeout 60s;
  keepalive_timeout 15s;
  client_max_body_size {MAX_BODY};
  server_tokens off;
  upstream site {{
    server 127.0.0.1:{upstream_port};
    keepalive 16;
  }}
  server {{
    listen {host}:{port};
    location / {{
      proxy_pass http://site;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $http_host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      # the whole request, then gunicorn (the default, written down: it is the point)
      proxy_request_buffering on;
      proxy_buffering on;
      proxy_read_timeout 180s;
    }}
  }}
}}
"""


def _worker_user() -> str:
    """nginx started as root drops its workers to `nobody`, who may not pass the folders
    above the prefix (a clone under a 0700 home or `mktemp -d`): every request body past
    the in-memory buffer (a runner's blob PUT) was then a 500. Its workers run as the user
    who started the demo, as gunicorn does; started as anyone else, they run as that user
    anyway and the directive is left out."""
    return f"user {getpass.getuser()};\n" if os.geteuid() == 0 else ""


def start_front(
    *, host: str, port: int, upstream_port: int, prefix: Path, log: Path
) -> subprocess.Popen | None:
    """Start nginx in the foreground, in its own process group (stop it by its PID); None
    where nginx is not installed (`make demo` installs it)."""
    nginx = nginx_binary()
    if nginx is None:
        return None
    (prefix / "tmp").mkdir(parents=True, exist_ok=True)
    conf = prefix / "nginx.conf"
    conf.write_text(front_conf(host=host, port=port, upstream_port=upstream_port, prefix=prefix))
    argv = [nginx, "-p", str(prefix), "-c", str(conf), "-g", "daemon off;"]
    with open(log, "ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
