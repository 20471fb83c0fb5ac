from django.apps import AppConfig


class LaddersConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "ladders"
    verbose_name = "Ladders (attribution of a speed-up to its changes)"

    def ready(self) -> None:
        from ladders.receivers import on_submission_transitioned
        from submissions.signals import submission_transitioned

        submission_transitioned.connect(
            on_submission_transitioned, dispatch_uid="ladders.refresh_on_transition"
        )
