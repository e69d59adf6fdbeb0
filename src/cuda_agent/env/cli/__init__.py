"""The env's commands: `cuda-agent eval`, `cache` and `doctor`, and the arguments they share."""
