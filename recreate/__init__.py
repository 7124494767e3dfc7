"""recreate: create and improve domain agents from their own experience."""

__version__ = "0.1.0"
