"""The private Slurm cluster (tests/slurm/cluster.py): started once per session, the first
time a Slurm test asks for it, and stopped at the session's end."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.pipeline.conftest import catalog, pipeline_settings, vendor  # noqa: F401 (fixtures)
from tests.slurm.cluster import SlurmCluster, start_slurm


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    cluster = start_slurm()
    previous = os.environ.get("SLURM_CONF")
    # the launcher runs in the test process (and in the pool workers it starts)
    os.environ["SLURM_CONF"] = str(cluster.conf)
    try:
        yield cluster
    finally:
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous
        cluster.stop()
