"""Research-data providers: ``research.document.created|updated|deleted`` events applied to
research documents by their ordering rules (docs/subsystems/processing.md, "Research documents")."""

from .integration import ResearchIntegration

integration = ResearchIntegration()

__all__ = ["integration"]
