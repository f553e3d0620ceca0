// A data-parallel run in which rank 1 is killed mid-training (SIGKILL, as the OOM killer or a
// lost machine would). Run by tests/dist_programs/rank_dies.cmake under mpirun: the job must end
// (not hang) with a message naming the dead rank, and the checkpoint rank 0 wrote before must
// still load. `rank_dies --check <file>` loads the checkpoint and exits 0 when it is whole.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>

#include <tapegrad/tapegrad.h>

int main(int argc, char** argv) {
  using namespace tg;
  if (argc == 3 && std::strcmp(argv[1], "--check") == 0) {
    Linear model(16, 4);
    const SafetensorsFile f = load_safetensors(argv[2]);
    model.load_state_dict(f.tensors);
    std::printf("rank_dies: checkpoint %s loads\n", argv[2]);
    return 0;
  }
  if (argc != 2) {
    std::fprintf(stderr, "usage: rank_dies <checkpoint file> | rank_dies --check <checkpoint file>\n");
    return 2;
  }
  dist::init();
  Linear model(16, 4);
  DistributedDataParallel ddp(model);
  SGD opt(model.named_parameters(), SGDOptions{0.1});
  Generator data(1 + uint64_t(dist::rank()));
  for (int step = 0; step < 1000; ++step) {
    if (step == 3 && dist::rank() == 1) std::raise(SIGKILL);
    opt.zero_grad();
    mse_loss(ddp.forward(randn({8, 16}, DType::Float32, &data)), zeros({8, 4})).backward();
    opt.step();
    if (dist::rank() == 0 && step == 2) save_safetensors(argv[1], model.state_dict());  // atomic
  }
  std::fprintf(stderr, "rank_dies: rank %d finished 1000 steps although rank 1 died\n", dist::rank());
  return 0;
}
