// User-defined ops (framework/custom_op.h): forward and backward as lambdas with captures,
// saved tensors by name and slot, the generic checks on a user's op, and a user's mistakes
// reported as the user's, naming the op and the input.
#include <gtest/gtest.h>

#include <tapegrad/tapegrad.h>

#include <cmath>
#include <memory>

#include "test_util.h"

namespace tg {
namespace {

Tensor leaf(Shape shape, DType dtype = DType::Float64) { return randn(shape, dtype).requires_grad_(); }

std::vector<double> values(const Tensor& t) { return t.to(DType::Float64).to_vector<double>(); }

// y = scale * softplus(x), scale captured by both lambdas.
CustomOp make_scaled_softplus(double scale) {
  CustomOp op(
      "scaled_softplus", {"x"},
      [scale](FunctionContext& ctx, const std::vector<Tensor>& in) {
        ctx.save("x", in[0]);
        return std::vector<Tensor>{mul(log(add(exp(in[0]), 1.0)), scale)};
      },
      [scale](FunctionContext& ctx, const std::vector<Tensor>& grad_out) {
        return std::vector<Tensor>{mul(grad_out[0], mul(sigmoid(ctx.saved("x")), scale))};
      });
  op.add_sample("vector", [](DType dt) { return std::vector<Tensor>{leaf({5}, dt)}; });
  op.add_sample("matrix", [](DType dt) { return std::vector<Tensor>{leaf({3, 4}, dt)}; });
  return op;
}

TEST(CustomOp, LambdasWithCapturesComputeForwardAndBackward) {
  manual_seed(1);
  CustomOp op = make_scaled_softplus(3.0);
  Tensor x = leaf({4});
  Tensor y = op(x);
  ASSERT_TRUE(y.requires_grad());
  EXPECT_STREQ(y.grad_fn()->op().name, "scaled_softplus");
  Tensor g = randn({4}, DType::Float64);
  y.backward(g);
  std::vector<double> xv = values(x), yv = values(y), gv = values(g), dx = values(x.grad());
  for (size_t i = 0; i < xv.size(); ++i) {
    EXPECT_NEAR(yv[i], 3.0 * std::log1p(std::exp(xv[i])), 1e-12);
    EXPECT_NEAR(dx[i], gv[i] * 3.0 / (1.0 + std::exp(-xv[i])), 1e-12);
  }
}

TEST(CustomOp, GradcheckPasses) {
  manual_seed(2);
  CustomOp op = make_scaled_softplus(0.5);
  GradcheckResult r = gradcheck([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{op(in[0])}; },
                                {leaf({3, 2})});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(CustomOp, TheTapeNamesTheUsersOp) {
  manual_seed(2);
  CustomOp op = make_scaled_softplus(1.0);
  Tensor y = sum(op(leaf({3})));
  EXPECT_NE(tape_to_text(y).find("scaled_softplus"), std::string::npos) << tape_to_text(y);
}

// The README's custom-op claims: forward runs without recording (only the op's own entry is on
// the tape, none of exp / log / mul inside it), and backward's ctx gives the inputs' shapes and
// dtypes.
TEST(CustomOp, ForwardRecordsNothingAndBackwardSeesTheInputsShapesAndDtypes) {
  manual_seed(3);
  bool grad_mode_in_forward = true;
  Shape shape_seen;
  DType dtype_seen = DType::Int64;
  CustomOp op(
      "exp_log_mul", {"x"},
      [&](FunctionContext& ctx, const std::vector<Tensor>& in) {
        grad_mode_in_forward = GradMode::is_enabled();
        ctx.save("x", in[0]);
        return std::vector<Tensor>{mul(log(add(exp(in[0]), 1.0)), 2.0)};
      },
      [&](FunctionContext& ctx, const std::vector<Tensor>& g) {
        shape_seen = ctx.input_shape(0);
        dtype_seen = ctx.input_dtype(0);
        return std::vector<Tensor>{mul(g[0], mul(sigmoid(ctx.saved("x")), 2.0))};
      });
  Tensor x = randn({2, 3}, DType::Float32).requires_grad_();
  Tensor y = op(x);
  EXPECT_FALSE(grad_mode_in_forward);
  const std::string tape = tape_to_text(y);
  EXPECT_NE(tape.find("exp_log_mul"), std::string::npos) << tape;
  EXPECT_NE(tape.find("#0 exp_log_mul"), std::string::npos) << tape;
  EXPECT_EQ(tape.find("#1"), std::string::npos) << "one entry only:\n" << tape;
  y.backward(ones({2, 3}));
  EXPECT_EQ(shape_seen, (Shape{2, 3}));
  EXPECT_EQ(dtype_seen, DType::Float32);
}

// tg::grad runs only the entries on a path to the inputs asked for: a branch that leads only to
// another leaf never runs its backward.
TEST(CustomOp, GradRunsOnlyTheEntriesLeadingToTheInputsAskedFor) {
  manual_seed(4);
  int runs_x = 0, runs_y = 0;
  auto counting = [](const char* name, int& runs) {
    return CustomOp(
        name, {"v"},
        [](FunctionContext&, const std::vector<Tensor>& in) { return std::vector<Tensor>{mul(in[0], 3.0)}; },
        [&runs](FunctionContext&, const std::vector<Tensor>& g) {
          ++runs;
          return std::vector<Tensor>{mul(g[0], 3.0)};
        });
  };
  CustomOp fx = counting("branch_x", runs_x), fy = counting("branch_y", runs_y);
  Tensor x = leaf({4}), y = leaf({4});
  Tensor loss = sum(add(fx(x), fy(y)));
  std::vector<Tensor> g = grad({loss}, {x}, {}, /*retain_graph=*/true);
  EXPECT_EQ(runs_x, 1);
  EXPECT_EQ(runs_y, 0);
  for (double v : values(g[0])) EXPECT_EQ(v, 3.0);
  EXPECT_FALSE(y.grad().defined());
  grad({loss}, {y});
  EXPECT_EQ(runs_x, 1);
  EXPECT_EQ(runs_y, 1);
}

// z = x * w (saved by slot) and s = x + w * k (k a value set in forward): two inputs, two outputs.
CustomOp make_mul_and_add() {
  return CustomOp(
      "mul_and_add", {"x", "w"},
      [](FunctionContext& ctx, const std::vector<Tensor>& in) {
        ctx.save_for_backward({ctx.needs_input_grad("w") ? in[0] : Tensor(), ctx.needs_input_grad("x") ? in[1] : Tensor()});
        ctx.set("k", 2.5);
        return std::vector<Tensor>{mul(in[0], in[1]), add(in[0], mul(in[1], 2.5))};
      },
      [](FunctionContext& ctx, const std::vector<Tensor>& g) {
        double k = ctx.get<double>("k");
        std::vector<Tensor> saved = ctx.saved_tensors();
        return std::vector<Tensor>{ctx.needs_input_grad(0) ? add(mul(g[0], saved[1]), g[1]) : Tensor(),
                                   ctx.needs_input_grad(1) ? add(mul(g[0], ctx.saved(0)), mul(g[1], k)) : Tensor()};
      });
}

TEST(CustomOp, SaveBySlotValuesAndTwoOutputsPassGradcheck) {
  manual_seed(3);
  CustomOp op = make_mul_and_add();
  GradcheckResult r = gradcheck([&](const std::vector<Tensor>& in) { return op.apply(in); }, {leaf({2, 3}), leaf({2, 3})});
  EXPECT_TRUE(r.ok) << r.message;
  // Only one output used: the other's gradient arrives as zeros.
  Tensor x = leaf({3}), w = leaf({3});
  sum(op.apply({x, w})[1]).backward();
  for (double v : values(x.grad())) EXPECT_EQ(v, 1.0);
  for (double v : values(w.grad())) EXPECT_EQ(v, 2.5);
}

TEST(CustomOp, NeedsInputGradInForwardFollowsTheInputs) {
  std::vector<bool> seen;
  CustomOp op(
      "probe", {"a", "b"},
      [&seen](FunctionContext& ctx, const std::vector<Tensor>& in) {
        seen = {ctx.needs_input_grad(0), ctx.needs_input_grad(1)};
        return std::vector<Tensor>{add(in[0], in[1])};
      },
      [](FunctionContext&, const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0], g[0]}; });
  Tensor a = leaf({2}), b = randn({2}, DType::Float64);
  op(a, b);
  EXPECT_EQ(seen, (std::vector<bool>{true, false}));
  {
    NoGradGuard no_grad;
    Tensor y = op(a, b);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(seen, (std::vector<bool>{false, false}));
  }
}

TEST(CustomOp, TheOpObjectMayDieBeforeBackward) {
  manual_seed(4);
  auto captured = std::make_shared<double>(2.0);
  std::weak_ptr<double> watch = captured;
  Tensor x = leaf({3});
  Tensor y;
  {
    auto op = std::make_unique<CustomOp>(
        "double_it", std::vector<std::string>{"x"},
        [captured](FunctionContext&, const std::vector<Tensor>& in) { return std::vector<Tensor>{mul(in[0], *captured)}; },
        [captured](FunctionContext&, const std::vector<Tensor>& g) { return std::vector<Tensor>{mul(g[0], *captured)}; });
    y = sum((*op)(x));
    op.reset();
  }
  captured.reset();
  EXPECT_FALSE(watch.expired()) << "the tape entry must keep the op's definition alive";
  y.backward();
  for (double v : values(x.grad())) EXPECT_EQ(v, 2.0);
  y = Tensor();  // the entry dies with the last tensor holding it, and the definition with it
  EXPECT_TRUE(watch.expired()) << "the definition outlived its last tape entry (a cycle?)";
}

TEST(CustomOp, ReturningAnInputGivesANewHandle) {
  CustomOp identity(
      "identity", {"x"}, [](FunctionContext&, const std::vector<Tensor>& in) { return in; },
      [](FunctionContext&, const std::vector<Tensor>& g) { return g; });
  Tensor x = leaf({3});
  Tensor y = identity(x);
  EXPECT_TRUE(x.is_leaf());
  EXPECT_FALSE(y.is_leaf());
  EXPECT_NE(x.impl(), y.impl());
  sum(mul(y, 3.0)).backward();
  for (double v : values(x.grad())) EXPECT_EQ(v, 3.0);
}

TEST(CustomOp, ANonFloatingOutputIsReturnedButNotDifferentiated) {
  std::vector<bool> grad_defined;
  CustomOp op(
      "value_and_index", {"x"},
      [](FunctionContext&, const std::vector<Tensor>& in) {
        return std::vector<Tensor>{mul(in[0], 2.0), argmax(in[0])};
      },
      [&grad_defined](FunctionContext&, const std::vector<Tensor>& g) {
        grad_defined = {g[0].defined(), g[1].defined()};
        return std::vector<Tensor>{mul(g[0], 2.0)};
      });
  Tensor x = leaf({4});
  std::vector<Tensor> out = op.apply({x});
  EXPECT_TRUE(out[0].requires_grad());
  EXPECT_FALSE(out[1].requires_grad());
  EXPECT_EQ(out[1].dtype(), DType::Int64);
  sum(out[0]).backward();
  EXPECT_EQ(grad_defined, (std::vector<bool>{true, false}));
  for (double v : values(x.grad())) EXPECT_EQ(v, 2.0);
}

TEST(CustomOp, TheSameTensorTwiceGetsBothGradients) {
  CustomOp op = make_mul_and_add();
  Tensor x = leaf({3});
  sum(op.apply({x, x})[0]).backward();  // d(x * x)/dx = 2x
  std::vector<double> xv = values(x), dx = values(x.grad());
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_NEAR(dx[i], 2 * xv[i], 1e-12);
}

TEST(CustomOp, RetainGraphAndASecondBackward) {
  CustomOp op = make_scaled_softplus(1.0);
  Tensor x = leaf({3});
  Tensor y = sum(op(x));
  y.backward(Tensor(), /*retain_graph=*/true);
  std::vector<double> once = values(x.grad());
  y.backward();
  std::vector<double> twice = values(x.grad());
  for (size_t i = 0; i < once.size(); ++i) EXPECT_NEAR(twice[i], 2 * once[i], 1e-12);
  try {
    y.backward();
    FAIL() << "a third backward went through freed saved tensors";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("backward through the graph a second time"), std::string::npos) << e.what();
  }
}

