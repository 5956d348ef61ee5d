"""Writes. Functions with keyword-only, typed arguments: <entity>_<action>."""
