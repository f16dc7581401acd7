"""Integrations with frameworks the bridge's users run it beside."""
