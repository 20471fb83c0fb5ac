from django.apps import AppConfig


class LeaderboardConfig(AppConfig):
    name = "leaderboard"
    verbose_name = "Leaderboard"

    def ready(self) -> None:
        # a catalog change purges the proxy and the page cache (docs/caching.md "Purge")
        from leaderboard.purge import connect_catalog_signals

        connect_catalog_signals()
