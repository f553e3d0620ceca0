// Collectives on MPI (see dist.h). With TAPEGRAD_HAS_MPI unset the world is one process.
#include "dist.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <sstream>
#include <string>

#include "check.h"
#include "grad_mode.h"

#if defined(TAPEGRAD_HAS_MPI)
#include <mpi.h>
#endif

namespace tg::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Product: return "product";
    case ReduceOp::Min: return "min";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

bool launched_by_mpirun() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(name)) return true;
  return false;
}

namespace {

// What every collective checks on its own rank first.
void check_tensor(const char* op, const Tensor& t, bool written) {
  TG_CHECK(t.defined(), "dist::", op, ": tensor: expected a defined tensor, got an undefined one");
  TG_CHECK(t.is_contiguous(), "dist::", op, ": tensor: expected a contiguous tensor, got one with shape ",
           format_shape(t.shape()), " and strides ", format_shape(t.strides()), " (call contiguous() first)");
  TG_CHECK(!written || !(t.requires_grad() && GradMode::is_enabled()), "dist::", op,
           ": tensor: expected a tensor that does not require grad (collectives are not differentiable), got one "
           "that requires grad with grad mode on; call it under NoGradGuard or on a detached tensor");
}

}  // namespace

#if !defined(TAPEGRAD_HAS_MPI)

bool available() { return false; }

void init() {
  // mpirun's count of processes: Open MPI's variable, or the PMI one of MPICH's launchers.
  int launched = 1;
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (const char* value = std::getenv(name)) launched = std::max(launched, std::atoi(value));
  TG_CHECK(launched == 1, "dist::init: expected one process (this tapegrad was built without MPI: ",
           "TAPEGRAD_WITH_MPI=OFF, or no MPI at build time; Debian: libopenmpi-dev), got ", launched,
           " started by mpirun, each of which would train alone on all of the data; rebuild with MPI or run ",
           "one process");
}

bool is_initialized() { return false; }
int rank() { return 0; }
int world_size() { return 1; }
void barrier() {}

void all_reduce(Tensor& t, ReduceOp op) {
  check_tensor("all_reduce", t, true);
  TG_CHECK(op != ReduceOp::Avg || is_floating(t.dtype()), "dist::all_reduce: op: expected sum, product, min or max ",
           "for an integer tensor, got avg on ", dtype_name(t.dtype()));
}

void broadcast(Tensor& t, int root) {
  check_tensor("broadcast", t, true);
  TG_CHECK(root == 0, "dist::broadcast: root: expected a rank in [0, 1), got ", root);
}

std::vector<Tensor> all_gather(const Tensor& t) {
  check_tensor("all_gather", t, false);
  return {t.detach().clone()};
}

struct Work::State {};
bool Work::is_completed() { return true; }
void Work::wait() {}

Work all_reduce_async(Tensor& t, ReduceOp op) {
  all_reduce(t, op);
  return Work();
}

#else

namespace {

bool g_initialized_here = false;

void throw_if_failed(int code, const char* op) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  TG_ERROR("dist::", op, ": MPI failed on rank ", rank(), ": ", std::string(text, size_t(len)));
}

bool mpi_running() {
  int started = 0, finished = 0;
  MPI_Initialized(&started);
  MPI_Finalized(&finished);
  return started && !finished;
}

// A rank that leaves (returns from main, calls exit) while the others wait in a collective it
// never started would leave them waiting forever: MPI does not tell them. So each rank, as it
// exits, sends every other rank a notice on a communicator of its own, holding the number of
// collectives it started; a rank waiting in collective number i that gets a notice of fewer
// than i + 1 collectives says which rank left and ends the job (MPI_Abort: the collective it
// waits in cannot be cancelled, and MPI may still write into its buffers, so it cannot throw
// and go on). A notice of a rank that took part in the collective (it finished and left
// first) is no error. Only when init() started MPI (and finalizes it at exit).
MPI_Comm g_control = MPI_COMM_NULL;
constexpr int kLeavingTag = 1;
int64_t g_started = 0;                          // collectives this rank started
int64_t g_first_missed = INT64_MAX;             // the first collective a rank that left never started
int g_left_rank = -1;                           // that rank
int g_notices = 0;                              // notices received

// Takes the notices that have arrived.
void receive_notices() {
  if (g_control == MPI_COMM_NULL) return;  // MPI started by the program, not by init()
  for (;;) {
    int flag = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kLeavingTag, g_control, &flag, &status) != MPI_SUCCESS || !flag) return;
    int64_t started = 0;
    MPI_Recv(&started, 1, MPI_INT64_T, status.MPI_SOURCE, kLeavingTag, g_control, MPI_STATUS_IGNORE);
    ++g_notices;
    if (started < g_first_missed) {
      g_first_missed = started;
      g_left_rank = status.MPI_SOURCE;
    }
  }
}

