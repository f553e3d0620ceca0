// The tape engine: recording rules, gradient accumulation, retain_graph, saved-tensor version
// checks, hooks, tg::grad, deep chains, freeing the graph, and the teaching views.
#include <gtest/gtest.h>

#include <tapegrad/tapegrad.h>

#include "test_util.h"

#include <sstream>
#include <string>

namespace tg {
namespace {

Tensor leaf(std::vector<double> values, Shape shape) {
  Tensor t = from_vector(values, shape);
  t.requires_grad_();
  return t;
}

TEST(Tape, RecordsOnlyWhenGradModeIsOnAndAnInputRequiresGrad) {
  Tensor a = leaf({1, 2}, {2});
  Tensor b = from_vector(std::vector<double>{3, 4}, {2});
  EXPECT_TRUE(mul(a, b).requires_grad());
  EXPECT_NE(mul(a, b).grad_fn(), nullptr);
  EXPECT_FALSE(mul(b, b).requires_grad());
  EXPECT_EQ(mul(b, b).grad_fn(), nullptr);
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(mul(a, b).requires_grad());
    {
      EnableGradGuard on;
      EXPECT_TRUE(mul(a, b).requires_grad());
    }
  }
  EXPECT_TRUE(GradMode::is_enabled());
  EXPECT_FALSE(a.detach().requires_grad());
}

TEST(Tape, ProductRuleThroughASharedInput) {
  // y = sum(x * x + 3x)  ->  dy/dx = 2x + 3
  Tensor x = leaf({1, -2, 0.5}, {3});
  Tensor y = sum(add(mul(x, x), mul(x, 3.0)));
  y.backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{5, -1, 4}));
}

TEST(Tape, GradientsAccumulateAcrossBackwardCalls) {
  Tensor x = leaf({1, 2}, {2});
  sum(mul(x, 2.0)).backward();
  sum(mul(x, 5.0)).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{7, 7}));
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
}

// A leaf adopts a gradient buffer nothing else holds (no copy), and copies every other one:
// gradients shared between inputs (add passes one to both), passed through from the caller, or
// viewing a buffer that another tensor still uses must not alias the leaf's .grad().
TEST(Tape, LeafGradientsNeverAliasAnotherTensor) {
  Tensor a = leaf({1, 2}, {2}), b = leaf({3, 4}, {2});
  Tensor g = from_vector(std::vector<double>{1, 1}, {2});
  add(a, b).backward(g);  // the same gradient buffer reaches both leaves
  a.grad().add_(from_vector(std::vector<double>{10, 10}, {2}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{1, 1}));
  EXPECT_EQ(g.to_vector<double>(), (std::vector<double>{1, 1}));

  Tensor c = leaf({5, 6}, {2});
  c.backward(g);  // a leaf root gets the caller's tensor: copied
  g.add_(from_vector(std::vector<double>{1, 1}, {2}));
  EXPECT_EQ(c.grad().to_vector<double>(), (std::vector<double>{1, 1}));

  Tensor d = leaf({1, 2, 3, 4}, {4});
  Tensor g4 = from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2});
  reshape(d, {2, 2}).backward(g4);  // reshape's gradient is a view of the caller's tensor
  g4.add_(from_vector(std::vector<double>{1, 1, 1, 1}, {2, 2}));
  EXPECT_EQ(d.grad().to_vector<double>(), (std::vector<double>{1, 2, 3, 4}));

  Tensor e = leaf({1, 2}, {2});
  sum(mul(e, 3.0)).backward();  // a fresh buffer: adopted, and later backwards accumulate into it
  sum(mul(e, 1.0)).backward();
  EXPECT_EQ(e.grad().to_vector<double>(), (std::vector<double>{4, 4}));
}

