// Multi-scale deformable attention, forward and backward, on Deformable-DETR's encoder shape
// (queries = keys = 5440 over levels 64x64, 32x32, 16x16, 8x8) and a decoder shape (300
// queries): bs 2, 8 heads, 32 channels, 4 points. PyTorch's side is Deformable-DETR's
// pure-PyTorch reference (grid_sample per level): no CPU framework has a kernel for it. The
// batch-1 encoder cases have few slices (bs * heads: 8, and 1 for one head): there the backward
// may cut a slice's queries into chunks with private grad_value buffers, a cost measured here.
#include "bench_common.h"

namespace tg::bench {
namespace {

struct MsdaInputs {
  Tensor value, shapes, start, loc, attn, grad;
};

MsdaInputs make_inputs(int64_t queries, int64_t bs, int64_t heads, DType dt) {
  manual_seed(0);
  const int64_t channels = 32, levels = 4, points = 4, keys = 5440;
  MsdaInputs in;
  in.value = randn({bs, keys, heads, channels}, dt);
  in.shapes = from_vector(std::vector<int64_t>{64, 64, 32, 32, 16, 16, 8, 8}, {levels, 2});
  in.start = from_vector(std::vector<int64_t>{0, 4096, 5120, 5376}, {levels});
  in.loc = rand({bs, queries, heads, levels, points, 2}, dt);
  in.attn = rand({bs, queries, heads, levels, points}, dt);
  in.grad = randn({bs, queries, heads * channels}, dt);
  return in;
}

void msda_fwd(benchmark::State& state, int64_t queries, int64_t bs, int64_t heads, DType dt = DType::Float32) {
  use_threads(state);
  MsdaInputs in = make_inputs(queries, bs, heads, dt);
  for (auto _ : state) benchmark::DoNotOptimize(ms_deform_attn(in.value, in.shapes, in.start, in.loc, in.attn));
}

void msda_bwd(benchmark::State& state, int64_t queries, int64_t bs, int64_t heads, DType dt = DType::Float32) {
  use_threads(state);
  MsdaInputs in = make_inputs(queries, bs, heads, dt);
  for (auto _ : state)
    benchmark::DoNotOptimize(ms_deform_attn_backward(in.value, in.shapes, in.start, in.loc, in.attn, in.grad));
}

const bool registered = [] {
  struct MsdaShape {
    const char* name;
    int64_t queries, bs, heads;
  };
  for (const MsdaShape& c : {MsdaShape{"encoder_B2_Q5440_H8", 5440, 2, 8}, MsdaShape{"decoder_B2_Q300_H8", 300, 2, 8},
                             MsdaShape{"encoder_B1_Q5440_H8", 5440, 1, 8},
                             MsdaShape{"encoder_B1_Q5440_H1", 5440, 1, 1}}) {
    std::string suffix = std::string(c.name) + "_C32_L4_P4";
    add_case("ms_deform_attn_fwd/" + suffix, [c](benchmark::State& s) { msda_fwd(s, c.queries, c.bs, c.heads); });
    add_case("ms_deform_attn_bwd/" + suffix, [c](benchmark::State& s) { msda_bwd(s, c.queries, c.bs, c.heads); });
  }
  // bfloat16 (issue 22's rows), the encoder shape.
  const auto bf16 = DType::BFloat16;
  add_case("ms_deform_attn_fwd/encoder_B2_Q5440_H8_C32_L4_P4_bf16", [=](benchmark::State& s) { msda_fwd(s, 5440, 2, 8, bf16); });
  add_case("ms_deform_attn_bwd/encoder_B2_Q5440_H8_C32_L4_P4_bf16", [=](benchmark::State& s) { msda_bwd(s, 5440, 2, 8, bf16); });
  // The decoder and one-head shapes in bfloat16: value's slices are not copied there (too few
  // queries per key, or one head), so the kernels read value's 16-bit rows where they are.
  add_case("ms_deform_attn_fwd/decoder_B2_Q300_H8_C32_L4_P4_bf16", [=](benchmark::State& s) { msda_fwd(s, 300, 2, 8, bf16); });
  add_case("ms_deform_attn_bwd/decoder_B2_Q300_H8_C32_L4_P4_bf16", [=](benchmark::State& s) { msda_bwd(s, 300, 2, 8, bf16); });
  add_case("ms_deform_attn_fwd/encoder_B1_Q5440_H1_C32_L4_P4_bf16", [=](benchmark::State& s) { msda_fwd(s, 5440, 1, 1, bf16); });
  add_case("ms_deform_attn_bwd/encoder_B1_Q5440_H1_C32_L4_P4_bf16", [=](benchmark::State& s) { msda_bwd(s, 5440, 1, 1, bf16); });
  return true;
}();

}  // namespace
}  // namespace tg::bench

TAPEGRAD_BENCHMARK_MAIN()
