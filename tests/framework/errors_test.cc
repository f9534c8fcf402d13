// User mistakes throw mantissa::Error with a message naming the op and the arguments' shapes/dtypes; the
// library never calls exit().
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "framework/autograd.h"
#include "ops/conv/conv.h"
#include "ops/elementwise/elementwise.h"
#include "ops/matmul/matmul.h"
#include "ops/norm/norm.h"
#include "ops/pool/pool.h"
#include "ops/reduce/reduce.h"

namespace mantissa {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

Tensor f32(const Shape& s) { return zeros(s); }

TEST(Errors, BroadcastMismatchNamesOpAndShapes) {
  EXPECT_THAT(
      [] {
        add(f32({3, 4}), f32({5}));
      },
      ThrowsMessage<Error>(AllOf(HasSubstr("add:"), HasSubstr("[3, 4]"), HasSubstr("[5]"),
                                 HasSubstr("cannot be broadcast"), HasSubstr("sizes 4 and 5"))));
  EXPECT_THAT(
      [] {
        mul(f32({2, 3}), f32({3, 2}));
      },
      ThrowsMessage<Error>(AllOf(HasSubstr("mul:"), HasSubstr("[2, 3]"), HasSubstr("[3, 2]"))));
}

TEST(Errors, ViewOfIncompatibleStridesSuggestsReshape) {
  EXPECT_THAT(
      [] {
        f32({3, 4}).t().view({12});
      },
      ThrowsMessage<Error>(AllOf(HasSubstr("view:"), HasSubstr("[12]"), HasSubstr("[4, 3]"),
                                 HasSubstr("strides [1, 4]"), HasSubstr("reshape()"))));
}

TEST(Errors, ReshapeToWrongNumberOfElements) {
  EXPECT_THAT(
      [] {
        f32({2, 3}).reshape({4, 2});
      },
      ThrowsMessage<Error>(AllOf(HasSubstr("reshape:"), HasSubstr("[4, 2]"), HasSubstr("6 elements"))));
  EXPECT_THAT(
      [] {
        f32({2, 3}).view({-1, -1});
      },
      ThrowsMessage<Error>(AllOf(HasSubstr("view:"), HasSubstr("only one dimension can be -1"))));
}

TEST(Errors, DimOutOfRange) {
  EXPECT_THAT(
      [] {
        sum(f32({2, 3}), {2});
      },
      ThrowsMessage<Error>(
          AllOf(HasSubstr("sum:"), HasSubstr("dim 2 is out of range"), HasSubstr("2 dims"), HasSubstr("[-2, 1]"))));
  EXPECT_THAT([] { f32({2, 3}).transpose(0, -3); }, ThrowsMessage<Error>(HasSubstr("transpose: dim -3")));
  EXPECT_THAT([] { max(f32({2, 3}), 5); }, ThrowsMessage<Error>(HasSubstr("max: dim 5")));
}

TEST(Errors, ReductionOverARepeatedDim) {
  EXPECT_THAT(
      [] {
        mean(f32({2, 3}), {1, -1});
      },
      ThrowsMessage<Error>(AllOf(HasSubstr("mean:"), HasSubstr("appears twice"), HasSubstr("[1, -1]"))));
}

TEST(Errors, ItemOnManyElements) {
  EXPECT_THAT(
      [] {
        f32({2, 3}).item();
      },
      ThrowsMessage<Error>(AllOf(HasSubstr("item()"), HasSubstr("[2, 3]"), HasSubstr("6 elements"))));
}

TEST(Errors, BackwardOnOutputThatNeedsNoGrad) {
  EXPECT_THAT(
      [] {
        sum(f32({4, 2}) * 2.0).backward();
      },
      ThrowsMessage<Error>(
          AllOf(HasSubstr("backward:"), HasSubstr("does not require grad"), HasSubstr("NoGradGuard"))));
}

TEST(Errors, MissingGradientForNonScalarBackward) {
  Tensor x = f32({2, 5}).set_requires_grad(true);
  EXPECT_THAT([&] { (x * 2.0).backward(); },
              ThrowsMessage<Error>(AllOf(HasSubstr("backward:"), HasSubstr("one-element"), HasSubstr("[2, 5]"))));
}

TEST(Errors, BackwardGradientOfWrongShapeOrDtype) {
  Tensor x = f32({2, 5}).set_requires_grad(true);
  Tensor y = x * 2.0;
  EXPECT_THAT(
      [&] {
        y.backward(f32({5, 2}));
      },
      ThrowsMessage<Error>(AllOf(HasSubstr("backward:"), HasSubstr("[5, 2]"), HasSubstr("[2, 5]"))));
  EXPECT_THAT(
      [&] {
        y.backward(zeros({2, 5}, {.dtype = DType::kF64}));
      },
      ThrowsMessage<Error>(AllOf(HasSubstr("backward:"), HasSubstr("f64"), HasSubstr("f32"))));
}

TEST(Errors, WhereWithNonBoolCondition) {
  EXPECT_THAT([] { where(f32({3}), f32({3}), f32({3})); },
              ThrowsMessage<Error>(AllOf(HasSubstr("where:"), HasSubstr("condition"), HasSubstr("bool"),
                                         HasSubstr("f32"), HasSubstr("[3]"))));
}

TEST(Errors, MaskedFillWithBadMask) {
  EXPECT_THAT(
      [] {
        masked_fill(f32({2, 3}), f32({3}), 0.0);
      },
      ThrowsMessage<Error>(AllOf(HasSubstr("masked_fill:"), HasSubstr("mask"), HasSubstr("bool"), HasSubstr("f32"))));
  // A mask that broadcasts with x but to a larger shape than x.
  EXPECT_THAT(
      [] {
        masked_fill(f32({3}), gt(f32({2, 3}), 0.0), 0.0);
      },
      ThrowsMessage<Error>(AllOf(HasSubstr("masked_fill:"), HasSubstr("[2, 3]"), HasSubstr("[3]"))));
}

TEST(Errors, ClampWithMinAboveMax) {
  EXPECT_THAT([] { clamp(f32({3}), 2.0, 1.0); },
              ThrowsMessage<Error>(AllOf(HasSubstr("clamp:"), HasSubstr("min 2"), HasSubstr("max 1"))));
  EXPECT_THAT([] { clamp(f32({3}), std::nullopt, std::nullopt); }, ThrowsMessage<Error>(HasSubstr("clamp:")));
}

TEST(Errors, NarrowAndSelectOutOfRange) {
  EXPECT_THAT(
      [] {
        f32({4, 3}).narrow(0, 2, 3);
      },
      ThrowsMessage<Error>(AllOf(HasSubstr("narrow:"), HasSubstr("[2, 5)"), HasSubstr("size 4"), HasSubstr("[4, 3]"))));
  EXPECT_THAT(
      [] {
        f32({4, 3}).select(1, 3);
      },
      ThrowsMessage<Error>(AllOf(HasSubstr("select:"), HasSubstr("index 3"), HasSubstr("size 3"))));
}

TEST(Errors, PermuteWithDuplicateOrMissingDims) {
  EXPECT_THAT(
      [] {
        f32({2, 3, 4}).permute({0, 2, -3});
      },
      ThrowsMessage<Error>(AllOf(HasSubstr("permute:"), HasSubstr("appears twice"), HasSubstr("[0, 2, -3]"))));
  EXPECT_THAT(
      [] {
        f32({2, 3, 4}).permute({1, 0});
      },
      ThrowsMessage<Error>(AllOf(HasSubstr("permute:"), HasSubstr("[1, 0]"), HasSubstr("3 dims"))));
}

TEST(Errors, ExpandOfANonSingletonDim) {
  EXPECT_THAT(
      [] {
        f32({2, 3}).expand({2, 4});
      },
      ThrowsMessage<Error>(AllOf(HasSubstr("expand:"), HasSubstr("[2, 3]"), HasSubstr("cannot become 4"))));
  EXPECT_THAT(
      [] {
        f32({2, 3}).expand({3});
      },
      ThrowsMessage<Error>(AllOf(HasSubstr("expand:"), HasSubstr("fewer dims"))));
}

TEST(Errors, FromVectorSizeMismatch) {
  EXPECT_THAT(
      [] {
        from_vector<float>({1, 2, 3, 4, 5}, {2, 3});
      },
      ThrowsMessage<Error>(
          AllOf(HasSubstr("from_data:"), HasSubstr("5 values"), HasSubstr("[2, 3]"), HasSubstr("6 elements"))));
}

TEST(Errors, NegativeSizes) {
  EXPECT_THAT([] { zeros({2, -3}); }, ThrowsMessage<Error>(AllOf(HasSubstr("non-negative"), HasSubstr("[2, -3]"))));
  EXPECT_THAT([] { f32({6}).reshape({-2, -3}); }, ThrowsMessage<Error>(AllOf(HasSubstr("reshape:"), HasSubstr("-2"))));
}

TEST(Errors, DataPointerOfTheWrongType) {
  EXPECT_THAT([] { f32({2}).data<double>(); },
              ThrowsMessage<Error>(AllOf(HasSubstr("data<T>()"), HasSubstr("f32"), HasSubstr("f64"))));
}

TEST(Errors, FloatingOpOnIntegerTensor) {
  EXPECT_THAT([] { exp(arange(4.0)); }, ThrowsMessage<Error>(AllOf(HasSubstr("exp:"), HasSubstr("i64"))));
  EXPECT_THAT([] { sum(arange(4.0)); }, ThrowsMessage<Error>(AllOf(HasSubstr("sum:"), HasSubstr("i64"))));
  EXPECT_THAT([] { add(arange(4.0), arange(4.0)); }, ThrowsMessage<Error>(AllOf(HasSubstr("add:"), HasSubstr("i64"))));
}

TEST(Errors, UndefinedTensor) {
  EXPECT_THAT([] { Tensor().shape(); }, ThrowsMessage<Error>(HasSubstr("undefined")));
}

TEST(Errors, CopyBetweenDifferentShapes) {
  EXPECT_THAT(
      [] {
        copy_(f32({2, 3}), f32({3, 2}));
      },
      ThrowsMessage<Error>(AllOf(HasSubstr("copy_:"), HasSubstr("[2, 3]"), HasSubstr("[3, 2]"))));
}

TEST(Errors, MaxOfAnEmptyTensor) {
  EXPECT_THAT([] { max(f32({0, 3})); }, ThrowsMessage<Error>(HasSubstr("max: cannot reduce an empty tensor")));
}

TEST(Errors, TransposeShorthandOnThreeDims) {
  EXPECT_THAT(
      [] {
        f32({2, 3, 4}).t();
      },
      ThrowsMessage<Error>(AllOf(HasSubstr("t():"), HasSubstr("[2, 3, 4]"), HasSubstr("transpose(d0, d1)"))));
}

TEST(Errors, Conv2dChannelAndDtypeMismatch) {
  EXPECT_THAT(
      [] {
        conv2d(f32({1, 3, 8, 8}), f32({4, 2, 3, 3}));
      },
      ThrowsMessage<Error>(
          AllOf(HasSubstr("conv2d:"), HasSubstr("[1, 3, 8, 8]"), HasSubstr("[4, 2, 3, 3]"), HasSubstr("3 channels"))));
  EXPECT_THAT(
      [] {
        conv2d(f32({1, 3, 8, 8}), zeros({4, 3, 3, 3}, {.dtype = DType::kF16}));
      },
      ThrowsMessage<Error>(AllOf(HasSubstr("conv2d:"), HasSubstr("f32"), HasSubstr("f16"))));
}

TEST(Errors, PoolPaddingLargerThanHalfTheKernel) {
  EXPECT_THAT(
      [] {
        max_pool2d(f32({1, 1, 4, 4}), {.kernel_size = {2, 2}, .padding = {2, 2}});
      },
      ThrowsMessage<Error>(AllOf(HasSubstr("max_pool2d:"), HasSubstr("padding [2, 2]"), HasSubstr("kernel [2, 2]"))));
}

TEST(Errors, LayerNormShapeThatIsNotTheTrailingDims) {
  EXPECT_THAT(
      [] {
        layer_norm(f32({2, 3, 4}), {3});
      },
      ThrowsMessage<Error>(AllOf(HasSubstr("layer_norm:"), HasSubstr("[3]"), HasSubstr("[2, 3, 4]"))));
}

TEST(Errors, MatmulInnerSizeMismatch) {
  EXPECT_THAT(
      [] {
        matmul(f32({4, 3}), f32({4, 5}));
      },
      ThrowsMessage<Error>(HasSubstr("matmul: cannot multiply [4, 3] by [4, 5]: inner sizes 3 and 4 differ")));
  EXPECT_THAT(
      [] {
        mm(f32({2, 3}), f32({2, 3}));
      },
      ThrowsMessage<Error>(AllOf(HasSubstr("mm:"), HasSubstr("[2, 3]"), HasSubstr("inner sizes 3 and 2"))));
  EXPECT_THAT(
      [] {
        linear(f32({5, 4}), f32({3, 7}));
      },
      ThrowsMessage<Error>(AllOf(HasSubstr("linear:"), HasSubstr("[5, 4]"), HasSubstr("[3, 7]"))));
}

TEST(Errors, MatmulDtypeMismatch) {
  EXPECT_THAT(
      [] {
        matmul(f32({2, 3}), zeros({3, 2}, {.dtype = DType::kF64}));
      },
      ThrowsMessage<Error>(
          AllOf(HasSubstr("matmul:"), HasSubstr("f32 [2, 3]"), HasSubstr("f64 [3, 2]"), HasSubstr("same dtype"))));
}

// Every error above is an exception the caller can catch; the library itself must never end the process.
// Scans the library's sources (not the CLI mains) for calls of exit, _exit, _Exit and quick_exit.
TEST(Errors, LibraryNeverCallsExit) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(MANTISSA_GOLDEN_DIR).parent_path().parent_path();
  const std::regex call(R"((^|[^\w.>])(std::)?(exit|_exit|_Exit|quick_exit)\s*\()");
  int scanned = 0;
  std::vector<std::string> offenders;
  for (const char* layer : {"framework", "ops", "optim", "amp", "data", "models", "train"}) {
    if (!fs::exists(root / layer)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(root / layer)) {
      const fs::path p = entry.path();
      const std::string ext = p.extension().string();
      if (ext != ".cc" && ext != ".h" && ext != ".cu" && ext != ".cuh") continue;
      if (p.filename().string().ends_with("_main.cc")) continue;  // programs may exit; the library may not
      ++scanned;
      std::ifstream in(p);
      std::string line;
      for (int n = 1; std::getline(in, line); ++n) {
        const std::string code = line.substr(0, line.find("//"));
        if (std::regex_search(code, call)) offenders.push_back(p.string() + ":" + std::to_string(n) + ": " + line);
      }
    }
  }
  EXPECT_GT(scanned, 10) << "found the library sources under " << root;
  EXPECT_TRUE(offenders.empty()) << ::testing::PrintToString(offenders);
}

}  // namespace
}  // namespace mantissa
