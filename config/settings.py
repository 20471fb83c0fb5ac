"""Django settings, all from the environment.

Two profiles, chosen by what is set:
- embedded default (nothing set): SQLite, Celery on kombu's SQLAlchemy/SQLite transport and
  a local artifacts folder, all under `var/`;
- services: PostgreSQL (`DATABASE_URL`), RabbitMQ or Redis (`CELERY_BROKER_URL`) and S3
  (`S3_ENDPOINT_URL` + keys + buckets).
Artifact storage is the `STORAGES["artifacts"]` entry; code never branches on the profile.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
from pathlib import Path

from csp import constants as _csp_constants

from core.env import (
    check_broker_url,
    check_http_url,
    check_redis_url,
    env_bool,
    env_int,
    env_list,
    env_str,
    parse_database_url,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("AGENTPERF_VAR_DIR", str(BASE_DIR / "var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = env_bool("DEBUG", False)
_DEV_SECRET = "insecure-embedded-profile-key-not-for-production"
SECRET_KEY = env_str("SECRET_KEY", _DEV_SECRET)
if len(SECRET_KEY) < 32:
    from core.env import ImproperlyConfiguredEnv

    raise ImproperlyConfiguredEnv("SECRET_KEY", "<hidden>", "must be at least 32 characters")
# (Django's test runner adds its own "testserver"; a deployment never answers to it)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
# The site's public address and its MCP server's, for absolute links in Open Graph tags,
# /llms.txt and the embeds (docs/api.md "Machines as readers"); empty: the address each
# request came in on, and no MCP address given.
PUBLIC_BASE_URL = (
    check_http_url("PUBLIC_BASE_URL", env_str("PUBLIC_BASE_URL")).rstrip("/")
    if env_str("PUBLIC_BASE_URL")
    else ""
)
PUBLIC_MCP_URL = (
    check_http_url("PUBLIC_MCP_URL", env_str("PUBLIC_MCP_URL")) if env_str("PUBLIC_MCP_URL") else ""
)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    # bottom to top (docs/architecture.md "Layers")
    "core",
    "catalog",
    "submissions",
    "runs",
    "leaderboard",
    "portal",
    "review",
    "ladders",
    "demo",
    # login throttle per account and per address (docs/security.md "Login"); its own tables
    "axes",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # a lock held past DATABASE_LOCK_TIMEOUT_S is a 503 with Retry-After (core/contention.py)
    "core.contention.ContentionMiddleware",
    # Content-Security-Policy on every response, cached ones too (docs/security.md "Headers")
    "csp.middleware.CSPMiddleware",
    # before anything looks a URL's values up (docs/security.md "Input limits")
    "core.middleware.RefuseControlCharactersMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Cache-Control, ETag/304, surrogate keys and the anonymous fast path; before the
    # session middleware, which a repeated public read skips (docs/caching.md)
    "leaderboard.httpcache.HttpCacheMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # last: answers a locked-out login with a 429 (docs/security.md "Login")
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------
# How long a statement waits for a lock another writer holds (SQLite's busy timeout,
# PostgreSQL's lock_timeout) before it gives up; the API then answers 503 with Retry-After
# (DATABASE_BUSY_RETRY_AFTER_S), never 500 (docs/pipeline.md "Contention").
DATABASE_LOCK_TIMEOUT_S = env_int("DATABASE_LOCK_TIMEOUT_S", 20, minimum=1)
DATABASE_BUSY_RETRY_AFTER_S = env_int("DATABASE_BUSY_RETRY_AFTER_S", 2, minimum=1)
# SQLite (the embedded profile, or a sqlite:/// DATABASE_URL): WAL, so readers (every page
# view, the cache table) never block the one writer and a writer never waits for readers;
# BEGIN IMMEDIATE, so a transaction that will write takes the lock at its start and waits
# for it there, instead of failing at once with "database is locked" when it upgrades a
# read lock another writer is waiting on. synchronous=NORMAL is durable in WAL mode up to
# a power cut (the last commits may roll back, the file stays consistent).
_SQLITE_OPTIONS = {
    "timeout": DATABASE_LOCK_TIMEOUT_S,
    "transaction_mode": "IMMEDIATE",
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL",
}


def _lock_timeout_option(options: dict) -> dict:
    """PostgreSQL: a lock wait ends after DATABASE_LOCK_TIMEOUT_S (SQLSTATE 55P03) unless
    DATABASE_URL's own `options` sets lock_timeout."""
    given = options.get("options", "")
    if "lock_timeout" in given:
        return options
    setting = f"-c lock_timeout={DATABASE_LOCK_TIMEOUT_S * 1000}"
    return {**options, "options": f"{given} {setting}".strip()}


