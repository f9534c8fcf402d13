// The autocast categories of every registered op (its descriptor, ops/<family>/<family>.h) checked against
// PyTorch's: the lists below are PyTorch 2.x's (aten/src/ATen/autocast_mode.cpp: the AutocastCPU and
// AutocastCUDA registrations, and the ops checked to be in none of them), written out per category, not
// per mantissa op. A descriptor that departs from PyTorch fails unless kDepartures says why; a new op fails
// until it is placed in PyTorch's lists here. amp/README.md's policy table is checked row by row against
// the registry and these lists: a row that disagrees with a descriptor, a missing row and a row for an op
// that has no descriptor all fail.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
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

// One device's lists, as PyTorch registers them. fp32 includes PyTorch's fp32_set_opt_dtype (softmax,
// log_softmax, sum, cumsum, prod on CUDA) and fp32_append_dtype (norm) policies: the same cast for ops
// called without a dtype, the only way mantissa's are called. `none` holds the ops that were looked up and
// are in no list: an op absent from all five is an op nobody has compared with PyTorch yet.
struct TorchLists {
  std::set<std::string> lower_precision, fp32, promote, banned, none;
};

const TorchLists& torch_cpu() {
  static const TorchLists kCpu{
      .lower_precision = {"mm", "bmm", "matmul", "linear", "addmm", "baddbmm", "conv1d", "conv2d",
                          "scaled_dot_product_attention"},
      .fp32 = {"prod", "cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "binary_cross_entropy",
               "binary_cross_entropy_with_logits"},
      .promote = {"cat", "stack"},
      .banned = {},
      .none = {"dot",
               "pow",
               "addcmul",
               "addcdiv",
               "exp",
               "log",
               "sqrt",
               "rsqrt",
               "abs",
               "relu",
               "gelu",
               "silu",
               "tanh",
               "sigmoid",
               "softmax",
               "log_softmax",
               "layer_norm",
               "group_norm",
               "sum",
               "mean",
               "logsumexp",
               "norm",
               "cumsum",
               "scatter_add",
               "index_put",
               "quantize_fp8",
               "amax",
               "scaled_mm",
               "quantize_blocks",
               "hadamard16",
               "block_scaled_mm"},
  };
  return kCpu;
}

const TorchLists& torch_cuda() {
  static const TorchLists kCuda{
      .lower_precision = {"mm", "bmm", "matmul", "linear", "addmm", "baddbmm", "conv1d", "conv2d",
                          "scaled_dot_product_attention"},
      .fp32 = {"pow", "exp", "log", "rsqrt", "softmax", "log_softmax", "layer_norm", "group_norm", "sum", "logsumexp",
               "prod", "norm", "cumsum", "cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss",
               "binary_cross_entropy_with_logits"},
      .promote = {"dot", "addcmul", "addcdiv", "scatter_add", "index_put"},
      .banned = {"binary_cross_entropy"},
      .none = {"sqrt", "abs", "relu", "gelu", "silu", "tanh", "sigmoid", "mean", "cat", "stack", "quantize_fp8", "amax",
               "scaled_mm", "quantize_blocks", "hadamard16", "block_scaled_mm"},
  };
  return kCuda;
}

// Where mantissa's descriptor deliberately differs from PyTorch's list: op -> why. None today.
const std::map<std::string, std::string>& departures() {
  static const std::map<std::string, std::string> kDepartures;
  return kDepartures;
}

// PyTorch's category of `op` as mantissa spells categories ("" when the op is in none of the five lists,
// "?" when it is in more than one).
std::string torch_category(const TorchLists& lists, const std::string& op) {
  const std::vector<std::pair<const std::set<std::string>*, CastPolicy>> sets = {
      {&lists.lower_precision, CastPolicy::kLowerPrecision},
      {&lists.fp32, CastPolicy::kFp32},
      {&lists.promote, CastPolicy::kPromote},
      {&lists.banned, CastPolicy::kRefused},
      {&lists.none, CastPolicy::kNone}};
  std::string found;
  for (const auto& [set, policy] : sets) {
    if (!set->count(op)) continue;
    if (!found.empty()) return "?";
    found = std::string(amp::policy_name(policy));
  }
  return found;
}

std::string spelled(CastPolicy p) { return std::string(amp::policy_name(p)); }

