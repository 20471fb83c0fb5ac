"""A launched server runs in the real sandbox (Debian bubblewrap): unprivileged, a clean
environment, its own folder, no view of the runner's files, loopback only; what the vendor
sees of its output is capped and redacted (docs/security.md "Sandbox")."""

from __future__ import annotations

import json
import os
import socket
import textwrap

import pytest

from runner.launchers.base import LauncherError, list_models
from runner.launchers.process import ProcessLauncher
from runner.launchers.sandbox import OUTPUT_CAP_CHARS
from tests.support.llamacpp import free_port

# The hostile "server": tries each escape, prints what it found as one JSON line, then
# serves /v1/models so the launcher sees it ready.
HOSTILE = textwrap.dedent(
    """
    import http.server, json, os, socket, sys
    found = {"uid": os.getuid(), "gid": os.getgid(), "env": sorted(os.environ),
             "interfaces": [name for _, name in socket.if_nameindex()], "cwd": os.getcwd()}
    for key, path in (("dataset", sys.argv[1]), ("database", sys.argv[2]), ("home", sys.argv[3])):
        try:
            with open(path, "rb") as handle:
                found[key] = "READ " + handle.read(20).decode(errors="replace")
        except OSError as exc:
            found[key] = type(exc).__name__
    for key, path in (("write_runner_dir", sys.argv[4] + "/pwned"), ("write_usr", "/usr/pwned")):
        try:
            with open(path, "w") as handle:
                handle.write("x")
            found[key] = "WROTE"
        except OSError as exc:
            found[key] = type(exc).__name__
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[5])), timeout=2).close()
        found["host_port"] = "CONNECTED"
    except OSError as exc:
        found["host_port"] = type(exc).__name__
    with open("own-file.txt", "w") as handle:
        handle.write("mine")
    print("FOUND " + json.dumps(found), flush=True)

    class Models(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"data": [{"id": "hostile"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    http.server.HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Models).serve_forever()
    """
)


@pytest.fixture
def runner_files(tmp_path):
    """Stand-ins for what a pool host keeps: a private test set, a database, a home file."""
    private = tmp_path / "runner"
    private.mkdir(mode=0o700)
    files = {}
    for name, text in (
        ("dataset", "PRIVATE-TEST-SET"),
        ("database", "SQLITE-DB"),
        ("home", "RUN-TOKEN aprun_x"),
    ):
        path = private / f"{name}.bin"
        path.write_text(text)
        os.chmod(path, 0o644)  # even world-readable files are out of the sandbox's view
        files[name] = str(path)
    return private, files


def test_a_hostile_launch_is_contained_at_every_step(tmp_path, runner_files, monkeypatch):
    private, files = runner_files
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    host_port = listener.getsockname()[1]
    monkeypatch.setenv("RUNNER_TEST_SECRET_HOLDER", "s3cr3t-value-from-the-host")
    launcher = ProcessLauncher(
        {
            "command": [
                "python",
                "-c",
                HOSTILE,
                files["dataset"],
                files["database"],
                files["home"],
                str(private),
                str(host_port),
            ],
            "env": {"DECLARED": "yes"},
            "port": free_port(),
            "ready_timeout_s": 30,
            "served_model_name": "hostile",
        },
        log_dir=str(tmp_path / "run"),
    )
    try:
        endpoint = launcher.start()
        assert list_models(endpoint.base_url or "", connect=endpoint.connect) == ["hostile"]
        sandbox_dir = launcher.sandbox.work_dir
        assert (sandbox_dir / "own-file.txt").read_text() == "mine"  # its own folder works
    finally:
        launcher.stop()
        listener.close()
    line = next(x for x in launcher.log_path.read_text().splitlines() if x.startswith("FOUND "))
    found = json.loads(line.removeprefix("FOUND "))
    assert found["uid"] == 65534 and found["gid"] == 65534  # not root
    assert found["interfaces"] == ["lo"]  # its own network namespace: loopback only
    assert found["host_port"] == "ConnectionRefusedError"  # the host's port is not reachable
    assert found["dataset"] == found["database"] == found["home"] == "FileNotFoundError"
    assert found["write_runner_dir"] == "FileNotFoundError"
    assert found["write_usr"] in ("OSError", "PermissionError")
    assert "RUNNER_TEST_SECRET_HOLDER" not in found["env"]  # the host's environment stays out
    assert set(found["env"]) <= {
        "DECLARED",
        "PORT",
        "PATH",
        "HOME",
        "TMPDIR",
        "LANG",
        "PWD",
        "PYTHONPATH",
        "PYTHONDONTWRITEBYTECODE",
    }
    assert "DECLARED" in found["env"] and found["cwd"] == "/sandbox"
    assert not (private / "pwned").exists()


