from django.http import Http404
from rest_framework import exceptions

from core.api_errors import ApiError, exception_handler


def test_a_django_404_has_the_not_found_code():
    response = exception_handler(Http404("no such submission"), {})
    assert response.status_code == 404
    assert response.data["error"]["code"] == "not_found"
    assert response.data["error"]["message"] == "no such submission"


def test_validation_errors_are_flattened_to_field_paths():
    exc = exceptions.ValidationError({"topology": {"roles": [{"tp": ["must be >= 1"]}]}})
    response = exception_handler(exc, {})
    assert response.data == {
        "error": {
            "code": "invalid",
            "message": "The request has invalid fields.",
            "fields": {"topology.roles.0.tp": ["must be >= 1"]},
        }
    }


def test_an_api_error_keeps_its_code_status_and_fields():
    exc = ApiError("conflict", "key reused", status_code=409, fields={"Idempotency-Key": ["x"]})
    response = exception_handler(exc, {})
    assert response.status_code == 409
    assert response.data["error"] == {
        "code": "conflict",
        "message": "key reused",
        "fields": {"Idempotency-Key": ["x"]},
    }