TEST(AutocastTable, EveryDescriptorHasPyTorchsCategoryOnEachDevice) {
  ASSERT_GT(all_ops().size(), 40u);
  for (const OpInfo* info : all_ops()) {
    const std::string op(info->name);
    SCOPED_TRACE(op);
    const std::string cpu = torch_category(torch_cpu(), op), cuda = torch_category(torch_cuda(), op);
    ASSERT_NE(cpu, "?") << "in more than one of PyTorch's CPU lists here";
    ASSERT_NE(cuda, "?") << "in more than one of PyTorch's CUDA lists here";
    ASSERT_FALSE(cpu.empty() || cuda.empty())
        << "has a descriptor but is in none of PyTorch's lists above: look it up in PyTorch's autocast lists "
           "(CPU and CUDA) and add it to the list of its category (or to `none`)";
    if (departures().count(op)) {
      EXPECT_TRUE(spelled(info->autocast.cpu) != cpu || spelled(info->autocast.cuda) != cuda)
          << "listed as a departure from PyTorch but has PyTorch's categories: remove it from kDepartures";
      continue;
    }
    EXPECT_EQ(spelled(info->autocast.cpu), cpu) << "CPU: the descriptor differs from PyTorch's list";
    EXPECT_EQ(spelled(info->autocast.cuda), cuda) << "CUDA: the descriptor differs from PyTorch's list";
    // The by-name lookup the rest of the library uses reads the same descriptor.
    EXPECT_EQ(amp::policy_for(op, DeviceType::kCPU), info->autocast.cpu);
    EXPECT_EQ(amp::policy_for(op, DeviceType::kCUDA), info->autocast.cuda);
  }
}

// The lists name no op that has no descriptor (a renamed or removed op leaves no stale entry behind).
TEST(AutocastTable, PyTorchListsHereNameOnlyRegisteredOps) {
  std::set<std::string> registered;
  for (const OpInfo* info : all_ops()) registered.insert(std::string(info->name));
  for (const TorchLists* lists : {&torch_cpu(), &torch_cuda()}) {
    for (const auto* set : {&lists->lower_precision, &lists->fp32, &lists->promote, &lists->banned, &lists->none}) {
      for (const std::string& op : *set) EXPECT_TRUE(registered.count(op)) << op << " has no descriptor";
    }
  }
}

std::string read_source_file(const std::string& relative) {
  std::ifstream in(std::string(MANTISSA_GOLDEN_DIR) + "/../../" + relative);
  EXPECT_TRUE(in.good()) << "cannot read " << relative;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct ReadmeRow {
  std::string torch_cpu, torch_cuda, cpu, cuda, note;
};

// The policy table's rows: | `op` | PyTorch CPU | PyTorch CUDA | mantissa CPU | mantissa CUDA | note |
std::map<std::string, ReadmeRow> readme_rows(const std::string& readme) {
  std::map<std::string, ReadmeRow> rows;
  const std::regex row(R"(^\| `(\w+)` \| ([^|]*) \| ([^|]*) \| ([^|]*) \| ([^|]*) \|(.*)\|\s*$)");
  std::istringstream in(readme);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (!std::regex_match(line, m, row)) continue;
    std::string note = m[6];
    while (!note.empty() && note.back() == ' ') note.pop_back();
    while (!note.empty() && note.front() == ' ') note.erase(note.begin());
    EXPECT_TRUE(rows.emplace(m[1], ReadmeRow{m[2], m[3], m[4], m[5], note}).second)
        << "amp/README.md shows " << m[1] << " twice";
  }
  return rows;
}

TEST(AutocastTable, ReadmeTableAgreesWithTheRegistry) {
  const std::map<std::string, ReadmeRow> rows = readme_rows(read_source_file("amp/README.md"));
  std::set<std::string> registered;
  for (const OpInfo* info : all_ops()) {
    const std::string op(info->name);
    registered.insert(op);
    SCOPED_TRACE(op);
    const std::string cpu = spelled(info->autocast.cpu), cuda = spelled(info->autocast.cuda);
    const std::string torch_c = torch_category(torch_cpu(), op), torch_g = torch_category(torch_cuda(), op);
    const std::string expected = "| `" + op + "` | " + torch_c + " | " + torch_g + " | " + cpu + " | " + cuda + " |";
    auto it = rows.find(op);
    if (it == rows.end()) {
      ADD_FAILURE() << "amp/README.md's policy table has no row for this op; add (then a note cell):\n" << expected;
      continue;
    }
    const ReadmeRow& r = it->second;
    EXPECT_EQ(r.cpu, cpu) << "amp/README.md's mantissa CPU cell disagrees with the descriptor";
    EXPECT_EQ(r.cuda, cuda) << "amp/README.md's mantissa CUDA cell disagrees with the descriptor";
    EXPECT_EQ(r.torch_cpu, torch_c) << "amp/README.md's PyTorch CPU cell disagrees with the lists in this test";
    EXPECT_EQ(r.torch_cuda, torch_g) << "amp/README.md's PyTorch CUDA cell disagrees with the lists in this test";
    if (cpu != torch_c || cuda != torch_g) {
      EXPECT_FALSE(r.note.empty()) << "differs from PyTorch: its row in amp/README.md needs a note saying why";
    }
  }
  for (const auto& [op, row] : rows) {
    EXPECT_TRUE(registered.count(op)) << "amp/README.md shows a row for " << op << ", which has no descriptor";
  }
}

}  // namespace
}  // namespace mantissa
