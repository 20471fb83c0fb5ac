"""Public read API (/api/v1/public/): catalog, results with points, tiers and provenance,
compare. Anonymous, read-only, cached per publish generation like the pages."""

from __future__ import annotations

from django.db.models import Count, Prefetch, Q
from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentperf.engine import frontier
from catalog.models import AIModel, HardwareSystem, SloTier, SloTierSet
from catalog.services import default_tier_set_for
from core.throttles import AnonThrottle
from leaderboard import configview
from leaderboard.cache import cached
from leaderboard.cachetruth import result_cache_truth
from leaderboard.cost import CLASSES as COST_CLASSES
from leaderboard.cost import cost_at_speed, result_cost
from leaderboard.energy import power_source, result_energy
from leaderboard.inventory_view import public_inventory
from leaderboard.launch import result_launch
from leaderboard.models import Result, TwinAccuracy
from leaderboard.pages.common import result_url
from leaderboard.pages.compare import MAX_COMPARE
from leaderboard.sessions import result_sessions

# --- output serializers --------------------------------------------------------------


class TierOut(serializers.Serializer):
    name = serializers.CharField()
    order = serializers.IntegerField()
    min_p25_output_speed = serializers.FloatField()
    max_ttft_s = serializers.FloatField()
    ttft_percentile = serializers.IntegerField()
    max_error_rate = serializers.FloatField()


