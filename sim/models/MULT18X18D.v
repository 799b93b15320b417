// Simulation model of the ECP5 MULT18X18D, for the subset bertforge
// instantiates (rtl/arith.py): A and B input registers and the output
// register on CLK0/CE0/RST0 or none, no pipeline register, no shift or
// cascade inputs, no C input. Lattice's model is not on PyPI; this one
// follows the ECP5 sysDSP user guide (FPGA-TN-02205): P = A * B, signed when
// SIGNEDA / SIGNEDB are high, 36 bits. Any other setting stops the
// simulation at time 0 rather than simulate something else.
module MULT18X18D (
    input A0, A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11, A12, A13, A14, A15, A16, A17,
    input B0, B1, B2, B3, B4, B5, B6, B7, B8, B9, B10, B11, B12, B13, B14, B15, B16, B17,
    input C0, C1, C2, C3, C4, C5, C6, C7, C8, C9, C10, C11, C12, C13, C14, C15, C16, C17,
    input SIGNEDA, SIGNEDB, SOURCEA, SOURCEB,
    input CLK0, CE0, RST0,
    output P0, P1, P2, P3, P4, P5, P6, P7, P8, P9, P10, P11, P12, P13, P14, P15, P16, P17,
    output P18, P19, P20, P21, P22, P23, P24, P25, P26, P27, P28, P29, P30, P31, P32, P33,
    output P34, P35
);
    parameter REG_INPUTA_CLK = "NONE";
    parameter REG_INPUTA_CE = "CE0";
    parameter REG_INPUTA_RST = "RST0";
    parameter REG_INPUTB_CLK = "NONE";
    parameter REG_INPUTB_CE = "CE0";
    parameter REG_INPUTB_RST = "RST0";
    parameter REG_OUTPUT_CLK = "NONE";
    parameter REG_OUTPUT_CE = "CE0";
    parameter REG_OUTPUT_RST = "RST0";
    parameter GSR = "ENABLED";
    parameter RESETMODE = "SYNC";

    initial begin
        if ((REG_INPUTA_CLK != "NONE" && REG_INPUTA_CLK != "CLK0")
            || (REG_INPUTB_CLK != "NONE" && REG_INPUTB_CLK != "CLK0")
            || (REG_OUTPUT_CLK != "NONE" && REG_OUTPUT_CLK != "CLK0")
            || REG_INPUTA_CE != "CE0" || REG_INPUTB_CE != "CE0" || REG_OUTPUT_CE != "CE0"
            || REG_INPUTA_RST != "RST0" || REG_INPUTB_RST != "RST0" || REG_OUTPUT_RST != "RST0"
            || RESETMODE != "SYNC") begin
            $display("MULT18X18D model: unsupported register setting");
            $finish;
        end
    end

    wire [17:0] a_in = {A17, A16, A15, A14, A13, A12, A11, A10, A9, A8, A7, A6, A5, A4, A3, A2, A1, A0};
    wire [17:0] b_in = {B17, B16, B15, B14, B13, B12, B11, B10, B9, B8, B7, B6, B5, B4, B3, B2, B1, B0};
    reg [17:0] a_reg = 0, b_reg = 0;
    reg sa_reg = 0, sb_reg = 0;
    always @(posedge CLK0)
        if (RST0) begin
            a_reg <= 0; b_reg <= 0; sa_reg <= 0; sb_reg <= 0;
        end else if (CE0) begin
            a_reg <= a_in; b_reg <= b_in; sa_reg <= SIGNEDA; sb_reg <= SIGNEDB;
        end
    wire [17:0] a = REG_INPUTA_CLK == "NONE" ? a_in : a_reg;
    wire [17:0] b = REG_INPUTB_CLK == "NONE" ? b_in : b_reg;
    wire sa = REG_INPUTA_CLK == "NONE" ? SIGNEDA : sa_reg;
    wire sb = REG_INPUTB_CLK == "NONE" ? SIGNEDB : sb_reg;
    // Each operand widened by one bit (sign or zero), then a signed multiply.
    wire signed [18:0] a_wide = {sa & a[17], a};
    wire signed [18:0] b_wide = {sb & b[17], b};
    wire signed [37:0] full = a_wide * b_wide;
    wire [35:0] product = full[35:0];
    reg [35:0] p_reg = 0;
    always @(posedge CLK0)
        if (RST0) p_reg <= 0;
        else if (CE0) p_reg <= product;
    wire [35:0] p = REG_OUTPUT_CLK == "NONE" ? product : p_reg;
    assign {P35, P34, P33, P32, P31, P30, P29, P28, P27, P26, P25, P24, P23, P22, P21, P20,
            P19, P18, P17, P16, P15, P14, P13, P12, P11, P10, P9, P8, P7, P6, P5, P4, P3, P2,
            P1, P0} = p;
endmodule