_database_url = env_str("DATABASE_URL")
if _database_url:
    _db = parse_database_url("DATABASE_URL", _database_url)
    _sqlite = _db.engine.endswith("sqlite3")
    DATABASES = {
        "default": {
            "ENGINE": _db.engine,
            "NAME": _db.name,
            "USER": _db.user,
            "PASSWORD": _db.password,
            "HOST": _db.host,
            "PORT": _db.port,
            "OPTIONS": dict(_SQLITE_OPTIONS) if _sqlite else _lock_timeout_option(_db.options),
            "CONN_MAX_AGE": env_int("DATABASE_CONN_MAX_AGE", 60, minimum=0),
        }
    }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": VAR_DIR / "db.sqlite3",
            "OPTIONS": dict(_SQLITE_OPTIONS),
            # a connection per thread kept open: a new SQLite connection reads the whole
            # schema on its first statement (~1 ms, 3/4 of a cached page's time; docs/caching.md)
            "CONN_MAX_AGE": env_int("DATABASE_CONN_MAX_AGE", 60, minimum=0),
        }
    }
DATABASE_PROFILE = "postgresql" if "postgresql" in DATABASES["default"]["ENGINE"] else "sqlite"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Object storage -------------------------------------------------------------------
S3_ENDPOINT_URL = env_str("S3_ENDPOINT_URL")
if S3_ENDPOINT_URL:
    check_http_url("S3_ENDPOINT_URL", S3_ENDPOINT_URL)
    _s3_options = {
        "endpoint_url": S3_ENDPOINT_URL,
        "access_key": env_str("S3_ACCESS_KEY_ID"),
        "secret_key": env_str("S3_SECRET_ACCESS_KEY"),
        "region_name": env_str("S3_REGION", "us-east-1"),
        "addressing_style": "path",
        "signature_version": "s3v4",
        "file_overwrite": False,
        "default_acl": None,
        "querystring_expire": env_int("S3_PRESIGN_SECONDS", 900, minimum=1),
    }
    for _var in ("S3_ACCESS_KEY_ID", "S3_SECRET_ACCESS_KEY"):
        if not env_str(_var):
            from core.env import ImproperlyConfiguredEnv

            raise ImproperlyConfiguredEnv(_var, "", "required when S3_ENDPOINT_URL is set")
    _artifacts_storage = {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {**_s3_options, "bucket_name": env_str("S3_BUCKET_ARTIFACTS", "artifacts")},
    }
    _datasets_storage = {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {**_s3_options, "bucket_name": env_str("S3_BUCKET_DATASETS", "datasets")},
    }
    STORAGE_PROFILE = "s3"
else:
    _artifacts_storage = {
        "BACKEND": "core.storage.SignedFileSystemStorage",
        "OPTIONS": {"location": VAR_DIR / "artifacts", "base_url": "/files/artifacts/"},
    }
    _datasets_storage = {
        "BACKEND": "core.storage.SignedFileSystemStorage",
        "OPTIONS": {"location": VAR_DIR / "datasets", "base_url": "/files/datasets/"},
    }
    STORAGE_PROFILE = "filesystem"