// ---- the user's mistakes, reported as the user's

// z = x @ w with a backward that returns what `bad` makes of the right gradients.
CustomOp make_matmul_op(std::function<std::vector<Tensor>(std::vector<Tensor>)> bad) {
  return CustomOp(
      "my_op", {"x", "weight"},
      [](FunctionContext& ctx, const std::vector<Tensor>& in) {
        ctx.save("x", in[0]);
        ctx.save("weight", in[1]);
        return std::vector<Tensor>{matmul(in[0], in[1])};
      },
      [bad](FunctionContext& ctx, const std::vector<Tensor>& g) {
        Tensor x = ctx.saved("x"), w = ctx.saved("weight");
        return bad({matmul(g[0], w.transpose(0, 1)), matmul(x.transpose(0, 1), g[0])});
      });
}

std::string backward_error(const CustomOp& op, DType dtype = DType::Float64) {
  Tensor x = leaf({4, 2}, dtype), w = leaf({2, 3}, dtype);
  Tensor y = sum(op(x, w));
  try {
    y.backward();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(CustomOpErrors, CorrectBackwardRaisesNothing) {
  EXPECT_EQ(backward_error(make_matmul_op([](std::vector<Tensor> g) { return g; })), "no error");
}

TEST(CustomOpErrors, WrongShapeNamesTheOpAndTheInput) {
  std::string e = backward_error(make_matmul_op([](std::vector<Tensor> g) {
    g[1] = g[1].transpose(0, 1).contiguous();
    return g;
  }));
  EXPECT_NE(e.find("my_op backward: gradient of input 1 (\"weight\") has shape [3, 2], expected [2, 3]"),
            std::string::npos)
      << e;
  EXPECT_EQ(e.find("internal error"), std::string::npos) << e;
}

TEST(CustomOpErrors, WrongDtypeNamesTheOpAndTheInput) {
  std::string e = backward_error(make_matmul_op([](std::vector<Tensor> g) {
    g[0] = g[0].to(DType::Float32);
    return g;
  }));
  EXPECT_NE(e.find("my_op backward: gradient of input 0 (\"x\") has dtype float32, expected float64"),
            std::string::npos)
      << e;
  EXPECT_EQ(e.find("internal error"), std::string::npos) << e;
}

TEST(CustomOpErrors, WrongCountNamesTheOp) {
  std::string e = backward_error(make_matmul_op([](std::vector<Tensor> g) { return std::vector<Tensor>{g[0]}; }));
  EXPECT_NE(e.find("my_op backward: returned 1 gradient for 2 inputs (x, weight)"), std::string::npos) << e;
  EXPECT_EQ(e.find("internal error"), std::string::npos) << e;
}

TEST(CustomOpErrors, MissingGradientNamesTheOpAndTheInput) {
  std::string e = backward_error(make_matmul_op([](std::vector<Tensor> g) {
    g[1] = Tensor();
    return g;
  }));
  EXPECT_NE(e.find("my_op backward: no gradient for input 1 (\"weight\"), which needs one"), std::string::npos) << e;
  EXPECT_EQ(e.find("internal error"), std::string::npos) << e;
}

// The same mistake in an op recorded the low-level way (Recorder + OpDef, as ops/ are written)
// is a bug of the framework's and keeps saying so.
std::vector<Tensor> transposed_backward(const BackwardContext&, const std::vector<Tensor>& g) {
  return {g[0].transpose(0, 1).contiguous()};
}
const OpDef kTransposedGrad{"transposed_grad", "transposed_grad_backward", "self", transposed_backward, nullptr};

TEST(CustomOpErrors, ABuiltInStyleOpStillReportsAnInternalError) {
  Tensor x = leaf({2, 3});
  Tensor y;
  {
    NoGradGuard no_grad;
    y = mul(x, 1.0);
  }
  if (Recorder rec{kTransposedGrad, {x}}) rec.set_outputs({y});
  try {
    sum(y).backward();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("transposed_grad_backward: internal error"), std::string::npos) << e.what();
  }
}

TEST(CustomOpErrors, AGradientNotAskedForIsIgnored) {
  CustomOp op = make_matmul_op([](std::vector<Tensor> g) { return g; });
  Tensor x = randn({4, 2}, DType::Float64), w = leaf({2, 3});
  sum(op(x, w)).backward();
  EXPECT_TRUE(w.grad().defined());
  EXPECT_FALSE(x.grad().defined());
}

TEST(CustomOpErrors, SavedTensorChangedInPlaceIsReportedAtBackward) {
  CustomOp op(
      "scale_by", {"x", "factor"},
      [](FunctionContext& ctx, const std::vector<Tensor>& in) {
        ctx.save("factor", in[1]);
        return std::vector<Tensor>{mul(in[0], in[1])};
      },
      [](FunctionContext& ctx, const std::vector<Tensor>& g) {
        return std::vector<Tensor>{mul(g[0], ctx.saved("factor")), Tensor()};
      });
  Tensor x = leaf({3}), factor = randn({3}, DType::Float64);
  Tensor y = sum(op(x, factor));
  factor.mul_(2.0);
  try {
    y.backward();
    FAIL() << "a saved tensor changed in place went unnoticed";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("scale_by backward: saved tensor \"factor\""), std::string::npos) << m;
    EXPECT_NE(m.find("modified in place"), std::string::npos) << m;
    EXPECT_NE(m.find("saved at version 0 and is now at version 1"), std::string::npos) << m;
  }
}

