// mantissa-train --report=precision: the table on stdout, <report_out>.json and .png, nothing trained; bad
// values are refused before anything runs.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "absl/strings/match.h"
#include "train/run.h"

namespace mantissa {
namespace {

namespace fs = std::filesystem;

RunOptions report_options(const std::string& out) {
  RunOptions o;
  o.data = DataKind::kSynthetic;
  o.mlp_hidden = {32, 16};
  o.batch_size = 16;
  o.progress = ProgressMode::kNone;
  o.report = "precision";
  o.report_out = out;
  return o;
}

TEST(PrecisionReportRun, WritesTheTableTheJsonAndThePicture) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("report." + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string printed = (dir / "stdout.txt").string();
  RunOptions o = report_options((dir / "mlp").string());
  std::FILE* out = std::fopen(printed.c_str(), "w");
  const absl::StatusOr<RunSummary> summary = run(o, out);
  std::fclose(out);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->steps, 0);  // nothing trained
  std::stringstream text;
  text << std::ifstream(printed).rdbuf();
  for (const char* s : {"precision report: mlp, one training batch of 16", "layers.0", "f32>bf16", "f32>f16",
                        "layers.2 output", "the data suggests a loss scale of", "flushed@S"}) {
    EXPECT_TRUE(absl::StrContains(text.str(), s)) << s << "\n" << text.str();
  }
  std::stringstream json;
  json << std::ifstream(dir / "mlp.json").rdbuf();
  EXPECT_TRUE(absl::StrContains(json.str(), "\"loss_scale\": 65536")) << json.str().substr(0, 300);
  EXPECT_TRUE(absl::StrContains(json.str(), "\"path\": \"layers.4\""));
  if (std::system("command -v gnuplot >/dev/null 2>&1") == 0) {
    EXPECT_GT(fs::file_size(dir / "mlp.png"), 1000u);
  }
  EXPECT_FALSE(fs::exists(dir / "mlp.json.partial"));
  fs::remove_all(dir);
}

// Under the precision ladder (issue 36) the report runs on the bf16 weights widened, and its memory section shows
// the ladder's bytes per parameter beside the fp32-master baseline: the MLP 784-32-16-10 has 25,818 parameters.
TEST(PrecisionReportRun, TheMemorySectionShowsTheLaddersBytesPerParameter) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("report_ladder." + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string printed = (dir / "stdout.txt").string();
  RunOptions o = report_options((dir / "mlp").string());
  o.precision = Precision::kBF16;
  o.master_weights = MasterWeights::kNone;
  o.update_rounding = UpdateRounding::kKahan;
  o.optimizer_state = StateStorage::k8bit;
  std::FILE* out = std::fopen(printed.c_str(), "w");
  const absl::StatusOr<RunSummary> summary = run(o, out);
  std::fclose(out);
  ASSERT_TRUE(summary.ok()) << summary.status();
  std::stringstream text;
  text << std::ifstream(printed).rdbuf();
  for (const char* s :
       {"weights and inputs in fp32 (the bf16 weights widened)", "memory: bytes per parameter (adam, 25818 parameters)",
        "master_weights=fp32 optimizer_state=fp32", "18.000",
        "master_weights=none update_rounding=kahan optimizer_state=8bit", "8.004"}) {
    EXPECT_TRUE(absl::StrContains(text.str(), s)) << s << "\n" << text.str();
  }
  fs::remove_all(dir);
}

TEST(PrecisionReportRun, BadValuesAreRefusedBeforeAnythingRuns) {
  RunOptions o = report_options("/nonexistent-folder/r");
  std::FILE* out = std::fopen("/dev/null", "w");
  absl::StatusOr<RunSummary> summary = run(o, out);
  ASSERT_FALSE(summary.ok());
  EXPECT_TRUE(absl::StrContains(summary.status().message(), "the folder /nonexistent-folder does not exist"))
      << summary.status();
  o.report = "bogus";
  EXPECT_TRUE(absl::StrContains(validate(o).message(), "--report=bogus: expected precision | speed | memory"));
  std::fclose(out);
}

}  // namespace
}  // namespace mantissa
