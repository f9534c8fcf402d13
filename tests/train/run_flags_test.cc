// mantissa-train's flag table (train/run_flags.h): every flag has help and --help shows its default; values
// and defaults round-trip through their flag text and through the config JSON checkpoints keep; a bad value
// is refused naming its flag; the docs mention only flags that exist.
#include "train/run_flags.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "tests/support/doc_example.h"

namespace mantissa {
namespace {

// A valid value other than the default for every flag (OtherValuesCoverEveryFlag fails for a flag missing
// here). The path has a quote, a backslash and a tab, which the JSON escapes.
const std::map<std::string, std::string>& other_values() {
  static const auto* values = new std::map<std::string, std::string>{{"model", "cnn"},
                                                                     {"data", "synthetic"},
                                                                     {"data_path", "/data/a \"b\"\\c\td"},
                                                                     {"mlp_hidden", "16,8"},
                                                                     {"n_layer", "2"},
                                                                     {"n_head", "2"},
                                                                     {"n_embd", "64"},
                                                                     {"block_size", "32"},
                                                                     {"dropout", "0.1"},
                                                                     {"batchnorm", "sync"},
                                                                     {"recompute", "blocks"},
                                                                     {"precision", "bf16"},
                                                                     {"fp8_recipe", "dynamic"},
                                                                     {"fp8_accumulator", "hopper"},
                                                                     {"optimizer", "adamw"},
                                                                     {"master_weights", "none"},
                                                                     {"update_rounding", "stochastic"},
                                                                     {"optimizer_state", "8bit"},
                                                                     {"lr", "0.0003"},
                                                                     {"momentum", "0.5"},
                                                                     {"weight_decay", "0.05"},
                                                                     {"batch_size", "16"},
                                                                     {"global_batch", "96"},
                                                                     {"epochs", "2"},
                                                                     {"max_steps", "100"},
                                                                     {"grad_accum", "4"},
                                                                     {"clip_grad_norm", "1.5"},
                                                                     {"init_scale", "1024"},
                                                                     {"growth_factor", "3"},
                                                                     {"backoff_factor", "0.25"},
                                                                     {"growth_interval", "10"},
                                                                     {"hysteresis", "2"},
                                                                     {"hysteresis_refill", "growth"},
                                                                     {"min_scale", "1"},
                                                                     {"seed", "18446744073709551615"},
                                                                     {"threads", "2"},
                                                                     {"eval_every", "7"},
                                                                     {"eval_batches", "3"},
                                                                     {"checkpoint_dir", "ck"},
                                                                     {"checkpoint_every", "5"},
                                                                     {"keep_checkpoints", "1"},
                                                                     {"resume", "latest"},
                                                                     {"metrics", "run.jsonl"},
                                                                     {"tensorboard", "runs/a"},
                                                                     {"tensorboard_histogram_every", "10"},
                                                                     {"profile", "trace.json"},
                                                                     {"memory_budget", "512"},
                                                                     {"profile_wait", "4"},
                                                                     {"profile_steps", "2"},
                                                                     {"report", "precision"},
                                                                     {"report_out", "out/report"},
                                                                     {"sample_chars", "0"},
                                                                     {"progress", "lines"},
                                                                     {"dist_timeout", "60"},
                                                                     {"collective_check", "shapes"},
                                                                     {"zero", "1"},
                                                                     {"device", "cuda:1"}};
  return *values;
}

RunOptions other_options() {
  RunOptions o;
  for (const auto& [name, value] : other_values()) EXPECT_TRUE(set_flag(o, name, value).ok()) << name;
  return o;
}

std::map<std::string, std::string> values_of(const RunOptions& o) {
  std::map<std::string, std::string> values;
  for (const FlagInfo& f : flag_infos(o)) values[f.name] = f.value;
  return values;
}

TEST(RunFlags, OtherValuesCoverEveryFlag) {
  std::set<std::string> names;
  for (const FlagInfo& f : flag_infos()) {
    names.insert(f.name);
    ASSERT_TRUE(other_values().contains(f.name)) << "add a test value for --" << f.name << " to other_values()";
    EXPECT_NE(other_values().at(f.name), f.value) << "--" << f.name << "'s test value is its default";
  }
  EXPECT_EQ(names.size(), other_values().size()) << "other_values() names a flag the table does not have";
}

// Under mpirun every rank must be started with the same flags (train/run_agreement.cc checks it) but these:
// where a rank keeps its files, how its machine runs it, what rank 0 alone uses. Each says why in the table.
TEST(RunFlags, OnlyPerRankFlagsMayDifferAcrossRanks) {
  const std::set<std::string> may_differ = {
      "data_path",    "recompute",    "threads",       "checkpoint_dir",
      "resume",       "metrics",      "tensorboard",   "tensorboard_histogram_every",
      "profile",      "profile_wait", "profile_steps", "report_out",
      "sample_chars", "progress",     "dist_timeout",  "device"};
  for (const FlagInfo& f : flag_infos()) {
    EXPECT_EQ(f.across_ranks == AcrossRanks::kMayDiffer, may_differ.contains(f.name)) << "--" << f.name;
  }
}

TEST(RunFlags, EveryFlagHasAUniqueNameAndHelp) {
  std::set<std::string> names;
  for (const FlagInfo& f : flag_infos()) {
    EXPECT_TRUE(std::regex_match(f.name, std::regex("[a-z][a-z0-9_]*"))) << f.name;
    EXPECT_TRUE(names.insert(f.name).second) << "--" << f.name << " is declared twice";
    EXPECT_FALSE(f.help.empty()) << "--" << f.name << " has no help";
  }
}

TEST(RunFlags, HelpListsEveryFlagInTableOrderWithItsDefault) {
  std::istringstream help(flags_help());
  std::string line;
  for (const FlagInfo& f : flag_infos()) {
    ASSERT_TRUE(std::getline(help, line)) << "--help ends before --" << f.name;
    EXPECT_TRUE(line.starts_with("  --" + f.name + " ")) << line;
    EXPECT_TRUE(line.ends_with("(default: " + (f.value.empty() ? "\"\"" : f.value) + ")")) << line;
  }
  EXPECT_FALSE(std::getline(help, line)) << "an extra --help line: " << line;
  EXPECT_NE(flags_help().find("  --lr                learning rate (default: 0.001)\n"), std::string::npos);
  EXPECT_NE(flags_help().find("  --weight_decay      weight decay (default: 0; 0.01 for adamw) (default: \"\")\n"),
            std::string::npos);
}

TEST(RunFlags, ValuesAndDefaultsRoundTripThroughTheirFlagText) {
  const RunOptions other = other_options();
  RunOptions o;
  for (const FlagInfo& f : flag_infos(other)) ASSERT_TRUE(set_flag(o, f.name, f.value).ok()) << f.name;
  EXPECT_EQ(values_of(o), values_of(other));
  for (const FlagInfo& f : flag_infos()) ASSERT_TRUE(set_flag(o, f.name, f.value).ok()) << f.name;
  EXPECT_EQ(values_of(o), values_of(RunOptions{}));
}

TEST(RunFlags, TheDefaultsAndTheOtherValuesAreValid) {
  EXPECT_TRUE(validate(RunOptions{}).ok()) << validate(RunOptions{});
  // other_values() runs the CNN; --recompute=blocks is the GPT's, so it is checked with the GPT.
  RunOptions cnn = other_options();
  cnn.recompute = RecomputeMode::kNone;
  EXPECT_TRUE(validate(cnn).ok()) << validate(cnn);
  RunOptions gpt;
  gpt.model = ModelKind::kGPT;
  gpt.recompute = RecomputeMode::kBlocks;
  EXPECT_TRUE(validate(gpt).ok()) << validate(gpt);
}

TEST(RunFlags, ABadValueIsRefusedNamingItsFlag) {
  for (const FlagInfo& f : flag_infos()) {
    RunOptions o;
    const absl::Status s = set_flag(o, f.name, "x?");
    if (s.ok()) {  // a text flag takes any text
      EXPECT_EQ(values_of(o)[f.name], "x?") << f.name;
    } else {
      EXPECT_TRUE(absl::StrContains(s.message(), "--" + f.name + "=x?: ")) << s;
    }
  }
  RunOptions o;
  EXPECT_EQ(set_flag(o, "bogus", "1").message(), "unknown flag --bogus");
  EXPECT_EQ(set_flag(o, "lr", "abc").message(), "--lr=abc: not a number");
  EXPECT_EQ(set_flag(o, "batch_size", "1.5").message(), "--batch_size=1.5: not an integer");
  EXPECT_EQ(set_flag(o, "seed", "-1").message(), "--seed=-1: not an integer >= 0");
  EXPECT_EQ(set_flag(o, "mlp_hidden", "256,x").message(), "--mlp_hidden=256,x: 'x' is not an integer");
  EXPECT_EQ(set_flag(o, "precision", "fp4").message(), "--precision=fp4: expected fp32 | fp16 | bf16 | fp8");
  EXPECT_EQ(set_flag(o, "data", "default").message(), "--data=default: expected fashion-mnist | text | synthetic");
}

TEST(RunFlags, IntegersAreDecimalOrHexadecimalAsAbslReadsThem) {
  RunOptions o;
  ASSERT_TRUE(set_flag(o, "seed", "0x5eed").ok());
  EXPECT_EQ(o.seed, 0x5eedu);
  ASSERT_TRUE(set_flag(o, "n_layer", " 12 ").ok());
  EXPECT_EQ(o.n_layer, 12);
  EXPECT_FALSE(set_flag(o, "n_layer", "-0x2").ok());
  ASSERT_TRUE(set_flag(o, "data", "").ok());  // empty: the model's usual data
  EXPECT_EQ(o.data, DataKind::kDefault);
  ASSERT_TRUE(set_flag(o, "weight_decay", "").ok());
  EXPECT_FALSE(o.weight_decay.has_value());
}

TEST(RunFlags, OutOfRangeValuesAreRefusedNamingTheFlag) {
  const std::vector<std::pair<std::map<std::string, std::string>, std::string>> cases = {
      {{{"lr", "-1"}}, "--lr must be > 0, got -1"},
      {{{"lr", "inf"}}, "--lr must be > 0, got inf"},
      {{{"n_head", "0"}}, "--n_head must be > 0, got 0"},
      {{{"dropout", "1"}}, "--dropout must be in [0, 1), got 1"},
      {{{"backoff_factor", "1.5"}}, "--backoff_factor must be in (0, 1), got 1.5"},
      {{{"growth_factor", "inf"}}, "--growth_factor must be > 1, got inf"},
      {{{"clip_grad_norm", "-1"}}, "--clip_grad_norm must be >= 0 (0: off), got -1"},
      {{{"threads", "-1"}}, "--threads must be >= 0 (0: all cores), got -1"},
      {{{"weight_decay", "nan"}}, "--weight_decay must be >= 0, got nan"},
      {{{"mlp_hidden", "256,0"}}, "--mlp_hidden: every size must be > 0, got 256,0"},
      {{{"dist_timeout", "0"}}, "--dist_timeout must be > 0, got 0"},
      // Rules that tie two flags together, and the device's form: validate() itself.
      {{{"model", "gpt"}, {"n_embd", "130"}}, "--n_embd (130) must be a multiple of --n_head (4)"},
      {{{"batchnorm", "sync"}}, "--batchnorm=sync needs --model=cnn (the only model with BatchNorm)"},
      {{{"recompute", "blocks"}}, "--recompute=blocks needs --model=gpt (the only model with blocks to recompute)"},
      {{{"min_scale", "1e6"}}, "--min_scale must be in [0, --init_scale], got 1e+06"},
      {{{"device", "gpu"}}, "--device=gpu: expected cpu, cuda or cuda:N"},
      {{{"fp8_accumulator", "h100"}},
       "--fp8_accumulator=h100: expected f32, hopper or hopper-fast (how the CPU's FP8 GEMMs sum their products)"},
      {{{"precision", "fp8"}, {"fp8_accumulator", "hopper"}, {"device", "cuda"}},
       "--fp8_accumulator=hopper models the tensor core on the CPU; on --device=cuda the GPU's own tensor core "
       "sums. HINT: leave it at f32 there"},
      {{{"update_rounding", "kahan"}},
       "--update_rounding=kahan rounds updates into bf16 weights, but --master_weights=fp32 keeps fp32 masters that "
       "take them exactly. HINT: --master_weights=none"},
      {{{"master_weights", "none"}},
       "--master_weights=none trains bf16 weights, which --precision=fp16 cannot hold (f16 weights without masters "
       "need a loss scaler and an f16 rounding rule this ladder does not have). HINT: --precision=bf16"},
      {{{"master_weights", "none"}, {"precision", "fp32"}},
       "--master_weights=none trains bf16 weights, which --precision=fp32 does not compute in (it runs the layers in "
       "f32). HINT: --precision=bf16"},
      {{{"optimizer_state", "8bit"}, {"optimizer", "sgd"}, {"momentum", "0"}},
       "--optimizer_state=8bit stores the momentum buffer, but --optimizer=sgd with --momentum=0 has no state to "
       "store. HINT: --momentum=0.9, or --optimizer_state=fp32"},
      {{{"precision", "fp8"}, {"fp8_recipe", "nvfp4"}, {"fp8_accumulator", "hopper"}},
       "--fp8_accumulator=hopper models Hopper's FP8 tensor core, which has no 16-element block scaling for "
       "--fp8_recipe=nvfp4 (MX and NVFP4 are Blackwell formats). HINT: --fp8_accumulator=f32"},
  };
  for (const auto& [flags, message] : cases) {
    RunOptions o;
    for (const auto& [name, value] : flags) ASSERT_TRUE(set_flag(o, name, value).ok()) << name;
    EXPECT_EQ(validate(o).message(), message);
  }
}

TEST(RunFlags, EnumFlagsNameEveryChoiceInTheirHelp) {
  int enums = 0;
  for (const FlagInfo& f : flag_infos()) {
    enums += !f.choices.empty();
    for (const std::string& choice : f.choices) {
      EXPECT_TRUE(absl::StrContains(f.help, choice)) << "--" << f.name << "'s help does not name " << choice;
    }
  }
  // model, data, batchnorm, recompute, precision, optimizer, master_weights, update_rounding, optimizer_state,
  // hysteresis_refill, progress, collective_check
  EXPECT_EQ(enums, 12);
}

TEST(RunFlags, EveryOptimizerChoiceParsesToItsKind) {
  const std::map<std::string, OptimizerKind> kinds = {{"sgd", OptimizerKind::kSGD},
                                                      {"adam", OptimizerKind::kAdam},
                                                      {"adamw", OptimizerKind::kAdamW},
                                                      {"lion", OptimizerKind::kLion}};
  for (const auto& [name, kind] : kinds) {
    RunOptions o;
    ASSERT_TRUE(set_flag(o, "optimizer", name).ok()) << name;
    EXPECT_EQ(o.optimizer, kind) << name;
    EXPECT_EQ(std::string(choice_name(kind)), name);
    EXPECT_TRUE(validate(o).ok()) << name;
  }
  RunOptions o;
  EXPECT_EQ(set_flag(o, "optimizer", "lamb").message(), "--optimizer=lamb: expected sgd | adam | adamw | lion");
}

TEST(RunFlags, PrecisionChoicesAreTheTrainersNames) {
  for (const FlagInfo& f : flag_infos()) {
    if (f.name != "precision") continue;
    ASSERT_EQ(f.choices.size(), 4u);
    for (const std::string& choice : f.choices) {
      absl::StatusOr<Precision> p = parse_precision(choice);
      ASSERT_TRUE(p.ok()) << choice;
      EXPECT_EQ(precision_name(*p), choice);
    }
  }
}

// The JSON checkpoints hold in /meta/config_json, as runs wrote it before the table existed (--batchnorm
// came later and is recorded after --dropout, --fp8_recipe after --precision, --global_batch after
// --batch_size, the precision ladder's three after --optimizer): old and new checkpoints must read the same.
TEST(RunFlagsConfigJson, TheDefaultsAsCheckpointsKeepThem) {
  const std::string head = R"({"model": "mlp", "data": "fashion-mnist", "data_path": "", "mlp_hidden": [1024, 1024], )"
                           R"("n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 128, "dropout": 0, )";
  const std::string precision = R"("precision": "fp16", )";
  const std::string tail =
      R"("optimizer": "adam", "lr": 0.001, "momentum": 0.90000000000000002, "weight_decay": null, )"
      R"("batch_size": 128, "epochs": 5, "max_steps": 0, "grad_accum": 1, "clip_grad_norm": 0, )"
      R"("init_scale": 65536, "growth_factor": 2, "backoff_factor": 0.5, "growth_interval": 2000, )"
      R"("hysteresis": 1, "hysteresis_refill": "clean_step", "min_scale": 0, "seed": 1, "eval_every": 0, "eval_batches": 0})";
  std::string new_tail = tail;
  new_tail.insert(new_tail.find(R"("epochs")"), R"("global_batch": 0, )");
  new_tail.insert(new_tail.find(R"("lr")"),
                  R"("master_weights": "fp32", "update_rounding": "nearest", "optimizer_state": "fp32", )");
  EXPECT_EQ(to_json(RunOptions{}), head + R"("batchnorm": "local", )" + precision +
                                       R"("fp8_recipe": "delayed", "fp8_accumulator": "f32", )" + new_tail);
  // A checkpoint written before --batchnorm, --fp8_recipe and --global_batch existed reads as their defaults
  // (local statistics, the delayed recipe, --batch_size per rank).
  absl::StatusOr<RunOptions> old = options_from_json(head + precision + tail);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(to_json(*old), to_json(RunOptions{}));
}

TEST(RunFlagsConfigJson, RecordsExactlyTheFlagsMarkedForIt) {
  const std::string json = to_json(RunOptions{});
  for (const FlagInfo& f : flag_infos()) {
    EXPECT_EQ(json.find("\"" + f.name + "\": ") != std::string::npos, f.in_config == InConfig::kYes) << f.name;
  }
}

TEST(RunFlagsConfigJson, DefaultsAndOtherValuesRoundTrip) {
  for (const RunOptions& o : {RunOptions{}, other_options()}) {
    const std::string json = to_json(o);
    absl::StatusOr<RunOptions> back = options_from_json(json);
    ASSERT_TRUE(back.ok()) << back.status() << "\n" << json;
    EXPECT_EQ(to_json(*back), json);
  }
  // Every recorded flag comes back; the others stay at their defaults.
  absl::StatusOr<RunOptions> back = options_from_json(to_json(other_options()));
  ASSERT_TRUE(back.ok());
  std::map<std::string, std::string> read = values_of(*back), written = values_of(other_options()),
                                     defaults = values_of(RunOptions{});
  for (const FlagInfo& f : flag_infos()) {
    EXPECT_EQ(read[f.name], f.in_config == InConfig::kYes ? written[f.name] : defaults[f.name]) << f.name;
  }
  // The default data is written as the data the model used.
  back = options_from_json(to_json(RunOptions{.model = ModelKind::kGPT}));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->data, DataKind::kText);
}

