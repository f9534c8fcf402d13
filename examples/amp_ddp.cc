// Mixed precision in your own loop with data parallelism: DistributedDataParallel around the model, each
// rank on its own shard of every batch, and a GradScaler that agrees with the other ranks on found_inf
// (PyTorch's "DistributedDataParallel, one GPU per process" recipe: autocast and the scaler are used as in
// one process). An MLP on Fashion-MNIST; the ranks must end with identical weights.
// Usage: mpirun -np 2 amp_ddp [fp16|bf16] [STEPS] [BATCH_PER_RANK]   (without mpirun: one process)
// On a machine with fewer cores than ranks times OpenMP threads, set OMP_NUM_THREADS (e.g. cores / ranks).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "data/idx.h"
#include "data/loader.h"
#include "framework/dist/process_group.h"
#include "models/mlp.h"
#include "ops/elementwise/elementwise.h"
#include "ops/loss/loss.h"
#include "ops/reduce/reduce.h"
#include "optim/sgd.h"
#include "train/ddp.h"

using namespace mantissa;

int main(int argc, char** argv) {
  const std::string precision = argc > 1 ? argv[1] : "fp16";
  const int64_t steps = argc > 2 ? std::stoll(argv[2]) : 200;
  const int64_t batch_per_rank = argc > 3 ? std::stoll(argv[3]) : 64;
  if (precision != "fp16" && precision != "bf16") {
    std::fprintf(stderr, "precision must be fp16 or bf16, got '%s'\n", precision.c_str());
    return 2;
  }
  const DType dtype = precision == "fp16" ? DType::kF16 : DType::kBF16;

  // Under mpirun: the MPI world (rank 0 .. size - 1); alone: a world of one.
  std::unique_ptr<ProcessGroup> pg = init_process_group();
  const int rank = pg->rank(), world = pg->size();

  absl::StatusOr<MnistData> data = read_mnist(MnistSplit::kTrain, {.scaling = PixelScaling::kNormalized});
  if (!data.ok()) {
    // Every rank reads the same files, so every rank fails here together.
    std::fprintf(stderr, "rank %d: %s\n", rank, data.status().ToString().c_str());
    return 1;
  }
  // Every rank shuffles with the same seed and keeps its own share of each batch of world * batch_per_rank.
  DataLoader loader(std::make_shared<TensorDataset>(std::vector{data->images, data->labels}),
                    {.batch_size = batch_per_rank,
                     .shuffle = Shuffle::kRandom,
                     .seed = 1,
                     .shard = {.rank = rank, .world_size = world}});

  MLP model(784, {256}, 10);
  DistributedDataParallel ddp(model, *pg);  // every rank now holds rank 0's initial weights
  SGD opt(model.named_parameters(), {.lr = 0.05, .momentum = 0.9});
  amp::GradScalerOptions scaler_options = amp::scaler_defaults_for(dtype);
  scaler_options.process_group = pg.get();  // an inf on any rank skips the step on all of them
  amp::GradScaler scaler(scaler_options);

  double first = 0.0, last = 0.0;  // this rank's mean loss at each end of the run
  const int64_t window = std::clamp<int64_t>(steps / 2, 1, 50);
  for (int64_t step = 0; step < steps; ++step) {
    std::optional<Example> batch = loader.next();
    if (!batch) batch = loader.next();  // the epoch ended: start the next one

    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard autocast({.dtype = dtype});
      loss = cross_entropy(model.forward((*batch)[0].flatten(1)), (*batch)[1]);
    }
    scaler.scale(loss).backward();  // DDP all-reduces the (scaled) grads in buckets while this runs
    ddp.finish();                   // every rank's grads are now the mean over the ranks
    scaler.step(opt);
    scaler.update();

    if (step < window) first += loss.item() / static_cast<double>(window);
    if (step >= steps - window) last += loss.item() / static_cast<double>(window);
  }

  // The mean over the ranks of each rank's mean loss, and how far any rank's weights are from rank 0's.
  Tensor losses = from_vector<double>({first, last});
  pg->all_reduce(losses, ReduceOp::kAvg);
  double difference = 0.0;
  for (const Tensor& p : model.parameters()) {
    Tensor rank0 = p.detach().clone();
    pg->broadcast(rank0, 0);
    difference = std::max(difference, max(abs(p.detach() - rank0)).item());
  }
  Tensor largest = from_vector<double>({difference});
  pg->all_reduce(largest, ReduceOp::kMax);

  if (rank == 0) {
    const amp::GradScalerStats stats = scaler.stats();
    std::printf("ranks: %d, batch %lld per rank\n", world, static_cast<long long>(batch_per_rank));
    std::printf("loss: %.4f over the first %lld steps, %.4f over the last %lld\n", losses.data<double>()[0],
                static_cast<long long>(window), losses.data<double>()[1], static_cast<long long>(window));
    std::printf("weights: largest difference from rank 0 %g\n", largest.item());
    std::printf("scaler: %s, %lld updates, %lld skipped, scale %g\n", scaler.is_enabled() ? "on" : "off",
                static_cast<long long>(stats.steps), static_cast<long long>(stats.skipped_steps), scaler.get_scale());
  }
  return 0;
}
