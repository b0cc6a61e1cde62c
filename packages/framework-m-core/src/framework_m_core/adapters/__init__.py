"""Broker adapters shipped with core (``memory://``) and the scheme registry."""
