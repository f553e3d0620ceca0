// In-place ops under autograd (framework/inplace.h): recorded and rebased on tensors with
// history, refused on leaves that require grad, refused when a view or base they share memory
// with holds stale history, untouched under NoGradGuard. Golden gradients from PyTorch
// (tools/fixtures/inplace.py), finite differences in float64 for the ops the registry's sample
// cases do not cover (sub_, div_, mul_ by a tensor, clamp_, masked_fill_, relu_).
#include <gtest/gtest.h>

#include <functional>
#include <map>

#include "golden.h"
#include "test_util.h"

namespace tg {
namespace {

using testing::expect_close;
using testing::load_golden_cases;

Tensor leaf(std::vector<double> v, const Shape& shape) {
  Tensor t = from_vector(v, shape);
  t.requires_grad_();
  return t;
}

using InplaceFn = std::function<void(Tensor&, const Tensor& w, const Tensor& mask)>;

// The ops of tools/fixtures/inplace.py, with the same arguments.
const std::map<std::string, InplaceFn>& ops() {
  static const std::map<std::string, InplaceFn> m = {
      {"fill", [](Tensor& t, const Tensor&, const Tensor&) { t.fill_(0.5); }},
      {"zero", [](Tensor& t, const Tensor&, const Tensor&) { t.zero_(); }},
      {"copy", [](Tensor& t, const Tensor& w, const Tensor&) { t.copy_(w); }},
      {"add", [](Tensor& t, const Tensor& w, const Tensor&) { t.add_(w, 0.7); }},
      {"mul_scalar", [](Tensor& t, const Tensor&, const Tensor&) { t.mul_(2.5); }},
      {"mul_tensor", [](Tensor& t, const Tensor& w, const Tensor&) { mul_(t, w); }},
      {"sub_tensor", [](Tensor& t, const Tensor& w, const Tensor&) { sub_(t, w, 1.3); }},
      {"sub_scalar", [](Tensor& t, const Tensor&, const Tensor&) { sub_(t, 0.4); }},
      {"div_tensor", [](Tensor& t, const Tensor& w, const Tensor&) { div_(t, w); }},
      {"div_scalar", [](Tensor& t, const Tensor&, const Tensor&) { div_(t, 4.0); }},
      {"clamp", [](Tensor& t, const Tensor&, const Tensor&) { clamp_(t, -0.3, 0.4); }},
      {"masked_fill", [](Tensor& t, const Tensor&, const Tensor& m) { masked_fill_(t, m, -1.0); }},
      {"relu", [](Tensor& t, const Tensor&, const Tensor&) { relu_(t); }},
  };
  return m;
}

// y = x * x - 0.5; t = y ("chain", "stale_view") or y.select(0, 1) ("view", "base");
// v = y.select(0, 1) taken before the change; op(t); out = t * t, or y * y for "base" (the
// base's history rebased by copy_slices), or v * v for "stale_view" (v's history taken again
// from y's new history by as_strided).
const std::vector<std::string> kWheres = {"chain", "view", "base", "stale_view"};
Tensor run_program(const std::string& op, const std::string& where, const Tensor& x, const Tensor& w,
                   const Tensor& mask) {
  Tensor y = add(mul(x, x), -0.5);
  Tensor t = where == "chain" || where == "stale_view" ? y : y.select(0, 1);
  Tensor v = y.select(0, 1);
  ops().at(op)(t, w, mask);
  if (where == "base") return mul(y, y);
  if (where == "stale_view") return mul(v, v);
  return mul(t, t);
}

// Float64 throughout; the programs are a handful of flops, so 1e-12 covers the different
// rounding of x / s (PyTorch) and x * (1 / s) (tapegrad's div by a scalar).
TEST(InplaceGolden, EveryOpOnANonLeafInAChainOnAViewItsBaseAndAStaleView) {
  auto cases = load_golden_cases("inplace");
  ASSERT_EQ(cases.size(), kWheres.size() * ops().size());
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name());
    const std::string op = c.json["op"];
    const std::string where = c.json["where"];
    Tensor x = c.tensor("x"), w = c.tensor("w"), mask = c.tensor("mask");
    x.requires_grad_();
    w.requires_grad_();
    Tensor out = run_program(op, where, x, w, mask);
    expect_close(out, c.tensor("out"), 1e-12, 1e-12, "out");
    out.backward(c.tensor("gout"));
    expect_close(x.grad(), c.tensor("grad_x"), 1e-12, 1e-12, "grad_x");
    if (c.has("grad_w")) expect_close(w.grad(), c.tensor("grad_w"), 1e-12, 1e-12, "grad_w");
    else EXPECT_FALSE(w.grad().defined());
  }
}

