// tg::dist collectives (framework/dist.h). ctest runs this binary three ways: alone (a world of
// one process), and under `mpirun -np 2` and `-np 3`. Every rank runs every test in the same
// order, so the collectives pair up; the expected values are computed by hand from what each
// rank contributes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>

#include <tapegrad/tapegrad.h>

namespace tg {
namespace {

class Dist : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { dist::init(); }
  int rank = dist::rank(), world = dist::world_size();
};

// Rank r contributes value(r, i) at element i: small integers, so every sum is exact.
double value(int r, int64_t i) { return double((r + 1) * ((i % 7) + 1)); }

Tensor filled(DType dt, int64_t n, int r) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = value(r, i);
  return from_vector(v, {n}).to(dt);
}

TEST_F(Dist, InitIsIdempotentAndNamesTheWorld) {
  dist::init();
  EXPECT_GE(rank, 0);
  EXPECT_LT(rank, world);
  EXPECT_EQ(dist::is_initialized(), dist::available());
  if (!dist::available()) {
    EXPECT_EQ(world, 1);
  }
  dist::barrier();
}

TEST_F(Dist, AllReduceEveryOpDtypeAndSize) {
  // 0, 1, odd, and more than a 25 MB bucket of float32.
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(7), int64_t(7) << 20}) {
    for (DType dt : {DType::Float32, DType::Float64, DType::Int64, DType::Int32, DType::BFloat16, DType::Float16}) {
      if (n > 7 && dt != DType::Float32) continue;  // one large case is enough
      for (dist::ReduceOp op : {dist::ReduceOp::Sum, dist::ReduceOp::Avg, dist::ReduceOp::Product,
                                dist::ReduceOp::Min, dist::ReduceOp::Max}) {
        if (op == dist::ReduceOp::Avg && !is_floating(dt)) continue;
        SCOPED_TRACE(std::string(dtype_name(dt)) + " " + dist::reduce_op_name(op) + " n=" + std::to_string(n));
        Tensor t = filled(dt, n, rank);
        dist::all_reduce(t, op);
        ASSERT_EQ(t.dtype(), dt);
        const std::vector<double> got = t.to(DType::Float64).to_vector<double>();
        for (int64_t i = 0; i < n; i += (n > 1000 ? 997 : 1)) {
          double expect = op == dist::ReduceOp::Product ? 1.0 : 0.0;
          if (op == dist::ReduceOp::Min) expect = value(0, i);
          if (op == dist::ReduceOp::Max) expect = value(world - 1, i);
          for (int r = 0; r < world; ++r) {
            if (op == dist::ReduceOp::Sum || op == dist::ReduceOp::Avg) expect += value(r, i);
            if (op == dist::ReduceOp::Product) expect *= value(r, i);
          }
          if (op == dist::ReduceOp::Avg) expect /= world;
          // The 16-bit dtypes hold the exact result rounded once (bf16: 8 significant bits).
          const double tol = dt == DType::BFloat16 ? std::abs(expect) * 0x1p-8
                             : dt == DType::Float16 ? std::abs(expect) * 0x1p-11
                             : std::abs(expect) * 1e-6 * (op == dist::ReduceOp::Avg);
          ASSERT_NEAR(got[size_t(i)], expect, tol) << "element " << i;
        }
      }
    }
  }
}

TEST_F(Dist, EveryRankGetsTheSameBits) {
  // Random float32 values whose sum depends on the order of additions.
  Generator gen(1234 + uint64_t(rank));
  Tensor t = randn({1001}, DType::Float32, &gen);
  dist::all_reduce(t, dist::ReduceOp::Sum);
  const std::vector<Tensor> seen = dist::all_gather(t);
  ASSERT_EQ(int(seen.size()), world);
  for (int r = 1; r < world; ++r)
    EXPECT_EQ(std::memcmp(seen[0].data<float>(), seen[size_t(r)].data<float>(), 1001 * sizeof(float)), 0)
        << "rank " << r << " differs from rank 0";
}

