"""Models already on disk in other tools' stores (sources.py: which stores, in what order)."""
