"""What a pull refuses or fails with: one error type carrying the HTTP status a server answers
it with, so each dialect renders it in its own shape and the CLI prints it as one line."""

from __future__ import annotations


class HubError(Exception):
    def __init__(self, status: int, message: str, code: str = "pull_failed"):
        super().__init__(message)
        self.status = status        # 400 a bad name, 404 nothing there, 401/403 gated, 502 the mirror, 507 the disk
        self.message = message
        self.code = code


def bad_name(message: str) -> HubError:
    return HubError(400, message, "invalid_model_name")
