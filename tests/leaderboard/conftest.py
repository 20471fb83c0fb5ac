import pytest
from django.core.cache import cache


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Chart and API payloads are cached per publish generation; start every test cold."""
    cache.clear()
    yield
    cache.clear()
