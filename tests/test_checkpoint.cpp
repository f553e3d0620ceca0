// One-call checkpoints (models/checkpoint.h) and the generator state they rely on: a run
// resumed from a checkpoint ends bit-identical to one that never stopped; bad files, a
// different model or missing parts throw tg::Error naming the file and the key and change
// nothing.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>

#include <tapegrad/tapegrad.h>

namespace tg {
namespace {

std::string temp_path(const std::string& name) { return ::testing::TempDir() + "/tapegrad_ck_" + name; }

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}
void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// An MLP with dropout: the default generator decides which units drop.
struct Mlp : Module {
  explicit Mlp(int64_t hidden = 16) {
    fc1 = add_module("fc1", std::make_shared<Linear>(4, hidden));
    drop = add_module("drop", std::make_shared<Dropout>(0.3));
    fc2 = add_module("fc2", std::make_shared<Linear>(hidden, 3));
  }
  Tensor forward(const Tensor& x) override { return fc2->forward(drop->forward(relu(fc1->forward(x)))); }
  std::shared_ptr<Linear> fc1, fc2;
  std::shared_ptr<Dropout> drop;
};

constexpr int64_t kSamples = 64, kBatch = 16, kStepsPerEpoch = kSamples / kBatch, kTotalSteps = 16;

// A training run: Adam with OneCycleLR (which also cycles beta1), batches shuffled each epoch
// by its own generator.
struct TrainingRun {
  explicit TrainingRun(uint64_t seed) : data_gen(seed + 1) {
    manual_seed(seed);
    net = std::make_shared<Mlp>();
    opt = std::make_unique<Adam>(net->parameters(), AdamOptions{});
    sched = std::make_unique<OneCycleLR>(*opt, 0.05, kTotalSteps);
  }
  Checkpoint checkpoint() {
    Checkpoint ck;
    ck.model = net.get();
    ck.optimizer = opt.get();
    ck.scheduler = sched.get();
    ck.generators["data"] = &data_gen;
    return ck;
  }
  // Steps [from, to); `from` is at an epoch boundary (the shuffle of a new epoch comes from the
  // restored generator; resuming mid-epoch would also need the epoch's order, a data loader's
  // state).
  void train(int64_t from, int64_t to) {
    Generator fixed(7);  // the data set: the same in every run
    const Tensor x = randn({kSamples, 4}, DType::Float32, &fixed);
    const Tensor y = randint(0, 3, {kSamples}, &fixed);
    Tensor order;
    for (int64_t step = from; step < to; ++step) {
      if (step % kStepsPerEpoch == 0 || !order.defined()) order = randperm(kSamples, &data_gen);
      const Tensor idx = order.slice(0, (step % kStepsPerEpoch) * kBatch, (step % kStepsPerEpoch + 1) * kBatch).contiguous();
      opt->zero_grad();
      cross_entropy(net->forward(index_select(x, 0, idx)), index_select(y, 0, idx)).backward();
      opt->step();
      sched->step();
    }
  }
  std::vector<std::vector<float>> params() const {
    std::vector<std::vector<float>> out;
    for (auto& p : net->parameters()) out.push_back(p.to_vector<float>());
    return out;
  }
  Generator data_gen;
  std::shared_ptr<Mlp> net;
  std::unique_ptr<Adam> opt;
  std::unique_ptr<OneCycleLR> sched;
};

TEST(GeneratorState, RoundTripIncludesTheSpareNormal) {
  Generator g(42);
  g.next_normal();  // leaves a spare normal waiting
  const Tensor state = g.get_state();
  EXPECT_EQ(state.dtype(), DType::Int64);
  EXPECT_EQ(state.shape(), (Shape{Generator::kStateSize}));
  EXPECT_EQ(state.at<int64_t>({4}), 1);
  std::vector<double> first;
  for (int i = 0; i < 5; ++i) first.push_back(g.next_normal());
  first.push_back(g.next_double());
  Generator h(0);
  h.set_state(state);
  std::vector<double> again;
  for (int i = 0; i < 5; ++i) again.push_back(h.next_normal());
  again.push_back(h.next_double());
  EXPECT_EQ(first, again);
  // The default generator, through PyTorch's names.
  manual_seed(3);
  const Tensor saved = get_rng_state();
  const std::vector<float> a = rand({8}).to_vector<float>();
  set_rng_state(saved);
  EXPECT_EQ(rand({8}).to_vector<float>(), a);
}

TEST(GeneratorState, RejectsBadStates) {
  Generator g(1);
  const Tensor before = g.get_state();
  EXPECT_NE(error_of([&] { g.set_state(zeros({6})); }).find("expected an int64 tensor of shape [6]"), std::string::npos);
  EXPECT_THROW(g.set_state(zeros({5}, DType::Int64)), Error);
  EXPECT_THROW(g.set_state(Tensor()), Error);
  EXPECT_NE(error_of([&] { g.set_state(zeros({6}, DType::Int64)); }).find("all zero"), std::string::npos);
  Tensor bad_flag = before.clone();
  bad_flag.data<int64_t>()[4] = 2;
  EXPECT_THROW(g.set_state(bad_flag), Error);
  EXPECT_EQ(g.get_state().to_vector<int64_t>(), before.to_vector<int64_t>());  // unchanged
}

TEST(Checkpoint, ResumedRunIsBitIdenticalToAnUninterruptedOne) {
  const std::string path = temp_path("resume.safetensors");
  const int64_t k = kTotalSteps / 2;  // an epoch boundary
  TrainingRun straight(11);
  straight.train(0, k);
  Checkpoint ck = straight.checkpoint();
  ck.metadata["epoch"] = std::to_string(k / kStepsPerEpoch);
  save_checkpoint(path, ck);
  straight.train(k, kTotalSteps);

  // Fresh objects, built from other seeds (other weights, other generator states): the
  // checkpoint must overwrite all of it.
  TrainingRun resumed(99);
  Checkpoint rk = resumed.checkpoint();
  load_checkpoint(path, rk);
  EXPECT_EQ(rk.metadata.at("epoch"), "2");
  EXPECT_EQ(rk.metadata.size(), 1u);  // the reserved tapegrad.* keys are not the user's
  EXPECT_EQ(resumed.sched->last_epoch(), k);
  resumed.train(k, kTotalSteps);
  EXPECT_EQ(resumed.params(), straight.params());

  // The test can fail: without the generators' state (dropout masks, shuffles) the run differs.
  TrainingRun no_rng(99);
  Checkpoint nk = no_rng.checkpoint();
  nk.generators.clear();
  load_checkpoint(path, nk);
  no_rng.train(k, kTotalSteps);
  EXPECT_NE(no_rng.params(), straight.params());
  std::remove(path.c_str());
}

// The README's recipe, as written there: a DataLoader shuffling by its seed and the epoch,
// a model with BatchNorm (running statistics, buffers) and Dropout (the default generator), Adam
// and CosineAnnealingLR, a checkpoint per epoch; resuming from epoch 0's checkpoint with new
// objects, load_checkpoint and loader.set_epoch(epoch + 1) ends on the same bits as the run that
// never stopped.
TEST(Checkpoint, TheReadmesResumeRecipeContinuesToTheSameBits) {
  const std::string path = temp_path("recipe.safetensors");
  Generator fixed(11);
  const Tensor x = randn({48, 6}, DType::Float32, &fixed);
  const Tensor y = randint(0, 3, {48}, &fixed);
  struct Run {
    std::shared_ptr<data::TensorDataset> set;
    data::DataLoader loader;
    Sequential net;
    Adam opt;
    CosineAnnealingLR schedule;
    Checkpoint checkpoint;
    Run(const Tensor& x, const Tensor& y)
        : set(std::make_shared<data::TensorDataset>(std::vector<Tensor>{x, y})),
          loader(set, data::DataLoaderOptions().batch_size(8).shuffle(true).seed(3)),
          net((manual_seed(21), std::vector<std::shared_ptr<Module>>{
                                    std::make_shared<Linear>(6, 16), std::make_shared<BatchNorm1d>(16),
                                    std::make_shared<ReLU>(), std::make_shared<Dropout>(0.2),
                                    std::make_shared<Linear>(16, 3)})),
          opt(net.parameters(), AdamOptions{}),
          schedule(opt, 3) {
      checkpoint.model = &net;
      checkpoint.optimizer = &opt;
      checkpoint.scheduler = &schedule;
    }
    void epochs(int from, int to, const std::string& save_to) {
      for (int epoch = from; epoch < to; ++epoch) {
        for (const std::vector<Tensor>& batch : loader) {
          opt.zero_grad();
          cross_entropy(net.forward(batch[0]), batch[1]).backward();
          opt.step();
        }
        schedule.step();
        checkpoint.metadata["epoch"] = std::to_string(epoch);
        if (!save_to.empty()) save_checkpoint(save_to, checkpoint);
      }
    }
    std::vector<std::vector<float>> state() const {
      std::vector<std::vector<float>> out;
      for (const auto& [name, t] : net.state_dict()) out.push_back(t.to(DType::Float32).to_vector<float>());
      return out;
    }
  };
  std::vector<std::vector<float>> straight;
  {
    Run run(x, y);
    run.epochs(0, 3, "");
    straight = run.state();
  }
  {
    Run first(x, y);
    first.epochs(0, 1, path);  // stops after epoch 0
  }
  Run resumed(x, y);
  randn({100});  // the default generator (Dropout's masks) moves on: the checkpoint restores it
  load_checkpoint(path, resumed.checkpoint);
  resumed.loader.set_epoch(std::stoi(resumed.checkpoint.metadata.at("epoch")) + 1);
  resumed.epochs(1, 3, "");
  EXPECT_EQ(resumed.state(), straight);
  std::remove(path.c_str());
}

TEST(Checkpoint, BadFilesAndMismatchesThrowAndChangeNothing) {
  const std::string path = temp_path("errors.safetensors");
  TrainingRun run(5);
  run.train(0, 4);
  Checkpoint ck = run.checkpoint();
  save_checkpoint(path, ck);
  const std::string bytes = read_bytes(path);

  TrainingRun target(6);
  target.train(0, 2);
  const auto params = target.params();
  const StateDict opt_state = target.opt->state_dict();
  const int64_t epoch = target.sched->last_epoch();
  const Tensor rng = target.data_gen.get_state();
  auto expect_unchanged = [&] {
    EXPECT_EQ(target.params(), params);
    const StateDict now = target.opt->state_dict();
    ASSERT_EQ(now.size(), opt_state.size());
    for (size_t i = 0; i < now.size(); ++i) {
      EXPECT_EQ(now[i].first, opt_state[i].first);
      EXPECT_EQ(now[i].second.to(DType::Float64).to_vector<double>(), opt_state[i].second.to(DType::Float64).to_vector<double>());
    }
    EXPECT_EQ(target.sched->last_epoch(), epoch);
    EXPECT_EQ(target.data_gen.get_state().to_vector<int64_t>(), rng.to_vector<int64_t>());
  };
  Checkpoint tk = target.checkpoint();

  // Truncated, then garbage.
  const std::string bad = temp_path("bad.safetensors");
  write_bytes(bad, bytes.substr(0, bytes.size() / 2));
  std::string msg = error_of([&] { load_checkpoint(bad, tk); });
  EXPECT_NE(msg.find("load_checkpoint: " + bad + " cannot be read"), std::string::npos) << msg;
  write_bytes(bad, "not a checkpoint at all, just some text that is long enough");
  EXPECT_THROW(load_checkpoint(bad, tk), Error);
  // A safetensors file that is not a checkpoint.
  save_safetensors(bad, run.net->state_dict());
  msg = error_of([&] { load_checkpoint(bad, tk); });
  EXPECT_NE(msg.find("is not a tapegrad checkpoint"), std::string::npos) << msg;
  expect_unchanged();

  // A different model: the optimizer and the scheduler loaded first are rolled back.
  TrainingRun other(7);
  other.net = std::make_shared<Mlp>(8);
  Checkpoint ok = target.checkpoint();
  ok.model = other.net.get();
  msg = error_of([&] { load_checkpoint(path, ok); });
  EXPECT_NE(msg.find("does not fit the model"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fc1.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  expect_unchanged();

  // A model key missing from the file.
  StateDict tensors = load_safetensors(path).tensors;
  SafetensorsMetadata meta = load_safetensors(path).metadata;
  StateDict fewer;
  for (auto& e : tensors)
    if (e.first != "model.fc2.bias") fewer.push_back(e);
  save_safetensors(bad, fewer, meta);
  msg = error_of([&] { load_checkpoint(bad, tk); });
  EXPECT_NE(msg.find("missing key: fc2.bias"), std::string::npos) << msg;
  expect_unchanged();

  // A generator the file does not have, then one with a broken state.
  Generator extra(1);
  Checkpoint gk = target.checkpoint();
  gk.generators["augment"] = &extra;
  msg = error_of([&] { load_checkpoint(path, gk); });
  EXPECT_NE(msg.find("no state for generator \"augment\" (key \"generator.augment\")"), std::string::npos) << msg;
  expect_unchanged();

  // Saved without an optimizer or scheduler, loaded with them.
  Checkpoint weights_only;
  weights_only.model = run.net.get();
  save_checkpoint(bad, weights_only);
  msg = error_of([&] { load_checkpoint(bad, tk); });
  EXPECT_NE(msg.find("holds no optimizer state"), std::string::npos) << msg;
  expect_unchanged();
  // ... but loading just the model from a full checkpoint is fine.
  Checkpoint just_model;
  just_model.model = target.net.get();
  just_model.generators.clear();
  load_checkpoint(path, just_model);
  EXPECT_EQ(target.params(), run.params());

  // Another optimizer type.
  SGD sgd(run.net->parameters(), SGDOptions{0.1});
  Checkpoint sk;
  sk.model = run.net.get();
  sk.optimizer = &sgd;
  msg = error_of([&] { load_checkpoint(path, sk); });
  EXPECT_NE(msg.find("holds the state of a Adam optimizer, not of a SGD"), std::string::npos) << msg;

  // Another scheduler type: refused before anything is loaded (the model was loaded above).
  StepLR step_lr(*target.opt, 2);
  Checkpoint stk = target.checkpoint();
  stk.scheduler = &step_lr;
  const auto params_now = target.params();
  msg = error_of([&] { load_checkpoint(path, stk); });
  EXPECT_NE(msg.find("scheduler"), std::string::npos) << msg;
  EXPECT_NE(msg.find("OneCycleLR"), std::string::npos) << msg;
  EXPECT_NE(msg.find("StepLR"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_EQ(target.params(), params_now);
  EXPECT_EQ(step_lr.last_epoch(), 0);
  EXPECT_EQ(target.data_gen.get_state().to_vector<int64_t>(), rng.to_vector<int64_t>());

  // Reserved metadata.
  ck.metadata["tapegrad.format"] = "mine";
  EXPECT_THROW(save_checkpoint(path, ck), Error);
  std::remove(path.c_str());
  std::remove(bad.c_str());
}

}  // namespace
}  // namespace tg
