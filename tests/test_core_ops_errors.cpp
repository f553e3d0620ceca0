// Bad input to the core ops: each call throws tg::Error with a message naming the op and what
// was wrong, before any memory is read (out-of-range indices included).
#include <gtest/gtest.h>

#include <string>

#include <tapegrad/tapegrad.h>

namespace {

using tg::DType;
using tg::Tensor;

// Runs fn, expects a tg::Error whose message contains every fragment.
template <class Fn>
void expect_error(Fn fn, std::initializer_list<std::string> fragments) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown; expected one mentioning '" << *fragments.begin() << "'";
  } catch (const tg::Error& e) {
    const std::string msg = e.what();
    for (const std::string& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << "message: " << msg << "\nmissing: " << f;
  }
}

Tensor idx(std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return tg::from_vector(v, {n});
}

TEST(CoreOpsErrors, IndicesOutOfRangeAreRejected) {
  Tensor x = tg::randn({3, 4});
  expect_error([&] { tg::index_select(x, 1, idx({0, 4})); }, {"index_select", "index 4", "out of bounds", "size 4"});
  expect_error([&] { tg::index_select(x, 0, idx({-1})); }, {"index_select", "index -1"});
  expect_error([&] { tg::gather(x, 1, tg::from_vector(std::vector<int64_t>{0, 9}, {1, 2})); },
               {"gather", "index 9", "out of bounds"});
  Tensor w = tg::randn({5, 2});
  expect_error([&] { tg::embedding(w, idx({1, 5})); }, {"embedding", "index 5", "5 embeddings"});
  expect_error([&] { tg::embedding(w, idx({-2})); }, {"embedding", "index -2"});
  expect_error([&] { tg::embedding(w, idx({1}), 7); }, {"embedding", "padding_idx 7"});
  Tensor logits = tg::randn({2, 3});
  expect_error([&] { tg::cross_entropy(logits, idx({0, 3})); }, {"cross_entropy", "target 3", "3 classes"});
  expect_error([&] { tg::cross_entropy(logits, idx({-5, 0})); }, {"cross_entropy", "target -5"});
}

TEST(CoreOpsErrors, WrongDtypes) {
  Tensor x = tg::randn({2, 3});
  expect_error([&] { tg::cross_entropy(x, tg::zeros({2}, DType::Float32)); }, {"cross_entropy", "int64", "float32"});
  expect_error([&] { tg::index_select(x, 0, tg::zeros({1}, DType::Float64)); }, {"index_select", "int64", "float64"});
  expect_error([&] { tg::embedding(x, tg::zeros({1}, DType::Float32)); }, {"embedding", "int64"});
  // (cat promotes dtypes as PyTorch: test_shape_edges.cpp)
  expect_error([&] { tg::mse_loss(x, x.to(DType::Float64)); }, {"mse_loss", "same dtype"});
  expect_error([&] { tg::exp(tg::zeros({2}, DType::Int64)); }, {"exp", "floating", "int64"});
  expect_error([&] { tg::layer_norm(x, {3}, tg::ones({3}, DType::Float64)); }, {"layer_norm", "weight", "float64"});
  // where promotes as PyTorch, and integer self and other select integers
  // (tests/test_dtypes_golden.cpp); a shape that does not broadcast is still refused.
  expect_error([&] { tg::where(tg::ones({2, 3}), x.to(DType::Int64), tg::zeros({4}, DType::Int64)); },
               {"where", "[2, 3]", "[4]"});
}

TEST(CoreOpsErrors, WrongShapesAndDims) {
  Tensor x = tg::randn({2, 3});
  expect_error([&] { tg::softmax(x, 2); }, {"softmax"});
  expect_error([&] { tg::cross_entropy(x, idx({0, 1, 2})); }, {"cross_entropy", "target of shape [2]", "[3]"});
  expect_error([&] { tg::cross_entropy(x, idx({0, 1}), {tg::Reduction::Mean, -100, 1.5}); }, {"label_smoothing"});
  expect_error([&] { tg::layer_norm(x, {4}); }, {"layer_norm", "[2, 3]"});
  expect_error([&] { tg::layer_norm(x, {3}, tg::ones({4})); }, {"layer_norm", "weight of shape [3]", "[4]"});
  expect_error([&] { tg::embedding(tg::randn({5}), idx({0})); }, {"embedding", "weight", "[5]"});
  expect_error([&] { tg::cat({x, tg::randn({3, 3})}, 1); }, {"cat", "Expected size 2", "size 3"});
  expect_error([&] { tg::cat({x, tg::randn({2})}, 0); }, {"cat", "same number of dimensions"});
  expect_error([&] { tg::cat({}, 0); }, {"cat", "non-empty"});
  expect_error([&] { tg::stack({x, tg::randn({3, 2})}, 0); }, {"stack", "[2, 3]", "[3, 2]"});
  expect_error([&] { tg::gather(x, 0, idx({0})); }, {"gather", "same number of dimensions"});
  expect_error([&] { tg::gather(x, 0, tg::zeros({1, 4}, DType::Int64)); }, {"gather", "dimension 1"});
  expect_error([&] { tg::index_select(x, 0, tg::zeros({1, 1}, DType::Int64)); }, {"index_select", "vector"});
  expect_error([&] { tg::split(x, {1, 1}, 1); }, {"split", "sum to"});
  expect_error([&] { tg::chunk(x, 0, 0); }, {"chunk", "chunks > 0"});
  expect_error([&] { tg::binary_cross_entropy_with_logits(x, tg::randn({3})); }, {"binary_cross_entropy_with_logits", "target size"});
  expect_error([&] { tg::binary_cross_entropy_with_logits(x, x, tg::randn({2})); }, {"pos_weight"});
  expect_error([&] { tg::masked_fill(tg::randn({3}), tg::ones({2, 3}), 0.0); }, {"masked_fill", "does not broadcast"});
  expect_error([&] { tg::max(tg::zeros({0})); }, {"max", "non-empty"});
  expect_error([&] { tg::max(tg::zeros({2, 0}), 1); }, {"max", "zero-size"});
  expect_error([&] { tg::var(x, {0, 0}); }, {"var", "more than once"});
}

TEST(CoreOpsErrors, BadParameters) {
  Tensor x = tg::randn({4});
  expect_error([&] { tg::dropout(x, 1.5, true); }, {"dropout", "[0, 1]", "1.5"});
  expect_error([&] { tg::gelu(x, "fast"); }, {"gelu", "'fast'"});
  expect_error([&] { tg::clamp(x, std::nullopt, std::nullopt); }, {"clamp", "at least one"});
  expect_error([&] { tg::smooth_l1_loss(x, x, tg::Reduction::Mean, -1.0); }, {"smooth_l1_loss", "beta"});
}

}  // namespace
