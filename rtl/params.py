"""Parameter checks shared by every block's config.

Bad parameters fail at construction, before anything reaches yosys or
Verilator: ``TypeError`` for a wrong type, ``ValueError`` for a broken
constraint, worded ``"rows must be a positive integer, not 0"``.
"""

from dataclasses import asdict, fields

from bertforge.rtl.errors import ParameterError, ParameterTypeError

__all__ = ["Config", "check_int", "check_choice", "check_instance", "check_bool", "check_scale",
           "check_size", "check_operands"]


class Config:
    """Base of the blocks' frozen config dataclasses: :meth:`to_dict`."""

    #: Fields added later, left out of :meth:`to_dict` at their defaults so
    #: that earlier configs keep byte-identical Verilog headers and sidecars.
    LATE_FIELDS = ()

    def to_dict(self):
        values = asdict(self)
        for field in fields(self):
            if field.name in self.LATE_FIELDS and values[field.name] == field.default:
                del values[field.name]
        return values


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


def check_instance(name, value, cls, *, article="a"):
    """Return ``value`` if it is a ``cls``: ``"config must be a GeluConfig, not ..."``."""
    if not isinstance(value, cls):
        raise ParameterTypeError(f"{name} must be {article} {cls.__name__}, not {value!r}")
    return value


def check_bool(name, value):
    """Return ``value`` if it is a ``bool``."""
    if not isinstance(value, bool):
        raise ParameterTypeError(f"{name} must be a bool, not {value!r}")
    return value


def check_scale(prefix, mult, shift):
    """A requantization scale ``{prefix}_mult`` (1 to 2**24 - 1) and
    ``{prefix}_shift`` (0 to 62)."""
    check_int(f"{prefix}_mult", mult, maximum=(1 << 24) - 1)
    check_int(f"{prefix}_shift", shift, minimum=0, maximum=62)


def check_size(config, maximum):
    """An array's ``rows`` and ``cols``, 1 to ``maximum``."""
    check_int("rows", config.rows, maximum=maximum)
    check_int("cols", config.cols, maximum=maximum)


def check_operands(config, acc_max):
    """Signed operand ``width`` (8 or 16) and ``acc_width`` (``2 * width`` to ``acc_max``)."""
    check_choice("width", config.width, (8, 16))
    check_int("acc_width", config.acc_width, minimum=2 * config.width, maximum=acc_max)
