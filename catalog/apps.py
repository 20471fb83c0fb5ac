from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _create_cache_table(sender: AppConfig, using: str = "default", **kwargs: object) -> None:
    """`migrate` also creates the shared cache's table (embedded profile; a no-op when it
    exists or the cache is Redis), so a site migrated by hand cannot miss it (docs/security.md
    "Shared state across processes")."""
    from django.core.management import call_command

    call_command("createcachetable", database=using, verbosity=0)


class CatalogConfig(AppConfig):
    name = "catalog"
    verbose_name = "Catalog"

    def ready(self) -> None:
        post_migrate.connect(_create_cache_table, sender=self, dispatch_uid="agentperf-cache")