// ... and without copying what it may adopt: the backward of y = 3 x from the caller's g allocates
// one buffer (3 g), which x adopts, also with a gradient hook on x (which sees the gradient before
// it is accumulated); a gradient that is a non-contiguous view (permute's) costs one dense copy.
// Measured as the high-water mark of allocated bytes during backward: a second copy of a 4 MB
// gradient would show (a leaf's gradient was once copied whenever hooks were looked up).
TEST(Tape, LeafAdoptsAFreshGradientWithoutACopy) {
  const int64_t n = 1 << 20, bytes = n * 4, slack = 64 << 10;
  const Tensor g = ones({n});
  for (bool with_hook : {false, true}) {
    SCOPED_TRACE(with_hook ? "with a hook" : "no hook");
    Tensor x = randn({n}).requires_grad_();
    int hook_calls = 0;
    if (with_hook) x.register_hook([&](const Tensor&) { ++hook_calls; return Tensor(); });
    Tensor y = mul(x, 3.0);
    const int64_t before = memory_stats().allocated_bytes;
    reset_peak_memory();
    y.backward(g);
    EXPECT_LE(memory_stats().peak_bytes - before, bytes + slack);
    EXPECT_EQ(hook_calls, with_hook ? 1 : 0);
    EXPECT_EQ(x.grad().to_vector<float>()[n - 1], 3.0f);
  }
  Tensor x = randn({1024, 1024}).requires_grad_();
  Tensor y = x.permute({1, 0});
  const Tensor g2 = arange(0, n).to(DType::Float32).reshape({1024, 1024});
  const int64_t before = memory_stats().allocated_bytes;
  reset_peak_memory();
  y.backward(g2);
  EXPECT_LE(memory_stats().peak_bytes - before, bytes + slack);
  EXPECT_EQ(x.grad().to_vector<float>()[1], 1024.0f);  // x[0, 1] is y[1, 0]
  EXPECT_TRUE(x.grad().is_contiguous());
}

// Without create_graph the pass does not record, so a grad_output that requires grad (or a
// hook's result that does) gives a .grad() without history, as PyTorch; with it, .grad() has one.
TEST(Tape, GradientsRecordOnlyUnderCreateGraph) {
  for (bool create_graph : {false, true}) {
    SCOPED_TRACE(create_graph ? "create_graph" : "plain");
    Tensor x = leaf({1, 2}, {2}), y = leaf({3, 4}, {2});
    Tensor g = from_vector(std::vector<double>{1, 1}, {2}).requires_grad_();
    mul(x, 2.0).backward(g, false, create_graph);
    EXPECT_EQ(x.grad().requires_grad(), create_graph);
    x.permute({0}).backward(g, false, create_graph);  // accumulated: a sum
    EXPECT_EQ(x.grad().requires_grad(), create_graph);
    EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{3, 3}));
    y.register_hook([&](const Tensor& gy) { return mul(gy, g); });
    mul(y, 1.0).backward(from_vector(std::vector<double>{1, 1}, {2}), false, create_graph);
    EXPECT_EQ(y.grad().requires_grad(), create_graph);
  }
}

TEST(Tape, BroadcastGradientsAreReducedToTheInputShape) {
  Tensor a = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = leaf({10, 20, 30}, {3});
  sum(mul(a, b)).backward();
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{5, 7, 9}));
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{10, 20, 30, 10, 20, 30}));
}

TEST(Tape, NonScalarBackwardNeedsAGradient) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = mul(x, 3.0);
  EXPECT_EQ(error_of([&] { y.backward(); }),
            "backward: a gradient can be implied only for a scalar output; output 0 has shape [2], so pass "
            "grad_output");
  y.backward(from_vector(std::vector<double>{1, 10}, {2}));
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{3, 30}));
}

TEST(Tape, SecondBackwardWithoutRetainGraphThrows) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = sum(mul(x, x));
  y.backward();
  std::string err = error_of([&] { y.backward(); });
  EXPECT_NE(err.find("backward through the graph a second time"), std::string::npos) << err;
  EXPECT_NE(err.find("retain_graph"), std::string::npos) << err;
}

// As PyTorch: only entries whose saved tensors were freed refuse; add, expand and sum save none.
TEST(Tape, EntriesThatSavedNothingRunASecondBackward) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = sum(add(x, x).expand({3, 2}));
  y.backward();
  y.backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{12, 12}));
  EXPECT_FALSE(y.grad_fn()->released());
}

TEST(Tape, RetainGraphAllowsASecondBackward) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = sum(mul(x, x));
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{4, 8}));
}

TEST(Tape, SavedTensorsAreFreedByBackward) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = sum(mul(x, x));
  EXPECT_FALSE(y.grad_fn()->edges()[0].fn->saved().empty());
  y.backward();
  EXPECT_TRUE(y.grad_fn()->edges()[0].fn->saved().empty());
  EXPECT_TRUE(y.grad_fn()->edges()[0].fn->released());
}

TEST(Tape, InPlaceChangeOfASavedTensorIsCaught) {
  Tensor a = leaf({1, 2}, {2});
  Tensor b = from_vector(std::vector<double>{3, 4}, {2});
  Tensor y = sum(mul(a, b));
  b.add_(ones({2}, DType::Float64));
  EXPECT_EQ(error_of([&] { y.backward(); }),
            "mul_backward: a tensor of shape [2] saved by mul for backward was modified in place: it was saved at "
            "version 0 and is now at version 1. Clone it before changing it, or change it after backward.");
}

