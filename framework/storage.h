// Storage: one allocation that tensors (and their views) share.
#pragma once

#include <cstddef>

#include "framework/allocator.h"
#include "framework/device.h"

namespace mantissa {

class Storage {
 public:
  Storage(size_t nbytes, Device device, Allocator* allocator)
      : nbytes_(nbytes),
        device_(device),
        allocator_(allocator),
        data_(nbytes ? allocator->allocate(nbytes) : nullptr) {}
  ~Storage() { allocator_->deallocate(data_, nbytes_); }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  size_t nbytes_;
  Device device_;
  Allocator* allocator_;
  void* data_;
};

}  // namespace mantissa