TEST(CustomOpErrors, MisuseOfTheContextNamesTheOp) {
  auto run = [](CustomForwardFn f, CustomBackwardFn b) -> std::string {
    CustomOp op("misuse", {"x"}, std::move(f), std::move(b));
    try {
      sum(op(leaf({2}))).backward();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  auto identity_fwd = [](FunctionContext& ctx, const std::vector<Tensor>& in) {
    ctx.save("x", in[0]);
    return std::vector<Tensor>{mul(in[0], 1.0)};
  };
  std::string e = run(identity_fwd, [](FunctionContext& ctx, const std::vector<Tensor>& g) {
    ctx.saved("y");
    return g;
  });
  EXPECT_NE(e.find("misuse backward: no tensor was saved as \"y\" (saved by name: \"x\")"), std::string::npos) << e;
  e = run(identity_fwd, [](FunctionContext& ctx, const std::vector<Tensor>& g) {
    ctx.get<double>("nothing");
    return g;
  });
  EXPECT_NE(e.find("misuse: ctx.get: no value was set as \"nothing\""), std::string::npos) << e;
  e = run(
      [](FunctionContext& ctx, const std::vector<Tensor>& in) {
        ctx.saved("x");
        return in;
      },
      [](FunctionContext&, const std::vector<Tensor>& g) { return g; });
  EXPECT_NE(e.find("misuse forward: ctx.saved is for backward"), std::string::npos) << e;

  CustomOp op("two_inputs", {"a", "b"}, identity_fwd, [](FunctionContext&, const std::vector<Tensor>& g) { return g; });
  try {
    op(leaf({2}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("two_inputs: expected 2 inputs (a, b), got 1"), std::string::npos) << e.what();
  }

  // Input names are joined into the op's declared input list, where ',' separates names and a
  // trailing "..." means a list: names that would change the count are refused up front.
  for (const char* bad : {"y,z", "rest..."}) {
    try {
      CustomOp named("named", {"x", bad}, identity_fwd, [](FunctionContext&, const std::vector<Tensor>& g) { return g; });
      FAIL() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("may not contain ',' or end in '...'"), std::string::npos) << e.what();
    }
  }
}

// Names appear in one-line dumps and DOT labels: control characters, or spaces at either end,
// are refused (an input named " " was accepted, then every call failed with an internal error).
TEST(CustomOp, NamesWithControlCharactersOrEdgeSpacesAreRefused) {
  auto make = [](std::string name, std::vector<std::string> inputs) {
    return CustomOp(
        std::move(name), std::move(inputs), [](FunctionContext&, const std::vector<Tensor>& in) { return in; },
        [](FunctionContext&, const std::vector<Tensor>& g) { return g; });
  };
  EXPECT_THROW(make("two\nlines", {"x"}), Error);
  EXPECT_THROW(make(std::string("nul\0cut", 7), {"x"}), Error);
  EXPECT_THROW(make("op", {"a", " "}), Error);
  EXPECT_THROW(make("op", {" a"}), Error);
  EXPECT_NO_THROW(make("my op <v2> \"quoted\"", {"in put", "w"}));
}

// ---- the generic checks on a user's op

TEST(CheckCustomOp, PassesACorrectOp) {
  OpCheckResult r = check_custom_op(make_scaled_softplus(1.5));
  EXPECT_TRUE(r.ok) << r.message;
  EXPECT_EQ(r.samples, 2);
}

TEST(CheckCustomOp, CatchesAWrongBackward) {
  // y = x^2 with the classic slip dy/dx = x.
  CustomOp op(
      "wrong_square", {"x"},
      [](FunctionContext& ctx, const std::vector<Tensor>& in) {
        ctx.save("x", in[0]);
        return std::vector<Tensor>{mul(in[0], in[0])};
      },
      [](FunctionContext& ctx, const std::vector<Tensor>& g) { return std::vector<Tensor>{mul(g[0], ctx.saved("x"))}; });
  op.add_sample("vector", [](DType dt) { return std::vector<Tensor>{leaf({4}, dt)}; });
  OpCheckResult r = check_custom_op(op);
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.message.find("wrong_square / vector: gradcheck: Jacobian mismatch for input 0"),
            std::string::npos)
      << r.message;
}

TEST(CheckCustomOp, CatchesABackwardThatDependsOnTheMask) {
  // The gradient of w is right only when x also needs a gradient: gradcheck (every input
  // requiring grad) cannot see it; the each-input-alone check does.
  CustomOp op(
      "mask_bug", {"x", "w"},
      [](FunctionContext& ctx, const std::vector<Tensor>& in) {
        ctx.save_for_backward({in[0], in[1]});
        return std::vector<Tensor>{mul(in[0], in[1])};
      },
      [](FunctionContext& ctx, const std::vector<Tensor>& g) {
        Tensor x = ctx.saved(0), w = ctx.saved(1);
        Tensor gw = ctx.needs_input_grad(0) ? mul(g[0], x) : mul(g[0], mul(x, 2.0));
        return std::vector<Tensor>{mul(g[0], w), gw};
      });
  op.add_sample("pair", [](DType dt) { return std::vector<Tensor>{leaf({3}, dt), leaf({3}, dt)}; });
  OpCheckOptions options;
  GradcheckResult g = check_sample_gradcheck("mask_bug", op.samples()[0], 1, options);
  EXPECT_TRUE(g.ok) << g.message;
  OpCheckResult r = check_custom_op(op, options);
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.message.find("mask_bug / pair: each input alone: gradient of input 1"), std::string::npos) << r.message;
  NoGradGuard no_grad;  // the checks turn recording on themselves
  EXPECT_FALSE(check_custom_op(op, options).ok);
}

