// A data-parallel run in which rank 1 catches an error and returns from main (exit status 1)
// while rank 0 goes on to the next gradient reduction. Run by tests/dist_programs/rank_leaves.cmake
// under mpirun: rank 0 must end the job with a message naming rank 1, not wait for rank 1 forever
// (MPI does not tell the others that a rank finalized). The last step, where both
// ranks finish normally with rank 0 leaving later than rank 1, must end cleanly too:
// `rank_leaves --late` is that run.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include <tapegrad/tapegrad.h>

int main(int argc, char** argv) {
  using namespace tg;
  const bool late = argc == 2 && std::strcmp(argv[1], "--late") == 0;
  dist::init();
  Linear model(16, 4);
  DistributedDataParallel ddp(model);
  SGD opt(model.named_parameters(), SGDOptions{0.1});
  Generator data(1 + uint64_t(dist::rank()));
  try {
    for (int step = 0; step < 20; ++step) {
      if (!late && step == 3 && dist::rank() == 1) TG_ERROR("rank_leaves: rank 1 gives up at step 3");
      opt.zero_grad();
      mse_loss(ddp.forward(randn({8, 16}, DType::Float32, &data)), zeros({8, 4})).backward();
      opt.step();
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "rank_leaves: rank %d: %s\n", dist::rank(), e.what());
    return 1;
  }
  if (late && dist::rank() == 0) std::this_thread::sleep_for(std::chrono::seconds(2));  // rank 1 leaves first
  std::printf("rank_leaves: rank %d finished\n", dist::rank());
  return 0;
}
