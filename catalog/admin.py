from django.contrib import admin

from catalog.models import AIModel, Dataset, HardwareSystem, SloTier, SloTierSet


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
    list_display = ("name", "model", "version", "effective_date")
    inlines = [SloTierInline]


@admin.register(Dataset)
class DatasetAdmin(admin.ModelAdmin):
    list_display = ("name", "version", "visibility", "sha256", "created_at")
