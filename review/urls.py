from django.urls import path

from review import timeline, views

app_name = "review"

urlpatterns = [
    path("", views.queue, name="queue"),
    path("submissions/<int:pk>/", views.submission_detail, name="submission"),
    path("runs/<int:run_pk>/", views.run_detail, name="run"),
    path(
        "runs/<int:run_pk>/trials/<int:index>/timeline.json",
        timeline.run_trial_timeline,
        name="run-timeline",
    ),
    path("submissions/<int:pk>/<str:action>/", views.decide, name="decide"),
]
