from django.apps import AppConfig


class VendorConfig(AppConfig):
    name = "vendor"
