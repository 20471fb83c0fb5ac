"""The demo's loopback registry and image (demo/container_image.py): a port another process
holds is refused before anything starts (the image must not go to another registry), the
registry started answers `/v2/` itself, and the image's folders follow this host's Python
and multiarch triplet."""

from __future__ import annotations

import json
import socket
import sys
import sysconfig
import urllib.request

import pytest

from demo.container_image import _inputs, start_registry


def test_a_held_port_is_refused_and_a_free_one_serves_v2_from_the_process_started(tmp_path):
    with socket.socket() as other:  # another process's listener on the port
        other.bind(("127.0.0.1", 0))
        other.listen()
        held = other.getsockname()[1]
        with pytest.raises(RuntimeError, match=f"127.0.0.1:{held} is taken"):
            start_registry(tmp_path / "held", held)
    assert not (tmp_path / "held" / "registry.log").exists()  # nothing was started
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    registry = start_registry(tmp_path / "registry", port)
    try:
        assert registry.process.poll() is None and registry.host == f"127.0.0.1:{port}"
        with urllib.request.urlopen(f"http://{registry.host}/v2/", timeout=10) as answer:
            assert answer.status == 200 and json.loads(answer.read() or b"{}") == {}
    finally:
        registry.stop()
    assert registry.process.poll() is not None


def test_the_image_folders_follow_this_hosts_python_and_triplet():
    targets = {target for target, _ in _inputs()}
    pydir = f"usr/local/lib/python{sys.version_info.major}.{sys.version_info.minor}"
    assert f"{pydir}/os.py" in targets
    assert any(t.startswith(f"{pydir}/site-packages/xllamacpp/") for t in targets)
    triplet = sysconfig.get_config_var("MULTIARCH")
    assert triplet and f"usr/lib/{triplet}/libc.so.6" in targets
