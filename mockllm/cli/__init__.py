"""The `mockllm` command's verbs: serve, inspect, check, record."""
