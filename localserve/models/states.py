"""A model's states in the manager (manager.py), as /v1/models and /health name them."""

UNLOADED, LOADING, LOADED, UNLOADING = "unloaded", "loading", "loaded", "unloading"
