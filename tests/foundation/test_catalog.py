import pytest
import yaml
from django.core.management import call_command

from agentperf.catalog_data import DEFAULT_CATALOG_DIR as CATALOG_DIR
from agentperf.catalog_data import CatalogError, load_catalog
from catalog.models import AIModel, HardwareSystem, SloTier, SloTierSet
from catalog.services import catalog_seed, default_tier_set_for
from demo.synthetic import make_model

REQUIRED_SYSTEMS = [
    "h100-sxm-hgx8",
    "h200-hgx8",
    "b200-hgx8",
    "b300-hgx8",
    "gb200-nvl72",
    "gb300-nvl72",
    "mi300x-8gpu",
    "mi355x-8gpu",
    "vera-rubin-nvl72",
]


@pytest.mark.django_db
def test_seed_catalog_loads_the_flagship_model_with_its_sourced_figures():
    call_command("seed_catalog")
    m = AIModel.objects.get(slug="deepseek-v4.1-flash-max")
    assert m.name == "DeepSeek V4.1 Flash (max)"
    assert (m.total_params_b, m.active_params_prefill_b, m.active_params_decode_b) == (552, 8, 16)
    assert (m.kv_bytes_per_token, m.context_length) == (890, 1048576)
    for field in ("total_params_b", "kv_bytes_per_token", "context_length"):
        assert m.sources[field]["source"]


@pytest.mark.django_db
def test_seed_catalog_loads_every_required_hardware_system():
    call_command("seed_catalog")
    slugs = set(HardwareSystem.objects.values_list("slug", flat=True))
    assert set(REQUIRED_SYSTEMS) <= slugs
    gb300 = HardwareSystem.objects.get(slug="gb300-nvl72")
    assert gb300.accelerators_per_system == 72
    assert gb300.sources["memory_gb_per_accelerator"]["source"]


@pytest.mark.django_db
def test_seed_catalog_is_idempotent():
    call_command("seed_catalog")
    counts = (AIModel.objects.count(), HardwareSystem.objects.count(), SloTier.objects.count())
    call_command("seed_catalog")
    assert (
        AIModel.objects.count(),
        HardwareSystem.objects.count(),
        SloTier.objects.count(),
    ) == counts


@pytest.mark.django_db
def test_default_tier_set_has_the_design_figures():
    call_command("seed_catalog")
    # the default set (the catalog's decode-heavy set has no model either: docs/datasets.md)
    tiers = SloTierSet.objects.get(slug="agentperf-default-v1").as_engine_tiers()
    assert [(t["min_p25_output_speed"], t["max_ttft_s"]) for t in tiers] == [
        (20, 10),
        (60, 10),
        (100, 5),
        (180, 5),
        (300, 3),
    ]


@pytest.mark.django_db
def test_the_default_tier_set_is_the_models_newest_own_set_else_the_newest_default():
    def tier_set(slug, model, date, version):
        return SloTierSet.objects.create(
            slug=slug, model=model, name=slug, version=version, effective_date=date, source="t"
        )

    model, other = make_model(), make_model()
    tier_set("default-old", None, "2026-01-01", 9)
    # same date: the later version wins, though created first (a lower id)
    default_newer = tier_set("default-new-v2", None, "2026-06-01", 2)
    default_new = tier_set("default-new-v1", None, "2026-06-01", 1)
    tier_set("own-old", model, "2026-01-01", 5)
    own = tier_set("own-new", model, "2026-03-01", 1)  # older than the defaults: still first

    assert default_newer.pk < default_new.pk
    assert default_tier_set_for(model) == own
    assert default_tier_set_for(other) == default_newer
    assert default_tier_set_for() == default_newer


def test_every_catalog_figure_with_a_value_names_its_source():
    for name in ("models.yaml", "hardware.yaml"):
        data = yaml.safe_load((CATALOG_DIR / name).read_text())
        for entry in next(iter(data.values())):
            stack = [(entry["slug"], entry)]
            while stack:
                where, node = stack.pop()
                if isinstance(node, dict) and "value" in node:
                    assert node["value"] is None or node.get("source"), f"{name}:{where}"
                elif isinstance(node, dict):
                    stack.extend((f"{where}.{k}", v) for k, v in node.items())


@pytest.mark.django_db
def test_a_figure_without_a_source_is_refused(tmp_path):
    directory = _catalog_copy(
        tmp_path, models="models:\n  - slug: x\n    name: X\n    total_params_b: {value: 7}\n"
    )
    with pytest.raises(CatalogError, match="models.yaml:x.total_params_b: value 7 has no source"):
        catalog_seed(directory=directory)


def _catalog_copy(tmp_path, **replace: str):
    for name in ("models.yaml", "hardware.yaml", "tiers.yaml"):
        (tmp_path / name).write_text(
            replace.get(name.split(".")[0]) or (CATALOG_DIR / name).read_text()
        )
    return tmp_path


def test_the_one_loader_reads_every_file_the_simulator_the_ladder_and_the_seed_use():
    catalog = load_catalog()
    assert catalog.model("deepseek-v4.1-flash-max")["name"] == "DeepSeek V4.1 Flash (max)"
    assert catalog.system("gb300-nvl72")["accelerators_per_system"]["value"] == 72
    default = catalog.tier_set("agentperf-default-v1")
    assert default["model"] is None and [t["name"] for t in default["tiers"]][0] == "20 tok/s"
    with pytest.raises(CatalogError, match="tier set 'nope' is not in the catalog"):
        catalog.tier_set("nope")


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("tier_sets:\n  - {slug: t, name: T}\n", "tiers.yaml:t: expected a non-empty list"),
        (
            "tier_sets:\n  - {slug: t, name: T, tiers: [{name: a, min_p25_output_speed: fast,"
            " max_ttft_s: 1}]}\n",
            "tiers.yaml:t.tiers\\[0\\].min_p25_output_speed: expected a number",
        ),
        (
            "tier_sets:\n  - {slug: t, name: T, effective_date: soon, tiers: []}\n",
            "tiers.yaml:t.effective_date: 'soon' is not an ISO date",
        ),
        ("models:\n  - {slug: m, name: M}\n  - {slug: m, name: N}\n", "slug 'm' appears twice"),
    ],
)
@pytest.mark.django_db
def test_a_malformed_file_is_refused_by_the_loader_before_the_seed_writes(tmp_path, doc, message):
    name = doc.partition(":")[0].replace("tier_sets", "tiers")
    directory = _catalog_copy(tmp_path, **{name: doc})
    with pytest.raises(CatalogError, match=message):
        load_catalog(directory)
    with pytest.raises(CatalogError, match=message):
        catalog_seed(directory=directory)
    assert not AIModel.objects.exists()


@pytest.mark.django_db
def test_unknown_figures_render_as_unknown_on_the_catalog_page(client):
    call_command("seed_catalog")
    html = client.get("/hardware/local-cpu/").content.decode()
    assert "Local CPU" in html and html.count("unknown") >= 5
    html = client.get("/models/deepseek-v4.1-flash-max/").content.decode()
    assert "552.0 B" in html and "huggingface.co" in html
