from django.contrib import admin

from catalog.models import AIModel, Dataset, HardwarePrice, HardwareSystem, SloTier, SloTierSet


@admin.register(AIModel)
class AIModelAdmin(admin.ModelAdmin):
    list_display = ("name", "slug", "provider", "total_params_b", "kv_bytes_per_token")
    search_fields = ("name", "slug", "provider")


@admin.register(HardwareSystem)
class HardwareSystemAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "slug",
        "vendor",
        "accelerator",
        "accelerators_per_system",
        "runner_pool",
    )
    search_fields = ("name", "slug", "vendor")


class SloTierInline(admin.TabularInline):
    model = SloTier
    extra = 0


@admin.register(SloTierSet)
class SloTierSetAdmin(admin.ModelAdmin):
    list_display = ("name", "model", "version", "effective_date", "criterion")
    inlines = [SloTierInline]


@admin.register(HardwarePrice)
class HardwarePriceAdmin(admin.ModelAdmin):
    list_display = (
        "system",
        "price_class",
        "date",
        "usd_per_accelerator_hour",
        "capex_usd_per_system",
        "usd_per_kwh",
        "pue",
    )
    list_filter = ("price_class",)


@admin.register(Dataset)
class DatasetAdmin(admin.ModelAdmin):
    list_display = ("name", "version", "visibility", "sha256", "created_at")
