"""storlab: a storage lab for databases."""

__version__ = "0.1.0"
