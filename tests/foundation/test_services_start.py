"""tests/services.py `main`: a service that fails to start stops the ones started before it
(a machine without varnishd left a SeaweedFS running after the session had ended)."""

from __future__ import annotations

import pytest

from tests import services


class Started:
    """Stands for a started service's handle: records that it was stopped."""

    def __init__(self) -> None:
        self.stopped = False
        self.endpoint = "http://127.0.0.1:1"

    def stop(self) -> None:
        self.stopped = True


def test_a_service_that_fails_to_start_stops_those_started_before_it(monkeypatch) -> None:
    weed = Started()
    for name in ("S3_ENDPOINT_URL", "TEST_VARNISH_URL", "TEST_REGISTRY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(services, "start_seaweedfs", lambda: weed)
    monkeypatch.setattr(services, "s3_env", lambda handle: {"S3_ENDPOINT_URL": handle.endpoint})

    def no_varnish() -> services.Varnish:
        raise RuntimeError("varnishd is not installed (make varnish)")

    monkeypatch.setattr(services, "start_varnish", no_varnish)
    monkeypatch.setattr(services, "drop_cache_keys", lambda url, prefix: None)
    with pytest.raises(RuntimeError, match="varnishd is not installed"):
        services.main(["--version"])
    assert weed.stopped
