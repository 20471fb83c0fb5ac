"""Ladder routes (mounted at the site root by config.urls, before the vendor portal's
/portal/): docs/ladders.md."""

from django.urls import path

from ladders import portal, views

urlpatterns = [
    path("api/v1/schema/ladder.json", views.LadderSchemaView.as_view(), name="ladder-schema"),
    path("api/v1/ladders/", views.LadderListCreateView.as_view(), name="ladder-api-list"),
    path("api/v1/ladders/<int:pk>/", views.LadderDetailView.as_view(), name="ladder-api-detail"),
    path("api/v1/public/ladders/", views.PublicLadderListApi.as_view(), name="public-api-ladders"),
    path(
        "api/v1/public/ladders/<int:pk>/",
        views.PublicLadderApi.as_view(),
        name="public-api-ladder",
    ),
    path("ladders/", views.ladder_list, name="ladder-list"),
    path("ladders/<int:pk>/", views.ladder_detail, name="ladder-detail"),
    path("ladders/<int:pk>/ladder.csv", views.ladder_csv, name="ladder-csv"),
    path("review/ladders/<int:pk>/", views.ladder_review_page, name="ladder-review"),
    # the vendor portal's ladder pages (ladders/portal.py)
    path("portal/ladders/", portal.ladder_list, name="portal-ladders"),
    path("portal/ladders/new/", portal.ladder_new, name="portal-ladder-new"),
    path("portal/ladders/<int:pk>/", portal.ladder_detail, name="portal-ladder"),
]
