"""The "Reproduce" block of a result page: the engine CLI commands that repeat the run's
search with the run's own settings (docs/engine.md "CLI").

Everything comes from the stored run spec, read through the contract
(`agentperf/contract.py` RunSpec): the search options dispatch gave the run, its SLO tiers
and its accelerator counts. The private test set stays private, so the block downloads the
public tuning subset instead (docs/datasets.md "Public tuning subset"). A simulated run is
reproduced exactly on the simulator's virtual time (`--target sim:PROFILE`); a measured one
against the reader's own endpoint. The block starts with the install of the engine's own
distribution (packages/agentperf), so it needs no web app and no database.
"""

from __future__ import annotations

import json
import shlex

from agentperf.contract import RunSpec, SearchOptions, SimulatedLauncher
from leaderboard.configview import redact

# The engine and the vendor CLI as their own distribution, no Django (docs/engine.md
# "Install"); tests/cli/test_engine_wheel.py runs the printed block in a fresh venv.
INSTALL_COMMENT = "# the engine and the agentperf CLI, from a clone of the repository"
INSTALL = "pip install ./packages/agentperf"


def search_flags(search: SearchOptions) -> list[str]:
    """The engine CLI's flags for the run's search options (`agentperf/engine/cli.py`)."""
    flags = [
        f"--warmup {search.warmup_s:g}",
        f"--duration {search.duration_s:g}",
        f"--cap {search.cap}",
        f"--max-trials {search.max_trials}",
        f"--min-requests {search.min_requests}",
        f"--seed {search.seed}",
    ]
    if search.ramp_s is not None:
        flags.append(f"--ramp {search.ramp_s:g}")
    if search.tool_delay_scale != 1.0:
        flags.append(f"--tool-delay-scale {search.tool_delay_scale:g}")
    if search.api != "chat":
        flags.append(f"--api {search.api}")
    flags.append(f"--timeout {search.request_timeout_s:g}")
    return flags


def public_model_name(name: str) -> str:
    """The served model name as every public surface shows it: through the same secret
    detector as the public config (docs/security.md "Secrets in configs"), so a name that
    is a credential reads ``[redacted]`` here too."""
    return str(redact(name, key="served_model_name"))


def reproduce_command(spec: RunSpec) -> str:
    """The shell lines that repeat the run's search (``run.spec``), one flag group per
    line."""
    launcher = spec.launcher
    tiers = json.dumps([t.model_dump() for t in spec.tiers], indent=1)
    if isinstance(launcher, SimulatedLauncher):
        target = [
            f"--target sim:{shlex.quote(launcher.profile)}",
            f"--model {shlex.quote(public_model_name(launcher.served_model_name))}",
        ]
        if spec.search.prime_cache is False:
            target.append("--no-prime-cache")
    else:
        target = [
            "--base-url http://<your-endpoint>/v1",
            f"--model {shlex.quote(public_model_name(spec.model.served_model_name))}",
        ]
    accelerators = [f"--accelerators {spec.accelerators.used}"]
    if spec.accelerators.total:
        accelerators.append(f"--accelerators-total {spec.accelerators.total}")
    groups = [
        target,
        ["--dataset tuning.jsonl.gz", "--tiers tiers.json"],
        accelerators,
        search_flags(spec.search),
        ["--out results/"],
    ]
    search = " \\\n  ".join(" ".join(group) for group in groups)
    return (
        f"{INSTALL_COMMENT}\n"
        f"{INSTALL}\n"
        "# the public tuning subset (the private test set stays private)\n"
        "agentperf datasets download -o tuning.jsonl.gz\n"
        f"# this run's SLO tiers: tier set {spec.tier_set.slug} v{spec.tier_set.version}\n"
        f"cat > tiers.json <<'EOF'\n{tiers}\nEOF\n"
        f"agentperf-engine search {search}\n"
    )
