"""Parameter checks shared by every block's config.

Bad parameters fail at construction, before anything reaches yosys or
Verilator: ``TypeError`` for a wrong type, ``ValueError`` for a broken
constraint, worded ``"rows must be a positive integer, not 0"``.
"""

from bertforge.rtl.errors import ParameterError, ParameterTypeError

__all__ = ["check_int", "check_choice"]


def check_int(name, value, *, minimum=1, maximum=None):
    """Return ``value`` if it is an ``int`` in ``[minimum, maximum]``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParameterTypeError(f"{name} must be an integer, not {value!r}")
    if value < minimum:
        if minimum == 1:
            kind = "a positive integer"
        elif minimum == 0:
            kind = "a non-negative integer"
        else:
            kind = f"an integer >= {minimum}"
        raise ParameterError(f"{name} must be {kind}, not {value!r}")
    if maximum is not None and value > maximum:
        raise ParameterError(f"{name} must be an integer <= {maximum}, not {value!r}")
    return value


def check_choice(name, value, choices):
    """Return ``value`` if it is one of ``choices`` (all ints or all strings)."""
    kind = int if isinstance(choices[0], int) else str
    if isinstance(value, bool) or not isinstance(value, kind):
        noun = "an integer" if kind is int else "a string"
        raise ParameterTypeError(f"{name} must be {noun}, not {value!r}")
    if value not in choices:
        listed = [repr(c) for c in choices]
        text = listed[0] if len(listed) == 1 else ", ".join(listed[:-1]) + " or " + listed[-1]
        raise ParameterError(f"{name} must be {text}, not {value!r}")
    return value
