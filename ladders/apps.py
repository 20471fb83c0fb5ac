from django.apps import AppConfig


class LaddersConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "ladders"
    verbose_name = "Ladders (attribution of a speed-up to its changes)"
