"""The sandbox every launched server runs in (bubblewrap; docs/security.md "Sandbox").

A vendor's command runs:
- as an unprivileged user (`RUNNER_SANDBOX_UID`/`GID`, default nobody) with no capabilities
  and `no_new_privs`: bubblewrap (run by the root runner) builds the namespaces and mounts,
  then `setpriv` drops to that user before the vendor's program starts;
- in a clean environment: only the declared variables, the secrets the runner host supplies
  by name, `PORT`, and a fixed `PATH`/`HOME`/`LANG`;
- in its own folder (`/sandbox`, writable) on an otherwise read-only view of the system
  (`/usr`, the Python installation, the runner's code, and the files the pool host lists);
  nothing of the runner's own files (private test set, database, keys, run token, `$HOME`);
- in its own network namespace with only a loopback interface, so it reaches nothing on the
  host or beyond; the runner reaches its port by creating sockets inside that namespace
  (`Sandbox.socket`), with no forwarding proxy in the measured path;
- in its own PID namespace, ended with its process group and by `--die-with-parent`;
- with exactly the accelerators the pool granted it (runner/launchers/devices.py): their
  device nodes `--dev-bind`-ed into an otherwise minimal `/dev`, `/sys` and `/proc/driver`
  read-only (only the granted GPUs listed), a sized `/dev/shm` and the pool's memlock limit.

What the vendor sees of its output goes through `redact_output`: capped, with the runner
host's paths and the resolved secret values replaced.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path
from socket import socket as Socket  # the class below has a method named socket
from typing import Any

from runner.launchers.base import LauncherError
from runner.launchers.devices import DeviceGrant, DevicePool

CLONE_NEWNET = 0x40000000
SANDBOX_DIR = "/sandbox"
OUTPUT_CAP_CHARS = 2000
_RUNNER_ROOT = Path(__file__).resolve().parents[2]

# bubblewrap's namespaces: no network but the sandbox's own loopback, its own PIDs, IPC,
# hostname and cgroup view; the sandbox dies with the worker
_NAMESPACES = (
    "--unshare-net",
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    "--die-with-parent",
    "--new-session",
    "--hostname",
    "sandbox",
)
# the host's system files a program needs, read-only: /usr (and the usual links into it),
# the loader cache and the time zone; a fresh /proc and a minimal /dev
_SYSTEM_FILES = (
    *("--ro-bind", "/usr", "/usr"),
    *("--symlink", "usr/bin", "/bin"),
    *("--symlink", "usr/sbin", "/sbin"),
    *("--symlink", "usr/lib", "/lib"),
    *("--symlink", "usr/lib64", "/lib64"),
    *("--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"),
    *("--ro-bind-try", "/etc/localtime", "/etc/localtime"),
    *("--proc", "/proc"),
    *("--dev", "/dev"),
)


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise LauncherError(f"{name}={raw!r} on the runner host is not an integer") from None


def sandbox_ids() -> tuple[int, int]:
    """The unprivileged user and group launched servers run as (never root)."""
    uid = _env_int("RUNNER_SANDBOX_UID", 65534)
    gid = _env_int("RUNNER_SANDBOX_GID", 65534)
    if uid == 0 or gid == 0:
        raise LauncherError(
            "RUNNER_SANDBOX_UID/GID must not be 0: launched servers never run as root"
        )
    return uid, gid


def launch_variables() -> dict[str, str]:
    """Runner-host variables a command may name as `${VAR}` (`RUNNER_LAUNCH_VARS`, comma
    separated): e.g. where the pool keeps model files. Nothing else of the host's
    environment reaches a command."""
    names = [n.strip() for n in os.environ.get("RUNNER_LAUNCH_VARS", "").split(",") if n.strip()]
    return {name: os.environ[name] for name in names if name in os.environ}


def extra_read_only_paths() -> list[str]:
    """Host paths the pool shares read-only with launched servers (`RUNNER_SANDBOX_RO_PATHS`,
    colon separated), e.g. a model directory."""
    raw = os.environ.get("RUNNER_SANDBOX_RO_PATHS", "")
    return [p for p in raw.split(":") if p]


def bwrap_binary() -> str:
    found = shutil.which("bwrap")
    if not found:
        raise LauncherError(
            "bubblewrap (bwrap) is not installed on this runner host; a launched server never "
            "runs outside the sandbox (install the Debian package `bubblewrap`)"
        )
    return found


def _python_roots() -> list[str]:
    """The interpreter's installation(s), so `python` works inside the sandbox: the
    runner's own environment first (its packages, e.g. xllamacpp), then its base install."""
    roots: list[str] = []
    for candidate in (
        sys.prefix,
        sys.base_prefix,
        str(Path(os.path.realpath(sys.executable)).parent.parent),
    ):
        real = os.path.realpath(candidate)
        if real and real != "/" and not real.startswith("/usr") and real not in roots:
            roots.append(real)
    return roots


