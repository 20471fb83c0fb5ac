"""`agentperf`: the vendor CLI. It talks only to the vendor REST API (docs/api.md "Vendor
CLI"); `validate` runs the API's own schema validator offline (`agentperf.schema`), and
nothing here imports the web app, its models or a database."""

__version__ = "0.1.0"
