// ops/op_registry.cc lists every descriptor that the family headers (ops/<family>/*.h) declare with MT_OP,
// once, with the name and policy the header gives it: the views built on all_ops() (amp::policy_table())
// cannot miss one.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "ops/autocast.h"
#include "ops/op.h"
#include "ops/softmax/softmax.h"

namespace mantissa {
namespace {

// name -> "cpu policy, cuda policy" spelled as in the header, from every MT_OP(name, cpu, cuda) in ops/**/*.h.
std::map<std::string, std::string> declared_in_headers() {
  const std::filesystem::path ops_dir = std::filesystem::path(MANTISSA_GOLDEN_DIR) / ".." / ".." / "ops";
  std::map<std::string, std::string> found;
  const std::regex mt_op(R"(^MT_OP\((\w+), (\w+, \w+)\))");
  for (const auto& entry : std::filesystem::recursive_directory_iterator(ops_dir)) {
    if (entry.path().extension() != ".h") continue;
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) {
      std::smatch m;
      if (!std::regex_search(line, m, mt_op)) continue;
      EXPECT_TRUE(found.emplace(m[1], m[2]).second) << m[1] << " is declared twice";
    }
  }
  return found;
}

std::string policy_spelling(amp::CastPolicy p) {
  switch (p) {
    case amp::CastPolicy::kLowerPrecision: return "kLowerPrecision";
    case amp::CastPolicy::kFp32: return "kFp32";
    case amp::CastPolicy::kPromote: return "kPromote";
    case amp::CastPolicy::kRefused: return "kRefused";
    case amp::CastPolicy::kNone: return "kNone";
  }
  return "?";
}

TEST(OpRegistry, ListsEveryDescriptorTheHeadersDeclareOnce) {
  const std::map<std::string, std::string> declared = declared_in_headers();
  ASSERT_GT(declared.size(), 40u) << "the scan of ops/**/*.h found too few MT_OP lines";
  std::map<std::string, std::string> listed;
  for (const OpInfo* info : all_ops()) {
    const std::string spelled = policy_spelling(info->autocast.cpu) + ", " + policy_spelling(info->autocast.cuda);
    EXPECT_TRUE(listed.emplace(std::string(info->name), spelled).second)
        << info->name << " is listed twice in ops/op_registry.cc";
  }
  for (const auto& [name, policy] : declared) {
    auto it = listed.find(name);
    if (it == listed.end()) {
      ADD_FAILURE() << "ops::" << name << " is declared but not listed in ops/op_registry.cc";
    } else {
      EXPECT_EQ(it->second, policy) << name;
    }
  }
  EXPECT_EQ(listed.size(), declared.size());
}

TEST(OpRegistry, PolicyLookupByNameReadsTheDescriptor) {
  for (DeviceType d : {DeviceType::kCPU, DeviceType::kCUDA}) {
    EXPECT_EQ(amp::policy_for("softmax", d), ops::softmax.autocast.on(d));
    EXPECT_EQ(amp::policy_for("linear", d), amp::CastPolicy::kLowerPrecision);
    EXPECT_EQ(amp::policy_for("not_an_op", d), amp::CastPolicy::kNone);
  }
  EXPECT_EQ(ops::softmax.autocast.on(DeviceType::kCPU), ops::softmax.autocast.cpu);
  EXPECT_EQ(ops::softmax.autocast.on(DeviceType::kCUDA), ops::softmax.autocast.cuda);
}

}  // namespace
}  // namespace mantissa
