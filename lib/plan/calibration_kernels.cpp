// Compute calibration (plan/calibration_kernels.h). GEMMs are timed with their operands in cache:
// the time model adds each product's operand bytes at operand_bytes_per_s (one way of a lone rank's
// copy bandwidth, shared as the core is), which is what a step's products, whose weights and
// activations outgrow the caches, cost beyond that (on the calibration machine, a 128 x 256 x 768
// product: 147 GFLOP/s warm, 115 cold; the two terms give 116). The streaming and attention kernels
// take their operands from a pool of copies used in turn (cold_copies), as a step finds them.
#include "plan/calibration_kernels.h"

#include <mpi.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "plan/calibration_timing.h"

namespace tessera::plan {
namespace {

// A pool of `copies` sets of a kernel's tensors; set(call) the one a call uses.
template <typename Set>
struct ColdPool {
  std::vector<Set> sets;
  template <typename Make>
  ColdPool(int64_t bytes_per_set, Make make) {
    const int64_t n = cold_copies(bytes_per_set);
    for (int64_t i = 0; i < n; ++i) sets.push_back(make());
  }
  Set& set(int64_t call) { return sets[static_cast<size_t>(call % static_cast<int64_t>(sets.size()))]; }
};

// A linear layer's three products on square n x n operands, in cache: forward y = x w^T, backward
// dx = dy w and dw += dy^T x (what a step runs per weight, in one rate).
struct LinearSet {
  Tensor x, w, y, dx, dw;
};

void calibrate_gemms(comm::Communicator& world, MachineModel& m, double t) {
  struct Class {
    const char* name;
    int64_t n;
    double max_flops;
  };
  for (const char* precision : {"f32", "bf16"}) {
    const ops::MatmulInputs inputs = std::string(precision) == "bf16" ? ops::MatmulInputs::bf16 : ops::MatmulInputs::f32;
    // Square products of 64, 256 and 768 stand for their classes.
    for (const Class& c : {Class{"small", 64, 1 << 22}, Class{"medium", 256, double(1 << 28)}, Class{"large", 768, 1e30}}) {
      const int64_t n = c.n;
      LinearSet s{filled({n, n}, 0.5f), filled({n, n}, 0.25f), Tensor::empty({n, n}), Tensor::empty({n, n}),
                  filled({n, n}, 0.0f)};
      const double sec = time_call(
          world,
          [&](int64_t) {
            ops::matmul(s.x, false, s.w, true, s.y, 1.0f, 0.0f, inputs);
            ops::matmul(s.y, false, s.w, false, s.dx, 1.0f, 0.0f, inputs);
            ops::matmul(s.y, true, s.x, false, s.dw, 1.0f, 1.0f, inputs);
          },
          t);
      const double flops = 3 * 2.0 * static_cast<double>(n * n * n);
      m.gemm[precision].push_back({c.name, c.max_flops, world_mean(world, flops / sec)});
    }
  }
}

void calibrate_attention(comm::Communicator& world, MachineModel& m, double t) {
  // causal attention, B 2, T 256, 4 heads of 32
  const int64_t b = 2, tl = 256, h = 4, d = 32;
  struct Set {
    Tensor qkv, out, lse;
  };
  ColdPool<Set> pool(b * tl * 4 * h * d * int64_t{sizeof(float)}, [&] {
    return Set{filled({b, tl, 3 * h * d}, 0.1f), Tensor::empty({b, tl, h * d}), Tensor::empty({b, h, tl})};
  });
  const double sec = time_call(
      world,
      [&](int64_t call) {
        Set& s = pool.set(call);
        ops::attention_forward(s.out, s.lse, s.qkv, h);
      },
      t);
  m.attention_flops_per_s = world_mean(world, 2.0 * b * tl * tl * d * h / sec);
}

// Per element: a norm, an elementwise activation, the loss's softmax, and the optimizer's update of
// a parameter (the gradient norm's pass, AdamW, the gradient zeroed: what the step runs).
void calibrate_other_kernels(comm::Communicator& world, MachineModel& m, double t) {
  auto& per_element = m.kernel_seconds_per_element;
  {
    const int64_t rows = 2048, cols = 256;
    struct Set {
      Tensor x, y, w, bias, mean, rstd;
    };
    ColdPool<Set> pool(2 * rows * cols * int64_t{sizeof(float)}, [&] {
      return Set{filled({rows, cols}, 1.0f), Tensor::empty({rows, cols}), filled({cols}, 1.0f), filled({cols}, 0.1f),
                 Tensor::empty({rows}), Tensor::empty({rows})};
    });
    const double elements = static_cast<double>(rows * cols);
    per_element["norm"] = world_mean(world, time_call(world, [&](int64_t call) {
                                       Set& s = pool.set(call);
                                       ops::layernorm_forward(s.y, s.mean, s.rstd, s.x, s.w, s.bias);
                                     }, t) / elements);
    per_element["elementwise"] = world_mean(world, time_call(world, [&](int64_t call) {
                                              Set& s = pool.set(call);
                                              ops::gelu_forward(s.y, s.x);
                                            }, t) / elements);
  }
  {
    const int64_t n = 512, vocab = 1024;
    struct Set {
      Tensor logits, targets, losses, lse;
    };
    ColdPool<Set> pool(n * vocab * int64_t{sizeof(float)}, [&] {
      Set s{filled({n, vocab}, 0.01f), Tensor::empty({n}, DType::i32), Tensor::empty({n}), Tensor::empty({n})};
      for (int64_t i = 0; i < n; ++i) s.targets.data<int32_t>()[i] = static_cast<int32_t>(i % vocab);
      return s;
    });
    per_element["softmax"] = world_mean(world, time_call(world, [&](int64_t call) {
                                          Set& s = pool.set(call);
                                          ops::softmax_xent_forward(s.losses, s.lse, s.logits, s.targets, vocab);
                                        }, t) / static_cast<double>(n * vocab));
  }
  {  // 4 Mi parameters: their four buffers (64 MiB) outgrow the caches as a model's do
    const int64_t params = int64_t{1} << 22;
    Tensor p = filled({params}, 0.1f), g = filled({params}, 0.01f), m1 = Tensor::zeros({params}),
           m2 = Tensor::zeros({params});
    ops::AdamWArgs args;
    args.zero_grad = true;
    per_element["adamw"] = world_mean(world, time_call(world, [&](int64_t) {
                                        (void)ops::sum_squares(g);
                                        ops::adamw(p, g, m1, m2, args);
                                      }, t) / static_cast<double>(params));
  }
  Tensor tiny = filled({16}, 1.0f), tiny_out = Tensor::empty({16});
  m.kernel_call_s = world_mean(world, time_call(world, [&](int64_t) { ops::gelu_forward(tiny_out, tiny); }, t));
  std::vector<char> from(int64_t{32} << 20, 1), to(from.size());
  const auto copy = [&](int64_t) { std::memcpy(to.data(), from.data(), from.size()); };
  const double bytes = 2.0 * static_cast<double>(from.size());  // read + write
  m.copy_bytes_per_s = world_mean(world, bytes / time_call(world, copy, t));
  // A GEMM's operands stream through its own core's caches, which the other cores do not share:
  // one way of a lone rank's copy bandwidth (the others wait), shared by the ranks that take turns
  // on a core. (Every rank copying at once measures the node's memory bus: on 2 cores, half.)
  double lone = 0;
  if (world.rank() == 0) {
    copy(0);
    const CalibrationClock::time_point start = CalibrationClock::now();
    int64_t calls = 0;
    do {
      copy(++calls);
    } while (seconds_since(start) < t);
    lone = bytes * static_cast<double>(calls) / seconds_since(start);
  }
  MPI_Bcast(&lone, 1, MPI_DOUBLE, 0, world.mpi_comm());
  m.operand_bytes_per_s = lone / 2 / m.oversubscription(m.ranks_per_node);
}

}  // namespace

void calibrate_kernels(comm::Communicator& world, MachineModel& m, double min_seconds) {
  calibrate_gemms(world, m, min_seconds);
  calibrate_attention(world, m, min_seconds);
  calibrate_other_kernels(world, m, min_seconds);
}

}  // namespace tessera::plan
