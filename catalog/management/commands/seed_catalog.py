from django.core.management.base import BaseCommand, CommandError

from agentperf.catalog_data import CatalogError
from catalog.services import catalog_seed


class Command(BaseCommand):
    help = "Load models, hardware systems and SLO tier sets from agentperf/catalog_data/*.yaml."

    def handle(self, *args, **options) -> None:
        try:
            counts = catalog_seed()
        except CatalogError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"catalog: {counts['models']} models, {counts['hardware']} hardware systems, "
            f"{counts['tier_sets']} tier sets"
        )
