"""DRF authentication with vendor API tokens (`Authorization: Bearer apf_...`)."""

from __future__ import annotations

from rest_framework import authentication, exceptions

from submissions.services.tokens import TokenError, api_token_verify


class TokenPrincipal:
    """The authenticated caller of a token request: the organization, not a person."""

    is_authenticated = True
    is_anonymous = False
    is_staff = False
    is_superuser = False

    def __init__(self, token) -> None:
        self.token = token
        self.org = token.org
        self.pk = None

    def get_username(self) -> str:
        return f"token:{self.token.prefix}"

    def __str__(self) -> str:
        return f"{self.org} (token {self.token.prefix})"


class ApiTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        keyword, _, value = header.partition(" ")
        if keyword not in (self.keyword, "Token") or not value.startswith("apf_"):
            return None
        try:
            token = api_token_verify(value.strip())
        except TokenError as exc:
            raise exceptions.AuthenticationFailed(str(exc)) from None
        return TokenPrincipal(token), token

    def authenticate_header(self, request) -> str:
        return self.keyword
