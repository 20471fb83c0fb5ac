import pytest
from django.db import transaction

from demo.synthetic import make_hardware, make_model, make_org
from submissions import constants as c
from submissions.models import AuditEvent, PoolEndpoint, Submission
from submissions.schema import ConfigError
from submissions.services.lifecycle import TransitionError
from submissions.services.submissions import (
    IdempotencyConflict,
    submission_create,
    submission_resubmit,
    submission_submit,
    submission_withdraw,
)
from tests.submissions.configs import as_json, as_yaml, example
from tests.submissions.support import make_catalog

pytestmark = pytest.mark.django_db


def test_a_valid_config_becomes_a_validated_submission_with_its_audit_trail():
    catalog, org = make_catalog(), make_org()
    sub = submission_create(org=org, config_text=catalog.yaml(), content_type="application/yaml")
    sub.refresh_from_db()
    assert sub.status == c.VALIDATED
    assert (sub.model, sub.hardware, sub.is_simulated) == (catalog.model, catalog.hardware, True)
    assert sub.config["topology"]["accelerators_used"] == 8  # 1 worker x 8 accelerators
    events = AuditEvent.objects.filter(object_id=str(sub.pk)).values_list("to_state", flat=True)
    assert list(events) == [c.SUBMITTED, c.VALIDATED]


def test_an_invalid_config_raises_field_errors_and_writes_nothing():
    catalog, org = make_catalog(), make_org()
    doc = catalog.config()
    doc["topology"]["roles"][0]["tp"] = 2
    with pytest.raises(ConfigError) as info:
        submission_create(org=org, config_text=as_json(doc), content_type="application/json")
    assert list(info.value.fields) == ["topology.roles.0.tp"]
    assert not Submission.objects.exists() and not AuditEvent.objects.exists()


def test_a_model_missing_from_the_catalog_is_an_error_at_model_id():
    catalog, org = make_catalog(), make_org()
    doc = catalog.config()
    doc["model"]["id"] = "no-such-model"
    with pytest.raises(ConfigError) as info:
        submission_create(org=org, config_text=as_json(doc), content_type="application/json")
    assert list(info.value.fields) == ["model.id"]


def _attached_doc(model, hardware, endpoint_id="rack-1"):
    doc = example("attached")
    doc["model"]["id"] = model.slug
    for role in doc["topology"]["roles"]:
        role["hardware"] = hardware.slug
    doc["launcher"]["attached"]["endpoint_id"] = endpoint_id
    return doc


def test_an_attached_endpoint_must_be_in_the_pools_allowlist_for_this_org():
    org, other = make_org(), make_org()
    model, hardware = make_model(), make_hardware(accelerators_per_system=72)
    doc = _attached_doc(model, hardware)
    with pytest.raises(ConfigError) as info:
        submission_create(org=org, config_text=as_json(doc), content_type="application/json")
    assert list(info.value.fields) == ["launcher.attached.endpoint_id"]
    PoolEndpoint.objects.create(
        pool=hardware.runner_pool, endpoint_id="rack-1", url="http://10.0.0.1/v1", org=other
    )
    with pytest.raises(ConfigError):
        submission_create(org=org, config_text=as_json(doc), content_type="application/json")
    PoolEndpoint.objects.create(
        pool=hardware.runner_pool, endpoint_id="rack-1b", url="http://10.0.0.2/v1"
    )
    doc = _attached_doc(model, hardware, endpoint_id="rack-1b")
    sub = submission_create(org=org, config_text=as_json(doc), content_type="application/json")
    assert sub.status == c.VALIDATED and not sub.is_simulated


def test_the_same_idempotency_key_and_body_return_the_same_submission():
    catalog, org = make_catalog(), make_org()
    text = catalog.yaml()
    first = submission_submit(org=org, config_text=text, idempotency_key="k-1")
    again = submission_submit(org=org, config_text=text, idempotency_key="k-1")
    assert first.replayed is False and again.replayed is True
    assert again.submission.pk == first.submission.pk
    assert Submission.objects.count() == 1


def test_the_same_idempotency_key_with_another_body_is_a_conflict():
    catalog, org = make_catalog(), make_org()
    submission_create(org=org, config_text=catalog.yaml(), idempotency_key="k-1")
    with pytest.raises(IdempotencyConflict):
        submission_create(org=org, config_text=catalog.yaml(notes="other"), idempotency_key="k-1")
    assert Submission.objects.count() == 1


def test_idempotency_keys_are_per_organization():
    catalog = make_catalog()
    a = submission_create(org=make_org(), config_text=catalog.yaml(), idempotency_key="k")
    b = submission_create(org=make_org(), config_text=catalog.yaml(), idempotency_key="k")
    assert a.pk != b.pk


def test_dispatch_waits_for_the_commit(django_capture_on_commit_callbacks):
    catalog, org = make_catalog(), make_org()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        with transaction.atomic():
            submission_create(org=org, config_text=catalog.yaml())
    assert len(callbacks) == 1


def test_withdraw_moves_a_live_submission_to_withdrawn():
    catalog, org = make_catalog(), make_org()
    sub = submission_create(org=org, config_text=catalog.yaml())
    submission_withdraw(submission=sub, actor_label="test", reason="wrong image")
    sub.refresh_from_db()
    assert (sub.status, sub.status_reason) == (c.WITHDRAWN, "wrong image")


def test_a_published_submission_cannot_be_withdrawn():
    catalog, org = make_catalog(), make_org()
    sub = submission_create(org=org, config_text=catalog.yaml())
    Submission.objects.filter(pk=sub.pk).update(status=c.PUBLISHED)
    sub.refresh_from_db()
    with pytest.raises(TransitionError):
        submission_withdraw(submission=sub)
    assert Submission.objects.get(pk=sub.pk).status == c.PUBLISHED


def test_resubmit_links_the_new_submission_and_withdraws_the_live_one():
    catalog, org = make_catalog(), make_org()
    old = submission_create(org=org, config_text=catalog.yaml())
    new = submission_resubmit(previous=old, config_text=catalog.yaml(notes="v2")).submission
    old.refresh_from_db()
    assert (new.previous_id, new.baseline_id, new.status) == (old.pk, old.pk, c.VALIDATED)
    assert old.status == c.WITHDRAWN and f"#{new.pk}" in old.status_reason


def test_an_invalid_resubmission_leaves_the_previous_submission_alone():
    catalog, org = make_catalog(), make_org()
    old = submission_create(org=org, config_text=catalog.yaml())
    with pytest.raises(ConfigError):
        submission_resubmit(previous=old, config_text=as_yaml({"model": {}}))
    assert Submission.objects.get(pk=old.pk).status == c.VALIDATED
    assert Submission.objects.count() == 1