TEST(InplaceGradcheck, EveryOpInAChainOnAViewItsBaseAndAStaleView) {
  for (const auto& [name, fn] : ops()) {
    for (const std::string& where : kWheres) {
      SCOPED_TRACE(name + " " + where);
      manual_seed(3);
      Tensor x = randn({2, 3}, DType::Float64), w = add(uniform({3}, 0.0, 1.0, DType::Float64), 1.0);
      x.requires_grad_();
      w.requires_grad_();
      Tensor mask = from_vector(std::vector<int64_t>{0, 1, 1}, {3});
      auto f = [&, name = name, where](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{run_program(name, where, in[0], in[1], mask)};
      };
      GradcheckResult r = gradcheck(f, {x, w});
      EXPECT_TRUE(r.ok) << r.message;
    }
  }
}

// An in-place op on a non-leaf enters the tape: the gradient of sum(3 * (x + 0)) is 3, where an
// unrecorded mul_ would leave the 1 of the add.
TEST(Inplace, MulOnANonLeafIsRecorded) {
  Tensor x = ones({3}).requires_grad_();
  Tensor y = add(x, 0.0);
  y.mul_(3.0);
  EXPECT_EQ(std::string(y.grad_fn()->op().name), "mul_");
  sum(y).backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{3, 3, 3}));
}

TEST(Inplace, LeafThatRequiresGradIsRefusedNamingTheOp) {
  Tensor w = ones({3}).requires_grad_();
  const uint64_t v0 = w.version();
  const std::string tail =
      ": a leaf tensor that requires grad cannot be changed in place while grad mode is on (its gradient would be "
      "taken at values it no longer holds); make the change under NoGradGuard, as the optimizers and init "
      "functions do";
  EXPECT_EQ(error_of([&] { w.add_(ones({3})); }), "add_" + tail);  // an optimizer's update made outside NoGradGuard
  EXPECT_EQ(error_of([&] { w.fill_(1); }), "fill_" + tail);
  EXPECT_EQ(error_of([&] { w.zero_(); }), "zero_" + tail);
  EXPECT_EQ(error_of([&] { w.copy_(zeros({3})); }), "copy_" + tail);
  EXPECT_EQ(error_of([&] { w.mul_(2); }), "mul_" + tail);
  EXPECT_EQ(error_of([&] { sub_(w, ones({3})); }), "sub_" + tail);
  EXPECT_EQ(error_of([&] { sub_(w, 1.0); }), "sub_" + tail);
  EXPECT_EQ(error_of([&] { mul_(w, ones({3})); }), "mul_" + tail);
  EXPECT_EQ(error_of([&] { div_(w, ones({3})); }), "div_" + tail);
  EXPECT_EQ(error_of([&] { div_(w, 2.0); }), "div_" + tail);
  EXPECT_EQ(error_of([&] { clamp_(w, 0.0, 1.0); }), "clamp_" + tail);
  EXPECT_EQ(error_of([&] { masked_fill_(w, ones({3}, DType::Int64), 0.0); }), "masked_fill_" + tail);
  EXPECT_EQ(error_of([&] { relu_(w); }), "relu_" + tail);
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{1, 1, 1}));  // nothing was written
  EXPECT_EQ(w.version(), v0);
}

TEST(Inplace, NoGradGuardKeepsTheOldBehaviourOnALeaf) {
  Tensor w = from_vector(std::vector<double>{1, -2, 3}, {3});
  w.requires_grad_();
  const uint64_t v0 = w.version();
  {
    NoGradGuard no_grad;
    w.add_(ones({3}, DType::Float64));
    w.mul_(2.0);
    relu_(w);
    clamp_(w, std::nullopt, 7.0);
  }
  EXPECT_EQ(w.to_vector<double>(), (std::vector<double>{4, 0, 7}));
  EXPECT_TRUE(w.is_leaf());
  EXPECT_TRUE(w.requires_grad());
  EXPECT_EQ(w.version(), v0 + 4);
  sum(mul(w, w)).backward();  // still a usable leaf
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{8, 0, 14}));
}

TEST(Inplace, NoGradGuardDoesNotRecordOnANonLeaf) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = mul(x, 2.0);
  const Node* before = y.grad_fn().get();
  {
    NoGradGuard no_grad;
    y.mul_(10.0);
  }
  EXPECT_EQ(y.grad_fn().get(), before);  // as PyTorch: the change is invisible to autograd
  sum(y).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2, 2}));
}