TEST(Tape, HooksObserveAndReplaceGradients) {
  Tensor x = leaf({1, 2}, {2});
  std::vector<double> seen;
  x.register_hook([&](const Tensor& g) {
    seen = g.to_vector<double>();
    return Tensor();  // observe only
  });
  Tensor h = mul(x, 3.0);
  h.register_hook([](const Tensor& g) { return mul(g, 10.0); });  // replace on a non-leaf
  sum(h).backward();
  EXPECT_EQ(seen, (std::vector<double>{30, 30}));
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{30, 30}));
}

// A leaf used twice gets its hook once, on the summed gradient (PyTorch's AccumulateGrad): run
// on each part, a hook that replaces the gradient left .grad() at [2 2 2] instead of its [1 1 1],
// and a post-accumulate hook saw a partial gradient when the leaf was also a root.
TEST(Tape, ALeafsHooksRunOnceOnItsWholeGradient) {
  Tensor a = leaf({1, 2, 3}, {3});
  std::vector<std::vector<double>> seen;
  a.register_hook([&](const Tensor& g) {
    seen.push_back(g.to_vector<double>());
    return ones_like(g);
  });
  sum(add(mul(a, 2.0), mul(a, 3.0))).backward();
  EXPECT_EQ(seen, (std::vector<std::vector<double>>{{5, 5, 5}}));
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{1, 1, 1}));
  // tg::grad: the hook once on the sum too
  seen.clear();
  std::vector<Tensor> g = grad({sum(add(mul(a, 2.0), mul(a, 3.0)))}, {a});
  EXPECT_EQ(seen, (std::vector<std::vector<double>>{{5, 5, 5}}));
  EXPECT_EQ(g[0].to_vector<double>(), (std::vector<double>{1, 1, 1}));
  // a leaf that is a root as well as an input: one post-accumulate call, with the whole gradient
  Tensor b = leaf({1, 2, 3}, {3});
  std::vector<std::vector<double>> after;
  b.register_post_accumulate_grad_hook([&](const Tensor& t) { after.push_back(t.grad().to_vector<double>()); });
  backward({b, mul(b, 2.0)}, {ones({3}, DType::Float64), ones({3}, DType::Float64)});
  EXPECT_EQ(after, (std::vector<std::vector<double>>{{3, 3, 3}}));
}

// The same leaf asked for twice gets its gradient in both places (the second used to replace
// the first, which came back undefined).
TEST(Tape, GradOfARepeatedLeafFillsEverySlot) {
  Tensor x = leaf({1, 2, 3}, {3});
  std::vector<Tensor> g = grad({sum(mul(x, x))}, {x, x});
  ASSERT_TRUE(g[0].defined() && g[1].defined());
  EXPECT_EQ(g[0].to_vector<double>(), (std::vector<double>{2, 4, 6}));
  EXPECT_EQ(g[1].to_vector<double>(), (std::vector<double>{2, 4, 6}));
}

TEST(Tape, RetainGradKeepsANonLeafGradientWithoutACycle) {
  Tensor x = leaf({1, 2}, {2});
  std::weak_ptr<Node> entry;
  {
    Tensor h = mul(x, 3.0);
    h.retain_grad();
    entry = h.grad_fn();
    sum(mul(h, h)).backward();
    EXPECT_EQ(h.grad().to_vector<double>(), (std::vector<double>{6, 12}));  // 2h
  }
  EXPECT_TRUE(entry.expired());  // the hook did not keep h (and so its entry) alive
}

TEST(Tape, GradReturnsGradientsWithoutTouchingDotGrad) {
  Tensor x = leaf({1, 2}, {2});
  Tensor w = leaf({3, 4}, {2});
  Tensor h = mul(x, w);
  Tensor y = sum(mul(h, h));
  std::vector<Tensor> g = grad({y}, {x, h});
  EXPECT_EQ(g[0].to_vector<double>(), (std::vector<double>{2 * 3 * 3, 2 * 8 * 4}));  // 2 x w^2
  EXPECT_EQ(g[1].to_vector<double>(), (std::vector<double>{6, 16}));                  // 2 h
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());
  Tensor unused = leaf({1}, {1});
  Tensor y2 = sum(mul(x, x));
  EXPECT_FALSE(grad({y2}, {unused})[0].defined());
  Tensor y3 = sum(mul(x, x));
  EXPECT_EQ(error_of([&] { grad({y3}, {unused}, {}, false, /*allow_unused=*/false); }),
            "grad: input 0 was not used to compute the outputs (pass allow_unused = true)");
}

