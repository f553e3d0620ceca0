// What a user reads (issue 25): tensors printed as PyTorch lays them out, the tape as DOT with
// every input and argument names, and the registry table's columns sized to their content.
#include <gtest/gtest.h>

#include <sstream>

#include "test_util.h"

namespace tg {
namespace {

// The values part of to_string (after the "Tensor(shape=..., dtype=...)" line).
std::string values_of(const Tensor& t) {
  const std::string s = t.to_string();
  return s.substr(s.find('\n') + 1);
}

TEST(Printing, ThreeDimsSeparateTheirBlocksAsPyTorch) {
  Tensor x = arange(0, 24).reshape({2, 3, 4});
  EXPECT_EQ(x.to_string(),
            "Tensor(shape=[2, 3, 4], dtype=int64)\n"
            "[[[ 0,  1,  2,  3],\n"
            "  [ 4,  5,  6,  7],\n"
            "  [ 8,  9, 10, 11]],\n"
            "\n"
            " [[12, 13, 14, 15],\n"
            "  [16, 17, 18, 19],\n"
            "  [20, 21, 22, 23]]]");
  // Four dims: two blank lines between 3-D blocks, one between 2-D blocks.
  EXPECT_EQ(values_of(arange(0, 8).reshape({2, 2, 1, 2})),
            "[[[[0, 1]],\n"
            "\n"
            "  [[2, 3]]],\n"
            "\n"
            "\n"
            " [[[4, 5]],\n"
            "\n"
            "  [[6, 7]]]]");
}

TEST(Printing, FloatsScalarsEmptyAndLongTensors) {
  EXPECT_EQ(values_of(from_vector(std::vector<double>{1.5, -2, 0.125, 1e-7}, {4})), "[  1.5,    -2, 0.125, 1e-07]");
  EXPECT_EQ(values_of(scalar_tensor(2.5)), "2.5");
  EXPECT_EQ(values_of(zeros({0, 3})), "[]");
  // A transposed view prints its logical order.
  EXPECT_EQ(values_of(arange(0, 6).reshape({2, 3}).transpose(0, 1)), "[[0, 3],\n [1, 4],\n [2, 5]]");
  // int64 beyond 2^53 prints exactly.
  EXPECT_EQ(values_of(from_vector(std::vector<int64_t>{(int64_t{1} << 60) + 1}, {1})), "[1152921504606846977]");
  // Over 1000 elements: the first and last 3 of each dim, as PyTorch's summary.
  EXPECT_EQ(values_of(arange(0, 2000)), "[   0,    1,    2, ..., 1997, 1998, 1999]");
  EXPECT_EQ(values_of(arange(0, 1010).reshape({101, 10})).substr(0, 95),
            "[[   0,    1,    2, ...,    7,    8,    9],\n"
            " [  10,   11,   12, ...,   17,   18,   19],\n"
            " [  20,");
  EXPECT_NE(values_of(arange(0, 1010).reshape({101, 10})).find("],\n ...,\n [ 980,"), std::string::npos);
}

TEST(TapeDot, DrawsConstantInputsAndNamesEachEdgesArgument) {
  Tensor x = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});  // does not require grad
  Tensor w = zeros({4, 3}).requires_grad_();
  Tensor y = mul(linear(x, w), 2.0);
  EXPECT_EQ(tape_to_dot(y, {{w, "fc.weight"}}),
            "digraph tape {\n"
            "  rankdir=TB;\n"
            "  node [fontname=\"Helvetica\", fontsize=10];\n"
            "  edge [fontname=\"Helvetica\", fontsize=9];\n"
            "  op0 [shape=box, style=\"rounded,filled\", fillcolor=\"#dde8f7\", label=\"#0 linear\\n[2, 4]\"];\n"
            "  const0_0 [shape=box, style=dashed, color=\"#888888\", fontcolor=\"#555555\", label=\"constant\\n[2, 3]\"];\n"
            "  const0_0 -> op0 [label=\"input\"];\n"
            "  leaf0 [shape=ellipse, style=filled, fillcolor=\"#f7e3c4\", label=\"fc.weight\\n[4, 3]\"];\n"
            "  leaf0 -> op0 [label=\"weight\"];\n"
            "  op1 [shape=box, style=\"rounded,filled\", fillcolor=\"#dde8f7\", label=\"#1 mul_scalar\\n[2, 4]\"];\n"
            "  op0 -> op1 [label=\"self\"];\n"
            "  output [shape=doublecircle, label=\"out\\n[2, 4] float32\"];\n"
            "  op1 -> output;\n"
            "}\n");
}