STORAGES = {
    "default": _artifacts_storage,
    "artifacts": _artifacts_storage,
    "datasets": _datasets_storage,
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
MAX_ATTACHMENT_BYTES = env_int("MAX_ATTACHMENT_BYTES", 50 * 1024 * 1024, minimum=1)
MAX_CONFIG_BYTES = env_int("MAX_CONFIG_BYTES", 256 * 1024, minimum=1)
# Any other JSON body (withdraw reasons, runner reports); docs/security.md "Input limits".
MAX_JSON_BODY_BYTES = env_int("MAX_JSON_BODY_BYTES", 4 * 1024 * 1024, minimum=1)
# Django's own cap on a body read whole (form posts, request.body): the same figure, so a
# body has one limit, and past it a 413 naming it (core/views.py bad_request)
DATA_UPLOAD_MAX_MEMORY_SIZE = MAX_JSON_BODY_BYTES

# --- Celery ---------------------------------------------------------------------------
_broker = env_str("CELERY_BROKER_URL")
if _broker:
    CELERY_BROKER_URL = check_broker_url("CELERY_BROKER_URL", _broker)
else:
    CELERY_BROKER_URL = f"sqla+sqlite:///{VAR_DIR / 'celery-broker.sqlite'}"
BROKER_PROFILE = CELERY_BROKER_URL.split("://", 1)[0]

_result_backend = env_str("CELERY_RESULT_BACKEND")
if _result_backend:
    CELERY_RESULT_BACKEND = _result_backend
elif DATABASE_PROFILE == "postgresql":
    _d = DATABASES["default"]
    CELERY_RESULT_BACKEND = (
        f"db+postgresql+psycopg://{_d['USER']}:{_d['PASSWORD']}@{_d['HOST']}:{_d['PORT'] or 5432}"
        f"/{_d['NAME']}"
    )
else:
    CELERY_RESULT_BACKEND = f"db+sqlite:///{VAR_DIR / 'celery-results.sqlite'}"

# The longest run a pool may take; the broker must not redeliver a task before that.
RUN_HARD_TIME_LIMIT_S = env_int("RUN_HARD_TIME_LIMIT_S", 6 * 3600, minimum=60)
RUN_SOFT_TIME_LIMIT_S = env_int("RUN_SOFT_TIME_LIMIT_S", RUN_HARD_TIME_LIMIT_S - 300, minimum=30)
RUN_HEARTBEAT_STALE_S = env_int("RUN_HEARTBEAT_STALE_S", 300, minimum=10)
# A run no pool worker has started (pool offline, message lost) is failed with a reason
# after this long in "pending"; a busy pool legitimately keeps runs queued for hours.
RUN_PENDING_STALE_S = env_int("RUN_PENDING_STALE_S", 24 * 3600, minimum=60)
# How often `celery beat` sends runner.reap_stale_runs to the web queue.
RUN_REAPER_INTERVAL_S = env_int("RUN_REAPER_INTERVAL_S", 60, minimum=5)
# How often `celery beat` sends ladders.refresh (every running ladder) to the web queue.
LADDER_REFRESH_INTERVAL_S = env_int("LADDER_REFRESH_INTERVAL_S", 300, minimum=5)
CELERY_BROKER_VISIBILITY_TIMEOUT_S = RUN_HARD_TIME_LIMIT_S + 3600
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
# Prefix for every queue name, so several deployments (or test sessions) can share a broker.
CELERY_QUEUE_PREFIX = env_str("CELERY_QUEUE_PREFIX", "")
# How long one /health report is served from the shared cache (core/health.py).
HEALTH_CACHE_S = env_int("HEALTH_CACHE_S", 5, minimum=1)

# --- Runner pipeline (dispatch, runner API, reaper) ------------------------------------
# Registries the platform's pools pull `engine.image` from (comma-separated host[:port],
# http:// for a registry without TLS), as the pool hosts' own RUNNER_REGISTRIES: a
# `container` config naming another registry is refused at submit (400 at engine.image).
# Empty: not checked at submit; the pool host still refuses (docs/security.md "Container
# launcher").
RUNNER_REGISTRIES = env_str("RUNNER_REGISTRIES", "")
# Where pool workers reach the runner API (`<base>/api/v1/runner/...`); the web tier's own
# public address as the runner hosts see it.
RUNNER_API_BASE_URL = check_http_url(
    "RUNNER_API_BASE_URL", env_str("RUNNER_API_BASE_URL", "http://127.0.0.1:8000")
)
RUN_HEARTBEAT_INTERVAL_S = env_int("RUN_HEARTBEAT_INTERVAL_S", 15, minimum=1)
RUN_MAX_ATTEMPTS = env_int("RUN_MAX_ATTEMPTS", 3, minimum=1)
RUN_DATASET_NAME = env_str("RUN_DATASET_NAME", "agentperf-private-test")
RUN_DATASET_SMALL_NAME = env_str("RUN_DATASET_SMALL_NAME", "agentperf-private-test-small")
RUN_DATASET_SEED = env_int("RUN_DATASET_SEED", 20261101, minimum=0)
RUN_DATASET_TRAJECTORIES = env_int("RUN_DATASET_TRAJECTORIES", 64, minimum=1)
RUN_DATASET_SMALL_TRAJECTORIES = env_int("RUN_DATASET_SMALL_TRAJECTORIES", 24, minimum=1)
RUN_PRESIGN_SECONDS = env_int("RUN_PRESIGN_SECONDS", 6 * 3600, minimum=60)
RUN_UPLOAD_MAX_BYTES = env_int("RUN_UPLOAD_MAX_BYTES", 1024 * 1024 * 1024, minimum=1)
# An upload grant (runner API `uploads`) is good for this long, for its declared size only.
RUN_UPLOAD_GRANT_SECONDS = env_int("RUN_UPLOAD_GRANT_SECONDS", 900, minimum=10)
# The key a pool host derives its runs' tokens with (docs/security.md "Run tokens and upload
# grants"): the task message carries a seed, never the token. RUNNER_TOKEN_KEYS gives a
# pool its own key ("pool=key,pool2=key2"), e.g. a vendor-operated pool; the rest use
# RUNNER_TOKEN_KEY (default: derived from SECRET_KEY, for hosts that share the settings).
RUNNER_TOKEN_KEY = (
    env_str("RUNNER_TOKEN_KEY")
    or hashlib.sha256(f"agentperf.runner-token-key:{SECRET_KEY}".encode()).hexdigest()
)
RUNNER_TOKEN_KEYS = dict(
    item.split("=", 1) for item in env_list("RUNNER_TOKEN_KEYS", []) if "=" in item
)
# Simulated profiles with at most this many accelerators run as the real-time HTTP server;
# larger (rack-scale) ones run in process on virtual time.
SIM_REALTIME_MAX_ACCELERATORS = env_int("SIM_REALTIME_MAX_ACCELERATORS", 1, minimum=0)


def _env_json_object(name: str, default: dict) -> dict:
    import json as _json

    from core.env import ImproperlyConfiguredEnv

    raw = env_str(name)
    if not raw:
        return default
    try:
        value = _json.loads(raw)
    except ValueError as exc:
        raise ImproperlyConfiguredEnv(name, raw, f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ImproperlyConfiguredEnv(name, raw, "expected a JSON object")
    return value


# Search settings of every run (docs/engine.md "Search decisions"); a vendor's
# benchmark.max_concurrency lowers the cap. Per-pool overrides: "simulated-realtime",
# "simulated-virtual" or a pool name.
RUN_SEARCH_OPTIONS = _env_json_object(
    "RUN_SEARCH_OPTIONS",
    {
        "warmup_s": 30.0,
        "duration_s": 120.0,
        "cap": 1024,
        "max_trials": 40,
        "min_requests": 20,
        "tool_delay_scale": 1.0,
        "request_timeout_s": 600.0,
        "max_loop_lag_ms": 25.0,
        "max_cpu_percent": 90.0,
        "api": "chat",
        "seed": 0,
        # HumanEval problems of the task check, idle and under load (docs/verification.md
        # "quality_task"); run only for models whose reference deployment has a task score
        "task_problems": 164,
        # Load generation (docs/engine.md "Sharded trials"): shards per trial (K or "auto")
        # and the pool's load-generator hosts (none: shards are local processes)
        "shards": 1,
        "loadgen_hosts": [],
    },
)
RUN_SEARCH_OPTIONS_BY_POOL = _env_json_object(
    "RUN_SEARCH_OPTIONS_BY_POOL",
    {
        # Dry runs on the small real-time simulator and the CPU pool: short trials, low cap.
        # These hosts also run the web tier (the demo), so the client-health limit on
        # event-loop lag is looser there; measured accelerator pools keep the default.
        "simulated-realtime": {
            "warmup_s": 3.0,
            "duration_s": 10.0,
            "cap": 16,
            "max_trials": 8,
            "min_requests": 8,
            "request_timeout_s": 120.0,
            "max_loop_lag_ms": 100.0,
        },
        # Dry runs on virtual time (the simulator in process): rack-scale searches start from
        # a primed prefix cache, so a one-minute warm-up reaches steady state (docs/engine.md
        # "Primed cache"); a virtual minute costs only the requests sent in it.
        "simulated-virtual": {
            "warmup_s": 60.0,
            "ramp_s": 30.0,
            # one agent must send min_requests in the window (60 s gave 17 on an 8-GPU H100)
            "duration_s": 120.0,
            "prime_cache": True,
            "cap": 16384,
            "max_trials": 60,
        },
        "local-cpu": {
            "warmup_s": 3.0,
            # one agent on a CPU server sends few requests: a longer window for enough of them
            "duration_s": 20.0,
            "cap": 4,
            "max_trials": 6,
            "min_requests": 4,
            "request_timeout_s": 120.0,
            "max_loop_lag_ms": 100.0,
            # the same host runs the web tier and the client: repeated trials' spread warns
            "shared_host": True,
            # a CPU server answers slowly: the first problems only
            "task_problems": 6,
        },
    },
)

# --- Cache ----------------------------------------------------------------------------
# Page epochs, cached API payloads and throttle counts decide what every web process shows,
# so the cache is shared by all of them (docs/security.md "Shared state across processes"):
# Redis in the services profile; the database otherwise (`manage.py createcachetable`,
# run by `make migrate`), which every process of the embedded profile already shares and
# whose add() is one transaction. A per-process memory cache is never the default.
_redis_cache = env_str("CACHE_REDIS_URL")
CACHE_KEY_PREFIX = env_str("CACHE_KEY_PREFIX", "agentperf")
CACHES = {
    "default": (
        {
            "BACKEND": "core.cache.PrefixedRedisCache",
            "LOCATION": check_redis_url("CACHE_REDIS_URL", _redis_cache),
            "KEY_PREFIX": CACHE_KEY_PREFIX,
        }
        if _redis_cache
        else {
            "BACKEND": "core.cache.DatabaseCache",  # Django's, a cheaper read
            "LOCATION": "agentperf_cache",
            "KEY_PREFIX": CACHE_KEY_PREFIX,
            "OPTIONS": {"MAX_ENTRIES": env_int("CACHE_MAX_ENTRIES", 20000, minimum=100)},
        }
    )
}
# The reverse proxies (Varnish with xkey, deploy/varnish/) a publish or a status change
# purges by surrogate key; comma-separated purge URLs, none = no proxy (docs/caching.md).
VARNISH_PURGE_URLS = env_list("VARNISH_PURGE_URL", [])

# --- Auth, i18n, static ---------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/portal/"
LOGOUT_REDIRECT_URL = "/"

# Login throttle (django-axes; docs/security.md "Login"): after LOGIN_FAILURE_LIMIT wrong
# passwords from one address (any accounts), that address is refused (429) for
# LOGIN_COOLOFF_MINUTES, even with the right password; the account still signs in from
# anywhere else (a guesser cannot lock a victim out). Counted in the database, so
# every web process shares the count; the portal's, the console's and the admin's logins
# all go through django.contrib.auth.authenticate, where the backend checks it.
AUTHENTICATION_BACKENDS = [
    "core.logins.AxesBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 10, minimum=1)
AXES_COOLOFF_TIME = _dt.timedelta(minutes=env_int("LOGIN_COOLOFF_MINUTES", 15, minimum=1))
# the pair and the address; never the account alone (that would let anyone lock it)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"], "ip_address"]
# a success clears nothing: axes would clear every failure of the address, the guesses at
# other accounts included (one's own login between guesses would reset the count)
AXES_RESET_ON_SUCCESS = False
AXES_HTTP_RESPONSE_CODE = 429
# Behind a proxy (deploy/varnish) every login arrives from its address: TRUSTED_PROXY_COUNT
# (the proxies in front of Django, each appending to X-Forwarded-For) makes the throttle
# count the address the outermost one saw (core.logins.client_address), so one client's
# wrong passwords never lock everyone out. 0: REMOTE_ADDR, for a site reached directly.
TRUSTED_PROXY_COUNT = env_int("TRUSTED_PROXY_COUNT", 0, minimum=0)
AXES_CLIENT_IP_CALLABLE = "core.logins.client_address"

# HTTPS (docs/security.md "Headers"): on in the services profile (DATABASE_URL names
# PostgreSQL), or as HTTPS says. Cookies are then Secure and HSTS is sent on HTTPS
# requests; behind a TLS-terminating proxy, SECURE_PROXY_SSL_HEADER names the header it
# sets (X-Forwarded-Proto) so a request it forwarded counts as HTTPS.
HTTPS = env_bool("HTTPS", DATABASE_PROFILE == "postgresql")
SESSION_COOKIE_SECURE = HTTPS
CSRF_COOKIE_SECURE = HTTPS
SESSION_COOKIE_HTTPONLY = True
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 365 * 24 * 3600 if HTTPS else 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
_proxy_ssl = env_str("SECURE_PROXY_SSL_HEADER")
if _proxy_ssl:
    SECURE_PROXY_SSL_HEADER = ("HTTP_" + _proxy_ssl.upper().replace("-", "_"), "https")

# Content-Security-Policy (django-csp; docs/security.md "Headers"). Scripts only from this
# site, or an inline one carrying the response's nonce (`request.csp_nonce`; the nonce is
# in the header only on a page that used it); no 'unsafe-inline' or 'unsafe-eval' for
# scripts. Styles allow inline: plotly.js draws with style attributes and one injected
# <style>. A view that must be framed (the embeds) sends its own header, which is kept.
_SELF, _NONE = "'self'", "'none'"
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [_SELF],
        "script-src": [_SELF, _csp_constants.NONCE],
        "style-src": [_SELF, "'unsafe-inline'"],
        "img-src": [_SELF, "data:"],
        "font-src": [_SELF, "data:"],
        "connect-src": [_SELF],
        "object-src": [_NONE],
        "base-uri": [_NONE],
        "form-action": [_SELF],
        "frame-ancestors": [_NONE],
    },
}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)
STATICFILES_DIRS = [BASE_DIR / "static"]
WHITENOISE_USE_FINDERS = True

EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "agentperf@localhost")

# Secrets such as endpoint API keys are encrypted at rest with this key (Fernet, urlsafe b64).
FIELD_ENCRYPTION_KEY = env_str("FIELD_ENCRYPTION_KEY")

# Signed measurement receipts (docs/verification.md "Receipt"): the platform's Ed25519 key as
# a PKCS#8 PEM file (`manage.py receipt_key` creates one; `make demo` does under var/), and
# the hex public keys of retired keys, still listed so their receipts keep verifying.
RECEIPT_SIGNING_KEY_FILE = env_str(
    "RECEIPT_SIGNING_KEY_FILE", str(VAR_DIR / "receipt-signing-key.pem")
)
RECEIPT_RETIRED_PUBLIC_KEYS = env_list("RECEIPT_RETIRED_PUBLIC_KEYS", [])
for _key in RECEIPT_RETIRED_PUBLIC_KEYS:
    if len(_key) != 64 or any(ch not in "0123456789abcdefABCDEF" for ch in _key):
        from core.env import ImproperlyConfiguredEnv

        raise ImproperlyConfiguredEnv(
            "RECEIPT_RETIRED_PUBLIC_KEYS", _key, "expected 64 hex digits per key"
        )

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "submissions.auth.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
    "DEFAULT_SCHEMA_CLASS": "core.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "core.api_errors.exception_handler",
    # JSON depth, size, non-finite numbers and control characters checked before parsing
    "DEFAULT_PARSER_CLASSES": [
        "core.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    # the client's address for the throttles: REMOTE_ADDR, or behind TRUSTED_PROXY_COUNT
    # proxies the entry the outermost appended (what a client writes itself never counts)
    "NUM_PROXIES": TRUSTED_PROXY_COUNT,
    "DEFAULT_THROTTLE_RATES": {
        "vendor": env_str("THROTTLE_VENDOR", "600/hour"),
        "vendor_submit": env_str("THROTTLE_VENDOR_SUBMIT", "60/hour"),
        "anon": env_str("THROTTLE_ANON", "3000/hour"),
    },
}
SPECTACULAR_SETTINGS = {
    "TITLE": "AgentPerf Leaderboard API",
    "DESCRIPTION": "Public read API, vendor submission API and runner API.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # the ladder answers' enums (ladders/openapi.py) by name; the submission's source keeps
    # the name it had before the ladder's `source` came
    "ENUM_NAME_OVERRIDES": {
        "LadderStatusEnum": "ladders.models.Ladder.STATUS_CHOICES",
        "LadderSourceEnum": "ladders.models.Ladder.SOURCE_CHOICES",
        "SourceEnum": "submissions.constants.SOURCE_CHOICES",
    },
    # The deployment-config and ladder schemas as components the request bodies reference.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "portal.api.openapi.deployment_config_components",
        "ladders.openapi.ladder_components",  # the ladder body (docs/api.md "Ladders")
    ],
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
}
