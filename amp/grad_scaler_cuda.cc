// GradScaler on CUDA: the scale, inv_scale and the trackers live on the GPU of the grads; unscale_,
// enqueue_step and update are written to launch kernels on that device's current stream and read nothing
// on the host (the loss-scale update is amp::loss_scale::apply_rule in a single-thread kernel). Compiled in
// every build: the kernels are reached through a DeviceKernels table, so without MANTISSA_CUDA the scaler
// refuses to move to a GPU with the usual "no kernel" error.
#include <cmath>

#include "amp/cuda/host/amp_kernels.h"
#include "amp/grad_scaler.h"
#include "amp/loss_scale_rule.h"
#include "amp/unscale_grads.h"
#include "framework/device_kernels.h"
#include "framework/error.h"

namespace mantissa::amp {
namespace {

// The CPU scaler updates host fields (GradScaler::update): only the device update is a kernel.
constexpr DeviceKernels<decltype(cuda_update_loss_scale)> kUpdateLossScale{.cuda =
                                                                               MT_CUDA_KERNEL(cuda_update_loss_scale)};

// The device of the first defined grad of `optimizer`, or `fallback` when none has one.
Device grads_device(const Optimizer& optimizer, Device fallback) {
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g)
    for (const auto& p : optimizer.group_params(g))
      if (p.tensor.grad().defined()) return p.tensor.grad().device();
  return fallback;
}

float inverse(double scale) { return static_cast<float>(1.0 / static_cast<double>(static_cast<float>(scale))); }

}  // namespace

bool GradScaler::cuda_grads(const Optimizer& optimizer) {
  const Device device = grads_device(optimizer, scale_.device());
  if (!device.is_cuda()) {
    MT_CHECK(!on_device(), "GradScaler: the scaler lives on ", scale_.device().str(), " but the grads of this ",
             optimizer.type_name(), " optimizer are on the CPU. HINT: one scaler per device");
    return false;
  }
  if (!on_device()) to_device(device);
  MT_CHECK(scale_.device() == device, "GradScaler: the scaler lives on ", scale_.device().str(),
           " but the grads of this ", optimizer.type_name(), " optimizer are on ", device.str(),
           ". HINT: one scaler per device");
  return true;
}

void GradScaler::to_device(Device device) {
  kernel_for("GradScaler", kUpdateLossScale, device);  // a build without CUDA stops here
  // Moved on the first step of a run (scale(loss) or the first CUDA grads): the scale is taken while it is
  // still in host memory, so that even that step reads nothing from the GPU.
  const double scale = static_cast<double>(scale_.data<float>()[0]);
  scale_ = scale_.to(device);
  inv_scale_dev_ = scalar_tensor(inverse(scale), {.dtype = DType::kF32}).to(device);
  one_dev_ = scalar_tensor(1.0, {.dtype = DType::kF32}).to(device);
  counters_dev_ = zeros({loss_scale::kNumCounters}, {.dtype = DType::kI64, .device = device});
  counters_to_device(scale);
}

void GradScaler::counters_to_device(double scale) {
  std::vector<int64_t> values(loss_scale::kNumCounters);
  pack_counters(values.data());
  copy_(counters_dev_, from_vector(values, {loss_scale::kNumCounters}));
  fill_(inv_scale_dev_, inverse(scale));
}

GradScaler::Counters GradScaler::counters() const {
  Counters c{growth_tracker_, consecutive_overflows_, hysteresis_overflows_, stats_};
  if (!on_device()) return c;
  const Tensor host = counters_dev_.to(kCPU);
  unpack_counters(host.data<int64_t>(), c);
  // The device keeps no history: the scale is sampled here, at the host's looks.
  const double now = scale_.item();
  if (options_.history_capacity > 0 && (c.stats.history.empty() || c.stats.history.back().scale != now)) {
    if (c.stats.history.size() >= options_.history_capacity) c.stats.history.erase(c.stats.history.begin());
    c.stats.history.push_back({c.stats.steps, now});
  }
  return c;
}