def test_the_host_port_of_a_sandboxed_server_is_not_on_the_hosts_loopback(tmp_path):
    port = free_port()
    launcher = ProcessLauncher(
        {
            "command": ["python", "-c", HOSTILE, "/x", "/x", "/x", "/x", "1"],
            "env": {},
            "port": port,
            "ready_timeout_s": 30,
            "served_model_name": "hostile",
        },
        log_dir=str(tmp_path / "run"),
    )
    try:
        launcher.start()
        with pytest.raises(OSError):  # the server listens in the sandbox's namespace only
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    finally:
        launcher.stop()


def test_what_a_failed_launch_tells_the_vendor_is_capped_and_redacted(tmp_path, monkeypatch):
    monkeypatch.setenv("UPSTREAM_KEY", "sk-the-real-upstream-key-0123456789")
    run_dir = tmp_path / "run"
    noisy = (
        "import os, sys\n"
        "print('key=' + os.environ['UPSTREAM_KEY'])\n"
        "print('argv secret=' + sys.argv[1])\n"
        f"print('runner dir: {run_dir}')\n"
        "print('x' * 20000)\n"
        "sys.exit(3)\n"
    )
    launcher = ProcessLauncher(
        {
            "command": ["python", "-c", noisy, {"secret": True, "name": "UPSTREAM_KEY"}],
            "env": {"UPSTREAM_KEY": {"secret": True}},
            "port": free_port(),
            "ready_timeout_s": 30,
            "served_model_name": "noisy",
        },
        log_dir=str(run_dir),
    )
    with pytest.raises(LauncherError) as info:
        launcher.start()
    launcher.stop()
    message = str(info.value)
    assert "status 3" in message
    assert "sk-the-real-upstream-key" not in message
    assert str(tmp_path) not in message
    assert len(message) < OUTPUT_CAP_CHARS + 300
    stored = launcher.log_bytes().decode()
    assert "sk-the-real-upstream-key" not in stored and "[secret]" in stored
    assert str(tmp_path) not in stored


def test_a_command_cannot_name_the_runner_hosts_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SECRET_KEY", "django-secret-of-the-host")
    launcher = ProcessLauncher(
        {
            "command": ["echo", "${SECRET_KEY}"],
            "env": {},
            "port": free_port(),
            "ready_timeout_s": 5,
            "served_model_name": "x",
        },
        log_dir=str(tmp_path / "run"),
    )
    with pytest.raises(LauncherError, match=r"\$\{SECRET_KEY\} in the command is not set"):
        launcher.start()
    launcher.stop()


def test_python_in_the_sandbox_is_the_runners_environment_with_its_packages(tmp_path):
    """`python -m runner.launchers.llamacpp_server` needs xllamacpp from the runner's venv,
    not the base interpreter the venv was made from."""
    code = "import os, sys, xllamacpp\nprint('PREFIX ' + sys.prefix, flush=True)\nsys.exit(7)\n"
    launcher = ProcessLauncher(
        {
            "command": ["python", "-c", code],
            "env": {},
            "port": free_port(),
            "ready_timeout_s": 30,
            "served_model_name": "x",
        },
        log_dir=str(tmp_path / "run"),
    )
    with pytest.raises(LauncherError, match="status 7"):
        launcher.start()
    launcher.stop()
    import sys

    assert f"PREFIX {sys.prefix}" in launcher.log_path.read_text()
