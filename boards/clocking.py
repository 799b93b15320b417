"""Clock generation: the ``sync`` domain of a board top-level at a requested
frequency, through the FPGA's PLL (iCE40 ``SB_PLL40_PAD``, ECP5
``EHXPLLL``), or straight from the board oscillator."""

from amaranth.lib import io
from amaranth.hdl import ClockDomain, ClockSignal, Elaboratable, Instance, Module, ResetSignal, Signal
from bertforge.rtl.errors import ParameterError

__all__ = ["ice40_pll_params", "ecp5_pll_params", "ClockShell"]


def ice40_pll_params(f_in, f_out):
    """Best (DIVR, DIVF, DIVQ, FILTER_RANGE, achieved MHz) for SB_PLL40 in
    SIMPLE feedback mode (the search icepll does)."""
    best = None
    for divr in range(16):
        f_pfd = f_in / (divr + 1)
        if not 10 <= f_pfd <= 133:
            continue
        for divf in range(128):
            f_vco = f_pfd * (divf + 1)
            if not 533 <= f_vco <= 1066:
                continue
            for divq in range(1, 7):
                f = f_vco / (1 << divq)
                if best is None or abs(f - f_out) < abs(best[4] - f_out):
                    filt = 1 if f_pfd < 17 else 2 if f_pfd < 26 else 3 if f_pfd < 44 \
                        else 4 if f_pfd < 66 else 5 if f_pfd < 101 else 6
                    best = (divr, divf, divq, filt, f)
    if best is None or abs(best[4] - f_out) > 0.01 * f_out:
        raise ParameterError(f"no iCE40 PLL setting makes {f_out} MHz from {f_in} MHz")
    return best


def ecp5_pll_params(f_in, f_out):
    """Best (CLKI_DIV, CLKFB_DIV, CLKOP_DIV, achieved MHz) for EHXPLLL (the
    search ecppll does)."""
    best = None
    for clki in range(1, 129):
        f_pfd = f_in / clki
        if not 3.125 <= f_pfd <= 400:
            continue
        for clkfb in range(1, 81):
            f = f_pfd * clkfb
            if not 8 <= f <= 400:
                continue
            for clkop in range(1, 129):
                if 400 <= f * clkop <= 800:
                    if best is None or abs(f - f_out) < abs(best[3] - f_out):
                        best = (clki, clkfb, clkop, f)
                    break
    if best is None or abs(best[3] - f_out) > 0.01 * f_out:
        raise ParameterError(f"no ECP5 PLL setting makes {f_out} MHz from {f_in} MHz")
    return best


class ClockShell(Elaboratable):
    """Creates ``sync`` at ``mhz`` (``None``: the board clock) and a reset
    held until the PLL locks, then elaborates ``top``; ``connect(m, platform)``
    ties ``top`` to the board's pins. ``achieved_mhz`` is the frequency the
    PLL actually makes."""

    def __init__(self, top, family, board_mhz, mhz, connect):
        self.top = top
        self.family = family
        self.board_mhz = board_mhz
        self.mhz = mhz
        self.connect = connect
        self.achieved_mhz = board_mhz
        self.pll = None
        if mhz is not None and abs(mhz - board_mhz) > 1e-6:
            if family == "ice40":
                self.pll = ice40_pll_params(board_mhz, mhz)
                self.achieved_mhz = self.pll[4]
            elif family == "ecp5":
                self.pll = ecp5_pll_params(board_mhz, mhz)
                self.achieved_mhz = self.pll[3]
            else:
                raise ParameterError(f"--clock needs a PLL, which bertforge does not drive on "
                                 f"{family}; leave --clock out to run at {board_mhz} MHz")

    def elaborate(self, platform):
        m = Module()
        m.submodules.top = self.top
        if self.pll is None:
            self.connect(m, platform)
            return m
        m.domains.sync = sync = ClockDomain("sync")
        locked = Signal()
        if self.family == "ice40":
            clk_pin = platform.request(platform.default_clk, dir="-")
            divr, divf, divq, filt, _ = self.pll
            m.submodules.pll = Instance(
                "SB_PLL40_PAD", p_FEEDBACK_PATH="SIMPLE", p_DIVR=divr, p_DIVF=divf, p_DIVQ=divq,
                p_FILTER_RANGE=filt, i_PACKAGEPIN=clk_pin.io, i_RESETB=1, i_BYPASS=0,
                o_PLLOUTGLOBAL=ClockSignal("sync"), o_LOCK=locked)
        else:
            m.submodules.clk_buffer = clk_pin = io.Buffer(
                "i", platform.request(platform.default_clk, dir="-"))
            clki, clkfb, clkop, _ = self.pll
            m.submodules.pll = Instance(
                "EHXPLLL", p_CLKI_DIV=clki, p_CLKFB_DIV=clkfb, p_CLKOP_DIV=clkop,
                p_CLKOP_ENABLE="ENABLED", p_CLKOP_CPHASE=clkop - 1, p_CLKOP_FPHASE=0,
                p_FEEDBK_PATH="CLKOP", p_OUTDIVIDER_MUXA="DIVA", a_FREQUENCY_PIN_CLKI=str(self.board_mhz),
                a_FREQUENCY_PIN_CLKOP=f"{self.achieved_mhz:.6f}",
                i_CLKI=clk_pin.i, i_CLKFB=ClockSignal("sync"), i_RST=0, i_STDBY=0,
                i_PHASESEL0=0, i_PHASESEL1=0, i_PHASEDIR=0, i_PHASESTEP=0, i_PHASELOADREG=0,
                i_PLLWAKESYNC=0, i_ENCLKOP=0, o_CLKOP=ClockSignal("sync"), o_LOCK=locked)
        m.d.comb += ResetSignal("sync").eq(~locked)
        platform.add_clock_constraint(sync.clk, self.achieved_mhz * 1e6)
        self.connect(m, platform)
        return m