// A plain tensor filled from one that requires grad joins the graph (PyTorch: y.copy_(w)).
TEST(Inplace, CopyFromATensorThatRequiresGradJoinsTheGraph) {
  Tensor w = leaf({1, 2, 3}, {3});
  Tensor y = zeros({2, 3}, DType::Float64);
  y.copy_(w);
  EXPECT_TRUE(y.requires_grad());
  EXPECT_FALSE(y.is_leaf());
  sum(mul(y, from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}))).backward();
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{5, 7, 9}));  // summed over the broadcast
}

TEST(Inplace, CopyCastsTheGradientToTheSourceDtype) {
  Tensor w = leaf({1, 2}, {2});  // float64
  Tensor y = zeros({2});         // float32
  y.copy_(w);
  mul(y, 3.0).backward(ones({2}));
  EXPECT_EQ(w.grad().dtype(), DType::Float64);
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{3, 3}));
}

TEST(Inplace, GradientsOfTheOldValueAreZeroAfterFillAndCopy) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = mul(x, 5.0);
  y.fill_(1.0);
  Tensor z = mul(x, 5.0);
  z.copy_(ones({2}, DType::Float64));
  add(sum(y), sum(z)).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 0}));
}

// mul_ by a tensor that requires grad needs self's old value: it must keep a copy, not the
// memory it overwrites (which the version check would refuse).
TEST(Inplace, MulByATensorKeepsTheOldValueOfSelf) {
  Tensor x = leaf({1, 2}, {2}), w = leaf({3, 4}, {2});
  Tensor y = mul(x, x);  // 1, 4
  mul_(y, w);            // 3, 16
  mul_(y, w);            // 9, 64
  sum(y).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2 * 9, 4 * 16}));  // 2x w^2
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{2 * 3, 2 * 4 * 4}));  // 2 x^2 w
}

TEST(Inplace, ChainsOfInPlaceOpsComposeWithOutOfPlaceOnes) {
  Tensor x = leaf({-1, 0.5, 2}, {3});
  Tensor y = mul(x, 2.0);  // -2, 1, 4
  relu_(y);                // 0, 1, 4
  y.add_(x);               // -1, 1.5, 6
  clamp_(y, -0.5, 5.0);    // -0.5, 1.5, 5
  div_(y, 2.0);
  sum(mul(y, y)).backward();
  // d/dx: out = sum(y^2), y = clamp(relu(2x) + x) / 2; only the middle element is inside the clamp.
  EXPECT_NEAR(x.grad().at<double>({0}), 0.0, 1e-15);
  EXPECT_NEAR(x.grad().at<double>({1}), 2 * 0.75 * 0.5 * 3, 1e-15);
  EXPECT_NEAR(x.grad().at<double>({2}), 0.0, 1e-15);
}

// The saved-tensor version check is unchanged: an entry that saved the tensor refuses at
// backward with the same message (PyTorch refuses this program too).
TEST(Inplace, ChangingATensorAnEntrySavedStillFailsAtBackward) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = exp(x);  // exp saves its output
  y.mul_(2.0);
  EXPECT_EQ(error_of([&] { sum(y).backward(); }),
            "exp_backward: a tensor of shape [2] saved by exp for backward was modified in place: it was saved at "
            "version 0 and is now at version 1. Clone it before changing it, or change it after backward.");

  Tensor a = leaf({1, 2}, {2});
  Tensor b = from_vector(std::vector<double>{3, 4}, {2});
  Tensor z = sum(mul(a, b));
  b.add_(ones({2}, DType::Float64));  // b does not require grad: not recorded, only bumped
  EXPECT_EQ(error_of([&] { z.backward(); }),
            "mul_backward: a tensor of shape [2] saved by mul for backward was modified in place: it was saved at "
            "version 0 and is now at version 1. Clone it before changing it, or change it after backward.");
}

// A recorded change through a view rebases its base (PyTorch's CopySlices).
TEST(InplaceViews, TheBaseOfAChangedViewIsRebased) {
  Tensor x = leaf({1, 2, 3, 4}, {2, 2});
  Tensor y = mul(x, 2.0);
  Tensor v = y.select(0, 1);
  v.mul_(3.0);
  EXPECT_EQ(std::string(y.grad_fn()->op().name), "copy_slices");
  EXPECT_EQ(std::string(v.grad_fn()->op().name), "as_strided");  // the region of y's new history
  sum(mul(y, y)).backward();  // y = [2, 4, 18, 24]: d/dx = 2y * [2, 2, 6, 6]
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{8, 16, 216, 288}));
  x.zero_grad();
  Tensor y2 = mul(x, 2.0);
  Tensor col = y2.transpose(0, 1).select(0, 0);  // a strided view: column 0
  Tensor w = leaf({10, 20}, {2});
  col.copy_(w);
  col.add_(w);  // a second change through the same view
  sum(mul(y2, from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2}))).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 4, 0, 8}));
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{2, 6}));
}

