import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _check(env_overrides: dict[str, str], tmp_path) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "AGENTPERF_VAR_DIR": str(tmp_path), **env_overrides}
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DATABASE_URL", "postgresql://user@127.0.0.1:notaport/db"),
        ("DATABASE_URL", "mysql2://somewhere/db"),
        ("DATABASE_URL", "postgresql://127.0.0.1:5432/"),
        ("CELERY_BROKER_URL", "kafka://127.0.0.1"),
        ("DEBUG", "maybe"),
        ("S3_ENDPOINT_URL", "not a url"),
        ("SECRET_KEY", "short"),
        ("RUN_HARD_TIME_LIMIT_S", "ten"),
    ],
)
def test_a_malformed_variable_stops_start_up_with_a_message_naming_it(name, value, tmp_path):
    proc = _check({name: value}, tmp_path)
    assert proc.returncode != 0
    assert f"Environment variable {name}=" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_nothing_set_selects_the_embedded_profile(tmp_path):
    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='config.settings'; "
        "django.setup(); from django.conf import settings as s; "
        "print(s.DATABASE_PROFILE, s.BROKER_PROFILE, s.STORAGE_PROFILE)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "AGENTPERF_VAR_DIR": str(tmp_path)},
        timeout=120,
    )
    assert proc.stdout.split() == ["sqlite", "sqla+sqlite", "filesystem"], proc.stderr
