// amp/fp8_recipe.h: the presets, the per-role formats and overflow modes, the text form (every key, role
// prefixes, every error) and str() read back by parse_fp8_recipe.
#include "amp/fp8_recipe.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "framework/error.h"

namespace mantissa::amp {
namespace {

Fp8Recipe parsed(const std::string& text) {
  absl::StatusOr<Fp8Recipe> r = parse_fp8_recipe(text);
  EXPECT_TRUE(r.ok()) << text << ": " << r.status();
  return r.ok() ? *r : Fp8Recipe{};
}

// The error for `text`, which must be refused.
std::string refusal(const std::string& text) {
  absl::StatusOr<Fp8Recipe> r = parse_fp8_recipe(text);
  EXPECT_FALSE(r.ok()) << text << " was accepted as " << (r.ok() ? r->str() : "");
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(r.status().message());
}

TEST(Fp8Recipe, Presets) {
  const Fp8Recipe d = Fp8Recipe::delayed();
  for (Fp8Role role : kFp8Roles) {
    EXPECT_EQ(d.role(role).scaling, Fp8Scaling::kDelayed);
    EXPECT_EQ(d.role(role).history_len, 16);
    EXPECT_EQ(d.role(role).amax_compute, AmaxCompute::kMax);
    EXPECT_EQ(d.role(role).margin, 0);
  }
  EXPECT_EQ(d.format, Fp8Format::kHybrid);
  EXPECT_EQ(d.forward_overflow, Fp8Overflow::kSaturate);
  EXPECT_EQ(d.backward_overflow, Fp8Overflow::kSaturate);
  const Fp8Recipe d2 = Fp8Recipe::delayed(4, AmaxCompute::kMostRecent, 2);
  EXPECT_EQ(d2.grad_output.history_len, 4);
  EXPECT_EQ(d2.weight.amax_compute, AmaxCompute::kMostRecent);
  EXPECT_EQ(d2.input.margin, 2);
  for (Fp8Role role : kFp8Roles) EXPECT_EQ(Fp8Recipe::dynamic().role(role).scaling, Fp8Scaling::kDynamic);
}

TEST(Fp8Recipe, FormatsAndOverflowPerRole) {
  Fp8Recipe r = Fp8Recipe::delayed();
  EXPECT_EQ(r.dtype(Fp8Role::kInput), DType::kF8E4M3);
  EXPECT_EQ(r.dtype(Fp8Role::kWeight), DType::kF8E4M3);
  EXPECT_EQ(r.dtype(Fp8Role::kGradOutput), DType::kF8E5M2);  // HYBRID
  r.format = Fp8Format::kE4M3;
  EXPECT_EQ(r.dtype(Fp8Role::kGradOutput), DType::kF8E4M3);
  r.backward_overflow = Fp8Overflow::kNoSaturate;
  EXPECT_EQ(r.overflow(Fp8Role::kGradOutput), Fp8Overflow::kNoSaturate);
  EXPECT_EQ(r.overflow(Fp8Role::kInput), Fp8Overflow::kSaturate);
  EXPECT_EQ(r.overflow(Fp8Role::kWeight), Fp8Overflow::kSaturate);
  EXPECT_EQ(fp8_max(DType::kF8E4M3), 448.0f);
  EXPECT_EQ(fp8_max(DType::kF8E5M2), 57344.0f);
  EXPECT_THROW(fp8_max(DType::kBF16), Error);
  EXPECT_STREQ(fp8_role_name(Fp8Role::kGradOutput), "grad_output");
}

TEST(Fp8Recipe, ParsesHeadWordsAndKeys) {
  EXPECT_EQ(parsed("delayed"), Fp8Recipe::delayed());
  EXPECT_EQ(parsed("dynamic"), Fp8Recipe::dynamic());
  EXPECT_EQ(parsed("delayed:history=16,margin=0,algo=max"), Fp8Recipe::delayed());
  EXPECT_EQ(parsed("delayed:history=3,algo=most_recent,margin=1"), Fp8Recipe::delayed(3, AmaxCompute::kMostRecent, 1));
  Fp8Recipe expected = Fp8Recipe::dynamic();
  expected.format = Fp8Format::kE4M3;
  expected.backward_overflow = Fp8Overflow::kNoSaturate;
  for (Fp8Role role : kFp8Roles) expected.role(role).margin = 2;
  EXPECT_EQ(parsed("dynamic:format=e4m3,backward_overflow=no_saturate,margin=2"), expected);
  Fp8Recipe fwd = Fp8Recipe::delayed();
  fwd.forward_overflow = Fp8Overflow::kNoSaturate;
  EXPECT_EQ(parsed("delayed:forward_overflow=no_saturate"), fwd);
}

TEST(Fp8Recipe, RolePrefixesRefineWhateverTheirOrder) {
  // torchao-style mixed roles: weights dynamic, the rest delayed with their own history.
  const Fp8Recipe r = parsed("delayed:grad_output.margin=1,weight.scaling=dynamic,history=8,input.history=4");
  EXPECT_EQ(r.input.scaling, Fp8Scaling::kDelayed);
  EXPECT_EQ(r.weight.scaling, Fp8Scaling::kDynamic);
  EXPECT_EQ(r.grad_output.scaling, Fp8Scaling::kDelayed);
  EXPECT_EQ(r.input.history_len, 4);  // the prefixed key wins over the unprefixed one given after it
  EXPECT_EQ(r.grad_output.history_len, 8);
  EXPECT_EQ(r.grad_output.margin, 1);
  EXPECT_EQ(r.input.margin, 0);
  // An unprefixed history is fine while some role is delayed (the dynamic ones ignore it).
  EXPECT_EQ(parsed("dynamic:input.scaling=delayed,history=4").input.history_len, 4);
}

TEST(Fp8Recipe, StrIsReadBack) {
  std::vector<Fp8Recipe> recipes = {Fp8Recipe::delayed(), Fp8Recipe::dynamic(),
                                    Fp8Recipe::delayed(3, AmaxCompute::kMostRecent, 1)};
  Fp8Recipe mixed = Fp8Recipe::delayed(8);
  mixed.weight = Fp8TensorScaling{.scaling = Fp8Scaling::kDynamic};
  mixed.input.history_len = 4;
  mixed.grad_output.margin = 2;
  mixed.format = Fp8Format::kE4M3;
  mixed.backward_overflow = Fp8Overflow::kNoSaturate;
  recipes.push_back(mixed);
  Fp8Recipe dyn_first = Fp8Recipe::dynamic();
  dyn_first.grad_output = Fp8TensorScaling{.scaling = Fp8Scaling::kDelayed, .history_len = 32};
  recipes.push_back(dyn_first);
  for (const Fp8Recipe& r : recipes) {
    SCOPED_TRACE(r.str());
    EXPECT_EQ(parsed(r.str()), r);
  }
  EXPECT_EQ(Fp8Recipe::delayed().str(),
            "delayed:format=hybrid,history=16,algo=max,margin=0,forward_overflow=saturate,backward_overflow=saturate");
  EXPECT_EQ(Fp8Recipe::dynamic().str(),
            "dynamic:format=hybrid,margin=0,forward_overflow=saturate,backward_overflow=saturate");
}

TEST(Fp8Recipe, RefusesWhatItCannotRead) {
  EXPECT_NE(refusal("delay").find("unknown recipe \"delay\""), std::string::npos);
  EXPECT_NE(refusal("").find("unknown recipe"), std::string::npos);
  EXPECT_NE(refusal("delayed:").find("nothing after ':'"), std::string::npos);
  EXPECT_NE(refusal("delayed:history").find("\"history\" is not key=value"), std::string::npos);
  EXPECT_NE(refusal("delayed:history=").find("not key=value"), std::string::npos);
  EXPECT_NE(refusal("delayed:history=16x").find("history=16x is not an integer"), std::string::npos);
  EXPECT_NE(refusal("delayed:history=0").find("input.history is 0, expected 1 to 65536"), std::string::npos);
  EXPECT_NE(refusal("delayed:grad_output.history=100000").find("grad_output.history is 100000"), std::string::npos);
  EXPECT_NE(refusal("delayed:margin=-1").find("margin is -1, expected 0 to 64"), std::string::npos);
  EXPECT_NE(refusal("delayed:algo=mean").find("algo=mean, expected max or most_recent"), std::string::npos);
  EXPECT_NE(refusal("delayed:format=e5m2").find("format=e5m2, expected hybrid or e4m3"), std::string::npos);
  EXPECT_NE(refusal("delayed:backward_overflow=wrap").find("expected saturate or no_saturate"), std::string::npos);
  EXPECT_NE(refusal("delayed:histroy=4").find("unknown key \"histroy\""), std::string::npos);
  EXPECT_NE(refusal("delayed:history=4,history=8").find("\"history\" is given twice"), std::string::npos);
  EXPECT_NE(refusal("delayed:output.margin=1").find("unknown role \"output\""), std::string::npos);
  EXPECT_NE(refusal("delayed:input.format=e4m3").find("\"format\" is not a per-role key"), std::string::npos);
  EXPECT_NE(refusal("dynamic:history=4").find("every role is scaled dynamically"), std::string::npos);
  EXPECT_NE(refusal("delayed:weight.scaling=dynamic,weight.algo=max").find("weight is scaled dynamically"),
            std::string::npos);
  EXPECT_NE(refusal("delayed:scaling=sometimes").find("scaling=sometimes"), std::string::npos);
  // Every refusal names the recipe and shows the form.
  EXPECT_NE(refusal("delayed:x=1").find("FP8 recipe \"delayed:x=1\""), std::string::npos);
  EXPECT_NE(refusal("delayed:x=1").find("HINT:"), std::string::npos);
}

TEST(Fp8Recipe, CheckRefusesOutOfRangeRecipesBuiltInCode) {
  EXPECT_NO_THROW(check_fp8_recipe(Fp8Recipe::delayed()));
  Fp8Recipe r = Fp8Recipe::delayed();
  r.weight.history_len = 0;
  try {
    check_fp8_recipe(r);
    ADD_FAILURE() << "history 0 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("weight.history is 0"), std::string::npos) << e.what();
  }
  r = Fp8Recipe::dynamic();
  r.grad_output.margin = 65;
  EXPECT_THROW(check_fp8_recipe(r), Error);
}

}  // namespace
}  // namespace mantissa::amp
