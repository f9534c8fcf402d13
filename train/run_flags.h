// mantissa-train's flags, each declared once, next to the RunOptions field it sets, in run_flags.cc's table.
// Everything that lists flags comes from that table: --help, the parsing of --name=value, each flag's own
// range check (part of validate()), and the config JSON a run stores in its checkpoints, with its reader.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "train/run.h"

namespace mantissa {

// Whether the config JSON records a flag: the flags that decide what is trained do; those that say where
// and how it runs (device, threads, progress) or where its files go do not.
enum class InConfig { kYes, kNo };

// Under mpirun: whether every rank must be started with the same value (checked before the first collective,
// train/run_agreement.cc), or whether it may differ from rank to rank: where this rank's own files are, how
// this machine runs it, what only rank 0 uses.
enum class AcrossRanks { kSame, kMayDiffer };

struct FlagInfo {
  std::string name;  // without the dashes
  std::string help;
  std::string value;                 // the field's value as flag text ("" for none)
  std::vector<std::string> choices;  // the names an enum flag accepts; empty for the others
  InConfig in_config = InConfig::kYes;
  AcrossRanks across_ranks = AcrossRanks::kSame;
};

// Every flag, in --help's order, with its value in `options` (RunOptions{}: the defaults --help shows).
std::vector<FlagInfo> flag_infos(const RunOptions& options = {});

// --help's flag lines: "  --name  help (default: value)", one per flag.
std::string flags_help();

// Sets the field of flag `name` from its text, as on the command line. Errors (InvalidArgument, one line
// naming the flag): an unknown name ("unknown flag --bogus"), a value of the wrong form ("--lr=abc: not a
// number", "--model=rnn: expected mlp | cnn | gpt"). Whether the value is in range is validate()'s.
absl::Status set_flag(RunOptions& options, std::string_view name, std::string_view value);

// The first flag, in table order, whose value is outside its own range ("--lr must be > 0, got -1"), or ok.
// validate() calls it, then checks what ties two flags together.
absl::Status check_flag_ranges(const RunOptions& options);

// The flags the config JSON records, as one JSON object in table order, with `data` resolved (never the
// default): what checkpoints keep in /meta/config_json.
std::string to_json(const RunOptions& options);

// Reads to_json's output back: the recorded flags set, the others at their defaults. Errors name the key or
// the flag (an unknown key, a bad value, text that is not such an object).
absl::StatusOr<RunOptions> options_from_json(std::string_view json);

// The flag value that selects an enum value: "mlp", "fashion-mnist", "adamw", "bar" ("" for DataKind::kDefault).
const char* choice_name(ModelKind model);
const char* choice_name(DataKind data);
const char* choice_name(OptimizerKind optimizer);
const char* choice_name(ProgressMode progress);
const char* choice_name(CollectiveCheck check);

}  // namespace mantissa