// After the change the view reads as the region of its rebased base (PyTorch regenerates the
// view's grad_fn), so the view's later uses reach the base's entry: gradients with respect to
// the base, and hooks on it, see them. (The view kept the in-place entry as its history: leaves'
// gradients came out right, but tg::grad with respect to the base missed the view's uses and a
// hook on the base did not scale them.)
TEST(InplaceViews, AChangedViewReadsAsTheRegionOfItsBase) {
  auto fresh = [](Tensor& x, Tensor& h, Tensor& v) {
    x = leaf({0.25, 0.125, 0, -0.125}, {4});
    h = mul(x, 2.0);
    v = h.narrow(0, 1, 2);
  };
  Tensor x, h, v;
  fresh(x, h, v);
  v.fill_(1.0);
  EXPECT_EQ(grad({add(sum(mul(v, v)), sum(h))}, {h})[0].to_vector<double>(), (std::vector<double>{1, 3, 3, 1}));
  fresh(x, h, v);
  v.mul_(3.0);  // v = [0.75, 0], the region of h's new value
  EXPECT_EQ(grad({sum(mul(v, v))}, {h}, {}, false, true)[0].to_vector<double>(),
            (std::vector<double>{0, 1.5, 0, 0}));
  fresh(x, h, v);
  v.mul_(3.0);
  const Tensor y = sum(mul(v, v));
  h.register_hook([](const Tensor& g) { return mul(g, 10.0); });
  y.backward();  // dy/dh1 = 2 v = 1.5, times 10 by the hook, 3 by mul_, 2 by h = 2x
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 90, 0, 0}));
}

// A view taken before a change through its base or a sibling view gets its history again from
// the base (as_strided, as PyTorch regenerates it).
TEST(InplaceViews, SiblingViewsOfAChangedViewAreRegenerated) {
  Tensor x = leaf({1, 2, 3, 4}, {2, 2});
  Tensor y = mul(x, 2.0);
  Tensor u = y.narrow(0, 0, 2).select(1, 1), v = y.select(0, 1);  // column 1, row 1
  v.mul_(3.0);                                                      // y = [2, 4, 18, 24]
  sum(mul(u, u)).backward();  // u = [4, 24] = [2 x1, 6 x3]: d/dx = [0, 2*4*2, 0, 2*24*6]
  EXPECT_EQ(std::string(u.grad_fn()->op().name), "as_strided");
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 16, 0, 288}));
}

TEST(InplaceViews, ViewsOfAChangedBaseAreRegenerated) {
  Tensor x = leaf({1, 2, 3, 4}, {2, 2});
  Tensor y = mul(x, 2.0);
  Tensor v = y.select(0, 1);  // history: select of y before the change
  y.mul_(3.0);
  EXPECT_EQ(std::string(v.grad_fn()->op().name), "as_strided");  // asking is enough
  v.backward(ones({2}, DType::Float64));
  const std::vector<double> got = x.grad().to_vector<double>();
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0], 0.0);
  EXPECT_EQ(got[1], 0.0);
  EXPECT_EQ(got[2], 6.0);
  EXPECT_EQ(got[3], 6.0);
  Tensor plain = zeros({2, 2}, DType::Float64);
  Tensor row = plain.select(0, 0);
  Tensor w = leaf({5, 6}, {2});
  plain.select(0, 1).copy_(w);  // plain joins the graph, and so does its view row (as PyTorch)
  EXPECT_TRUE(row.requires_grad());
  EXPECT_EQ(std::string(row.grad_fn()->op().name), "as_strided");
  sum(mul(row, w)).backward();  // row = [0, 0] whatever w is
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{0, 0}));
}

// What cannot be regenerated is refused, never a wrong gradient: another tensor sharing the
// memory that is not a view of the changed one (here the tensor a detach() came from).
TEST(InplaceViews, OtherHandlesToChangedMemoryAreRefused) {
  Tensor x = leaf({1, 2, 3, 4}, {2, 2});
  Tensor y = mul(x, 2.0);
  Tensor d = y.detach();
  Tensor w = leaf({5, 6}, {2});
  d.select(0, 1).copy_(w);  // d joins the graph; y's history does not know
  EXPECT_TRUE(d.requires_grad());
  EXPECT_EQ(error_of([&] { sum(y); }),
            "sum: a tensor of shape [2, 2] shares memory with a tensor that copy_ changed in place (with grad mode "
            "on) after this one got its history, and it is not a view whose history can be taken again from its "
            "base. Its recorded history no longer matches its values, so it cannot be used for gradients. Compute "
            "it again after the in-place change, or clone() before changing it.");
  EXPECT_NE(error_of([&] { y.backward(ones({2, 2}, DType::Float64)); }), "<no error>");
  EXPECT_NE(error_of([&] { grad({sum(d)}, {y}); }), "<no error>");
  EXPECT_NE(error_of([&] { y.add_(ones({2, 2}, DType::Float64)); }), "<no error>");
  EXPECT_NE(error_of([&] { y.select(0, 0); }), "<no error>");
  sum(d).backward();
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{1, 1}));
}

