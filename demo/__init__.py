"""`manage.py demo`: the embedded-profile demo that `make demo` starts (README Quickstart)."""