TEST_F(Dist, AsyncAllReduceOverlapsAndFinishesOnWait) {
  std::vector<Tensor> ts;
  std::vector<dist::Work> works;
  for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16}) {
    ts.push_back(filled(dt, 1000, rank));
    works.push_back(dist::all_reduce_async(ts.back(), dist::ReduceOp::Avg));
  }
  (void)works[0].is_completed();  // may or may not be done: it only lets MPI progress
  for (size_t i = 0; i < ts.size(); ++i) {
    works[i].wait();
    EXPECT_TRUE(works[i].is_completed());
    const std::vector<double> got = ts[i].to(DType::Float64).to_vector<double>();
    for (int64_t j = 0; j < 1000; ++j) {
      double expect = 0;
      for (int r = 0; r < world; ++r) expect += value(r, j) / world;
      ASSERT_NEAR(got[size_t(j)], expect, std::abs(expect) * (i == 2 ? 0x1p-8 : 1e-6)) << i << " " << j;
    }
  }
}

TEST_F(Dist, BroadcastFromEachRoot) {
  for (int root = 0; root < world; ++root) {
    for (DType dt : {DType::Float32, DType::Int64, DType::BFloat16}) {
      Tensor t = filled(dt, 5, rank);
      dist::broadcast(t, root);
      EXPECT_EQ(t.to(DType::Float64).to_vector<double>(), filled(DType::Float64, 5, root).to_vector<double>());
    }
  }
}

TEST_F(Dist, AllGatherInRankOrder) {
  for (int64_t n : {0, 1, 9}) {
    Tensor t = filled(DType::Float64, n, rank).view({1, n});
    const std::vector<Tensor> parts = dist::all_gather(t);
    ASSERT_EQ(int(parts.size()), world);
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(parts[size_t(r)].shape(), (Shape{1, n}));
      EXPECT_EQ(parts[size_t(r)].to_vector<double>(), filled(DType::Float64, n, r).to_vector<double>());
    }
  }
}

TEST_F(Dist, InPlaceBumpsTheVersion) {
  Tensor t = zeros({3});
  const uint64_t before = t.version();
  dist::all_reduce(t);
  if (dist::is_initialized()) {
    EXPECT_GT(t.version(), before);
  }
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST_F(Dist, MismatchedShapesAreAnErrorOnEveryRank) {
  if (world < 2) GTEST_SKIP() << "needs two ranks (run under mpirun -np 2)";
  Tensor t = zeros({rank == 1 ? 4 : 3});
  const std::string msg = error_of([&] { dist::all_reduce(t); });
  EXPECT_NE(msg.find("expected the same collective, op, dtype, shape and root on every rank"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("all_reduce (sum) of float32 (3) on rank 0 and all_reduce (sum) of float32 (4) on rank 1"),
            std::string::npos)
      << msg;
  Tensor u = zeros({2}, rank == 1 ? DType::Float64 : DType::Float32);
  EXPECT_NE(error_of([&] { dist::broadcast(u, 0); }).find("broadcast of float64 (2) with root 0 on rank 1"),
            std::string::npos);
  dist::barrier();  // the world still works
}

// A different op, or another collective, on one rank: an error on every rank (the ops gave each
// rank its own result; all_reduce against all_gather of one shape hung).
TEST_F(Dist, MismatchedOpsAndCollectivesAreAnErrorOnEveryRank) {
  if (world < 2) GTEST_SKIP() << "needs two ranks (run under mpirun -np 2)";
  Tensor t = full({2}, rank + 1.0);
  const std::string msg = error_of([&] { dist::all_reduce(t, rank == 0 ? dist::ReduceOp::Sum : dist::ReduceOp::Max); });
  EXPECT_NE(msg.find("all_reduce (sum) of float32 (2) on rank 0 and all_reduce (max) of float32 (2) on rank 1"),
            std::string::npos)
      << msg;
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(2, float(rank + 1))) << "no data moved";
  const std::string other = error_of([&] {
    if (rank == 1) (void)dist::all_gather(t);
    else dist::all_reduce(t);
  });
  EXPECT_NE(other.find("and all_gather of float32 (2) on rank 1"), std::string::npos) << other;
  // a barrier against another collective (an MPI_Ibarrier met rank 0's exchange)
  const std::string with_barrier = error_of([&] {
    if (rank == 1) dist::barrier();
    else dist::all_reduce(t);
  });
  EXPECT_NE(with_barrier.find("all_reduce (sum) of float32 (2) on rank 0 and barrier on rank 1"), std::string::npos)
      << with_barrier;
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(2, float(rank + 1))) << "no data moved";
  dist::barrier();
}

