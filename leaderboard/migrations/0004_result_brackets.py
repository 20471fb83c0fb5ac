"""Result.brackets, and the uncertainty of results published before it: each result's
tier brackets and each point's session-bootstrap intervals, from its run's stored trials
(leaderboard.publishing.tier_brackets / point_intervals)."""

from django.db import migrations, models


def backfill(apps, schema_editor):
    from leaderboard.publishing import point_intervals, tier_brackets

    Result = apps.get_model("leaderboard", "Result")
    Trial = apps.get_model("runner", "Trial")
    SloTier = apps.get_model("leaderboard", "SloTier")
    for result in Result.objects.select_related("run").iterator():
        trials = list(Trial.objects.filter(run_id=result.run_id).order_by("index"))
        names = list(
            SloTier.objects.filter(tier_set_id=result.tier_set_id)
            .order_by("order")
            .values_list("name", flat=True)
        )
        by_index = {t.index: t for t in trials}
        points = []
        for point in result.points or []:
            trial = by_index.get(point.get("index"))
            if "intervals" not in point and trial is not None:
                point = {**point, "intervals": point_intervals(trial.metrics or {})}
            points.append(point)
        result.points = points
        result.brackets = tier_brackets(result.run.search_summary or {}, trials, names)
        result.save(update_fields=["points", "brackets"])


class Migration(migrations.Migration):
    dependencies = [
        ("leaderboard", "0003_result_quality"),
        ("runner", "0003_benchmarkrun_qualification_benchmarkrun_runner_info_and_more"),
    ]

    operations = [
        migrations.AddField(
            model_name="result",
            name="brackets",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
