import pytest
from django.core.cache import cache


@pytest.fixture(autouse=True)
def _fresh_throttle_counts():
    """Throttle counters live in the cache; each test starts from zero."""
    cache.clear()
    yield
    cache.clear()
