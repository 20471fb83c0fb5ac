"""Django's Redis cache whose clear() removes only this deployment's keys.

Django's RedisCache.clear() is FLUSHDB: on a Redis shared with another deployment (or
another test session, tests/services.py) it would wipe their page epochs and throttle
counts too. Every key this site writes starts with its KEY_PREFIX (CACHE_KEY_PREFIX), so
clear() deletes exactly those.
"""

from __future__ import annotations

from django.core.cache.backends.redis import RedisCache


class PrefixedRedisCache(RedisCache):
    def clear(self) -> bool:
        if not self.key_prefix:
            return super().clear()
        client = self._cache.get_client(write=True)
        batch: list = []
        for key in client.scan_iter(match=f"{self.key_prefix}:*", count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                client.delete(*batch)
                batch.clear()
        if batch:
            client.delete(*batch)
        return True
