"""The twin's HTTP side: the simulated serving system as a real-time OpenAI-compatible server
on the pool host (`server`, `python -m runner.twin_server`). The twin's model, the profiles
and the virtual-time target are the domain side, agentperf/simulator/ (docs/simulator.md)."""