def _ancestors(path: str) -> list[str]:
    parts = Path(path).parts[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def redact_output(
    text: str, *, secrets: list[str], paths: list[str], cap: int | None = OUTPUT_CAP_CHARS
) -> str:
    """What a vendor may see of a launched process's output: secret values and the runner
    host's paths replaced, capped to the last `cap` characters (None: the whole stored log)."""
    for value in sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True):
        text = text.replace(value, "[secret]")
    for path in sorted({p.rstrip("/") for p in paths if len(p) > 1}, key=len, reverse=True):
        text = text.replace(path, "[host path]")
    if cap is not None and len(text) > cap:
        text = "[…] " + text[-cap:]
    return text


def redacted_log(path: Path, *, secrets: list[str], paths: list[str]) -> bytes:
    """A launcher's stored log as the run keeps it (vendors read it): `redact_output` over the
    whole file; empty when there is none."""
    try:
        data = path.read_bytes()
    except OSError:
        return b""
    text = data.decode(errors="replace")
    return redact_output(text, secrets=secrets, paths=paths, cap=None).encode()


def netns_connect(
    netns_fd: int | None, host: str, port: int, timeout: float | None, *, what: str
) -> Socket:
    """A TCP connection to `host:port` from inside the network namespace `netns_fd` (the
    launchers' `Endpoint.connect`); a LauncherError when the namespace is gone."""
    if netns_fd is None:
        raise LauncherError(f"the {what} is not running")
    sock = netns_socket(netns_fd, what=what)
    sock.settimeout(timeout)
    try:
        sock.connect((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def netns_socket(netns_fd: int, *, what: str = "sandbox") -> Socket:
    """A TCP socket created inside the network namespace `netns_fd` (a sandbox's or a
    container's: its loopback is the server's), so no proxy sits in the measured path."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    result: dict[str, Any] = {}

    def make() -> None:  # setns changes only this short-lived thread's namespace
        if libc.setns(netns_fd, CLONE_NEWNET) != 0:
            result["error"] = os.strerror(ctypes.get_errno())
            return
        result["sock"] = socket.socket(socket.AF_INET, socket.SOCK_STREAM)

    thread = threading.Thread(target=make, name=f"{what}-netns")
    thread.start()
    thread.join()
    if "error" in result:
        raise LauncherError(
            f"cannot enter the {what}'s network namespace: {result['error']} (the runner "
            "needs CAP_SYS_ADMIN, i.e. root, on the pool host)"
        )
    sock: Socket = result["sock"]
    return sock


class Sandbox:
    """One sandboxed process: `start(argv)`, `socket()` inside its network namespace, `stop()`."""

    def __init__(
        self,
        *,
        work_dir: str,
        env: dict[str, str],
        read_only: list[str],
        serves: bool = True,
        devices: DeviceGrant | None = None,
    ) -> None:
        self.work_dir = Path(work_dir)
        # the accelerators granted (none: the pool's sized /dev/shm and memlock limit only)
        self.devices = devices if devices is not None else DevicePool.from_env().grant([])
        self.env = env
        self.read_only = read_only
        # a server the runner connects to (its network namespace is kept open), or a
        # program that only runs and exits (the task check's executions)
        self.serves = serves
        self.uid, self.gid = sandbox_ids()
        self.process: subprocess.Popen[bytes] | None = None
        self.child_pid: int | None = None
        self._netns_fd: int | None = None
        self._libc = ctypes.CDLL("libc.so.6", use_errno=True)

    def _read_only_binds(self) -> list[str]:
        """`--ro-bind` of the Python roots, the platform's own code a launched helper runs
        (the simulator's server, the llama.cpp wrapper: the runtime and the domain package
        it imports) and the pool's read-only paths, each with its parent folders made."""
        binds: list[str] = []
        made: set[str] = set()
        code = [str(_RUNNER_ROOT / "runner"), str(_RUNNER_ROOT / "agentperf")]
        for path in [*_python_roots(), *code, *self.read_only]:
            if not os.path.exists(path):
                continue
            for parent in _ancestors(path):
                if parent not in made and parent not in ("/usr",):
                    binds += ["--perms", "0755", "--dir", parent]
                    made.add(parent)
            binds += ["--ro-bind", path, path]
        return binds

    def _env_args(self) -> list[str]:
        """`--setenv` of the declared env and the sandbox's own (PATH, HOME, TMPDIR, ...)."""
        path = [f"{root}/bin" for root in _python_roots()] + ["/usr/local/bin", "/usr/bin", "/bin"]
        env = {
            **self.env,
            "PATH": ":".join(path),
            "HOME": SANDBOX_DIR,
            "TMPDIR": "/tmp",
            "LANG": "C.UTF-8",
            "PYTHONPATH": str(_RUNNER_ROOT),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        return [arg for name, value in env.items() for arg in ("--setenv", name, value)]

    def bwrap_argv(self, argv: list[str], *, info_fd: int = 3) -> list[str]:
        """`argv` as it runs in the sandbox: prlimit (the memlock limit, set by root before
        bubblewrap drops every capability), bubblewrap with fresh namespaces and the host's
        /usr read-only, then setpriv to the sandbox's user with no capability left."""
        prlimit = shutil.which("prlimit") or "/usr/bin/prlimit"
        self.devices.memlock_preflight()
        return [
            prlimit,
            f"--memlock={self.devices.memlock_arg()}",
            "--",
            bwrap_binary(),
            *_NAMESPACES,
            *_SYSTEM_FILES,
            *self.devices.bwrap_args(),
            *("--perms", "1777", "--tmpfs", "/tmp"),
            *self._read_only_binds(),
            *("--bind", str(self.work_dir), SANDBOX_DIR, "--chdir", SANDBOX_DIR),
            "--clearenv",
            *self._env_args(),
            *("--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"),
            *("--info-fd", str(info_fd), "--"),
            "setpriv",
            f"--reuid={self.uid}",
            f"--regid={self.gid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "--",
            *argv,
        ]

    def start(self, argv: list[str], *, log: Any) -> subprocess.Popen[bytes]:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        os.chown(self.work_dir, self.uid, self.gid)
        os.chmod(self.work_dir, 0o700)
        read_fd, write_fd = os.pipe()
        try:
            self.process = subprocess.Popen(
                self.bwrap_argv(argv, info_fd=write_fd),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                pass_fds=(write_fd,),
                start_new_session=True,
                env={"PATH": "/usr/bin:/bin"},
                close_fds=True,
            )
        except OSError as exc:
            os.close(read_fd)
            raise LauncherError(f"could not start the sandbox: {exc}") from exc
        finally:
            os.close(write_fd)
        info = self._read_info(read_fd)
        self.child_pid = int(info["child-pid"])
        if not self.serves:
            return self.process
        try:
            self._netns_fd = os.open(f"/proc/{self.child_pid}/ns/net", os.O_RDONLY)
        except OSError as exc:
            raise LauncherError(f"the sandbox exited at once: {exc}") from exc
        return self.process

    @staticmethod
    def _read_info(fd: int) -> dict[str, Any]:
        data = b""
        with os.fdopen(fd, "rb") as pipe:
            while True:
                chunk = pipe.read1(4096)
                if not chunk:
                    break
                data += chunk
                try:
                    return dict(json.loads(data))
                except ValueError:
                    continue
        raise LauncherError("the sandbox did not start (bubblewrap reported nothing)")

    def socket(self) -> Socket:
        """A TCP socket inside the sandbox's network namespace (its loopback is the server's)."""
        if self._netns_fd is None:
            raise LauncherError("the sandbox is not running")
        return netns_socket(self._netns_fd)

    def connect(self, host: str, port: int, timeout: float | None) -> Socket:
        return netns_connect(self._netns_fd, host, port, timeout, what="sandbox")

    def stop(self) -> None:
        if self._netns_fd is not None:
            os.close(self._netns_fd)
            self._netns_fd = None
        if self.work_dir.exists():
            shutil.rmtree(self.work_dir, ignore_errors=True)
