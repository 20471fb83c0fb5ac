"""Ladders of changes measured under identical conditions, and the gain each change bought
(docs/engine.md "ladder"). Above the engine and the simulator: a rung's target is often a
patched simulator profile, and its server figures come from the speculative-decoding
parser of agentperf.verification."""
