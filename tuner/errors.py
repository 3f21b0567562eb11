"""Errors a user can cause, which the CLI prints as one line before it exits with code 2."""


class UserError(Exception):
    """Bad input from the user (a file, a key, a value, a URL): one clear line, no traceback."""
