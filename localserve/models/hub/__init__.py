"""Pulls from the Hugging Face Hub or a mirror into the Hugging Face cache (pull.py: the steps)."""
