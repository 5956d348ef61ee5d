"""GitHub: ``ping`` and ``deployment_status`` events; a deployment status moves the matching
deployment forward (docs/subsystems/processing.md, "GitHub")."""

from .integration import GitHubIntegration

integration = GitHubIntegration()

__all__ = ["integration"]
