"""What `make demo` does once the site is up. The pipeline stage adds benchmark runs here."""

from __future__ import annotations


def run_demo_steps(*, base_url: str) -> None:
    from django.contrib.auth import get_user_model

    user_model = get_user_model()
    if not user_model.objects.filter(username="admin").exists():
        user_model.objects.create_superuser("admin", "admin@localhost", "admin-demo-password")
        print("admin login: admin / admin-demo-password (embedded demo only)")
