"""Parameter tests shared by the blocks' test modules: a module gets its
``test_bad_parameters`` and ``test_component_needs_a_config`` from
:func:`config_tests`, with its own list of bad fields."""

import pytest


def positive_int_errors(name, maximum):
    """Bad values of a field that takes 1 to ``maximum``: 0, ``maximum + 1``, 2.0."""
    return [
        ({name: 0}, ValueError, rf"^{name} must be a positive integer, not 0$"),
        ({name: maximum + 1}, ValueError,
         rf"^{name} must be an integer <= {maximum}, not {maximum + 1}$"),
        ({name: 2.0}, TypeError, rf"^{name} must be an integer, not 2\.0$"),
    ]


#: Bad sizes and widths of an array with up to 256 rows and cols and
#: accumulators up to 48 bits (systolic and sparse arrays).
ARRAY_ERRORS = [
    ({"rows": 0}, ValueError, r"^rows must be a positive integer, not 0$"),
    ({"cols": -3}, ValueError, r"^cols must be a positive integer, not -3$"),
    ({"rows": "4"}, TypeError, r"^rows must be an integer, not '4'$"),
    ({"cols": 2.0}, TypeError, r"^cols must be an integer, not 2\.0$"),
    ({"rows": True}, TypeError, r"^rows must be an integer, not True$"),
    ({"rows": 257}, ValueError, r"^rows must be an integer <= 256, not 257$"),
    ({"width": 7}, ValueError, r"^width must be 8 or 16, not 7$"),
    ({"acc_width": 15}, ValueError, r"^acc_width must be an integer >= 16, not 15$"),
    ({"width": 16, "acc_width": 24}, ValueError, r"^acc_width must be an integer >= 32, not 24$"),
    ({"acc_width": 49}, ValueError, r"^acc_width must be an integer <= 48, not 49$"),
    ({"max_dsp": -1}, ValueError, r"^max_dsp must be a non-negative integer, not -1$"),
    ({"max_dsp": 2.5}, TypeError, r"^max_dsp must be an integer, not 2\.5$"),
]


def config_tests(config_class, component, bad, *, article="a"):
    """``(test_bad_parameters, test_component_needs_a_config)``: each of
    ``bad`` (``(fields, error, message)``) fails when ``config_class`` is
    built, and ``component`` takes only a ``config_class``."""

    @pytest.mark.parametrize("fields, error, message", bad)
    def test_bad_parameters(fields, error, message):
        with pytest.raises(error, match=message):
            config_class(**fields)

    def test_component_needs_a_config():
        message = rf"^config must be {article} {config_class.__name__}, not 3$"
        with pytest.raises(TypeError, match=message):
            component(3)

    return test_bad_parameters, test_component_needs_a_config


def frozen_config_test(config_class, **fields):
    """A test that a ``config_class`` (built from ``fields``) is frozen and
    takes its fields by keyword only."""
    def test_config_is_frozen_and_keyword_only():
        config = config_class(**fields)
        with pytest.raises(Exception):
            config.rows = 4
        with pytest.raises(TypeError):
            config_class(*fields.values())
    return test_config_is_frozen_and_keyword_only
