"""Board designs: what ``bertforge build`` and ``bertforge run`` know about
one block behind the UART host link, as one :class:`BoardDesign` per design,
and what the designs' hooks share (the UART divisor, memory depths, the
serial link, the ``run`` flags every design takes).

Each design's own hooks and its :class:`BoardDesign` live with the block's
name, ``generators/<block>_board.py``: :mod:`~bertforge.generators.systolic_board`,
:mod:`~bertforge.generators.gemm_board` (the gemm and sparse_engine designs:
one top for either engine), :mod:`~bertforge.generators.sparse_board`,
:mod:`~bertforge.generators.butterfly_board` and
:mod:`~bertforge.generators.norm_board` (softmax, layernorm and GELU: one
top for the three units). Each is the ``board`` of its
:class:`~bertforge.generators.block.Block` in
:data:`bertforge.generators.blocks.BLOCKS` (the only list of designs);
:mod:`bertforge.generators.board_cli` reads nothing else.
"""

import dataclasses
import sys
from dataclasses import dataclass
from typing import Callable

from .cli_common import CliError

__all__ = ["BoardDesign", "BAUD", "K_MAX", "STREAM_DEPTH_DEFAULTS", "uart_divisor", "k_max_of",
           "with_dsps", "memory_depth", "with_array_multiply", "array_macs", "open_link",
           "on_board", "checked", "compare", "add_ab", "add_requant", "add_x", "add_int8"]

BAUD = 115200
#: ``--k-max`` when not given.
K_MAX = 256
#: Default beats of the streaming and butterfly tops' memories per FPGA family.
STREAM_DEPTH_DEFAULTS = {"ice40": 256}


@dataclass(frozen=True)
class BoardDesign:
    """One design behind the UART host link.

    ``name`` (as in ``--design`` and ``run NAME``), ``design_id`` (the PING
    reply's design byte, put in the top config), ``help``; ``build_flags``:
    which of ``k_max``, ``mem_kib``, ``depth`` ``build`` takes for it;
    ``top_config`` ``(block, args, clock_mhz, target) -> top config``
    (``block``: the :class:`~bertforge.generators.block.Block` whose board
    this is);
    ``top`` (top config -> the board top Component); ``per_cycle`` (top
    config -> MACs per cycle, or elements per cycle if ``elements``);
    ``add_run_args`` (adds the design's own ``run`` flags to its sub-parser);
    ``run`` ``(args, target, saved top config dict) -> exit code``.
    """

    name: str
    design_id: int
    help: str
    top_config: Callable
    top: Callable
    per_cycle: Callable
    add_run_args: Callable
    run: Callable
    build_flags: tuple = ()
    elements: bool = False


def uart_divisor(clock_mhz):
    return round(clock_mhz * 1e6 / BAUD)


def k_max_of(args):
    return K_MAX if args.k_max is None else args.k_max


def with_dsps(array, target):
    if array.max_dsp is None and target.dsp_count is not None:
        array = dataclasses.replace(array, max_dsp=target.dsp_count)
    return array


def memory_depth(args, target, least):
    if args.depth is not None:
        return args.depth
    return max(STREAM_DEPTH_DEFAULTS.get(target.family, 1024), least)


def with_array_multiply(array, args, target):
    """The family's multiply fields (ECP5: registered MULT18X18Ds, for Fmax)
    unless the command line sets them."""
    from bertforge.boards.targets import array_multiply
    chosen = args.cfg_multiply_stages is not None or args.cfg_multiplier_cell is not None
    return array_multiply(array, target.family, chosen=chosen)


def array_macs(top_config):
    return top_config.array.rows * top_config.array.cols


# -- bertforge run: the host side ----------------------------------------


# -- bertforge run: the host side ----------------------------------------

def open_link(port_name):
    try:
        import serial
    except ImportError:
        raise CliError("pyserial is not installed; run: pip install pyserial") from None
    try:
        return serial.Serial(port_name, BAUD, timeout=2.0)
    except (OSError, serial.SerialException) as error:
        raise CliError(f"cannot open {port_name}: {error}") from None


def on_board(args, config, work):
    """Open the serial port, check with a PING that the board runs the top
    of ``config`` (its design id) and return ``work(link)``; link errors end
    as one line."""
    from bertforge.boards import protocol
    with open_link(args.port) as port:
        try:
            link = protocol.HostLink(port)
            design, _ = link.ping()
            if design != config.design_id:
                raise CliError(f"the board on {args.port} runs design {design}, not the {args.design} "
                               f"top ({config.design_id}); flash build {args.build_dir or 'first'}")
            return work(link)
        except protocol.LinkError as error:
            raise CliError(f"board link: {error}") from None


def checked(check):
    """Run ``check()`` (the host-side checks ``run_*`` make, before the port
    is opened); its ``ValueError`` ends as one line."""
    try:
        return check()
    except ValueError as error:
        raise CliError(str(error)) from None


def compare(args, matches):
    """``--check``: exit code 1 if ``matches()`` is false, else 0."""
    if not args.check:
        return 0
    if not matches():
        print("bertforge: error: the board's result differs from the golden model", file=sys.stderr)
        return 1
    print("matches the golden model")
    return 0


def add_ab(parser, b_help):
    parser.add_argument("--a", required=True, metavar="A.npy", help="A")
    parser.add_argument("--b", required=True, metavar="B.npy", help=b_help)


def add_requant(parser, shift_default):
    parser.add_argument("--multiplier", "--mult", type=int, default=None,
                        help="requantization multiplier (default 1)")
    parser.add_argument("--shift", type=int, default=None,
                        help=f"requantization shift (default {shift_default})")


def add_x(parser, x_help="the rows (vectors) of integers"):
    parser.add_argument("--x", required=True, metavar="X.npy", help=x_help)


def add_int8(parser):
    parser.add_argument("--int8", action="store_true", help="requantize C to int8")
    add_requant(parser, 0)
