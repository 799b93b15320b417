"""The one root of every error bertforge reports to a user.

``bertforge`` (the command line) catches :class:`BertforgeError` (and
``OSError``) and prints it as one line with exit code 2; anything else is
an internal bug and shows its traceback. Parameter errors stay
``ValueError`` / ``TypeError`` as well, so code that catches those (and the
anchored-message tests) keeps working.
"""

__all__ = ["BertforgeError", "ParameterError", "ParameterTypeError"]


class BertforgeError(Exception):
    """Bad input from the user (a parameter, a file, a missing tool or board),
    worded as one line that says what is wrong and how to fix it."""


class ParameterError(BertforgeError, ValueError):
    """A parameter or input value breaks a constraint."""


class ParameterTypeError(BertforgeError, TypeError):
    """A parameter has the wrong type."""