// A plain tensor filled through a view from one that requires grad joins the graph.
TEST(InplaceViews, APlainBaseFilledThroughAViewJoinsTheGraph) {
  Tensor w = leaf({1, 2}, {2});
  Tensor buf = zeros({2, 2}, DType::Float64);
  buf.select(0, 0).copy_(w);
  EXPECT_TRUE(buf.requires_grad());
  sum(mul(buf, from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2}))).backward();
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{1, 2}));
}

TEST(InplaceViews, AViewOfALeafThatRequiresGradIsRefused) {
  Tensor x = leaf({1, 2, 3, 4}, {2, 2});
  EXPECT_EQ(error_of([&] { x.select(0, 1).mul_(2.0); }),
            "mul_: a view of a leaf tensor that requires grad cannot be changed in place while grad mode is on; make "
            "the change under NoGradGuard, as the optimizers and init functions do");
  EXPECT_EQ(x.to_vector<double>(), (std::vector<double>{1, 2, 3, 4}));
  NoGradGuard no_grad;
  x.select(0, 1).mul_(2.0);  // as the init functions do
  EXPECT_EQ(x.to_vector<double>(), (std::vector<double>{1, 2, 6, 8}));
}

TEST(InplaceViews, AViewTakenUnderNoGradGuardIsRefused) {
  Tensor x = leaf({1, 2, 3, 4}, {2, 2});
  Tensor y = mul(x, 2.0);
  Tensor v;
  {
    NoGradGuard no_grad;
    v = y.select(0, 1);
  }
  EXPECT_EQ(error_of([&] { v.fill_(0.0); }),
            "fill_: this view was taken under NoGradGuard, so it has no history of its own to change in place with "
            "grad mode on (PyTorch forbids it too); take the view with grad mode on, or make the change under "
            "NoGradGuard");
  // Of a base without grad, joining the graph through the change: refused too (it was recorded,
  // and the view kept the op's entry apart from the base's: gradients with respect to the view
  // took in the base's later uses, 130 240 where the same view taken with grad mode on gives
  // 100 200).
  Tensor base = from_vector(std::vector<double>{1, 2, 3, 4}, {4});
  Tensor u;
  {
    NoGradGuard no_grad;
    u = base.narrow(0, 2, 2);
  }
  EXPECT_NE(error_of([&] { u.copy_(leaf({5, 6}, {2})); }).find("copy_: this view was taken under NoGradGuard"),
            std::string::npos);
  EXPECT_FALSE(base.requires_grad());
  u.copy_(from_vector(std::vector<double>{5, 6}, {2}));  // nothing to record: allowed
  EXPECT_EQ(base.to_vector<double>(), (std::vector<double>{1, 2, 5, 6}));
  // flatten with nothing to merge is the tensor itself, as in PyTorch, not a view: changing it
  // in place after NoGradGuard is allowed (PyTorch: y = 2 6 12 20, w.grad = 1 20 300 4000).
  Tensor flat_base = from_vector(std::vector<double>{1, 2, 3, 4}, {4});
  Tensor flat;
  {
    NoGradGuard no_grad;
    flat = flat_base.flatten();
  }
  Tensor f = leaf({2, 3, 4, 5}, {4});
  mul_(flat, f);
  sum(mul(flat, from_vector(std::vector<double>{1, 10, 100, 1000}, {4}))).backward();
  EXPECT_EQ(flat.to_vector<double>(), (std::vector<double>{2, 6, 12, 20}));
  EXPECT_EQ(f.grad().to_vector<double>(), (std::vector<double>{1, 20, 300, 4000}));
}

// Without grad (nothing requires grad, or NoGradGuard) views and bases are written without any history check or entry.
TEST(InplaceViews, UnrecordedChangesThroughViewsLeaveHistoriesAlone) {
  Tensor buf = zeros({2, 2}, DType::Float64);
  buf.select(0, 1).fill_(2.0);
  Tensor w = leaf({1, 1, 1, 1}, {2, 2});
  sum(mul(buf, w)).backward();
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{0, 0, 2, 2}));

  Tensor x = leaf({1, 2}, {2});
  Tensor y = mul(x, 2.0);
  Tensor v = y.narrow(0, 0, 1);
  {
    NoGradGuard no_grad;
    v.fill_(0.0);
  }
  sum(mul(y, v)).backward();  // no error: as PyTorch, an unrecorded change is invisible to autograd
  EXPECT_TRUE(x.grad().defined());
  // detach() shares memory but claims no history, so it is never stale.
  Tensor d = y.detach();
  y.mul_(2.0);  // recorded: y is rebased; d sees the new values, as a constant
  EXPECT_EQ(mul(d, x).to_vector<double>(), (std::vector<double>{0, 16}));
}

