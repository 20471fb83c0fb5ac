"""The vendor portal: session login, submit a config, follow its run, preview the result."""