TEST(RunFlagsConfigJson, ReadingRefusesWhatToJsonNeverWrites) {
  auto error = [](const std::string& json) { return std::string(options_from_json(json).status().message()); };
  EXPECT_EQ(error(R"({"bogus": 1})"), R"(config JSON: "bogus" is not a flag the config records)");
  EXPECT_EQ(error(R"({"device": "cpu"})"), R"(config JSON: "device" is not a flag the config records)");
  EXPECT_EQ(error(R"({"lr": "x"})"), "config JSON: --lr=x: not a number");
  EXPECT_EQ(error(R"({"model": "rnn"})"), "config JSON: --model=rnn: expected mlp | cnn | gpt");
  EXPECT_EQ(error(R"({"lr": 0.1)"), "config JSON: expected ',' or '}' after a value");
  EXPECT_EQ(error(R"({"lr": 0.1} x)"), "config JSON: text after the object");
  EXPECT_EQ(error("[]"), "config JSON: expected an object");
  EXPECT_TRUE(options_from_json(" { } ").ok());
}

// The pages that document mantissa-train's flags: the front page, every page of docs/, train/'s.
std::vector<std::string> flag_docs() {
  std::vector<std::string> docs = {"README.md", "train/README.md", "train/checkpoint.md"};
  for (const auto& entry : std::filesystem::directory_iterator(testing::source_path("docs"))) {
    if (entry.path().extension() == ".md") docs.push_back("docs/" + entry.path().filename().string());
  }
  std::sort(docs.begin() + 3, docs.end());
  return docs;
}