TEST(InplaceViews, AnExpandedViewCannotBeRecorded) {
  Tensor x = leaf({1}, {1});
  Tensor y = mul(x, 2.0).expand({3});
  EXPECT_EQ(error_of([&] { y.mul_(2.0); }),
            "mul_: cannot write in place into a tensor of shape [3] and strides [0] whose elements share memory (a "
            "stride of 0, as from expand()); clone() it first");
  // An expanded view of a changed base takes its history again as the region without its
  // repeats, expanded (it was refused): d/dx sum(expand(3 * 2x)) = 3 * 6.
  Tensor z = mul(x, 2.0);
  Tensor e = z.expand({3});
  z.mul_(3.0);
  sum(mul(e, e)).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), std::vector<double>{3 * 2 * 6 * 6});
  // A plain tensor that joins the graph under an expanded view of it (PyTorch: w.grad = [3, 3]).
  Tensor y2 = from_vector(std::vector<double>{1, 2}, {2, 1});
  Tensor e2 = y2.expand({2, 3});
  Tensor w = leaf({3, 4}, {2, 1});
  y2.copy_(w);
  EXPECT_TRUE(e2.requires_grad());
  EXPECT_EQ(e2.to_vector<double>(), (std::vector<double>{3, 3, 3, 4, 4, 4}));
  sum(e2).backward();
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{3, 3}));
}

// Found by random programs against PyTorch: a view of a detach()ed handle inherited the
// handle's exemption from staleness, so after the handle joined the graph (d.copy_(w)) the
// view still read as a constant holding w's values, and its uses gave w no gradient.
TEST(InplaceViews, AViewOfADetachedHandleTakesItsHistoryWhenTheHandleJoinsTheGraph) {
  Tensor d = from_vector(std::vector<double>{1, 2, 3, 4}, {4}).detach();
  Tensor v = d.narrow(0, 0, 2);
  Tensor w = leaf({5, 6, 7, 8}, {4});
  d.copy_(w);
  EXPECT_TRUE(v.requires_grad());
  sum(mul(v, from_vector(std::vector<double>{1, 10}, {2}))).backward();
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{1, 10, 0, 0}));
  // A view of a detached handle of a tensor with history stays a constant when that tensor is
  // changed in place (also through a non-contiguous handle: no region is needed).
  Tensor x = leaf({1, 2, 3, 4}, {2, 2});
  Tensor y = mul(x, 1.0);
  Tensor dt = y.detach().transpose(0, 1);
  Tensor c = dt.select(0, 0);
  y.mul_(2.0);
  EXPECT_FALSE(c.requires_grad());
  EXPECT_EQ(mul(c, 1.0).to_vector<double>(), (std::vector<double>{2, 6}));
  // A non-contiguous handle that joins the graph: its views' history cannot be taken as a
  // region, and the refusal says so (they stayed constants before: no gradient, silently).
  Tensor nd = from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2}).transpose(0, 1).detach();
  Tensor nv = nd.select(0, 0);
  nd.copy_(leaf({5, 6, 7, 8}, {2, 2}));
  EXPECT_NE(error_of([&] { sum(nv); }).find("sum: a view of shape [2] of a non-contiguous tensor that requires grad"),
            std::string::npos);
  // A view of a non-contiguous base cannot be changed in place with grad mode on (its base's
  // history would need a copy_slices over a non-contiguous region): refused, base untouched.
  Tensor nc = from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2}).transpose(0, 1).detach();
  Tensor row = nc.select(0, 0);
  EXPECT_NE(error_of([&] { row.copy_(leaf({5, 6}, {2})); }).find("copy_: in-place change of a view of a "
                                                                 "non-contiguous tensor of shape [2, 2]"),
            std::string::npos);
  EXPECT_EQ(nc.contiguous().to_vector<double>(), (std::vector<double>{1, 3, 2, 4}));
}

