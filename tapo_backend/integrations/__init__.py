"""Bridges from tapo_backend's losses to other RL engines (import the one you run; each needs its engine)."""
