"""Errors a user can cause. The CLI prints them as one line and exits with code 2."""


class UserError(Exception):
    """Bad input from the user (a file, a key, a value, a URL): one clear line, no traceback."""
