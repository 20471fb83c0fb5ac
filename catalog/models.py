"""The catalog: served models, hardware systems, SLO tier sets and datasets (docs/catalog.md)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class AIModel(models.Model):
    """A served model. Figures are null when no public source gives them (shown as unknown)."""

    slug = models.SlugField(max_length=100, unique=True)
    name = models.CharField(max_length=200)
    provider = models.CharField(max_length=100, blank=True)
    reasoning_mode = models.CharField(max_length=50, blank=True)
    release_date = models.DateField(null=True, blank=True)
    total_params_b = models.FloatField(null=True, blank=True)
    active_params_prefill_b = models.FloatField(null=True, blank=True)
    active_params_decode_b = models.FloatField(null=True, blank=True)
    context_length = models.PositiveIntegerField(null=True, blank=True)
    kv_bytes_per_token = models.PositiveIntegerField(null=True, blank=True)
    weight_bits = models.FloatField(null=True, blank=True)
    hf_repo = models.CharField(max_length=200, blank=True)
    # {field name: {"source": url-or-text, "note": str}}
    sources = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "AI model"
        constraints = [
            models.CheckConstraint(
                condition=Q(total_params_b__isnull=True) | Q(total_params_b__gt=0),
                name="aimodel_total_params_positive",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class HardwareSystem(models.Model):
    """A purchasable system (e.g. GB300 NVL72); figures per accelerator unless named otherwise."""

    slug = models.SlugField(max_length=100, unique=True)
    name = models.CharField(max_length=200)
    vendor = models.CharField(max_length=100, blank=True)
    accelerator = models.CharField(max_length=100, blank=True)
    accelerators_per_system = models.PositiveIntegerField(null=True, blank=True)
    memory_gb_per_accelerator = models.FloatField(null=True, blank=True)
    hbm_bandwidth_tb_s = models.FloatField(null=True, blank=True)
    # {"fp4": 10000.0, "fp8": 5000.0, "bf16": 2500.0} dense TFLOP/s per accelerator
    peak_tflops_dense = models.JSONField(default=dict, blank=True)
    accelerator_power_w = models.FloatField(null=True, blank=True)
    system_power_kw = models.FloatField(null=True, blank=True)
    interconnect = models.CharField(max_length=300, blank=True)
    scale_up_domain = models.PositiveIntegerField(null=True, blank=True)
    runner_pool = models.SlugField(max_length=100)
    sources = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class SloTierSet(models.Model):
    """A versioned set of service tiers; `model` null = the project's default set."""

    slug = models.SlugField(max_length=100, unique=True)
    model = models.ForeignKey(
        AIModel, null=True, blank=True, on_delete=models.PROTECT, related_name="tier_sets"
    )
    name = models.CharField(max_length=200)
    version = models.PositiveIntegerField(default=1)
    effective_date = models.DateField()
    source = models.CharField(max_length=500)
    # How a trial passes a tier (docs/engine.md "Session SLOs"): "requests" (the request-level
    # p25, the default) or "sessions" (at least min_session_share of the window's sessions
    # met the tier on their own p25 speed and TTFT percentile)
    CRITERION_REQUESTS = "requests"
    CRITERION_SESSIONS = "sessions"
    CRITERION_CHOICES = [(CRITERION_REQUESTS, "requests"), (CRITERION_SESSIONS, "sessions")]
    criterion = models.CharField(
        max_length=10, choices=CRITERION_CHOICES, default=CRITERION_REQUESTS
    )
    min_session_share = models.FloatField(default=0.95)

    class Meta:
        ordering = ["-effective_date", "slug"]
        constraints = [
            models.UniqueConstraint(fields=["model", "version"], name="tierset_model_version"),
            models.CheckConstraint(
                condition=Q(criterion__in=["requests", "sessions"]), name="tierset_criterion"
            ),
            models.CheckConstraint(
                condition=Q(min_session_share__gt=0) & Q(min_session_share__lte=1),
                name="tierset_min_session_share_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} v{self.version}"

    def as_engine_tiers(self) -> list[dict]:
        """Tiers in the engine's JSON shape, easiest first, each with the set's criterion."""
        return [
            {
                **tier.as_engine_tier(),
                "criterion": self.criterion,
                "min_session_share": self.min_session_share,
            }
            for tier in self.tiers.all()
        ]


class SloTier(models.Model):
    tier_set = models.ForeignKey(SloTierSet, on_delete=models.CASCADE, related_name="tiers")
    name = models.CharField(max_length=100)
    order = models.PositiveSmallIntegerField()
    min_p25_output_speed = models.FloatField(help_text="tok/s per agent, p25 over requests")
    max_ttft_s = models.FloatField()
    ttft_percentile = models.PositiveSmallIntegerField(default=75)
    max_error_rate = models.FloatField(default=0.01)

    class Meta:
        ordering = ["tier_set", "order"]
        constraints = [
            models.UniqueConstraint(fields=["tier_set", "name"], name="tier_name_unique"),
            models.UniqueConstraint(fields=["tier_set", "order"], name="tier_order_unique"),
            models.CheckConstraint(
                condition=Q(min_p25_output_speed__gt=0), name="tier_speed_positive"
            ),
            models.CheckConstraint(condition=Q(max_ttft_s__gt=0), name="tier_ttft_positive"),
            models.CheckConstraint(
                condition=Q(ttft_percentile__gte=1) & Q(ttft_percentile__lte=100),
                name="tier_percentile_range",
            ),
            models.CheckConstraint(
                condition=Q(max_error_rate__gte=0) & Q(max_error_rate__lte=1),
                name="tier_error_rate_range",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def as_engine_tier(self) -> dict:
        return {
            "name": self.name,
            "min_p25_output_speed": self.min_p25_output_speed,
            "max_ttft_s": self.max_ttft_s,
            "ttft_percentile": self.ttft_percentile,
            "max_error_rate": self.max_error_rate,
        }


class HardwarePrice(models.Model):
    """What running a hardware system costs, by price class (docs/catalog.md "Prices"); seeded
    from agentperf/catalog_data/prices.yaml. A null figure is unknown and shows as "—"."""

    CLASS_ON_DEMAND = "on-demand"
    CLASS_NEOCLOUD = "neocloud"
    CLASS_OWNED = "owned"
    CLASS_CHOICES = [
        (CLASS_ON_DEMAND, "on-demand cloud"),
        (CLASS_NEOCLOUD, "neocloud"),
        (CLASS_OWNED, "owned (3-year capex + power)"),
    ]

    system = models.ForeignKey(HardwareSystem, on_delete=models.CASCADE, related_name="prices")
    slug = models.SlugField(max_length=120, unique=True)
    price_class = models.CharField(max_length=10, choices=CLASS_CHOICES)
    date = models.DateField(help_text="date of the quote")
    # rental classes: $ per accelerator-hour
    usd_per_accelerator_hour = models.FloatField(null=True, blank=True)
    # owned: capex per system, straight-line over amortization_years, plus power
    capex_usd_per_system = models.FloatField(null=True, blank=True)
    amortization_years = models.FloatField(null=True, blank=True)
    usd_per_kwh = models.FloatField(null=True, blank=True)
    pue = models.FloatField(null=True, blank=True)
    # {figure: {"source", "note"}}
    sources = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["system", "price_class"]
        constraints = [
            models.UniqueConstraint(fields=["system", "price_class"], name="price_system_class"),
            models.CheckConstraint(
                condition=Q(price_class__in=["on-demand", "neocloud", "owned"]),
                name="price_class_valid",
            ),
            *[
                models.CheckConstraint(
                    condition=Q(**{f"{f}__isnull": True}) | Q(**{f"{f}__gt": 0}),
                    name=f"price_{f}_positive",
                )
                for f in (
                    "usd_per_accelerator_hour",
                    "capex_usd_per_system",
                    "amortization_years",
                    "usd_per_kwh",
                    "pue",
                )
            ],
        ]

    def __str__(self) -> str:
        return f"{self.system.name}: {self.price_class}"

    @property
    def source(self) -> str:
        """The source of the class's main figure (the rental rate or the capex)."""
        main = (
            "capex_usd_per_system"
            if self.price_class == self.CLASS_OWNED
            else ("usd_per_accelerator_hour")
        )
        return str((self.sources.get(main) or {}).get("source") or "")


# The workloads a run can replay (docs/datasets.md "Workloads"). Agentic coding is the
# benchmark's; "chat" is the same sessions with every turn's text labelled prose, for a
# ladder rung that asks whether a change's gain holds off agentic coding (docs/ladders.md);
# "decode-heavy" is sessions whose turns carry long reasoning outputs (2k-16k tokens,
# docs/datasets.md "Decode-heavy variant") with a tier set of its own (agentperf/catalog_data/
# tiers.yaml). Only agentic-coding results are ranked.
WORKLOAD_CODING = "agentic-coding"
WORKLOAD_CHAT = "chat"
WORKLOAD_DECODE_HEAVY = "decode-heavy"
WORKLOADS = (WORKLOAD_CODING, WORKLOAD_CHAT, WORKLOAD_DECODE_HEAVY)
WORKLOAD_CHOICES = [(w, w) for w in WORKLOADS]


class Dataset(models.Model):
    VISIBILITY_PUBLIC = "public"
    VISIBILITY_PRIVATE = "private"
    VISIBILITY_CHOICES = [(VISIBILITY_PUBLIC, "public"), (VISIBILITY_PRIVATE, "private")]

    name = models.CharField(max_length=100)
    version = models.CharField(max_length=50)
    visibility = models.CharField(max_length=10, choices=VISIBILITY_CHOICES)
    sha256 = models.CharField(max_length=64, unique=True)
    storage_key = models.CharField(max_length=500)
    size = models.PositiveBigIntegerField(default=0)
    stats = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["name", "version"], name="dataset_name_version"),
            models.CheckConstraint(
                condition=Q(visibility__in=["public", "private"]), name="dataset_visibility"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name}@{self.version}"