class TierSetOut(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    version = serializers.IntegerField()
    effective_date = serializers.DateField()
    source = serializers.CharField()
    tiers = TierOut(many=True, source="tiers.all")


class ModelOut(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    provider = serializers.CharField()
    reasoning_mode = serializers.CharField()
    release_date = serializers.DateField(allow_null=True)
    total_params_b = serializers.FloatField(allow_null=True)
    active_params_prefill_b = serializers.FloatField(allow_null=True)
    active_params_decode_b = serializers.FloatField(allow_null=True)
    context_length = serializers.IntegerField(allow_null=True)
    kv_bytes_per_token = serializers.IntegerField(allow_null=True)
    weight_bits = serializers.FloatField(allow_null=True)
    hf_repo = serializers.CharField()
    sources = serializers.JSONField()
    published_results = serializers.IntegerField(source="n_results", default=None)


class HardwareOut(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    vendor = serializers.CharField()
    accelerator = serializers.CharField()
    accelerators_per_system = serializers.IntegerField(allow_null=True)
    memory_gb_per_accelerator = serializers.FloatField(allow_null=True)
    hbm_bandwidth_tb_s = serializers.FloatField(allow_null=True)
    peak_tflops_dense = serializers.JSONField()
    accelerator_power_w = serializers.FloatField(allow_null=True)
    system_power_kw = serializers.FloatField(allow_null=True)
    interconnect = serializers.CharField()
    scale_up_domain = serializers.IntegerField(allow_null=True)
    sources = serializers.JSONField()
    published_results = serializers.IntegerField(source="n_results", default=None)


class ResultSummaryOut(serializers.Serializer):
    id = serializers.IntegerField()
    label = serializers.CharField()
    model = serializers.CharField(source="model.slug")
    hardware = serializers.CharField(source="hardware.slug")
    status = serializers.CharField()
    status_reason = serializers.CharField()
    is_simulated = serializers.BooleanField()
    accelerators_used = serializers.IntegerField()
    accelerators_in_system = serializers.IntegerField(allow_null=True)
    max_agents = serializers.JSONField()
    max_agents_brackets = serializers.JSONField(
        source="brackets",
        help_text="per tier: highest_pass, lowest_fail (null: never failed), confirmed, "
        "marginal (a bootstrap interval at a bound straddled the threshold), flags",
    )
    agents_per_accelerator = serializers.JSONField()
    agents_per_mw = serializers.JSONField(
        help_text="measured only: null = power not measured (a simulated result's figures "
        "are in modelled_power, never here)"
    )
    power_source = serializers.SerializerMethodField(
        help_text='"measured" (runner-host telemetry: agents_per_mw, energy), "modelled" '
        "(a simulated result: modelled_power) or null (no power figure)"
    )
    modelled_power = serializers.JSONField(
        help_text="simulated results only, MODELLED not measured: per tier at max agents "
        "power_w, agents_per_mw, tokens_per_joule from the simulator's power model (idle + "
        "dynamic share of a sourced TDP); label 'modelled', method; null on measured results"
    )
    published_at = serializers.DateTimeField()
    url = serializers.SerializerMethodField()
    twin = serializers.SerializerMethodField(
        help_text="simulated results only (null on measured ones): the twin profile that "
        "served the run and its standing on the accuracy page (docs/simulator.md "
        "'Accuracy'): {profile, status: admitted | quarantined, accuracy_url}; a profile "
        "the accuracy page holds no row for is quarantined"
    )

    def get_url(self, obj: Result) -> str:
        return result_url(obj.pk)

    def get_twin(self, obj: Result) -> dict | None:
        if not obj.is_simulated:
            return None
        return {
            "profile": obj.twin_profile or None,
            "status": obj.twin_status,
            "accuracy_url": reverse("twin-accuracy")
            + (f"#twin-{obj.twin_profile}" if obj.twin_profile else ""),
        }

    def get_power_source(self, obj: Result) -> str | None:
        return power_source(obj)


class ResultDetailOut(ResultSummaryOut):
    points = serializers.JSONField(
        help_text="each point's intervals: 95% session-bootstrap bounds of p25_speed and "
        "throughput_per_accelerator (absent where not measured)"
    )
    tier_set = TierSetOut()
    engine = serializers.SerializerMethodField()
    provenance = serializers.SerializerMethodField()
    config = serializers.SerializerMethodField()
    launch = serializers.SerializerMethodField(
        help_text="how the run started the deployment (leaderboard/launch.py): launcher "
        "(container | process | attached | simulated | slurm), image_run (true only when "
        "engine.image was pulled by digest and run), image, note ('host process, image not "
        "run' for the process launcher); null when the run reported none"
    )
    verification = serializers.SerializerMethodField()
    inventory = serializers.SerializerMethodField(
        help_text="what served the run, read on the pool host (docs/verification.md "
        "'inventory'): {recorded, document: accelerators (model, UUID, serial, VBIOS, clocks, "
        "power limit, ECC), driver, CUDA, topology, runtime (launcher, image digest as "
        "resolved, entrypoint, user), server (engine name and version it reports), machine "
        "(CPU, memory, kernel); check: the inventory check's status, summary and mismatches}; "
        "{recorded: false, reason} when none was recorded; null for a simulated result"
    )
    energy = serializers.SerializerMethodField(
        help_text="measured energy per tier at max agents (power, agents_per_mw, "
        "tokens_per_joule, coverage) with tools, methods, denominators and accelerators "
        "measured / used; {measured: false, reason} when not measured (never modelled)"
    )

    sessions = serializers.SerializerMethodField(
        help_text="session SLOs per tier at max agents (docs/engine.md 'Session SLOs'): met, "
        "sessions, share with its session-bootstrap interval (low, high, confidence) and the "
        "whole-task model time (median, p90, s); the tier set's criterion (requests | "
        "sessions) and min_session_share"
    )
    cache_truth = serializers.SerializerMethodField(
        help_text="prefix-cache truth (docs/metrics.md 'Cache truth'): theoretical_tokens (the "
        "prompt tokens each request shares with its own session's earlier requests, server "
        "tokens), observed_tokens (cached tokens the server reported), prompt_tokens, ratio "
        "(observed / theoretical), verdict (pass | flagged | fail | not_checked, the worst "
        "trial's) and per trial the same with the counters' status and hit share; each "
        "point's cache_truth has its trial's in full; null for a result published before it"
    )
    cost = serializers.SerializerMethodField(
        help_text="cost per tier at max agents for each price class (on-demand, neocloud, "
        "owned): usd_per_m_output_tokens, usd_per_m_total_tokens, usd_per_agent_hour, "
        "usd_per_hour; null where the catalog has no price or an owned system no power; "
        "owned figures say their power_source (measured | modelled); the catalog prices "
        "(class, date, source, figures) under prices. Computed from the catalog when read."
    )

    def get_energy(self, obj: Result) -> dict:
        return result_energy(obj)

    def get_sessions(self, obj: Result) -> dict:
        return result_sessions(obj)

    def get_cache_truth(self, obj: Result) -> dict | None:
        return result_cache_truth(obj)

    def get_cost(self, obj: Result) -> dict:
        return result_cost(obj)

    def get_engine(self, obj: Result) -> dict:
        return {"name": obj.engine_name, "version": obj.engine_version}

    def get_provenance(self, obj: Result) -> dict:
        sub = obj.submission
        run = obj.run
        return {
            "submitter": sub.org.name,
            "source": sub.source,
            "submission_id": sub.pk,
            "submitted_at": sub.created_at,
            "run_id": run.pk,
            "run_started_at": run.started_at,
            "run_finished_at": run.finished_at,
            "dataset_sha256": obj.dataset_sha256 or None,
            "dataset": str(run.dataset) if run.dataset_id else None,
            "search_flags": run.summary.flags if run.summary else [],
        }

    def get_config(self, obj: Result) -> dict | None:
        # null once the result is invalidated or withdrawn; a reviewer's redactions applied
        # (docs/security.md "Secrets in configs")
        return configview.public_config(obj)

    def get_inventory(self, obj: Result) -> dict | None:
        return public_inventory(obj)

    def get_launch(self, obj: Result) -> dict | None:
        return result_launch(obj)

    def get_verification(self, obj: Result) -> dict | None:
        report = getattr(obj.run, "verification", None)
        if report is None:
            return None
        return {"status": report.status, "checks": report.checks}


# --- views ---------------------------------------------------------------------------


class PublicApi(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]
    throttle_classes = [AnonThrottle]


def _simulated(request: Request) -> bool:
    return request.query_params.get("simulated") in ("1", "true", "yes")


_published = Q(results__status=Result.STATUS_PUBLISHED)


class ModelListApi(PublicApi):
    @extend_schema(responses=ModelOut(many=True), operation_id="public_models_list")
    def get(self, request: Request) -> Response:
        def build() -> list:
            qs = AIModel.objects.annotate(n_results=Count("results", filter=_published))
            return ModelOut(qs, many=True).data

        return Response(cached("api:models", build))


class ModelDetailApi(PublicApi):
    @extend_schema(responses=ModelOut, operation_id="public_models_retrieve")
    def get(self, request: Request, slug: str) -> Response:
        def build() -> dict | None:
            model = (
                AIModel.objects.annotate(n_results=Count("results", filter=_published))
                .filter(slug=slug)
                .first()
            )
            if model is None:
                return None
            tier_set = default_tier_set_for(model)
            return {
                **ModelOut(model).data,
                "tier_set": TierSetOut(tier_set).data if tier_set else None,
            }

        data = cached(f"api:model:{slug}", build)
        if data is None:
            raise NotFound(f"no model {slug!r}")
        return Response(data)


class HardwareListApi(PublicApi):
    @extend_schema(responses=HardwareOut(many=True), operation_id="public_hardware_list")
    def get(self, request: Request) -> Response:
        def build() -> list:
            qs = HardwareSystem.objects.annotate(n_results=Count("results", filter=_published))
            return HardwareOut(qs, many=True).data

        return Response(cached("api:hardware", build))


class HardwareDetailApi(PublicApi):
    @extend_schema(responses=HardwareOut, operation_id="public_hardware_retrieve")
    def get(self, request: Request, slug: str) -> Response:
        def build() -> dict | None:
            system = (
                HardwareSystem.objects.annotate(n_results=Count("results", filter=_published))
                .filter(slug=slug)
                .first()
            )
            return HardwareOut(system).data if system else None

        data = cached(f"api:hardware:{slug}", build)
        if data is None:
            raise NotFound(f"no hardware system {slug!r}")
        return Response(data)


class ResultListApi(PublicApi):
    @extend_schema(
        responses=ResultSummaryOut(many=True),
        operation_id="public_results_list",
        parameters=[
            OpenApiParameter("model", str, description="model slug"),
            OpenApiParameter("hardware", str, description="hardware slug"),
            OpenApiParameter("simulated", bool, description="include simulated results"),
            OpenApiParameter(
                "status", str, description="published (default), superseded, invalidated, all"
            ),
        ],
    )
    def get(self, request: Request) -> Response:
        model = request.query_params.get("model") or ""
        hardware = request.query_params.get("hardware") or ""
        status = request.query_params.get("status") or Result.STATUS_PUBLISHED
        valid = {c for c, _ in Result.STATUS_CHOICES} | {"all"}
        if status not in valid:
            raise ValidationError({"status": [f"one of {', '.join(sorted(valid))}"]})
        sim = _simulated(request)

        def build() -> list:
            qs = Result.objects.for_chart()  # the summary has no points
            if status != "all":
                qs = qs.filter(status=status)
            if not sim:
                qs = qs.filter(is_simulated=False)
            if model:
                qs = qs.filter(model__slug=model)
            if hardware:
                qs = qs.filter(hardware__slug=hardware)
            return ResultSummaryOut(qs, many=True).data

        return Response(cached(f"api:results:{model}:{hardware}:{status}:{sim}", build))


class ResultDetailApi(PublicApi):
    @extend_schema(responses=ResultDetailOut, operation_id="public_results_retrieve")
    def get(self, request: Request, pk: int) -> Response:
        def build() -> dict | None:
            result = (
                Result.objects.select_related(
                    "model", "hardware", "submission__org", "run__dataset", "run__verification"
                )
                .prefetch_related(
                    Prefetch("tier_set__tiers", queryset=SloTier.objects.order_by("order")),
                    "hardware__prices",
                )
                .filter(pk=pk)
                .first()
            )
            return ResultDetailOut(result).data if result else None

        data = cached(f"api:result:{pk}", build)
        if data is None:
            raise NotFound(f"no result {pk}")
        return Response(data)


class TwinFigureOut(serializers.Serializer):
    figure = serializers.CharField()
    unit = serializers.CharField()
    reference = serializers.FloatField(help_text="the published or measured figure")
    simulated = serializers.FloatField(
        allow_null=True, help_text="the twin's figure; null: never reached (a miss)"
    )
    basis = serializers.CharField(
        help_text="published | measured on this CPU | leave-one-out (the fit without it)"
    )
    read = serializers.CharField()
    error = serializers.FloatField(allow_null=True, help_text="simulated ÷ reference − 1")
    within = serializers.BooleanField()


class TwinAccuracyOut(serializers.Serializer):
    profile = serializers.CharField()
    status = serializers.CharField(help_text="admitted | quarantined")
    reason = serializers.CharField()
    mape = serializers.FloatField(
        allow_null=True, help_text="mean absolute error over the figures the twin reaches"
    )
    figures_total = serializers.IntegerField()
    figures_within = serializers.IntegerField()
    tolerance = serializers.FloatField()
    sources = serializers.ListField(child=serializers.CharField())
    figures = TwinFigureOut(many=True)


class TwinAccuracyApi(PublicApi):
    """Every twin profile against its held-out figures (docs/simulator.md "Accuracy")."""

    @extend_schema(responses=TwinAccuracyOut(many=True), operation_id="public_twin_accuracy")
    def get(self, request: Request) -> Response:
        def build() -> list:
            return [row.record for row in TwinAccuracy.objects.all()]

        return Response(cached("api:twin-accuracy", build))


class CompareApi(PublicApi):
    @extend_schema(
        operation_id="public_compare",
        parameters=[
            OpenApiParameter("r", int, many=True, description="2 to 4 result ids; first = base"),
            OpenApiParameter("speed", float, description="extra iso-speed point, tok/s"),
            OpenApiParameter("n", int, description="extra iso-concurrency point, agents"),
        ],
        responses={200: dict},
    )
    def get(self, request: Request) -> Response:
        ids: list[int] = []
        for raw in request.query_params.getlist("r"):
            for part in raw.split(","):
                if not part.strip().isdigit():
                    raise ValidationError({"r": [f"{part!r} is not a result id"]})
                if int(part) not in ids:
                    ids.append(int(part))
        if not 2 <= len(ids) <= MAX_COMPARE:
            raise ValidationError({"r": [f"give 2 to {MAX_COMPARE} result ids"]})
        speed = _positive(request, "speed")
        n = _positive(request, "n")
        return Response(
            cached(f"api:compare:v2:{ids}:{speed}:{n}", lambda: _compare(ids, speed, n))
        )


def _positive(request: Request, name: str) -> float | None:
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ValidationError({name: ["a positive number"]}) from None
    if not value > 0 or value == float("inf"):
        raise ValidationError({name: ["a positive number"]})
    return value


def _compare(ids: list[int], speed: float | None, n: float | None) -> dict:
    results = {
        r.pk: r
        for r in Result.objects.for_listing()
        .prefetch_related("hardware__prices")
        .filter(pk__in=ids)
    }
    missing = [i for i in ids if i not in results]
    if missing:
        raise NotFound(f"no result {missing[0]}")
    ordered = [results[i] for i in ids]
    points = [r.frontier_points() for r in ordered]
    speeds = sorted(
        {
            t.min_p25_output_speed
            for t in SloTier.objects.filter(
                tier_set__in=SloTierSet.objects.filter(result__in=ordered)
            )
        }
        | ({speed} if speed else set())
    )
    base = points[0]
    out_speed = []
    for s in speeds:
        values = [frontier.throughput_at_speed(p, s) for p in points]
        cost: dict[str, dict] = {}
        for kind in COST_CLASSES:  # docs/catalog.md "Prices"
            usd = [
                cost_at_speed(r, s, {p.price_class: p for p in r.hardware.prices.all()}.get(kind))
                for r in ordered
            ]
            cost[kind] = {
                "usd_per_m_total_tokens": usd,
                "ratio_to_first": [frontier.ratio(v, usd[0]) for v in usd],
            }
        out_speed.append(
            {
                "speed": s,
                "throughput_per_accelerator": values,
                # per result: "at a measured point", "read between measured points" (a
                # linear reading, not a measurement) or null (outside its range)
                "read": [frontier.read_at_speed(p, s) for p in points],
                "ratio_to_first": [frontier.ratio(v, values[0]) for v in values],
                "cost": cost,
            }
        )
    ns = frontier.common_concurrencies(*points) + ([int(n)] if n else [])
    out_n = []
    for c in ns:
        values = [frontier.throughput_at_concurrency(p, c) for p in points]
        out_n.append(
            {
                "concurrency": c,
                "throughput_per_accelerator": values,
                "ratio_to_first": [frontier.ratio(v, values[0]) for v in values],
            }
        )
    single = [frontier.single_agent(p) for p in points]
    single_speed = [s[1] if s and s[0] == 1 else None for s in single]
    return {
        "results": ResultSummaryOut(ordered, many=True).data,
        "iso_speed": out_speed,
        "iso_concurrency": out_n,
        "single_agent_speed": {
            "values": single_speed,
            "ratio_to_first": [frontier.ratio(v, single_speed[0]) for v in single_speed],
        },
        "base_speed_range": frontier.speed_range(base),
    }