namespace {

// A zeroed f32 flag on the scaler's device for this iteration of `optimizer` (reused: no allocation per step;
// the zero is a fill on the device's current stream).
Tensor zeroed_flag(std::map<const Optimizer*, Tensor>& flags, const Optimizer& optimizer, Device device) {
  Tensor& flag = flags[&optimizer];
  if (!flag.defined()) flag = zeros({}, {.dtype = DType::kF32, .device = device});
  fill_(flag, 0.0);
  return flag;
}

// The GradScaler's checks on grads (as prepare_grads in grad_scaler.cc): fp32 and contiguous.
void prepare_cuda_grads(const Optimizer& optimizer) {
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g)
    for (const auto& p : optimizer.group_params(g)) {
      const Tensor& grad = p.tensor.grad();
      if (!grad.defined()) continue;
      MT_CHECK(grad.dtype() == DType::kF32, "GradScaler: attempting to unscale FP16 gradients: the grad of '", p.name,
               "' is ", dtype_name(grad.dtype()), " ", shape_str(grad.shape()),
               ". HINT: keep fp32 master weights; autocast makes the 16-bit copies and hands back fp32 grads");
      if (!grad.is_contiguous()) {
        Tensor param = p.tensor;
        param.set_grad(grad.contiguous());
      }
    }
}

}  // namespace

void GradScaler::unscale_cuda(Optimizer& optimizer, PerOptimizer& s) {
  prepare_cuda_grads(optimizer);
  s.found_inf = zeroed_flag(found_inf_dev_, optimizer, scale_.device());
  unscale_grads_(optimizer, inv_scale_dev_, s.found_inf);
  agree_found_inf(s.found_inf);  // with an NCCL group: a MAX all-reduce on the GPU, no host read
  s.stage = Stage::kUnscaled;
}

void GradScaler::step_cuda(Optimizer& optimizer, PerOptimizer& s) {
  if (s.stage == Stage::kUnscaled) {
    // The grads are unscaled already: the fused step multiplies by 1 (exact) and skips on found_inf.
    optimizer.step({.inv_scale = one_dev_, .found_inf = s.found_inf});
  } else {
    prepare_cuda_grads(optimizer);
    s.found_inf = zeroed_flag(found_inf_dev_, optimizer, scale_.device());
    check_grads_finite_(optimizer, s.found_inf);
    agree_found_inf(s.found_inf);
    optimizer.step({.inv_scale = inv_scale_dev_, .found_inf = s.found_inf});
  }
  s.stage = Stage::kStepped;
}

void GradScaler::update_cuda() {
  std::vector<Tensor> flags;
  for (const auto& [opt, s] : per_optimizer_)
    if (s.found_inf.defined()) flags.push_back(s.found_inf);
  MT_CHECK(!flags.empty(), "GradScaler.update: no inf checks were recorded prior to update(). HINT: call ",
           "step(optimizer) (or unscale_) before update(), or update(new_scale) to set the scale directly");
  per_optimizer_.clear();
  dispatch("GradScaler.update", kUpdateLossScale, scale_.device(), scale_, inv_scale_dev_, counters_dev_, flags,
           rule());
  if (options_.on_min_scale != OnMinScale::kThrow) return;
  // kThrow asks the host to look every iteration (one read): the kernel only records the iteration.
  const int64_t floor_step = counters_dev_.to(kCPU).data<int64_t>()[loss_scale::kFloorOverflowStep];
  if (floor_step < 0) return;
  const Counters c = counters();
  growth_tracker_ = c.growth_tracker;
  consecutive_overflows_ = c.consecutive_overflows;
  hysteresis_overflows_ = c.hysteresis_overflows;
  stats_ = c.stats;
  counters_to_device(scale_.item());  // clears the pending report
  throw_at_min_scale(floor_step, c.stats.consecutive_skips);
}

void GradScaler::set_scale_cuda(double scale) {
  fill_(scale_, scale);
  fill_(inv_scale_dev_, inverse(scale));
  const Counters c = counters();  // the history as of now, with the new scale
  stats_.history = c.stats.history;
}

}  // namespace mantissa::amp
