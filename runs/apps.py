from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Benchmark runs"

    def ready(self) -> None:
        from runs import receivers

        receivers.connect()