// An op with an integer output (an index beside its values) passes the float32 check: the
// integer output keeps its dtype there (it was required to be float32). A sample whose run
// returns an output of another input alone passes the each-input-alone check (it counted the
// outputs that require grad and wanted the same number with one input).
TEST(CheckCustomOp, IntegerOutputsAndOutputsOfOtherInputsPass) {
  CustomOp with_index(
      "doubled_with_argmax", {"x"},
      [](FunctionContext&, const std::vector<Tensor>& in) {
        return std::vector<Tensor>{mul(in[0], 2.0), argmax(in[0], 0)};
      },
      [](FunctionContext&, const std::vector<Tensor>& g) { return std::vector<Tensor>{mul(g[0], 2.0)}; });
  with_index.add_sample("vector", [](DType dt) { return std::vector<Tensor>{leaf({4}, dt)}; });
  OpCheckResult r = check_custom_op(with_index);
  EXPECT_TRUE(r.ok) << r.message;
  CustomOp product(
      "product", {"a", "b"},
      [](FunctionContext& ctx, const std::vector<Tensor>& in) {
        ctx.save_for_backward({in[0], in[1]});
        return std::vector<Tensor>{mul(in[0], in[1])};
      },
      [](FunctionContext& ctx, const std::vector<Tensor>& g) {
        return std::vector<Tensor>{mul(g[0], ctx.saved(1)), mul(g[0], ctx.saved(0))};
      });
  product.add_sample(
      "with b doubled", [](DType dt) { return std::vector<Tensor>{leaf({3}, dt), leaf({3}, dt)}; },
      [op = product](const std::vector<Tensor>& in) { return std::vector<Tensor>{op(in[0], in[1]), mul(in[1], 2.0)}; });
  r = check_custom_op(product);
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(CheckCustomOp, ReportsABackwardThatThrowsAsAFailure) {
  CustomOp op = make_matmul_op([](std::vector<Tensor> g) { return std::vector<Tensor>{g[0]}; });
  op.add_sample("small", [](DType dt) { return std::vector<Tensor>{leaf({2, 2}, dt), leaf({2, 3}, dt)}; });
  OpCheckResult r = check_custom_op(op);
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.message.find("my_op / small: gradcheck: threw: my_op backward: returned 1 gradient"), std::string::npos)
      << r.message;
}

