// Where the ranks of a data-parallel run must hold the same value (batches per epoch, the step a resume
// starts at, whether rank 0 wrote its checkpoint, the flags they were started with, the model's parameters),
// one collective finds the ranks that do not, so that a mismatch becomes a clear error on every rank instead
// of a hang, a crash in MPI or silently diverged replicas.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "framework/dist/process_group.h"
#include "framework/module.h"

namespace mantissa {

// The first rank whose value differs from rank 0's.
struct RankDisagreement {
  int rank = 0;
  int64_t value = 0;        // that rank's
  int64_t rank0_value = 0;  // rank 0's
};

// Gathers every rank's `value` (one all_gather: every rank of `group` calls it at the same point, in the
// order of its other collectives) and returns the first rank that differs from rank 0, or nullopt when
// they all agree. Every rank gets the same answer.
std::optional<RankDisagreement> ranks_disagree(ProcessGroup& group, int64_t value);

// Every rank's `text`, in rank order (two all_gathers: the lengths, then the texts padded to the longest).
std::vector<std::string> all_gather_text(ProcessGroup& group, std::string_view text);

// A named value that every rank must hold the same: a flag and its text, a parameter and its shape.
struct Field {
  std::string name;
  std::string value;
};

// The first field, in order, whose value is not the same on every rank, and who holds what: its values
// in order of the first rank that holds each, with the ranks that hold it. A rank whose field there has
// another name (or that has fewer fields) holds "'<its name>' <value>" (or "nothing").
struct FieldDisagreement {
  std::string name;
  struct Holders {
    std::string value;
    std::vector<int> ranks;
  };
  std::vector<Holders> values;
  // "0.001 on rank 0, 0.002 on ranks 1, 2" (each value as `quote` formats it).
  std::string describe(std::string (*quote)(const std::string&) = nullptr) const;
};

// Whether every rank holds the same `fields`. In agreement it costs one all_gather of a 64-bit hash of
// them; otherwise the fields themselves are gathered to name the first that differs. Every rank of `group`
// calls it at the same point and gets the same answer.
std::optional<FieldDisagreement> fields_disagree(ProcessGroup& group, const std::vector<Field>& fields);

// The check PyTorch's DDP makes when it is built: whether every rank has the same parameters (dotted
// names, shapes, dtypes, in order). Nullopt when they do; else one line naming the first parameter that
// differs and what each rank has ("parameter 'layers.0.weight': [64, 784] f32 on rank 0, [32, 784] f32 on
// rank 1"). A collective, like fields_disagree.
std::optional<std::string> parameters_disagree(ProcessGroup& group, const std::vector<NamedTensor>& parameters);

// An error that every rank returns alike because a collective decided it (the ranks disagree): a program
// prints it once, on rank 0, and every rank ends together, without aborting the job (train_main.cc).
absl::Status agreed_error(absl::Status status);
bool is_agreed_error(const absl::Status& status);

}  // namespace mantissa
