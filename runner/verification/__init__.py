"""The verification steps that run on the pool host: qualification probes before load
(`probes`), HumanEval completions executed in the sandbox (`taskrun`) and recording a
reference deployment's figures (`reference`). The checks over a run's records are
agentperf/verification/; docs/verification.md lists every check."""