TEST(Tape, AChainOf100000OpsRunsAndIsFreedWithoutRecursion) {
  Tensor x = leaf({1.0}, {1});
  Tensor y = x;
  for (int i = 0; i < 100000; ++i) y = add(y, 1e-5);
  sum(y).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{1.0}));
  y = Tensor();  // frees 100,000 entries; a recursive destructor would overflow the stack
  Tensor z = x;
  for (int i = 0; i < 100000; ++i) z = mul(z, 1.0);
  z = Tensor();  // freed without ever running backward
  // Entries that save their input (mul by a tensor): the saved tensor's producer is a second
  // owner of each entry, which the destructor skipped, so the chain was freed recursively.
  Tensor w = x;
  for (int i = 0; i < 100000; ++i) w = mul(w, x);
  w = Tensor();
  SUCCEED();
}

TEST(Tape, GraphIsFreedWithItsOutputs) {
  const int64_t before = memory_stats().allocated_bytes;
  Tensor w = leaf(std::vector<double>(64, 0.5), {8, 8});
  const int64_t with_w = memory_stats().allocated_bytes;
  {
    Tensor x = randn({16, 8}, DType::Float64);
    Tensor y = sum(relu(matmul(x, w)));
    EXPECT_GT(memory_stats().allocated_bytes, with_w);  // activations and saved tensors
  }
  EXPECT_EQ(memory_stats().allocated_bytes, with_w);  // no gradient computed: nothing left
  (void)before;
}

TEST(Tape, TextDumpListsEntriesInRecordingOrder) {
  Tensor x = randn({4, 3}, DType::Float64);
  Tensor w = leaf(std::vector<double>(6, 0.1), {2, 3});
  Tensor y = mean(relu(linear(x, w)));
  std::string text = tape_to_text(y);
  EXPECT_EQ(text,
            "#0 linear  in: [4, 3] [2, 3]* -  -> out: [4, 2]  saved: [4, 3]\n"
            "#1 relu  in: [4, 2](#0)  -> out: [4, 2]  saved: [4, 2]\n"
            "#2 mean  in: [4, 2](#1)  -> out: []  saved: nothing\n");
  std::string dot = tape_to_dot(y, {{w, "fc.weight"}});
  EXPECT_NE(dot.find("digraph tape"), std::string::npos);
  EXPECT_NE(dot.find("fc.weight\\n[2, 3]"), std::string::npos) << dot;
  EXPECT_NE(dot.find("op0 -> op1 [label=\"self\"]"), std::string::npos) << dot;
}

TEST(Tape, TraceSwitchPrintsEachBackwardStep) {
  Tensor x = leaf({3, 4}, {2});
  Tensor y = sum(mul(x, 2.0));
  std::ostringstream os;
  {
    BackwardTraceGuard trace(os);
    y.backward();
  }
  // numbered by position in the graph, as tape_to_text numbers the entries
  EXPECT_EQ(os.str(),
            "backward #1 sum_backward: grad_output [] |1| -> grad_input [2] |1.41421|\n"
            "backward #0 mul_scalar_backward: grad_output [2] |1.41421| -> grad_input [2] |2.82843|\n");
  EXPECT_EQ(tape_to_text(y).substr(0, 3), "#0 ");
}

// A trace switched on by a hook during a pass starts with the next pass (the step numbers are
// made as a pass begins: it threw std::out_of_range half-way through the accumulation).
TEST(Tape, ATraceSwitchedOnDuringAPassStartsWithTheNext) {
  Tensor a = leaf({1, 2}, {2});
  std::ostringstream os;
  a.register_hook([&os](Tensor) {
    set_backward_trace(&os);
    return Tensor();
  });
  sum(mul(a, a)).backward();
  EXPECT_EQ(os.str(), "");
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{2, 4}));
  sum(mul(a, a)).backward();
  set_backward_trace(nullptr);
  EXPECT_NE(os.str().find("backward #1 sum_backward"), std::string::npos) << os.str();
}

