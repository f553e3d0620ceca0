#include "data_loader.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "../framework/check.h"
#include "../framework/grad_mode.h"
#include "../framework/parallel.h"

namespace tg::data {

DataLoaderOptions& DataLoaderOptions::batch_size(int64_t n) {
  TG_CHECK(n >= 1, "DataLoaderOptions::batch_size: expected >= 1, got ", n);
  batch_size_ = n;
  return *this;
}

DataLoaderOptions& DataLoaderOptions::prefetch(int depth) {
  TG_CHECK(depth >= 0, "DataLoaderOptions::prefetch: expected a depth >= 0 (0: off), got ", depth);
  prefetch_ = depth;
  return *this;
}

// One pass: the order, how to build batch b, and with prefetch the thread that builds them ahead
// into `ready` (a batch, or the exception that stopped the thread).
struct DataLoader::Pass {
  struct Slot {
    std::vector<Tensor> batch;
    std::exception_ptr error;
  };

  std::shared_ptr<const Dataset> dataset;
  Collate collate;
  std::vector<int64_t> order;
  int64_t batch_size = 1, num_batches = 0, next = 0;  // next: the batch the loop takes next
  int depth = 0;

  std::mutex mutex;
  std::condition_variable changed;
  std::deque<Slot> ready;
  bool stop = false;
  std::thread worker;

  ~Pass() {
    if (!worker.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
    }
    changed.notify_all();
    worker.join();
  }

  std::vector<Tensor> build(int64_t b) const {
    NoGradGuard no_grad;
    const int64_t begin = b * batch_size, end = std::min<int64_t>(begin + batch_size, order.size());
    const std::vector<int64_t> indices(order.begin() + begin, order.begin() + end);
    if (!collate) return dataset->get_batch(indices);
    std::vector<std::vector<Tensor>> samples;
    samples.reserve(indices.size());
    for (int64_t i : indices) samples.push_back(dataset->get(i));
    return collate(samples);
  }

  void run() {
    set_num_threads(1);  // this thread's OpenMP regions only; the step keeps the cores
    for (int64_t b = 0; b < num_batches; ++b) {
      {
        std::unique_lock<std::mutex> lock(mutex);
        changed.wait(lock, [&] { return stop || static_cast<int64_t>(ready.size()) < depth; });
        if (stop) return;
      }
      Slot slot;
      try {
        slot.batch = build(b);
      } catch (...) {
        slot.error = std::current_exception();
      }
      const bool failed = slot.error != nullptr;
      {
        std::lock_guard<std::mutex> lock(mutex);
        ready.push_back(std::move(slot));
      }
      changed.notify_all();
      if (failed) return;
    }
  }

  // The next batch: from the thread, or built here. Throws what building it threw.
  std::vector<Tensor> take() {
    const int64_t b = next++;
    if (!worker.joinable()) return build(b);
    Slot slot;
    {
      std::unique_lock<std::mutex> lock(mutex);
      changed.wait(lock, [&] { return !ready.empty(); });
      slot = std::move(ready.front());
      ready.pop_front();
    }
    changed.notify_all();
    if (slot.error) std::rethrow_exception(slot.error);
    return std::move(slot.batch);
  }
};

DataLoader::Iterator::Iterator(std::shared_ptr<Pass> pass) : pass_(std::move(pass)) { fetch(); }

void DataLoader::Iterator::fetch() {
  batch_.clear();
  if (pass_->next >= pass_->num_batches) {
    pass_.reset();
    return;
  }
  try {
    batch_ = pass_->take();
  } catch (...) {
    pass_.reset();  // the pass ends with the error (its thread has stopped)
    throw;
  }
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  TG_CHECK(pass_ != nullptr, "DataLoader: ++ on an iterator at the end of the pass");
  fetch();
  return *this;
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  TG_CHECK(dataset_ != nullptr, "DataLoader: dataset is null");
  if (options_.sampler()) {
    TG_CHECK(!options_.shuffle(), "DataLoader: options: shuffle(true) and a sampler exclude each other (the sampler "
             "decides the order; give it the shuffle)");
    sampler_ = options_.sampler();
  } else {
    sampler_ = std::make_shared<RandomSampler>(dataset_->size(), options_.shuffle(), options_.seed());
  }
}

int64_t DataLoader::num_samples() const { return sampler_->num_samples(); }

int64_t DataLoader::size() const {
  const int64_t n = num_samples(), b = options_.batch_size();
  return options_.drop_last() ? n / b : ceil_div(n, b);
}

DataLoader::Iterator DataLoader::begin() {
  auto pass = std::make_shared<Pass>();
  pass->dataset = dataset_;
  pass->collate = options_.collate();
  sampler_->set_epoch(epoch_++);
  pass->order = sampler_->indices();
  const int64_t n = dataset_->size();
  for (size_t i = 0; i < pass->order.size(); ++i)
    TG_CHECK(pass->order[i] >= 0 && pass->order[i] < n, "DataLoader: the sampler's index ", i, " is ",
             pass->order[i], ", out of range for a dataset of ", n, " samples");
  pass->batch_size = options_.batch_size();
  const int64_t count = static_cast<int64_t>(pass->order.size());
  pass->num_batches = options_.drop_last() ? count / pass->batch_size : ceil_div(count, pass->batch_size);
  pass->depth = options_.prefetch();
  if (pass->depth > 0 && pass->num_batches > 0) pass->worker = std::thread([p = pass.get()] { p->run(); });
  return Iterator(std::move(pass));
}

}  // namespace tg::data