TEST(TapeDot, TakesNamedParametersAsTheyComeFromAModule) {
  Linear fc(3, 2);
  Tensor x = ones({5, 3});
  Tensor loss = mean(fc.forward(x));
  const std::string dot = tape_to_dot(loss, fc.named_parameters());
  EXPECT_NE(dot.find("label=\"weight\\n[2, 3]\"];\n  leaf0 -> op0 [label=\"weight\"]"), std::string::npos) << dot;
  EXPECT_NE(dot.find("label=\"bias\\n[2]\"];\n  leaf1 -> op0 [label=\"bias\"]"), std::string::npos) << dot;
  EXPECT_NE(dot.find("const0_0 -> op0 [label=\"input\"]"), std::string::npos) << dot;
  // A two-input op whose second input is a constant shows both.
  Tensor a = ones({2}).requires_grad_();
  const std::string two = tape_to_dot(add(a, ones({2})));
  EXPECT_NE(two.find("leaf0 -> op0 [label=\"self\"]"), std::string::npos) << two;
  EXPECT_NE(two.find("const0_1 -> op0 [label=\"other\"]"), std::string::npos) << two;
  // A list input (cat's "tensors...") names each element.
  const std::string list = tape_to_dot(cat({a, ones({2})}, 0));
  EXPECT_NE(list.find("leaf0 -> op0 [label=\"tensors[0]\"]"), std::string::npos) << list;
  EXPECT_NE(list.find("const0_1 -> op0 [label=\"tensors[1]\"]"), std::string::npos) << list;
}

// Labels are DOT strings: a quote or backslash in a leaf's name or a custom op's names is escaped
// (they made invalid DOT, or were taken as DOT's own escapes), a line break becomes \n, and a
// space inside an input name stays.
TEST(TapeDot, EscapesLabels) {
  Tensor w = ones({3}).requires_grad_();
  const std::string dot = tape_to_dot(mul(w, 2.0), {{w, "w\"q\" back\\slash\nline"}});
  EXPECT_NE(dot.find("label=\"w\\\"q\\\" back\\\\slash\\nline\\n[3]\""), std::string::npos) << dot;
  CustomOp op(
      "my\"op", {"in put"}, [](FunctionContext&, const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0]}; },
      [](FunctionContext&, const std::vector<Tensor>& g) { return g; });
  const std::string custom = tape_to_dot(op(w));
  EXPECT_NE(custom.find("#0 my\\\"op\\n[3]"), std::string::npos) << custom;
  EXPECT_NE(custom.find("[label=\"in put\"]"), std::string::npos) << custom;
}

TEST(TapeText, MarksAbsentInputsOnlyAndShowsConstants) {
  Tensor w = zeros({2, 3}).requires_grad_();
  Tensor y = linear(scalar_tensor(1).expand({4, 3}).contiguous(), w);
  EXPECT_EQ(tape_to_text(y), "#0 linear  in: [4, 3] [2, 3]* -  -> out: [4, 2]  saved: [4, 3]\n");
}

// Dtypes other than the root's are named where a cast changes them (autocast's casts are
// entries); a graph in one dtype reads as before (Tape.TextDumpListsEntriesInRecordingOrder).
TEST(TapeText, NamesDtypesOtherThanTheRoots) {
  Tensor x = ones({2, 3}, DType::Float64).requires_grad_();
  Tensor w = ones({4, 3}).requires_grad_();
  Tensor xb = x.to(DType::BFloat16);
  Tensor wb = w.to(DType::BFloat16);
  Tensor y = linear(xb, wb);
  EXPECT_EQ(tape_to_text(y),
            "#0 to  in: [2, 3]:float64*  -> out: [2, 3]  saved: nothing\n"
            "#1 to  in: [4, 3]:float32*  -> out: [4, 3]  saved: nothing\n"
            "#2 linear  in: [2, 3](#0) [4, 3](#1) -  -> out: [2, 4]  saved: [2, 3] [4, 3]\n");
  const std::string text32 = tape_to_text(y.to(DType::Float32));
  EXPECT_NE(text32.find("#3 to  in: [2, 4]:bfloat16(#2)  -> out: [2, 4]  saved: nothing\n"), std::string::npos)
      << text32;
  const std::string dot = tape_to_dot(y);
  EXPECT_NE(dot.find("label=\"leaf\\n[2, 3]:float64\""), std::string::npos) << dot;
  EXPECT_NE(dot.find("label=\"#2 linear\\n[2, 4]\""), std::string::npos) << dot;
  EXPECT_NE(dot.find("label=\"out\\n[2, 4] bfloat16\""), std::string::npos) << dot;
}

