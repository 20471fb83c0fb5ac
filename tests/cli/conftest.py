"""The pipeline fixtures (seeded catalog, vendor token, short search settings pointed at the
live server, database-free pool workers), shared with tests/pipeline."""

from tests.pipeline.conftest import (  # noqa: F401 - fixtures, registered by import
    catalog,
    pipeline_settings,
    pool_worker_factory,
    vendor,
)
