// Collective communication between processes, on MPI: the layer data parallelism stands on
// (issue 24). A program started by `mpirun -np P` calls tg::dist::init() once; every process
// (rank 0 .. P-1) then runs the same sequence of collectives on tensors of the same shape and
// dtype, and each call returns when this rank's part is done.
//
//   mpirun -np 2 ./my_training_program        (as root: add --allow-run-as-root)
//
// Without MPI at build time (TAPEGRAD_WITH_MPI=OFF, or no MPI found), or in a program that never
// calls init(), the world is one process: rank 0 of 1, and every collective is what it is for
// one process (all_reduce and broadcast leave the tensor as it is; all_gather returns a copy).
//
// The tensors: contiguous, float32, float64, int64, int32, bfloat16 or float16, changed in place
// (the collectives are not differentiable: they refuse a tensor that requires grad while grad
// mode is on, as other in-place writes do; call them under NoGradGuard, on .grad() tensors, or
// on detached ones). bfloat16 and float16 are reduced in float32 and rounded once. Every rank
// must call the same collective with the same op or root, dtype and shape; a mismatch, or a
// tensor one rank alone refuses, is a tg::Error on every rank naming the ranks and what they
// passed (checked with one small exchange before the data moves).
//
// Results: every rank gets the same bits (the reduction follows one order for all ranks), and a
// run with the same world size and inputs gives the same bits again. Errors of the MPI library
// (a rank that died, a broken connection) become tg::Error on the ranks that see them. A rank
// that exits (returns from main after an error it caught) while the others wait in a collective
// it never started ends the job: the first rank to notice names it on stderr and calls MPI_Abort
// (the collective cannot be cancelled, so it cannot throw and go on), as a killed rank does.
#pragma once

#include <memory>
#include <vector>

#include "tensor.h"

namespace tg::dist {

enum class ReduceOp { Sum, Avg, Product, Min, Max };

// Whether this build has MPI.
bool available();

// Joins the world of processes started by mpirun (MPI_Init_thread, serialized threads). Safe to
// call again; MPI is finalized when the process exits. Without MPI it does nothing, and throws
// when mpirun started more than one process (each would run alone: P copies of one job).
void init();
bool is_initialized();

// Whether this process was started by mpirun / mpiexec (their environment variables are set):
// a program that also runs alone calls init() only then, and skips MPI's start-up otherwise.
bool launched_by_mpirun();

int rank();        // 0 until init()
int world_size();  // 1 until init()

// Returns when every rank has called it; a rank in another collective meanwhile is a tg::Error on
// every rank, as a mismatch of the collectives below is.
void barrier();

// t = op over the ranks of t, on every rank. Avg is Sum divided by world_size (floating dtypes
// only; for bf16/fp16 the division happens in float32 before the rounding).
void all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum);

// A collective in flight: wait() returns when this rank's part is done and its result is in the
// tensor; is_completed() asks without blocking (and lets MPI make progress). Destroying a Work
// that was not waited for waits.
class Work {
 public:
  struct State;
  Work() = default;
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}
  bool is_completed();
  void wait();

 private:
  std::shared_ptr<State> state_;
};

// all_reduce started without waiting (MPI_Iallreduce), for overlapping communication with
// computation: t must stay untouched until wait(). Unlike all_reduce it does not compare the
// shapes across ranks (that exchange would wait for the other ranks): every rank must start the
// same sequence of collectives on tensors of the same dtype and size, as DistributedDataParallel
// does with buckets built alike on every rank.
Work all_reduce_async(Tensor& t, ReduceOp op = ReduceOp::Sum);

// t = rank root's t, on every rank.
void broadcast(Tensor& t, int root);

// Every rank's t, in rank order (world_size tensors of t's shape and dtype), on every rank.
std::vector<Tensor> all_gather(const Tensor& t);

const char* reduce_op_name(ReduceOp op);  // "sum", "avg", "product", "min", "max"

}  // namespace tg::dist
