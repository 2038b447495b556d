"""Several models: the catalogue (catalogue.py), one loaded model (loaded.py), and the manager
that loads on demand, unloads when idle and keeps inside the limits (manager.py), with each
model's record (record.py) and its memory estimate before a load (footprint.py)."""