// Every `--name` the docs show in backticks or on a mantissa-train command line is a flag of the table, so
// renaming or removing a flag fails here until the docs follow.
TEST(RunFlagsDocs, MentionOnlyFlagsThatExist) {
  std::set<std::string> flags = {"help"};
  for (const FlagInfo& f : flag_infos()) flags.insert(f.name);
  const std::set<std::string> mpirun_flags = {"allow-run-as-root", "oversubscribe", "mca",   "bind-to",
                                              "hostfile",          "host",          "map-by"};  // the docs say whose
  const std::regex flag("--([a-z][a-z0-9_-]*)");
  int mentions = 0;
  for (const std::string& doc : flag_docs()) {
    std::istringstream in(testing::read_text_file(testing::source_path(doc)));
    std::string line;
    while (std::getline(in, line)) {
      const size_t program = line.find("mantissa-train ");
      for (std::sregex_iterator m(line.begin(), line.end(), flag), end; m != end; ++m) {
        const size_t at = static_cast<size_t>(m->position(0));
        const bool quoted = at > 0 && line[at - 1] == '`';
        const bool on_command_line = program != std::string::npos && at > program;
        if (!quoted && !on_command_line) continue;
        ++mentions;
        const std::string name = (*m)[1];
        EXPECT_TRUE(flags.contains(name) || mpirun_flags.contains(name))
            << doc << " mentions --" << name << ", which mantissa-train does not have:\n"
            << line;
      }
    }
  }
  EXPECT_GT(mentions, 10);  // the scan found the docs' flags at all
}

}  // namespace
}  // namespace mantissa
