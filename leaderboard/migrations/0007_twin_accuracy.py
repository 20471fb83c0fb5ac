# The twin's accuracy page (docs/simulator.md "Accuracy"): each simulated result names the
# twin profile that served it, and each profile's standing is a TwinAccuracy row.

from django.db import migrations, models


def twin_profiles(apps, schema_editor):
    """Name the profile of every simulated result published before the field existed, from
    its submission's config (launcher.simulated.profile)."""
    Result = apps.get_model("leaderboard", "Result")
    for result in Result.objects.filter(is_simulated=True).select_related("submission"):
        config = result.submission.config or {}
        simulated = (config.get("launcher") or {}).get("simulated") or {}
        profile = simulated.get("profile")
        if isinstance(profile, str) and profile:
            result.twin_profile = profile[:100]
            result.save(update_fields=["twin_profile"])


class Migration(migrations.Migration):
    dependencies = [
        ("leaderboard", "0006_result_band"),
        ("submissions", "0002_workload_decode_heavy"),
    ]

    operations = [
        migrations.AddField(
            model_name="result",
            name="twin_profile",
            field=models.CharField(blank=True, max_length=100),
        ),
        migrations.CreateModel(
            name="TwinAccuracy",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("profile", models.CharField(max_length=100, unique=True)),
                (
                    "status",
                    models.CharField(
                        choices=[("admitted", "admitted"), ("quarantined", "quarantined")],
                        max_length=20,
                    ),
                ),
                ("mape", models.FloatField(blank=True, null=True)),
                ("record", models.JSONField()),
                ("built_at", models.DateTimeField()),
            ],
            options={
                "ordering": ["profile"],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("status__in", ["admitted", "quarantined"])),
                        name="twin_accuracy_status_valid",
                    )
                ],
            },
        ),
        migrations.RunPython(twin_profiles, migrations.RunPython.noop),
    ]