// A tensor that one rank alone refuses (its own checks: dtype for avg, contiguity, grad, root,
// dims) is an error on every rank: the others waited in the exchange forever.
TEST_F(Dist, ATensorOneRankRefusesIsAnErrorOnEveryRank) {
  if (world < 2) GTEST_SKIP() << "needs two ranks (run under mpirun -np 2)";
  Tensor ints = zeros({2}, rank == 1 ? DType::Int32 : DType::Float32);
  const std::string msg = error_of([&] { dist::all_reduce(ints, dist::ReduceOp::Avg); });
  if (rank == 1) {
    EXPECT_NE(msg.find("got avg on int32"), std::string::npos) << msg;
  } else {
    EXPECT_NE(msg.find("dist::all_reduce: rank 1 refused its tensor"), std::string::npos) << msg;
  }
  Tensor wide = zeros({2, 2});
  Tensor maybe_strided = rank == 1 ? wide.transpose(0, 1) : wide;
  EXPECT_NE(error_of([&] { dist::broadcast(maybe_strided, 0); }), "");
  Tensor t = zeros({2});
  EXPECT_NE(error_of([&] { dist::broadcast(t, rank == 1 ? 7 : 0); }), "");
  Tensor many = zeros(Shape(rank == 1 ? 17 : 1, 1));
  EXPECT_NE(error_of([&] { (void)dist::all_gather(many); }), "");
  dist::barrier();  // the world still works
}

// A Work dropped without wait() completes as wait() would: the average divided, a 16-bit
// tensor rounded back (it was left as the sum, or untouched).
TEST_F(Dist, ADroppedWorkFinishesItsReduction) {
  for (DType dt : {DType::Float32, DType::BFloat16}) {
    Tensor t = full({3}, rank + 1.0, dt);
    { dist::Work dropped = dist::all_reduce_async(t, dist::ReduceOp::Avg); }
    EXPECT_EQ(t.to(DType::Float64).to_vector<double>(), std::vector<double>(3, (world + 1) / 2.0)) << dtype_name(dt);
  }
}

TEST_F(Dist, BadArgumentsAreErrors) {
  Tensor leaf = zeros({2}).requires_grad_();
  EXPECT_NE(error_of([&] { dist::all_reduce(leaf); }).find("dist::all_reduce: tensor: expected a tensor that does not "
                                                           "require grad"),
            std::string::npos);
  {
    NoGradGuard no_grad;
    dist::all_reduce(leaf);  // the way optimizers and DDP write parameters
  }
  Tensor wide = zeros({3, 4});
  Tensor strided = wide.transpose(0, 1);
  EXPECT_NE(error_of([&] { dist::all_reduce(strided); }).find("expected a contiguous tensor"), std::string::npos);
  Tensor ints = zeros({2}, DType::Int64);
  EXPECT_NE(error_of([&] { dist::all_reduce(ints, dist::ReduceOp::Avg); }).find("got avg on int64"),
            std::string::npos);
  Tensor t = zeros({2});
  EXPECT_NE(error_of([&] { dist::broadcast(t, world); }).find("dist::broadcast: root: expected a rank in [0, " +
                                                              std::to_string(world) + "), got " +
                                                              std::to_string(world)),
            std::string::npos);
  EXPECT_NE(error_of([&] { dist::broadcast(t, -1); }).find("got -1"), std::string::npos);
}

}  // namespace
}  // namespace tg
