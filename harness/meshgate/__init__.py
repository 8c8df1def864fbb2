"""meshgate: the Python driver of meshgate-runner (standard library only)."""
