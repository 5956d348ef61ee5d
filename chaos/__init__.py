"""The chaos suite (``make chaos``): faults injected under a mixed load, then invariants checked."""
