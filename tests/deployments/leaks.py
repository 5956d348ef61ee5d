"""What tests of secrets share (docs/security.md, "Secrets")."""

from __future__ import annotations

# The characters a paste, a CRLF env file or a careless editor leave behind a token.
STRAY = {"space": " ", "cr": "\r", "lf": "\n", "tab": "\t", "nul": "\x00"}
