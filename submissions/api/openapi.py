"""drf-spectacular description of the vendor token authentication."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ApiTokenScheme(OpenApiAuthenticationExtension):
    target_class = "submissions.auth.ApiTokenAuthentication"
    name = "vendorToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "apf_<prefix>_<secret>",
            "description": "Vendor API token from `manage.py create_token --org NAME`.",
        }
