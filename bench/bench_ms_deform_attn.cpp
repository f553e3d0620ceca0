// Multi-scale deformable attention, forward and backward, on Deformable-DETR's encoder shape
// (queries = keys = 5440 over levels 64x64, 32x32, 16x16, 8x8) and a decoder shape (300
// queries): bs 2, 8 heads, 32 channels, 4 points. PyTorch's side is Deformable-DETR's
// pure-PyTorch reference (grid_sample per level): no CPU framework has a kernel for it.
#include "bench_common.h"

namespace tg::bench {
namespace {

struct MsdaInputs {
  Tensor value, shapes, start, loc, attn, grad;
};

MsdaInputs make_inputs(int64_t queries) {
  manual_seed(0);
  const int64_t bs = 2, heads = 8, channels = 32, levels = 4, points = 4, keys = 5440;
  MsdaInputs in;
  in.value = randn({bs, keys, heads, channels});
  in.shapes = from_vector(std::vector<int64_t>{64, 64, 32, 32, 16, 16, 8, 8}, {levels, 2});
  in.start = from_vector(std::vector<int64_t>{0, 4096, 5120, 5376}, {levels});
  in.loc = rand({bs, queries, heads, levels, points, 2});
  in.attn = rand({bs, queries, heads, levels, points});
  in.grad = randn({bs, queries, heads * channels});
  return in;
}

void msda_fwd(benchmark::State& state, int64_t queries) {
  use_threads(state);
  MsdaInputs in = make_inputs(queries);
  for (auto _ : state) benchmark::DoNotOptimize(ms_deform_attn(in.value, in.shapes, in.start, in.loc, in.attn));
}

void msda_bwd(benchmark::State& state, int64_t queries) {
  use_threads(state);
  MsdaInputs in = make_inputs(queries);
  for (auto _ : state)
    benchmark::DoNotOptimize(ms_deform_attn_backward(in.value, in.shapes, in.start, in.loc, in.attn, in.grad));
}

const bool registered = [] {
  for (auto [name, q] : {std::pair<const char*, int64_t>{"encoder_B2_Q5440", 5440}, {"decoder_B2_Q300", 300}}) {
    std::string suffix = std::string(name) + "_H8_C32_L4_P4";
    add_case("ms_deform_attn_fwd/" + suffix, [q = q](benchmark::State& s) { msda_fwd(s, q); });
    add_case("ms_deform_attn_bwd/" + suffix, [q = q](benchmark::State& s) { msda_bwd(s, q); });
  }
  return true;
}();

}  // namespace
}  // namespace tg::bench

BENCHMARK_MAIN();
