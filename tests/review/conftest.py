import pytest


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """The cast's passwords are hashed on creation; a fast hasher keeps setup short here.
    (Password checking itself is not under test in these modules.)"""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
