"""The simulated serving system as a real-time HTTP server on the pool host (`server`); its
model is agentperf/simulator/ (docs/simulator.md)."""
