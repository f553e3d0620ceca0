// A training step of Deformable-DETR's blocks at the paper's sizes: one encoder layer over
// four feature levels (64x64, 32x32, 16x16, 8x8 = 5440 tokens) and one decoder layer with
// 300 queries, d_model 256, 8 heads, 4 points, d_ffn 1024, batch 1, float32, dropout 0
// (random masks would make the two frameworks' work differ). Forward, backward of an MSE
// loss on the decoder output, AdamW. tools/bench_vs_torch.py runs the same modules in
// PyTorch (tools/fixtures/deformable_detr.py, the pure-PyTorch deformable attention core).
#include "bench_common.h"

namespace tg::bench {
namespace {

struct EncDec : Module {
  EncDec() {
    encoder_layer = add_module("encoder_layer", std::make_shared<DeformableTransformerEncoderLayer>(256, 1024, 0.0));
    decoder_layer = add_module("decoder_layer", std::make_shared<DeformableTransformerDecoderLayer>(256, 1024, 0.0));
  }
  std::shared_ptr<DeformableTransformerEncoderLayer> encoder_layer;
  std::shared_ptr<DeformableTransformerDecoderLayer> decoder_layer;
};

void detr_train_step(benchmark::State& state) {
  use_threads(state);
  manual_seed(0);
  const int64_t N = 1, C = 256, Q = 300, L = 4;
  EncDec m;
  Tensor ss = from_vector(std::vector<int64_t>{64, 64, 32, 32, 16, 16, 8, 8}, {L, 2});
  Tensor lsi = from_vector(std::vector<int64_t>{0, 4096, 5120, 5376}, {L});
  const int64_t S = 5440;
  Tensor src = randn({N, S, C}), pos = randn({N, S, C}), tgt = randn({N, Q, C}), query_pos = randn({N, Q, C});
  Tensor target = randn({N, Q, C});
  Tensor valid = ones({N, L, 2});
  Tensor enc_ref = get_reference_points(ss, valid);
  Tensor dec_ref = rand({N, Q, 1, 2}).expand({N, Q, L, 2}).contiguous();
  AdamW opt(m.named_parameters(), AdamOptions{1e-4, 0.9, 0.999, 1e-8, 1e-4});
  auto step = [&] {
    opt.zero_grad();
    Tensor memory = m.encoder_layer->forward(src, pos, enc_ref, ss, lsi);
    Tensor out = m.decoder_layer->forward(tgt, query_pos, dec_ref, memory, ss, lsi);
    Tensor loss = mean(square(out - target));
    loss.backward();
    opt.step();
    benchmark::DoNotOptimize(loss.item<float>());
  };
  // One step first, as the PyTorch side warms up (time_torch): a step takes longer than the
  // script's minimum time, so the only timed step would otherwise be the first, which also pays
  // for first-touching every buffer and creating the optimizer's state (400-770 ms against
  // 360 ms for a later step on an AMD EPYC).
  step();
  PeakMemory peak(state);
  for (auto _ : state) step();
}

const bool registered = [] {
  add_case("detr_train_step/enc1_dec1_D256_H8_L4_P4_Q300", detr_train_step);
  return true;
}();

}  // namespace
}  // namespace tg::bench

TAPEGRAD_BENCHMARK_MAIN()
