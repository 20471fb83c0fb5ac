"""The simulated serving system as a launcher.

Small profiles run as the real-time HTTP server (`python -m runner.twin_server`) in a
subprocess started by `runner.twin_server.server.start_server`, measured over loopback exactly like a real endpoint; rack-scale profiles run in
process on virtual time (`agentperf.simulator.virtual`), which the engine reaches through
`Target(sim_profile=...)`. Dispatch decides which (`launcher.clock`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from agentperf import contract
from agentperf.simulator.profile import ProfileError, load_profile_with, profile_document
from runner.launchers.base import Endpoint, LauncherError, die_with_parent, list_models
from runner.launchers.devices import DeviceGrant
from runner.launchers.sections import WrittenSimulated, read_section

if TYPE_CHECKING:  # the server module loads the cost model (numpy); import it to start one
    from runner.twin_server.server import ServerProcess


class SimulatedLauncher:
    kind = "simulated"

    def __init__(
        self, section: contract.SimulatedLauncher | Mapping[str, Any], *, log_dir: str
    ) -> None:
        self.section = read_section(contract.SimulatedLauncher, WrittenSimulated, section)
        self.log_path = Path(log_dir) / "simulator.log"
        self.server: ServerProcess | None = None
        self.devices: DeviceGrant | None = None  # the twin takes no accelerator

    def start(self) -> Endpoint:
        section = self.section
        name, seed, served = section.profile, section.seed, section.served_model_name
        profile = self._profile(name, section.overrides)
        if section.clock == "virtual":
            return Endpoint(
                served_model_name=served,
                sim_profile=profile,
                seed=seed,
                info={"launcher": "simulated", "profile": name, "clock": "virtual"},
            )
        from runner.twin_server.server import start_server

        try:
            self.server = start_server(
                profile,
                seed=seed,
                log_path=self.log_path,
                startup_timeout_s=60,
                new_session=True,
                preexec_fn=die_with_parent,
            )
        except (OSError, RuntimeError) as exc:
            raise LauncherError(f"could not start the simulator: {exc}") from exc
        models = list_models(self.server.base_url, timeout_s=30)
        return Endpoint(
            served_model_name=served,
            base_url=self.server.base_url,
            seed=seed,
            info={"launcher": "simulated", "profile": name, "clock": "real", "models": models},
        )

    def _profile(self, name: str, overrides: dict[str, Any] | None) -> str:
        """The profile to serve: its name, or with overrides the patched profile written
        beside the log (docs/simulator.md "Overrides")."""
        if not overrides:
            return name
        try:
            load_profile_with(name, overrides)  # refused at submission too; checked again here
            doc = profile_document(name, overrides)
        except ProfileError as exc:
            raise LauncherError(f"simulator profile {name!r} with overrides: {exc}") from exc
        path = self.log_path.with_name("profile-with-overrides.yaml")
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return str(path)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(timeout_s=10)

    def log_bytes(self) -> bytes:
        try:
            return self.log_path.read_bytes()
        except OSError:
            return b""

    def check(self) -> None:
        """Nothing watched: the twin runs in this worker or its own child."""
