from django.contrib import admin

from leaderboard.models import Result


@admin.register(Result)
class ResultAdmin(admin.ModelAdmin):
    list_display = ("label", "model", "hardware", "status", "is_simulated", "published_at")
    list_filter = ("status", "is_simulated", "model", "hardware")
    readonly_fields = ("submission", "run")