// A view taken under NoGradGuard of a tensor that requires grad, whose base is then changed in
// place with grad mode on: PyTorch forbids its use; it silently took the base's history
// (requires_grad went from false to true because of an unrelated write).
TEST(InplaceViews, AViewTakenUnderNoGradGuardIsRefusedOnceItsBaseChanges) {
  Tensor L = leaf({1, 2, 3}, {3});
  Tensor b = mul(L, 1.0);
  Tensor v;
  {
    NoGradGuard no_grad;
    v = b.narrow(0, 0, 2);
  }
  EXPECT_FALSE(v.requires_grad());
  b.narrow(0, 2, 1).mul_(2.0);
  EXPECT_FALSE(v.requires_grad());
  EXPECT_EQ(error_of([&] { sum(v); }),
            "sum: a view of shape [2] of a tensor that requires grad was taken under NoGradGuard, and its base (or "
            "another view of it) was then changed in place by mul_ with grad mode on; whether the view now carries the "
            "base's history is ambiguous, so it cannot be used for gradients (PyTorch forbids it too). Take the view "
            "with grad mode on, or clone() it under NoGradGuard.");
  {
    NoGradGuard no_grad;  // its values are fine to read without grad
    EXPECT_EQ(mul(v, 1.0).to_vector<double>(), (std::vector<double>{1, 2}));
  }
  // A view taken of such a view, with grad mode on, is one too (PyTorch propagates the mode).
  Tensor L2 = leaf({1, 2, 3, 4}, {4});
  Tensor t2 = mul(L2, 2.0);
  Tensor a;
  {
    NoGradGuard no_grad;
    a = t2.narrow(0, 1, 2);
  }
  Tensor a2 = a.view({2, 1});
  t2.mul_(3.0);
  EXPECT_NE(error_of([&] { sum(a2); }).find("taken under NoGradGuard"), std::string::npos);
  // One taken under NoGradGuard after the change, of a stale view: a constant as of then (it
  // inherited the stale view's history: a wrong gradient before, then a false refusal).
  Tensor L3 = leaf({1, 2, 3, 4, 5, 6}, {6});
  Tensor t3 = mul(L3, 2.0);
  Tensor v3 = t3.view({3, 2});
  t3.mul_(3.0);  // v3 is stale
  Tensor w3;
  {
    NoGradGuard no_grad;
    w3 = v3.select(1, 1);
  }
  add(sum(mul(w3, w3)), sum(t3)).backward();  // PyTorch: w3 is a constant
  EXPECT_EQ(L3.grad().to_vector<double>(), std::vector<double>(6, 6.0));
  // Also when the base joined the graph after the view was taken (PyTorch refuses it too).
  Tensor p = from_vector(std::vector<double>{1, 2, 3}, {3});
  Tensor q;
  {
    NoGradGuard no_grad;
    q = p.narrow(0, 0, 2);
  }
  p.narrow(0, 2, 1).copy_(leaf({9}, {1}));
  EXPECT_NE(error_of([&] { sum(q); }).find("taken under NoGradGuard"), std::string::npos);
}

// The op on a view takes the view's old value as the region of its base (PyTorch's
// CopySlices): a retained view it was taken from is off the gradient's path. Through the view's
// own chain, v.grad got part of a gradient ([2, 0, 0, 0]; PyTorch: none).
TEST(InplaceViews, AViewsInPlaceChangeDoesNotFlowThroughTheViewsItWasTakenFrom) {
  Tensor L = leaf({1, 2, 3, 4}, {2, 2});
  Tensor b = mul(L, 1.0);
  Tensor v = b.view({4});
  v.retain_grad();
  v.select(0, 0).mul_(2.0);
  sum(mul(b, from_vector(std::vector<double>{1, 10, 100, 1000}, {2, 2}))).backward();
  EXPECT_FALSE(v.grad().defined());
  EXPECT_EQ(L.grad().to_vector<double>(), (std::vector<double>{2, 10, 100, 1000}));
  // A hook on a view that already reads as the region of its base (changed in place before, or
  // regenerated after its base changed) sees only the uses before a later in-place op on it:
  // the op took the view's own as_strided entry as its input, so the hook saw (and scaled) the
  // later uses too (x.grad 0 80 80 0). PyTorch: the hook sees 2, x.grad = [0, 26, 26, 0].
  for (int variant = 0; variant < 2; ++variant) {
    Tensor x = leaf({1, 2, 3, 4}, {4});
    Tensor y = mul(x, 1.0);
    Tensor r = y.narrow(0, 1, 2);
    if (variant == 0) r.mul_(2.0);  // r now reads as the region of y
    else y.mul_(2.0);               // r is stale: regenerated as the region when read
    double seen = 0;
    r.register_hook([&](const Tensor& g) {
      seen += sum(g).item();
      return mul(g, 10.0);
    });
    Tensor before_add = sum(r);
    r.add_(ones({2}, DType::Float64));
    add(before_add, sum(mul(r, 3.0))).backward();
    EXPECT_EQ(seen, 2.0) << variant;
    EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 26, 26, 0})) << variant;
  }
  // An op on a view that fails (a shape it cannot broadcast) leaves the view's history, hooks and
  // retained gradient as they were (a first version of the rule above replaced its history before
  // the op's own checks: the uses before the failure were lost to v.grad). PyTorch: [8, 8].
  Tensor M = leaf({1, 2, 3, 4}, {4});
  Tensor w = mul(M, 1.0).narrow(0, 0, 2);
  w.retain_grad();
  Tensor before = sum(mul(w, 3.0));
  EXPECT_NE(error_of([&] { w.add_(ones({3}, DType::Float64)); }), "<no error>");
  EXPECT_NE(error_of([&] { mul_(w, ones({3}, DType::Float64)); }), "<no error>");
  add(before, sum(mul(w, 5.0))).backward();
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{8, 8}));
  EXPECT_EQ(M.grad().to_vector<double>(), (std::vector<double>{8, 8, 0, 0}));
}