TEST(CheckCustomOp, AnOpWithoutSamplesFails) {
  CustomOp op = make_matmul_op([](std::vector<Tensor> g) { return g; });
  OpCheckResult r = check_custom_op(op);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.message.find("my_op: no sample cases"), std::string::npos) << r.message;
}

TEST(CheckOp, ABuiltInOpPassesTheSameChecks) {
  const OpDef* op = registry().find("mul");
  ASSERT_NE(op, nullptr);
  OpCheckResult r = check_op(*op);
  EXPECT_TRUE(r.ok) << r.message;
  EXPECT_GT(r.samples, 0);
}

}  // namespace
}  // namespace tg

namespace tg {
namespace {

// Double backward through a user's op: its backward is written with recorded ops, and the op
// says so; then create_graph differentiates through it and check_custom_op gradgradchecks it.
TEST(CustomOpDoubleBackward, ADeclaredOpIsGradgradcheckedAndGivesTheHessian) {
  CustomOp op = make_scaled_softplus(1.5);
  op.twice_differentiable();
  OpCheckResult r = check_custom_op(op);
  EXPECT_TRUE(r.ok) << r.message;
  // d2/dx2 of 1.5 softplus(x) = 1.5 sigmoid(x) (1 - sigmoid(x)).
  Tensor x = from_vector(std::vector<double>{0.3, -1.2}, {2});
  x.requires_grad_();
  Tensor g = grad({sum(op(x))}, {x}, {}, false, false, /*create_graph=*/true)[0];
  Tensor h = grad({sum(g)}, {x})[0];
  const std::vector<double> hv = values(h);
  for (int i = 0; i < 2; ++i) {
    const double xi = i == 0 ? 0.3 : -1.2, s = 1 / (1 + std::exp(-xi));
    EXPECT_NEAR(hv[i], 1.5 * s * (1 - s), 1e-12);
  }
}

TEST(CustomOpDoubleBackward, AnUndeclaredOpRefusesCreateGraph) {
  CustomOp op = make_scaled_softplus(1.5);
  Tensor x = leaf({3});
  const std::string msg = error_of([&] { grad({sum(op(x))}, {x}, {}, false, false, /*create_graph=*/true); });
  EXPECT_NE(msg.find("scaled_softplus_backward"), std::string::npos) << msg;
  EXPECT_NE(msg.find("create_graph"), std::string::npos) << msg;
}

// A backward that uses the saved input as a constant: first derivatives right, second wrong.
TEST(CustomOpDoubleBackward, GradgradcheckCatchesABackwardThatLosesTheSecondDerivative) {
  CustomOp op(
      "square_const", {"x"},
      [](FunctionContext& ctx, const std::vector<Tensor>& in) {
        ctx.save("x", in[0]);
        return std::vector<Tensor>{mul(in[0], in[0])};
      },
      [](FunctionContext& ctx, const std::vector<Tensor>& g) {
        return std::vector<Tensor>{mul(g[0], mul(ctx.saved("x").detach(), 2.0))};
      });
  op.add_sample("vector", [](DType dt) { return std::vector<Tensor>{leaf({4}, dt)}; });
  EXPECT_TRUE(check_custom_op(op).ok);
  op.twice_differentiable();
  OpCheckResult r = check_custom_op(op);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.message.find("gradgradcheck"), std::string::npos) << r.message;
}

}  // namespace
}  // namespace tg
