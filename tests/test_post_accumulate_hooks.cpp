// The engine's hooks for data parallelism: post-accumulate hooks on leaves (they see the pass's
// whole gradient in .grad(), once per pass) and callbacks queued for the end of a pass.
#include <gtest/gtest.h>

#include <tapegrad/tapegrad.h>

namespace tg {
namespace {

TEST(PostAccumulateGradHook, SeesTheWholeGradientOncePerPass) {
  Tensor w = from_vector(std::vector<float>{1, 2}, {2}).requires_grad_();
  std::vector<std::vector<float>> seen;
  w.register_post_accumulate_grad_hook([&](const Tensor& leaf) { seen.push_back(leaf.grad().to_vector<float>()); });
  // w used three times: three deliveries, one hook call after the last.
  Tensor y = sum(mul(w, w)) + sum(w);
  y.backward();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], (std::vector<float>{3, 5}));  // 2w + 1
  // A second pass accumulates, and the hook sees the sum.
  (sum(w) * 2.0).backward();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1], (std::vector<float>{5, 7}));
}

TEST(PostAccumulateGradHook, RunsOnceWhenTheLeafFeedsOneEntry) {
  Tensor w = from_vector(std::vector<float>{1, -1}, {2}).requires_grad_();
  int calls = 0;
  w.register_post_accumulate_grad_hook([&](const Tensor&) { ++calls; });
  sum(relu(w)).backward();
  EXPECT_EQ(calls, 1);
}

TEST(PostAccumulateGradHook, NotForGradNorNonLeaves) {
  Tensor w = ones({2}).requires_grad_();
  int calls = 0;
  w.register_post_accumulate_grad_hook([&](const Tensor&) { ++calls; });
  grad({sum(w)}, {w});
  EXPECT_EQ(calls, 0);
  Tensor y = mul(w, 2.0);
  EXPECT_THROW(y.register_post_accumulate_grad_hook([](const Tensor&) {}), Error);
  EXPECT_THROW(ones({2}).register_post_accumulate_grad_hook([](const Tensor&) {}), Error);
}

// A leaf frozen after the forward (requires_grad_(false)) gets no gradient and runs no
// post-accumulate hook, as PyTorch's AccumulateGrad; the other leaves are unaffected.
TEST(PostAccumulateGradHook, NotForALeafFrozenAfterTheForward) {
  Tensor x = from_vector(std::vector<double>{1, 2}, {2}).requires_grad_();
  Tensor w = from_vector(std::vector<double>{3, 4}, {2}).requires_grad_();
  int calls = 0;
  x.register_post_accumulate_grad_hook([&](const Tensor&) { ++calls; });
  const Tensor y = sum(mul(x, w));
  x.requires_grad_(false);
  y.backward();
  EXPECT_FALSE(x.grad().defined());
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{1, 2}));
}

TEST(QueueBackwardCallback, RunsAfterEveryGradientInQueueOrder) {
  Tensor a = ones({2}).requires_grad_(), b = ones({2}).requires_grad_();
  std::vector<std::string> log;
  a.register_post_accumulate_grad_hook([&](const Tensor&) {
    log.push_back("a");
    queue_backward_callback([&] {
      log.push_back("end1 b.grad=" + std::to_string(b.grad().defined()));
      queue_backward_callback([&] { log.push_back("end2"); });
    });
  });
  b.register_post_accumulate_grad_hook([&](const Tensor&) { log.push_back("b"); });
  const uint64_t passes = backward_pass_count();
  (sum(mul(a, 3.0)) + sum(mul(b, 2.0))).backward();
  EXPECT_EQ(backward_pass_count(), passes + 1);
  ASSERT_EQ(log.size(), 4u);
  EXPECT_EQ(log[2], "end1 b.grad=1");
  EXPECT_EQ(log[3], "end2");
}

TEST(QueueBackwardCallback, OutsideABackwardPassIsAnError) {
  try {
    queue_backward_callback([] {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected to be called during a backward pass"), std::string::npos);
  }
}

}  // namespace
}  // namespace tg