// The backward trace names dtypes as the dump does: a gradient's rounding to bf16 is visible.
TEST(TapeText, TraceNamesDtypesOtherThanTheRoots) {
  Tensor x = ones({2, 3}, DType::Float64).requires_grad_();
  Tensor y = sum(x.to(DType::BFloat16).to(DType::Float32));
  std::ostringstream os;
  {
    BackwardTraceGuard trace(os);
    y.backward();
  }
  EXPECT_EQ(os.str(),
            "backward #2 sum_backward: grad_output [] |1| -> grad_input [2, 3] |2.44949|\n"
            "backward #1 to_backward: grad_output [2, 3] |2.44949| -> grad_input [2, 3]:bfloat16 |2.44949|\n"
            "backward #0 to_backward: grad_output [2, 3]:bfloat16 |2.44949| -> grad_input [2, 3]:float64 |2.44949|\n");
}

// What backward would refuse shows before it runs: a saved tensor changed in place since.
TEST(TapeText, MarksSavedTensorsModifiedInPlace) {
  Tensor a = ones({3}).requires_grad_();
  Tensor h = mul(a, 1.0);
  Tensor y = mul(h, exp(a));
  EXPECT_EQ(tape_to_text(y).find("modified"), std::string::npos);
  h.mul_(2.0);
  const std::string text = tape_to_text(y);
  EXPECT_NE(text.find("#2 mul  in: [3](#0) [3](#1)  -> out: [3]  saved: [3](modified in place) [3]\n"),
            std::string::npos)
      << text;
  EXPECT_THROW(y.backward(ones({3})), Error);
}

// A root that is one output of several names it (text: a last line; DOT: the edge to "out").
TEST(TapeText, NamesWhichOutputOfItsEntryTheRootIs) {
  CustomOp two(
      "two_ways", {"x"},
      [](FunctionContext&, const std::vector<Tensor>& in) {
        return std::vector<Tensor>{mul(in[0], 2.0), mul(in[0], 3.0)};
      },
      [](FunctionContext&, const std::vector<Tensor>& g) { return std::vector<Tensor>{add(mul(g[0], 2.0), mul(g[1], 3.0))}; });
  Tensor x = ones({2}).requires_grad_();
  const std::vector<Tensor> out = two.apply({x});
  EXPECT_EQ(tape_to_text(out[1]), "#0 two_ways  in: [2]*  -> out: [2] [2]  saved: nothing\nroot: output 1 of #0\n");
  EXPECT_NE(tape_to_dot(out[1]).find("op0 -> output [label=\"output 1\"];"), std::string::npos) << tape_to_dot(out[1]);
  // an input from one output of several says which ((#k) alone did not)
  EXPECT_NE(tape_to_text(add(out[1], out[0])).find("#1 add  in: [2](#0.1) [2](#0.0)"), std::string::npos)
      << tape_to_text(add(out[1], out[0]));
  // one output: no such line, and a plain edge
  EXPECT_EQ(tape_to_text(mul(x, 2.0)).find("root:"), std::string::npos);
  EXPECT_NE(tape_to_dot(mul(x, 2.0)).find("op0 -> output;"), std::string::npos);
}

std::vector<SampleCase> no_samples() { return {}; }
std::vector<Tensor> no_backward(const BackwardContext&, const std::vector<Tensor>& g) { return g; }

TEST(RegistryTable, ColumnsAreAsWideAsTheirLongestEntry) {
  static const OpDef kShort{"abs", "abs_backward", "self", no_backward, no_samples};
  static const OpDef kLong{"a_rather_long_forward_name_for_an_op", "a_rather_long_forward_name_for_an_op_backward",
                           "input, weight, bias, offsets, mask, a_long_input_name", no_backward, no_samples, true};
  Registry r;
  r.add(kShort);
  r.add(kLong);
  const std::string t = r.table();
  EXPECT_EQ(t,
            "forward                               backward                                       "
            "differentiable inputs                                  samples  twice\n"
            "a_rather_long_forward_name_for_an_op  a_rather_long_forward_name_for_an_op_backward  "
            "input, weight, bias, offsets, mask, a_long_input_name  0        yes\n"
            "abs                                   abs_backward                                   "
            "self                                                   0        -\n");
}

}  // namespace
}  // namespace tg
