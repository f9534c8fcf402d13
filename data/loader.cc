// DataLoader: order per (seed, epoch, rank), batches gathered by the dataset, and a bounded prefetch queue
// filled by one worker thread that restarts from wherever set_position() puts the loader.
#include "data/loader.h"

#include "framework/cuda/allocator.h"
#include "framework/cuda/device.h"
#include "framework/error.h"

namespace mantissa {

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  MT_CHECK(dataset_ != nullptr, "DataLoader: no dataset");
  MT_CHECK(options_.batch_size >= 1, "DataLoader: batch_size must be >= 1, got ", options_.batch_size);
  MT_CHECK(options_.prefetch >= 0, "DataLoader: prefetch must be >= 0, got ", options_.prefetch);
  MT_CHECK(options_.pin_memory == PinMemory::kNo || cuda_device_count() > 0,
           "DataLoader: pin_memory needs a GPU: ", cuda_unavailable_reason(),
           ". HINT: pinned memory only speeds up copies to a GPU; leave pin_memory at kNo");
  const int64_t w = options_.shard.world_size;
  MT_CHECK(w >= 1 && options_.shard.rank >= 0 && options_.shard.rank < w, "DataLoader: rank ", options_.shard.rank,
           " must be in [0, world_size ", w, ")");
  samples_ = shard_size(dataset_->size(), options_.shard);
  start_worker();
}

DataLoader::~DataLoader() { stop_worker(); }

int64_t DataLoader::batches_per_epoch() const {
  const int64_t b = options_.batch_size;
  return options_.drop_last == DropLast::kYes ? samples_ / b : (samples_ + b - 1) / b;
}

std::shared_ptr<const std::vector<int64_t>> DataLoader::rank_order(int64_t epoch) const {
  std::lock_guard lock(order_mutex_);
  if (order_epoch_ != epoch) {
    order_ = std::make_shared<const std::vector<int64_t>>(
        shard_order(epoch_order(dataset_->size(), options_.shuffle, options_.seed, epoch), options_.shard));
    order_epoch_ = epoch;
  }
  return order_;
}

std::vector<int64_t> DataLoader::batch_indices(int64_t epoch, int64_t batch) const {
  MT_CHECK(batch >= 0 && batch < batches_per_epoch(), "DataLoader: batch ", batch, " out of range [0, ",
           batches_per_epoch(), ")");
  const auto order = rank_order(epoch);
  const int64_t begin = batch * options_.batch_size;
  const int64_t end = std::min(begin + options_.batch_size, samples_);
  return {order->begin() + begin, order->begin() + end};
}

Example DataLoader::make_batch(int64_t epoch, int64_t batch) const {
  const std::vector<int64_t> indices = batch_indices(epoch, batch);
  Example example = dataset_->get_batch(indices);
  if (options_.pin_memory == PinMemory::kYes) {
    for (Tensor& t : example) t = pin_memory(t);
  }
  return example;
}

std::optional<Example> DataLoader::next() {
  if (position_.batch >= batches_per_epoch()) {
    // The worker already runs on into the next epoch, so its queue stays in step without a restart.
    position_ = {.epoch = position_.epoch + 1, .batch = 0};
    return std::nullopt;
  }
  Example batch;
  if (options_.prefetch == 0) {
    batch = make_batch(position_.epoch, position_.batch);
  } else {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return !queue_.empty(); });
    MT_ASSERT(queue_.front().position == position_, "DataLoader: worker produced a batch out of order");
    // An error stays at the front: every next() rethrows it until set_position() moves past it.
    if (queue_.front().error) std::rethrow_exception(queue_.front().error);
    batch = std::move(queue_.front().batch);
    queue_.pop_front();
    cv_.notify_all();  // room for the worker
  }
  ++position_.batch;
  return batch;
}

void DataLoader::set_position(LoaderPosition position) {
  MT_CHECK(position.epoch >= 0 && position.batch >= 0 && position.batch <= batches_per_epoch(),
           "DataLoader: position {epoch ", position.epoch, ", batch ", position.batch, "} out of range (",
           batches_per_epoch(), " batches per epoch)");
  stop_worker();
  position_ = position;
  start_worker();
}

void DataLoader::start_worker() {
  if (options_.prefetch == 0) return;
  queue_.clear();
  stop_ = false;
  failed_ = false;
  produce_ = position_;
  worker_ = std::thread([this] { worker_loop(); });
}

void DataLoader::stop_worker() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void DataLoader::worker_loop() {
  const int64_t per_epoch = batches_per_epoch();
  std::unique_lock lock(mutex_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || (!failed_ && static_cast<int64_t>(queue_.size()) < options_.prefetch); });
    if (stop_) return;
    // The worker runs on into the next epoch, so the first batches of an epoch are ready when it starts.
    if (produce_.batch >= per_epoch) produce_ = {.epoch = produce_.epoch + 1, .batch = 0};
    if (per_epoch == 0) {  // nothing to produce: wait for stop
      cv_.wait(lock, [&] { return stop_; });
      return;
    }
    const LoaderPosition pos = produce_;
    lock.unlock();
    Item item{.position = pos};
    try {
      item.batch = make_batch(pos.epoch, pos.batch);
    } catch (...) {
      item.error = std::current_exception();
    }
    lock.lock();
    if (stop_) return;
    failed_ = item.error != nullptr;
    queue_.push_back(std::move(item));
    ++produce_.batch;
    cv_.notify_all();
  }
}

}  // namespace mantissa