// Without grad mode too: add_ into an expanded view used to add once per element sharing the
// location (x = [0, 0] expanded to 3 rows, plus ones, gave 3s), copy_ kept whichever write came
// last, and with threads the writes raced. Every in-place entry point refuses, as PyTorch does;
// the base is left as it was.
TEST(Inplace, AnExpandedTensorIsNeverWrittenInPlace) {
  NoGradGuard no_grad;
  Tensor base = zeros({1, 2});
  Tensor e = base.expand({3, 2});
  const Tensor ones32 = ones({3, 2}), mask = ones({3, 2});
  const std::map<std::string, std::function<void()>> writes = {
      {"fill_", [&] { e.fill_(1.0); }},
      {"zero_", [&] { e.zero_(); }},
      {"copy_", [&] { e.copy_(ones32); }},
      {"add_", [&] { e.add_(ones32); }},
      {"mul_", [&] { e.mul_(2.0); }},
      {"sub_", [&] { sub_(e, ones32); }},
      {"div_", [&] { div_(e, 2.0); }},
      {"clamp_", [&] { clamp_(e, 1.0); }},
      {"relu_", [&] { relu_(e); }},
      {"masked_fill_", [&] { masked_fill_(e, mask, 1.0); }},
  };
  for (const auto& [op, write] : writes) {
    EXPECT_EQ(error_of(write), op + ": cannot write in place into a tensor of shape [3, 2] and strides [0, 1] whose "
                                   "elements share memory (a stride of 0, as from expand()); clone() it first");
    EXPECT_EQ(base.to_vector<float>(), (std::vector<float>{0, 0})) << op;
  }
  // A dim of size 1 with stride 0 shares nothing: writing it is fine.
  Tensor one_row = zeros({2}).expand({1, 2});
  one_row.add_(ones({1, 2}));
  EXPECT_EQ(one_row.to_vector<float>(), (std::vector<float>{1, 1}));
}

TEST(Inplace, OtherShapesAndDtypesAreChecked) {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor y = mul(x, 1.0);
  EXPECT_NE(error_of([&] { mul_(y, ones({2, 3}, DType::Float64)); }), "<no error>");  // self does not broadcast
  Tensor i = zeros({3}, DType::Int64);
  EXPECT_EQ(error_of([&] { i.copy_(x); }),
            "copy_: cannot record an in-place change of a int64 tensor from a tensor that requires grad (only "
            "floating tensors carry gradients); detach() the source or use NoGradGuard");
  i.copy_(x.detach());
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3}));
}

// retain_grad follows the tensor onto its new entry, as in PyTorch: .grad() is the gradient of
// the changed values.
TEST(Inplace, RetainGradMovesWithTheRebase) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = mul(x, 2.0);
  y.retain_grad();
  y.mul_(3.0);
  relu_(y);
  sum(mul(y, y)).backward();  // y = [6, 12]
  EXPECT_EQ(y.grad().to_vector<double>(), (std::vector<double>{12, 24}));
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{72, 144}));
}

// The engine's own accumulation into .grad() is never recorded or refused.
TEST(Inplace, GradientAccumulationIsNotAnInPlaceOpOnTheTape) {
  Tensor x = leaf({1, 2}, {2});
  sum(mul(x, 3.0)).backward();
  sum(mul(x, 3.0)).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{6, 6}));
  EXPECT_FALSE(x.grad().requires_grad());
  Tensor y = mul(x, 1.0);
  y.retain_grad();
  sum(y).backward(Tensor(), true);
  sum(y).backward();
  EXPECT_EQ(y.grad().to_vector<double>(), (std::vector<double>{2, 2}));
}

}  // namespace
}  // namespace tg
