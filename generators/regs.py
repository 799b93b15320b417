"""The register map: one SystemRDL file (``generators/regs/bertforge.rdl``)
compiled with ``systemrdl-compiler`` into

- :func:`regmap`: a plain Python description, which
  :func:`regmap_source` renders as ``rtl/axi_regmap.py`` (the amaranth
  register file, :class:`~bertforge.rtl.axi_regs.AxiLiteRegisters`, takes it;
  rtl reads no files, so the compiled description is committed, and a test
  checks it is up to date: ``python -m bertforge.generators.regs``
  rewrites it);
- :func:`export`: the C header (``peakrdl-cheader``), the register document
  (``peakrdl-markdown``) and IP-XACT (``peakrdl-ipxact``).

Field kinds in the description: ``const`` (read-only, a fixed value),
``r`` (read-only, driven by the hardware), ``rw`` (storage), ``pulse``
(reads 0; writing 1 gives the hardware a one-cycle pulse), ``w1c``
(set by the hardware, cleared by writing 1).
"""

from pathlib import Path

from bertforge.rtl.errors import BertforgeError

__all__ = ["RDL_FILE", "REGMAP_FILE", "compile_rdl", "regmap", "regmap_source", "export"]

RDL_FILE = Path(__file__).parent / "regs" / "bertforge.rdl"
REGMAP_FILE = Path(__file__).parent.parent / "rtl" / "axi_regmap.py"


def compile_rdl(path=RDL_FILE):
    """The elaborated top address map node of the RDL file ``path``."""
    from systemrdl import RDLCompileError, RDLCompiler
    compiler = RDLCompiler()
    try:
        compiler.compile_file(str(path))
        return compiler.elaborate().top
    except RDLCompileError as error:
        raise BertforgeError(f"{path}: SystemRDL does not compile ({error})") from None


def _kind(field):
    from systemrdl.rdltypes import OnWriteType
    sw = field.get_property("sw").name
    if field.get_property("singlepulse"):
        return "pulse"
    if field.get_property("onwrite") == OnWriteType.woclr and field.get_property("hwset"):
        return "w1c"
    if sw == "rw":
        return "rw"
    if sw == "r":
        return "r" if field.is_hw_writable else "const"
    raise BertforgeError(f"field {field.get_path()}: access {sw!r} is not supported by the register file")


def regmap(path=RDL_FILE):
    """The register map as plain data: a tuple of registers
    ``{"name", "offset", "fields": ({"name", "lsb", "width", "kind", "reset"}, ...)}``."""
    top = compile_rdl(path)
    return tuple({
        "name": reg.inst_name, "offset": reg.absolute_address,
        "fields": tuple({"name": f.inst_name, "lsb": f.lsb, "width": f.width, "kind": _kind(f),
                         "reset": f.get_property("reset") or 0} for f in reg.fields()),
    } for reg in top.registers())


def regmap_source(path=RDL_FILE):
    """The text of ``rtl/axi_regmap.py`` (deterministic)."""
    body = "(\n" + "".join(f"    {register!r},\n" for register in regmap(path)) + ")"
    return ('"""The register map of the AXI4-Lite register file, compiled from\n'
            '``generators/regs/bertforge.rdl`` by :mod:`bertforge.generators.regs`.\n\n'
            'Generated: do not edit (``python -m bertforge.generators.regs`` rewrites it;\n'
            'a test checks that it is up to date)."""\n\n'
            '__all__ = ["REGISTERS"]\n\n'
            f"REGISTERS = {body}\n")


def export(directory, *, prefix="bertforge", path=RDL_FILE):
    """Write ``{prefix}_regs.h``, ``{prefix}_regs.md`` and ``component.xml``
    into ``directory``; returns their paths."""
    from peakrdl_cheader.exporter import CHeaderExporter
    from peakrdl_ipxact import IPXACTExporter
    from peakrdl_markdown import MarkdownExporter
    top = compile_rdl(path)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / f"{prefix}_regs.h", directory / f"{prefix}_regs.md",
             directory / "component.xml"]
    CHeaderExporter().export(top, str(paths[0]))
    MarkdownExporter().export(top, str(paths[1]))
    IPXACTExporter(vendor="bertforge.org", library="bertforge", version="1.0").export(
        top, str(paths[2]), component_name=f"{prefix}_regs")
    return paths


if __name__ == "__main__":
    REGMAP_FILE.write_text(regmap_source())
    print(f"wrote {REGMAP_FILE}")