// Waits for `requests` of the collective numbered `index` (its g_started when it began).
void wait_for(std::vector<MPI_Request>& requests, int64_t index, const char* op) {
  for (;;) {
    int done = 0;
    throw_if_failed(MPI_Testall(int(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE), op);
    if (done) return;
    receive_notices();
    if (index >= g_first_missed) {
      std::fprintf(stderr,
                   "tg::dist::%s: rank %d left the job before this collective (it returned from main or called exit, "
                   "perhaps after an error it caught); rank %d ends the job\n",
                   op, g_left_rank, rank());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
}

// One request of collective `op`, started by `start(&request)`, waited for.
template <class Start>
void run_collective(const char* op, Start&& start) {
  const int64_t index = g_started++;
  std::vector<MPI_Request> requests(1);
  throw_if_failed(start(&requests[0]), op);
  wait_for(requests, index, op);
}

void finalize_at_exit() {
  if (!mpi_running()) return;
  const int me = rank(), world = world_size();
  for (int r = 0; r < world; ++r)
    if (r != me) MPI_Send(&g_started, 1, MPI_INT64_T, r, kLeavingTag, g_control);
  // Every other rank's notice, as it leaves in turn: polled with growing sleeps (a blocking
  // receive would spin a core while a slower rank still evaluates or writes its checkpoint).
  for (int pause_us = 50; g_notices < world - 1; pause_us = std::min(pause_us * 2, 10000)) {
    receive_notices();
    if (g_notices < world - 1) std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
  }
  MPI_Comm_free(&g_control);
  MPI_Finalize();
}

// The MPI type of the data as it travels: 16-bit floats travel as float32 for reductions (see
// all_reduce) and as their bits otherwise.
MPI_Datatype wire_type(DType d) {
  switch (d) {
    case DType::Float32: return MPI_FLOAT;
    case DType::Float64: return MPI_DOUBLE;
    case DType::Int64: return MPI_INT64_T;
    case DType::Int32: return MPI_INT32_T;
    case DType::BFloat16:
    case DType::Float16: return MPI_UINT16_T;
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Product: return MPI_PROD;
    case ReduceOp::Min: return MPI_MIN;
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Sum:
    case ReduceOp::Avg: break;
  }
  return MPI_SUM;
}

// What one rank asks of a collective: which one, its op (all_reduce) or root (broadcast), and
// the tensor's dtype and shape.
struct Call {
  const char* name;  // "all_reduce", "broadcast", "all_gather", "barrier"
  int64_t op = -1;   // ReduceOp, for all_reduce
  int64_t root = -1;  // for broadcast
};

// Every rank's call, exchanged before any data moves: a tensor this rank refuses (its own
// checks, `local`, which threw on this rank alone and left the others waiting in the exchange)
// or a mismatch between ranks (dtype, shape, op, root, or another collective altogether) is then
// a tg::Error on every rank, instead of a hang or a buffer overrun inside MPI. A barrier has no
// tensor (t undefined): the exchange is the barrier.
void check_same_everywhere(const Call& call, const Tensor& t, const std::function<void()>& local) {
  constexpr int kMaxDims = 16, kMeta = 6, kWidth = kMeta + kMaxDims;
  std::string refused;
  try {
    local();
    TG_CHECK(!t.defined() || t.dim() <= kMaxDims, "dist::", call.name, ": tensor: expected at most ", kMaxDims,
             " dims, got ", t.dim());
  } catch (const Error& e) {
    refused = e.what();
  }
  const char* const kNames[] = {"all_reduce", "broadcast", "all_gather", "barrier"};
  int64_t mine[kWidth] = {};
  mine[0] = refused.empty() ? 0 : 1;
  mine[1] = std::find_if(std::begin(kNames), std::end(kNames), [&](const char* n) { return std::string(n) == call.name; }) -
            std::begin(kNames);
  mine[2] = call.op;
  mine[3] = call.root;
  if (refused.empty() && t.defined()) {
    mine[4] = int64_t(t.dtype());
    mine[5] = t.dim();
    for (int64_t d = 0; d < t.dim(); ++d) mine[kMeta + d] = t.size(d);
  }
  const int world = world_size();
  std::vector<int64_t> all(size_t(world) * kWidth);
  run_collective(call.name, [&](MPI_Request* r) {
    return MPI_Iallgather(mine, kWidth, MPI_INT64_T, all.data(), kWidth, MPI_INT64_T, MPI_COMM_WORLD, r);
  });
  if (!refused.empty()) throw Error(refused);
  for (int r = 0; r < world; ++r)
    TG_CHECK(all[size_t(r) * kWidth] == 0, "dist::", call.name, ": rank ", r,
             " refused its tensor (its own error says why), so no rank's data moved");
  auto describe = [&](int r) {
    const int64_t* v = all.data() + size_t(r) * kWidth;
    std::ostringstream s;
    s << kNames[v[1]];
    if (std::string(kNames[v[1]]) == "barrier") return s.str();
    if (v[2] >= 0) s << " (" << reduce_op_name(ReduceOp(v[2])) << ")";
    s << " of " << dtype_name(DType(v[4])) << " (";
    for (int64_t d = 0; d < v[5]; ++d) s << (d ? ", " : "") << v[kMeta + d];
    s << ")";
    if (v[3] >= 0) s << " with root " << v[3];
    return s.str();
  };
  for (int r = 1; r < world; ++r) {
    const bool same = std::equal(all.begin(), all.begin() + kWidth, all.begin() + r * kWidth);
    TG_CHECK(same, "dist::", call.name, ": expected the same collective, op, dtype, shape and root on every rank, got ",
             describe(0), " on rank 0 and ", describe(r), " on rank ", r);
  }
}

// The first byte of a contiguous tensor.
char* bytes_of(const Tensor& t) {
  return static_cast<char*>(dispatch_all(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return static_cast<void*>(const_cast<T*>(t.data<T>()));
  }));
}

// MPI counts are int: larger tensors move in pieces.
template <class F>
void in_pieces(int64_t n, F&& f) {
  constexpr int64_t kPiece = int64_t(1) << 30;
  for (int64_t i = 0; i < n; i += kPiece) f(i, int(std::min(kPiece, n - i)));
}

}  // namespace

bool available() { return true; }

void init() {
  if (mpi_running()) return;
  int finished = 0;
  MPI_Finalized(&finished);
  TG_CHECK(!finished, "dist::init: MPI was already finalized in this process; it cannot start again");
  int provided = 0;
  const int code = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  TG_CHECK(code == MPI_SUCCESS, "dist::init: MPI_Init_thread failed with code ", code);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_dup(MPI_COMM_WORLD, &g_control);
  if (!g_initialized_here) std::atexit(finalize_at_exit);
  g_initialized_here = true;
}

bool is_initialized() { return mpi_running(); }

int rank() {
  if (!mpi_running()) return 0;
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int world_size() {
  if (!mpi_running()) return 1;
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

void barrier() {
  if (!mpi_running()) return;
  // An exchange of calls, as before each collective: a rank in another collective is then an
  // error on every rank (an MPI_Ibarrier against another rank's all_reduce hung or mismatched).
  check_same_everywhere({"barrier"}, Tensor(), [] {});
}

namespace {

// An all_reduce's buffer: the tensor itself, or its float32 copy for a 16-bit one (reduced in
// float32, rounded once by finish_reduce).
Tensor reduce_buffer(const Tensor& t) {
  return is_reduced_floating(t.dtype()) ? detail::convert(t.detach(), DType::Float32) : t.detach();
}

void finish_reduce(Tensor& t, Tensor& buffer, ReduceOp op) {
  if (op == ReduceOp::Avg) detail::raw_mul_(buffer, 1.0 / world_size());
  if (is_reduced_floating(t.dtype())) {
    Tensor target = t.detach();
    detail::raw_copy_(target, buffer);
  }
  t.bump_version();
}

void check_reduce(const char* op_name, const Tensor& t, ReduceOp op) {
  check_tensor(op_name, t, true);
  TG_CHECK(op != ReduceOp::Avg || is_floating(t.dtype()), "dist::", op_name,
           ": op: expected sum, product, min or max for an integer tensor, got avg on ", dtype_name(t.dtype()));
}

}  // namespace

void all_reduce(Tensor& t, ReduceOp op) {
  if (!mpi_running()) return check_reduce("all_reduce", t, op);
  check_same_everywhere({"all_reduce", int64_t(op)}, t, [&] { check_reduce("all_reduce", t, op); });
  Tensor buffer = reduce_buffer(t);
  const size_t elem = dtype_size(buffer.dtype());
  char* base = bytes_of(buffer);
  in_pieces(buffer.numel(), [&](int64_t first, int count) {
    run_collective("all_reduce", [&](MPI_Request* r) {
      return MPI_Iallreduce(MPI_IN_PLACE, base + size_t(first) * elem, count, wire_type(buffer.dtype()), mpi_op(op),
                            MPI_COMM_WORLD, r);
    });
  });
  finish_reduce(t, buffer, op);
}

struct Work::State {
  Tensor tensor, buffer;
  ReduceOp op = ReduceOp::Sum;
  std::vector<MPI_Request> requests;
  int64_t index = 0;  // of its last piece's collective (see wait_for)
  bool done = false;

  void finish() {
    done = true;
    finish_reduce(tensor, buffer, op);
  }
  // Not waited for: completes it (the average's division, a 16-bit tensor's rounding back), as
  // wait() would; an error cannot leave a destructor, so it is dropped.
  ~State() {
    if (done || requests.empty() || !mpi_running()) return;
    try {
      wait_for(requests, index, "all_reduce_async");
      finish();
    } catch (...) {
    }
  }
};

bool Work::is_completed() {
  if (!state_ || state_->done) return true;
  int flag = 0;
  throw_if_failed(MPI_Testall(int(state_->requests.size()), state_->requests.data(), &flag, MPI_STATUSES_IGNORE),
                  "all_reduce_async");
  if (flag) state_->finish();
  return flag != 0;
}

void Work::wait() {
  if (!state_ || state_->done) return;
  wait_for(state_->requests, state_->index, "all_reduce_async");
  state_->finish();
}

Work all_reduce_async(Tensor& t, ReduceOp op) {
  check_reduce("all_reduce_async", t, op);
  if (!mpi_running()) return Work();
  auto state = std::make_shared<Work::State>();
  state->tensor = t;
  state->buffer = reduce_buffer(t);
  state->op = op;
  const size_t elem = dtype_size(state->buffer.dtype());
  char* base = bytes_of(state->buffer);
  in_pieces(state->buffer.numel(), [&](int64_t first, int count) {
    state->requests.emplace_back();
    state->index = g_started++;
    throw_if_failed(MPI_Iallreduce(MPI_IN_PLACE, base + size_t(first) * elem, count, wire_type(state->buffer.dtype()),
                                   mpi_op(op), MPI_COMM_WORLD, &state->requests.back()),
                    "all_reduce_async");
  });
  return Work(std::move(state));
}

void broadcast(Tensor& t, int root) {
  auto local = [&] {
    check_tensor("broadcast", t, true);
    TG_CHECK(root >= 0 && root < world_size(), "dist::broadcast: root: expected a rank in [0, ", world_size(),
             "), got ", root);
  };
  if (!mpi_running()) return local();
  check_same_everywhere({"broadcast", -1, root}, t, local);
  const size_t elem = dtype_size(t.dtype());
  char* base = bytes_of(t);
  in_pieces(t.numel(), [&](int64_t first, int count) {
    run_collective("broadcast", [&](MPI_Request* r) {
      return MPI_Ibcast(base + size_t(first) * elem, count, wire_type(t.dtype()), root, MPI_COMM_WORLD, r);
    });
  });
  t.bump_version();
}

std::vector<Tensor> all_gather(const Tensor& t) {
  auto local = [&] { check_tensor("all_gather", t, false); };
  if (!mpi_running()) {
    local();
    return {t.detach().clone()};
  }
  check_same_everywhere({"all_gather"}, t, local);
  const int world = world_size();
  Shape shape = t.shape();
  shape.insert(shape.begin(), world);
  Tensor all = Tensor::empty(shape, t.dtype());
  const size_t elem = dtype_size(t.dtype());
  const int64_t n = t.numel();
  const char* mine = bytes_of(t);
  char* out = bytes_of(all);
  // Rank r's piece lands at r * n: one MPI_Allgather per piece of at most 2^30 / world elements.
  const int64_t piece = std::max<int64_t>(1, (int64_t(1) << 30) / world);
  std::vector<char> recv;
  for (int64_t first = 0; first < n; first += piece) {
    const int count = int(std::min(piece, n - first));
    recv.resize(size_t(count) * elem * size_t(world));
    run_collective("all_gather", [&](MPI_Request* r) {
      return MPI_Iallgather(mine + size_t(first) * elem, count, wire_type(t.dtype()), recv.data(), count,
                            wire_type(t.dtype()), MPI_COMM_WORLD, r);
    });
    for (int r = 0; r < world; ++r)
      std::copy_n(recv.data() + size_t(r) * size_t(count) * elem, size_t(count) * elem,
                  out + (size_t(r) * size_t(n) + size_t(first)) * elem);
  }
  std::vector<Tensor> parts;
  for (int r = 0; r < world; ++r) parts.push_back(all.select(0, r));
  return parts;
}

#endif

}  // namespace tg::dist
