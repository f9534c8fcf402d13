// Autocast: the per-thread guard that turns it on for a device (AutocastGuard), the queries the ops ask
// (is_enabled, lower_precision_dtype, policy_device), and the weight-cast cache with its working copies.
// Inside an AutocastGuard each op's public function casts its floating inputs by the category its
// descriptor gives for their device (ops/op.h: kLowerPrecision, kFp32, kPromote, kRefused, kNone); that
// application, the policy table and register_op are ops/autocast.h, since they read the op descriptors.
// PyTorch's CPU and CUDA lists are the reference (amp/README.md compares them op by op). Only floating,
// non-f64 tensors on the guard's device are cast; a tensor already in the target dtype is not copied.
// Casts of fp32 leaves that require grad are cached for the region (weights are cast once per forward) and
// the cache is cleared when the outermost guard exits. State is per thread. This includes only framework/
// (DESIGN.md): the ops library compiles amp/autocast.cc and is the only layer below amp that sees this header.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "framework/autocast_state.h"
#include "framework/tensor.h"

namespace mantissa::amp {

enum class CacheMode { kEnabled, kDisabled };
enum class AutocastState { kEnabled, kDisabled };

struct AutocastOptions {
  DeviceType device = DeviceType::kCPU;
  // f16 or bf16 (or f32 when `state` is kDisabled). Unset: the dtype autocast already has on this thread for
  // `device` (an outer guard's), at the outermost guard the device's default, as PyTorch's: bf16 on the
  // CPU, f16 on CUDA.
  std::optional<DType> dtype;
  AutocastState state = AutocastState::kEnabled;
  CacheMode cache = CacheMode::kEnabled;
  // Whose categories the ops apply to tensors on `device`. Unset: as the outer guard for `device` said,
  // at the outermost guard `device`'s own. kCUDA on a CPU guard runs a GPU recipe's casts on the CPU
  // (with f16 or bf16 rounding emulated bit-exactly), so that a CPU run can stand in for a GPU run: the
  // tests that compare a GPU run with the CPU's use it. Beyond PyTorch, which has no such switch.
  std::optional<DeviceType> policy_device;
};

// Enables (or, with state kDisabled, suspends) autocast for one device type on this thread until the
// guard is destroyed; the outer settings come back exactly.
class AutocastGuard {
 public:
  explicit AutocastGuard(AutocastOptions options = {});
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DeviceType device_;
  bool counted_;  // this guard enabled autocast and so counts toward the cache's region
  bool prev_enabled_;
  DType prev_dtype_;
  CacheMode prev_cache_;
  DeviceType prev_policy_device_;
};

// Puts this thread's whole autocast state back to `state` (a copy of autocast_tls() taken earlier) for a
// scope: every device's switch, dtype and policy device, and the cache mode; the state in force before
// comes back after. A forward's state replayed in its backward: recompute (ops/recompute/recompute.h) reruns a
// segment in it, and a custom Function's backward runs in it when it asks to (ops/function.h).
class AutocastReplay {
 public:
  explicit AutocastReplay(const AutocastTls& state);
  AutocastReplay(const AutocastReplay&) = delete;
  AutocastReplay& operator=(const AutocastReplay&) = delete;

 private:
  AutocastGuard cpu_;
  AutocastGuard cuda_;
};

bool is_enabled(DeviceType device);
// Whether autocast may cast `t` for `device`: a defined floating, non-f64 tensor on that device type.
bool is_castable(const Tensor& t, DeviceType device);
DType lower_precision_dtype(DeviceType device);
// Whose categories apply to tensors on `device` on this thread (AutocastOptions::policy_device).
DeviceType policy_device(DeviceType device);

// `t` in `dtype` as autocast casts it (cast_inputs calls it for each input it casts): `t` itself when
// already in `dtype`; for an fp32 leaf that requires grad, with the cache on and a 16-bit `dtype`, the
// region's cached cast (or the master's working copy), made once and recorded with grad on; otherwise t.to(dtype).
Tensor cached_cast(const Tensor& t, DType dtype);

// Persistent working copies (beyond PyTorch): `copy` (f16 or bf16, the master's shape) stands for
// `master` (an fp32 leaf that requires grad) whenever autocast needs that cast with the weight-cast
// cache on (the default), on every thread, until cleared: no cast is made, and the gradient still flows
// back to the master in fp32. The copy is kept on the master itself (one per master: a second replaces
// the first), so it goes when the master goes. The owner (an optimizer with working copies enabled) keeps
// the copy equal to the rounded master after each update.
void set_working_copy(const Tensor& master, const Tensor& copy);
void clear_working_copy(const Tensor& master);
size_t working_copy_count();  // copies handed over and not cleared
// Makes `master`'s working copy in `dtype` (f16 or bf16: the rounded master), hands it over and returns it.
Tensor make_working_copy(const Tensor& master, DType dtype);

// Working copies for as long as this object lives: inference without an optimizer. Each fp32 parameter
// of `params` gets its rounded `dtype` copy, so that a forward under autocast casts no weight (at batch 1
// the casts are most of a forward: bench/RESULTS.md, inference); the outputs are bit-identical to casting.
// Call refresh() after changing the masters (loading weights); the destructor clears the copies.
class ScopedWorkingCopies {
 public:
  ScopedWorkingCopies(const std::vector<Tensor>& params, DType dtype);
  ~ScopedWorkingCopies();
  ScopedWorkingCopies(const ScopedWorkingCopies&) = delete;
  ScopedWorkingCopies& operator=(const ScopedWorkingCopies&) = delete;
  void refresh();

 private:
  std::vector<std::pair<Tensor, Tensor>> copies_;  // (master, copy)
};

// Number of cached weight casts on this thread (for tests).
size_t cache_size();
// Casts of cacheable tensors (fp32 leaves that require grad) this thread has actually performed, i.e.
// cache misses, since it started: a weight cast once per region adds exactly 1 per region.
uint64_t weight_cast_count();

}  // namespace mantissa::amp
