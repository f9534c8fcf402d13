// The autocast categories pinned, op by op and device by device, against a list written out here
// independently of the descriptors (ops/*.h): an edit of one descriptor fails this test until the list
// (and the comparison with PyTorch in amp/README.md) is edited too. The list also holds PyTorch 2.x's
// category for each op (aten/src/ATen/autocast_mode.cpp: the AutocastCPU and AutocastCUDA registrations),
// and amp/README.md must show the same rows, with a note wherever mantissa's category differs from
// PyTorch's.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "ops/autocast.h"  // cast_inputs, policy_for, policy_table: autocast as the ops apply it
#include "ops/op.h"

namespace mantissa {
namespace {

using amp::CastPolicy;
constexpr CastPolicy kLow = CastPolicy::kLowerPrecision, kFp32 = CastPolicy::kFp32, kPromote = CastPolicy::kPromote,
                     kRefused = CastPolicy::kRefused, kNone = CastPolicy::kNone;

struct Row {
  const char* op;
  const char* torch_cpu;   // PyTorch's category on CPU tensors ("none": in no list)
  const char* torch_cuda;  // on CUDA tensors
  CastPolicy cpu, cuda;    // mantissa's
};

// Every op with a descriptor. PyTorch's cuda "fp32" for softmax, log_softmax, sum, cumsum and prod is its
// fp32_set_opt_dtype policy and for norm fp32_append_dtype: the same cast for ops called without a dtype.
const std::vector<Row>& expected() {
  static const std::vector<Row> kRows = {
      {"mm", "lower precision", "lower precision", kLow, kLow},
      {"bmm", "lower precision", "lower precision", kLow, kLow},
      {"matmul", "lower precision", "lower precision", kLow, kLow},
      {"linear", "lower precision", "lower precision", kLow, kLow},
      {"addmm", "lower precision", "lower precision", kLow, kLow},
      {"baddbmm", "lower precision", "lower precision", kLow, kLow},
      {"dot", "none", "promote", kNone, kPromote},
      {"conv2d", "lower precision", "lower precision", kLow, kLow},
      {"conv1d", "lower precision", "lower precision", kLow, kLow},
      {"scaled_dot_product_attention", "lower precision", "lower precision", kLow, kLow},
      {"pow", "none", "fp32", kNone, kFp32},
      {"addcmul", "none", "promote", kNone, kPromote},
      {"addcdiv", "none", "promote", kNone, kPromote},
      {"exp", "none", "fp32", kNone, kFp32},
      {"log", "none", "fp32", kNone, kFp32},
      {"sqrt", "none", "none", kNone, kNone},
      {"rsqrt", "none", "fp32", kNone, kFp32},
      {"abs", "none", "none", kNone, kNone},
      {"relu", "none", "none", kNone, kNone},
      {"gelu", "none", "none", kNone, kNone},
      {"tanh", "none", "none", kNone, kNone},
      {"sigmoid", "none", "none", kNone, kNone},
      {"softmax", "none", "fp32", kNone, kFp32},
      {"log_softmax", "none", "fp32", kNone, kFp32},
      {"layer_norm", "none", "fp32", kNone, kFp32},
      {"group_norm", "none", "fp32", kNone, kFp32},
      {"sum", "none", "fp32", kNone, kFp32},
      {"mean", "none", "none", kNone, kNone},
      {"logsumexp", "none", "fp32", kNone, kFp32},
      {"prod", "fp32", "fp32", kFp32, kFp32},
      {"norm", "none", "fp32", kNone, kFp32},
      {"cumsum", "none", "fp32", kNone, kFp32},
      {"cross_entropy", "fp32", "fp32", kFp32, kFp32},
      {"nll_loss", "fp32", "fp32", kFp32, kFp32},
      {"mse_loss", "fp32", "fp32", kFp32, kFp32},
      {"l1_loss", "fp32", "fp32", kFp32, kFp32},
      {"smooth_l1_loss", "fp32", "fp32", kFp32, kFp32},
      {"binary_cross_entropy", "fp32", "refused", kFp32, kRefused},
      {"binary_cross_entropy_with_logits", "fp32", "fp32", kFp32, kFp32},
      {"cat", "promote", "none", kPromote, kNone},
      {"stack", "promote", "none", kPromote, kNone},
      {"scatter_add", "none", "promote", kNone, kPromote},
      {"index_put", "none", "promote", kNone, kPromote},
      {"quantize_fp8", "none", "none", kNone, kNone},
      {"amax", "none", "none", kNone, kNone},
      {"scaled_mm", "none", "none", kNone, kNone},
  };
  return kRows;
}

std::string spelled(CastPolicy p) { return std::string(amp::policy_name(p)); }

TEST(AutocastTable, EveryOpHasItsPinnedCategoryOnEachDevice) {
  std::set<std::string> listed;
  for (const Row& row : expected()) {
    SCOPED_TRACE(row.op);
    EXPECT_TRUE(listed.insert(row.op).second) << "listed twice";
    EXPECT_EQ(spelled(amp::policy_for(row.op, DeviceType::kCPU)), spelled(row.cpu)) << "CPU";
    EXPECT_EQ(spelled(amp::policy_for(row.op, DeviceType::kCUDA)), spelled(row.cuda)) << "CUDA";
  }
  for (const OpInfo* info : all_ops()) {
    EXPECT_TRUE(listed.count(std::string(info->name))) << info->name << " has a descriptor but no row here";
  }
  EXPECT_EQ(listed.size(), all_ops().size());
}

std::string read_source_file(const std::string& relative) {
  std::ifstream in(std::string(MANTISSA_GOLDEN_DIR) + "/../../" + relative);
  EXPECT_TRUE(in.good()) << "cannot read " << relative;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The README row of `row` up to its note: | `op` | PyTorch CPU | PyTorch CUDA | mantissa CPU | mantissa CUDA |
std::string readme_row(const Row& row) {
  return "| `" + std::string(row.op) + "` | " + row.torch_cpu + " | " + row.torch_cuda + " | " + spelled(row.cpu) +
         " | " + spelled(row.cuda) + " |";
}

// The note cell of the README line that starts with `prefix` ("" when there is no such line).
std::string note_after(const std::string& readme, const std::string& prefix) {
  const size_t at = readme.find("\n" + prefix);
  if (at == std::string::npos) return "";
  const size_t begin = at + 1 + prefix.size();
  std::string note = readme.substr(begin, readme.find('\n', begin) - begin);
  while (!note.empty() && (note.back() == '|' || note.back() == ' ')) note.pop_back();
  while (!note.empty() && note.front() == ' ') note.erase(note.begin());
  return note;
}

// Where mantissa deliberately departs from PyTorch (none of the rows today), the row's note must say why.
TEST(AutocastTable, ReadmeComparisonShowsEveryRow) {
  const std::string readme = read_source_file("amp/README.md");
  for (const Row& row : expected()) {
    const bool shown = readme.find("\n" + readme_row(row)) != std::string::npos;
    EXPECT_TRUE(shown) << "amp/README.md must have this row (then a note cell):\n" << readme_row(row);
    const bool same_as_pytorch = row.torch_cpu == spelled(row.cpu) && row.torch_cuda == spelled(row.cuda);
    if (shown && !same_as_pytorch) {
      EXPECT_FALSE(note_after(readme, readme_row(row)).empty())
          << row.op << " differs from PyTorch: its row in amp/README.md needs a note saying why";
    }
  }
}

}  // namespace
}  // namespace mantissa