// Found by stress-testing the trace: the numbers once were the entries' global creation numbers
// (unlike the printed tape's, after any earlier op); the norm of a float64 gradient that is not
// dense (sum_to's backward expands it) read past its storage; the trace recorded its own
// conversions under create_graph.
TEST(Tape, TraceNumbersMatchTheTapeAndNormsReadExpandedGradients) {
  Tensor x = leaf(std::vector<double>(12, 0.5), {4, 3});
  (void)exp(x);  // an earlier op: the global numbers move on
  Tensor y = sum(sum_to(mul(x, 1.0), {1, 3}));
  std::ostringstream os;
  {
    BackwardTraceGuard trace(os);
    y.backward();
  }
  const std::string text = tape_to_text(y);
  EXPECT_NE(text.find("#2 sum "), std::string::npos) << text;
  EXPECT_EQ(os.str().substr(0, 20), "backward #2 sum_back");
  // sum_to's backward hands mul's backward a [4, 3] gradient of ones, expanded from [1, 3]: norm 3.4641
  EXPECT_NE(os.str().find("grad_input [4, 3] |3.4641|"), std::string::npos) << os.str();
  // under create_graph the trace records nothing of its own
  Tensor z = leaf({1, 2, 3}, {3});
  Tensor w = sum(mul(z, z));
  const size_t before = tape_to_text(grad({w}, {z}, {}, true, true, true)[0]).size();
  std::ostringstream os2;
  size_t traced;
  {
    BackwardTraceGuard trace(os2);
    traced = tape_to_text(grad({w}, {z}, {}, true, true, true)[0]).size();
  }
  EXPECT_EQ(traced, before);
}

TEST(Tape, RequiresGradOnlyOnLeavesAndFloats) {
  Tensor x = leaf({1}, {1});
  Tensor y = mul(x, 2.0);
  EXPECT_NE(error_of([&] { y.requires_grad_(false); }).find("can only change requires_grad of a leaf"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { arange(0, 3).requires_grad_(); }),
            "requires_grad_: only floating tensors can require grad, got int64");
  EXPECT_NE(error_of([&] { sum(from_vector(std::vector<double>{1}, {1})).backward(); }).find("does not require grad"),
            std::string::npos);
}

}  // namespace
}  // namespace tg

namespace tg {
namespace {

// An op of two declared inputs and its backward, written as every op is: saved slots named by
// an enum, the backward reading them by name.
enum TwoInputSaved { kFirst, kSecond };
std::vector<Tensor> two_input_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  return {mul(g[0], ctx.saved(kSecond)), mul(g[0], ctx.saved(kFirst))};
}
const OpDef kTwoInputOp{"two_input_test_op", "two_input_test_op_backward", "a, b", two_input_backward, nullptr};
const OpDef kListOp{"list_test_op", "list_test_op_backward", "first, rest...", two_input_backward, nullptr};

TEST(Tape, TheRecorderChecksTheNumberOfInputsAgainstTheOpsDeclaration) {
  Tensor a = leaf({1, 2}, {2}), b = leaf({3, 4}, {2});
  const std::string msg = error_of([&] { Recorder rec{kTwoInputOp, {a}}; });
  EXPECT_NE(msg.find("two_input_test_op: internal error: recorded with 1 inputs, but the op declares 2 (a, b)"),
            std::string::npos)
      << msg;
  EXPECT_NO_THROW(Recorder(kTwoInputOp, {a, Tensor()}));  // an undefined input still counts
  // A list input ("rest...") takes any number, none included.
  EXPECT_NO_THROW(Recorder(kListOp, {a}));
  EXPECT_NO_THROW(Recorder(kListOp, {a, b, a}));
  EXPECT_NE(error_of([&] { Recorder rec{kListOp, {}}; }).find("declares 2"), std::string::npos);
}

TEST(Tape, SavedSlotsAreReadByNameInAnyOrderAndCheckedWhenMissingOrSavedTwice) {
  Tensor a = leaf({1, 2}, {2}), b = leaf({3, 4}, {2});
  Tensor out = mul(a.detach(), b.detach());
  {
    Recorder rec{kTwoInputOp, {a, b}};
    ASSERT_TRUE(rec);
    rec.save(kSecond, b);  // the order of the saves does not matter
    rec.save(kFirst, a);
    EXPECT_NE(error_of([&] { rec.save(kFirst, a); }).find("saved slot 0 saved twice"), std::string::npos);
    rec.set_outputs({out});
  }
  sum(out).backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{3, 4}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{1, 2}));
  // A backward that reads a slot its forward did not save: an internal error naming the op.
  Tensor c = leaf({1, 2}, {2});
  Tensor out2 = c.detach().clone();
  {
    Recorder rec{kTwoInputOp, {c, Tensor()}};
    rec.save(kFirst, c);
    rec.set_outputs({out2});
  }
  const std::string msg = error_of([&] { sum(out2).backward(); });
  EXPECT_NE(msg.find("two_input_test_op_backward: internal error: saved tensor 1 was not saved"), std::string::npos)
      << msg;
}

}  // namespace
}  // namespace tg
