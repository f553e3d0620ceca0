#include "parallel.h"

#include <omp.h>

#include "check.h"

namespace tg {

int num_threads() { return omp_get_max_threads(); }

void set_num_threads(int n) {
  TG_CHECK(n >= 1, "set_num_threads: expected a thread count >= 1, got ", n);
  omp_set_num_threads(n);
}

int max_threads() { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

}  // namespace tg
