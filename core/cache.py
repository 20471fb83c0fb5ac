"""The shared cache's backends (config/settings.py "Cache").

Redis (services profile): Django's Redis cache whose clear() removes only this deployment's
keys. The database table (embedded profile): Django's database cache with a cheaper read.

Django's RedisCache.clear() is FLUSHDB: on a Redis shared with another deployment (or
another test session, tests/services.py) it would wipe their page epochs and throttle
counts too. Every key this site writes starts with its KEY_PREFIX (CACHE_KEY_PREFIX), so
clear() deletes exactly those.
"""

from __future__ import annotations

import base64
import pickle

from django.core.cache.backends.db import DatabaseCache as BaseDatabaseCache
from django.core.cache.backends.redis import RedisCache
from django.db import connections, router
from django.db.models import DateTimeField, Expression
from django.utils.timezone import now as tz_now


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


class DatabaseCache(BaseDatabaseCache):
    """Django's database cache whose reads build the expiry column's field once.

    Django's get_many() constructs a DateTimeField (and its expression) on every call to
    convert `expires`: about a third of a page-cache read on SQLite, the embedded profile's
    shared cache, measured with py-spy under load (docs/caching.md "Where the time went").
    """

    _expires: Expression | None = None

    def get_many(self, keys, version=None):  # type: ignore[no-untyped-def]
        if not keys:
            return {}
        key_map = {self.make_and_validate_key(key, version=version): key for key in keys}
        connection = connections[router.db_for_read(self.cache_model_class)]
        quote_name = connection.ops.quote_name
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {quote_name('cache_key')}, {quote_name('value')}, "
                f"{quote_name('expires')} FROM {quote_name(self._table)} "
                f"WHERE {quote_name('cache_key')} IN ({', '.join(['%s'] * len(key_map))})",
                list(key_map),
            )
            rows = cursor.fetchall()
        expression = DatabaseCache._expires
        if expression is None:
            expression = DatabaseCache._expires = Expression(output_field=DateTimeField())
        converters = connection.ops.get_db_converters(expression) + expression.get_db_converters(
            connection
        )
        result, expired, now = {}, [], tz_now()
        for key, value, expires in rows:
            for converter in converters:
                expires = converter(expires, expression, connection)
            if expires < now:
                expired.append(key)
            else:
                value = connection.ops.process_clob(value)
                result[key_map.get(key)] = pickle.loads(base64.b64decode(value.encode()))
        if expired:
            self._base_delete_many(expired)
        return result
