// FP8 recipes: the presets, the text form (parse_fp8_recipe, str) and the range checks.
#include "amp/fp8_recipe.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "framework/error.h"

namespace mantissa::amp {
namespace {

constexpr int64_t kMaxHistory = 65536;
constexpr int64_t kMaxMargin = 64;

const char* scaling_name(Fp8Scaling s) { return s == Fp8Scaling::kDelayed ? "delayed" : "dynamic"; }
const char* algo_name(AmaxCompute a) { return a == AmaxCompute::kMax ? "max" : "most_recent"; }
const char* format_name(Fp8Format f) { return f == Fp8Format::kHybrid ? "hybrid" : "e4m3"; }
const char* overflow_name(Fp8Overflow o) { return o == Fp8Overflow::kSaturate ? "saturate" : "no_saturate"; }

std::optional<Fp8Scaling> scaling_from(std::string_view s) {
  if (s == "delayed") return Fp8Scaling::kDelayed;
  if (s == "dynamic") return Fp8Scaling::kDynamic;
  return std::nullopt;
}

std::optional<int64_t> integer_from(std::string_view s) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

absl::Status bad(std::string_view text, const std::string& what) {
  return absl::InvalidArgumentError(detail::cat(
      "FP8 recipe \"", text, "\": ", what,
      ". HINT: \"delayed\", \"dynamic\", \"rowwise\", \"blockwise\", \"mxfp8\", \"nvfp4\", \"mxfp4\" or e.g. "
      "\"delayed:history=16,algo=max,margin=0,format=hybrid\"; keys: "
      "history, algo (max|most_recent), margin, scaling (delayed|dynamic), format (hybrid|e4m3), "
      "forward_overflow, backward_overflow (saturate|no_saturate), each of the first four optionally prefixed "
      "by input., weight. or grad_output."));
}

// The range checks, shared by the parser (as a Status) and check_fp8_recipe (as an Error): "" when fine.
std::string range_problem(const Fp8Recipe& r) {
  for (Fp8Role role : kFp8Roles) {
    const Fp8TensorScaling& s = r.role(role);
    if (s.history_len < 1 || s.history_len > kMaxHistory)
      return detail::cat(fp8_role_name(role), ".history is ", s.history_len, ", expected 1 to ", kMaxHistory);
    if (s.margin < 0 || s.margin > kMaxMargin)
      return detail::cat(fp8_role_name(role), ".margin is ", s.margin, ", expected 0 to ", kMaxMargin);
  }
  if (r.block_scaled()) {
    const char* head = fp8_granularity_name(r.granularity);
    for (Fp8Role role : kFp8Roles) {
      if (r.role(role).scaling != Fp8Scaling::kDynamic)
        return detail::cat("the ", head, " recipe scales every role from the values it casts, but ",
                           fp8_role_name(role), " is set to delayed scaling");
      if (r.role(role).margin != r.input.margin)
        return detail::cat("the ", head, " recipe takes one margin for every role, got ", r.input.margin, " and ",
                           r.role(role).margin);
    }
  }
  const bool f32_blocks = r.granularity == Fp8Granularity::kRowwise || r.granularity == Fp8Granularity::kBlockwise;
  if (r.pow2_scales && !f32_blocks)
    return detail::cat("pow2 scales apply to the rowwise and blockwise recipes, not ",
                       fp8_granularity_name(r.granularity));
  if ((r.stochastic_rounding || r.hadamard) && !r.fp4())
    return detail::cat("stochastic rounding and the Hadamard transform apply to the nvfp4 and mxfp4 recipes, not ",
                       fp8_granularity_name(r.granularity));
  if (r.weight_2d && r.granularity != Fp8Granularity::kNvfp4)
    return detail::cat("weight_2d applies to the nvfp4 recipe, not ", fp8_granularity_name(r.granularity));
  if (r.rceil_scales && r.granularity != Fp8Granularity::kMxfp8 && r.granularity != Fp8Granularity::kMxfp4)
    return detail::cat("scale=rceil applies to the mxfp8 and mxfp4 recipes, not ", fp8_granularity_name(r.granularity));
  if (r.block_scaled() && !f32_blocks && r.input.margin != 0)
    return detail::cat("the ", fp8_granularity_name(r.granularity),
                       " recipe's scales follow its format's rule and take no margin, got ", r.input.margin);
  return "";
}

}  // namespace

const char* fp8_role_name(Fp8Role role) {
  switch (role) {
    case Fp8Role::kInput: return "input";
    case Fp8Role::kWeight: return "weight";
    case Fp8Role::kGradOutput: return "grad_output";
  }
  return "?";
}

Fp8Recipe Fp8Recipe::delayed(int64_t history_len, AmaxCompute amax_compute, int64_t margin) {
  const Fp8TensorScaling s{
      .scaling = Fp8Scaling::kDelayed, .history_len = history_len, .amax_compute = amax_compute, .margin = margin};
  return Fp8Recipe{.input = s, .weight = s, .grad_output = s};
}

Fp8Recipe Fp8Recipe::dynamic() {
  const Fp8TensorScaling s{.scaling = Fp8Scaling::kDynamic};
  return Fp8Recipe{.input = s, .weight = s, .grad_output = s};
}

namespace {
// A block-scaled recipe: every role scaled from the values it casts (a one-entry history, for statistics).
Fp8Recipe block_recipe(Fp8Granularity g, Fp8Format format) {
  Fp8Recipe r = Fp8Recipe::dynamic();
  r.granularity = g;
  r.format = format;
  return r;
}
}  // namespace

Fp8Recipe Fp8Recipe::rowwise() {
  Fp8Recipe r = block_recipe(Fp8Granularity::kRowwise, Fp8Format::kE4M3);
  r.pow2_scales = true;  // torchao's rowwise recipe: round_scales_to_power_of_2=True
  return r;
}
Fp8Recipe Fp8Recipe::blockwise() { return block_recipe(Fp8Granularity::kBlockwise, Fp8Format::kE4M3); }
Fp8Recipe Fp8Recipe::mxfp8() { return block_recipe(Fp8Granularity::kMxfp8, Fp8Format::kE4M3); }
Fp8Recipe Fp8Recipe::nvfp4() {
  Fp8Recipe r = block_recipe(Fp8Granularity::kNvfp4, Fp8Format::kE4M3);
  r.stochastic_rounding = r.hadamard = r.weight_2d = true;
  return r;
}
Fp8Recipe Fp8Recipe::mxfp4() {
  Fp8Recipe r = block_recipe(Fp8Granularity::kMxfp4, Fp8Format::kE4M3);
  r.stochastic_rounding = r.hadamard = true;
  return r;
}

int64_t Fp8Recipe::block_k() const {
  switch (granularity) {
    case Fp8Granularity::kTensor:
    case Fp8Granularity::kRowwise: return 0;
    case Fp8Granularity::kBlockwise: return 128;
    case Fp8Granularity::kMxfp8:
    case Fp8Granularity::kMxfp4: return 32;
    case Fp8Granularity::kNvfp4: return 16;
  }
  return 0;
}

const char* fp8_granularity_name(Fp8Granularity g) {
  switch (g) {
    case Fp8Granularity::kTensor: return "tensor";
    case Fp8Granularity::kRowwise: return "rowwise";
    case Fp8Granularity::kBlockwise: return "blockwise";
    case Fp8Granularity::kMxfp8: return "mxfp8";
    case Fp8Granularity::kNvfp4: return "nvfp4";
    case Fp8Granularity::kMxfp4: return "mxfp4";
  }
  return "?";
}

const Fp8TensorScaling& Fp8Recipe::role(Fp8Role r) const {
  return r == Fp8Role::kInput ? input : r == Fp8Role::kWeight ? weight : grad_output;
}
Fp8TensorScaling& Fp8Recipe::role(Fp8Role r) {
  return r == Fp8Role::kInput ? input : r == Fp8Role::kWeight ? weight : grad_output;
}

DType Fp8Recipe::dtype(Fp8Role r) const {
  return r == Fp8Role::kGradOutput && format == Fp8Format::kHybrid ? DType::kF8E5M2 : DType::kF8E4M3;
}

Fp8Overflow Fp8Recipe::overflow(Fp8Role r) const {
  return r == Fp8Role::kGradOutput ? backward_overflow : forward_overflow;
}

std::string Fp8Recipe::str() const {
  if (block_scaled()) {
    const char* head = fp8_granularity_name(granularity);
    auto flag = [](bool b) { return b ? "1" : "0"; };
    if (fp4()) {
      std::string out = detail::cat(head, ":sr=", flag(stochastic_rounding), ",hadamard=", flag(hadamard));
      if (granularity == Fp8Granularity::kNvfp4) out += detail::cat(",weight_2d=", flag(weight_2d));
      if (rceil_scales) out += ",scale=rceil";
      return out;
    }
    if (granularity == Fp8Granularity::kMxfp8)
      return detail::cat(head, ":format=", format_name(format), rceil_scales ? ",scale=rceil" : "");
    return detail::cat(head, ":format=", format_name(format), ",margin=", input.margin, ",pow2=", flag(pow2_scales),
                       ",forward_overflow=", overflow_name(forward_overflow),
                       ",backward_overflow=", overflow_name(backward_overflow));
  }
  // A per-role field is printed once without a prefix when the roles that use it agree, else once per role.
  std::vector<std::string> opts;
  opts.push_back(detail::cat("format=", format_name(format)));
  const Fp8Scaling head = input.scaling;
  if (weight.scaling != head || grad_output.scaling != head) {
    for (Fp8Role r : kFp8Roles)
      if (role(r).scaling != head)
        opts.push_back(detail::cat(fp8_role_name(r), ".scaling=", scaling_name(role(r).scaling)));
  }
  auto field = [&](const char* key, auto get, bool delayed_only) {
    std::vector<Fp8Role> users;
    for (Fp8Role r : kFp8Roles)
      if (!delayed_only || role(r).scaling == Fp8Scaling::kDelayed) users.push_back(r);
    if (users.empty()) return;
    bool agree = true;
    for (Fp8Role r : users) agree = agree && get(role(r)) == get(role(users.front()));
    // Unprefixed keys set every role, so they can only be used when every role uses the field.
    if (agree && users.size() == 3) {
      opts.push_back(detail::cat(key, "=", get(role(users.front()))));
    } else {
      for (Fp8Role r : users) opts.push_back(detail::cat(fp8_role_name(r), ".", key, "=", get(role(r))));
    }
  };
  field(
      "history", [](const Fp8TensorScaling& s) { return std::to_string(s.history_len); }, true);
  field(
      "algo", [](const Fp8TensorScaling& s) { return std::string(algo_name(s.amax_compute)); }, true);
  field(
      "margin", [](const Fp8TensorScaling& s) { return std::to_string(s.margin); }, false);
  opts.push_back(detail::cat("forward_overflow=", overflow_name(forward_overflow)));
  opts.push_back(detail::cat("backward_overflow=", overflow_name(backward_overflow)));
  return detail::cat(scaling_name(head), ":", absl::StrJoin(opts, ","));
}

namespace {

// The options of a block-scaled recipe (no role prefixes, no history or algo: every role is scaled from the
// values it casts). The keys each head word takes are in amp/fp8_recipe.h.
absl::StatusOr<Fp8Recipe> parse_block_recipe(std::string_view text, Fp8Recipe r, std::string_view rest) {
  const std::string_view head = fp8_granularity_name(r.granularity);
  const bool fp4 = r.fp4(),
             scaled_f32 = r.granularity == Fp8Granularity::kRowwise || r.granularity == Fp8Granularity::kBlockwise,
             mx = r.granularity == Fp8Granularity::kMxfp8 || r.granularity == Fp8Granularity::kMxfp4;
  std::vector<std::string_view> seen;
  for (size_t start = 0;;) {
    const size_t comma = rest.find(',', start);
    const std::string_view item =
        rest.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0 || eq + 1 == item.size())
      return bad(text, detail::cat("\"", item, "\" is not key=value"));
    const std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
    for (std::string_view k : seen)
      if (k == key) return bad(text, detail::cat("\"", key, "\" is given twice"));
    seen.push_back(key);
    auto boolean = [&](bool& field) -> absl::Status {
      if (value != "0" && value != "1") return bad(text, detail::cat(key, "=", value, ", expected 0 or 1"));
      field = value == "1";
      return absl::OkStatus();
    };
    absl::Status status = absl::OkStatus();
    if (key == "format" && !fp4) {
      if (value != "hybrid" && value != "e4m3")
        return bad(text, detail::cat("format=", value, ", expected hybrid or e4m3"));
      r.format = value == "hybrid" ? Fp8Format::kHybrid : Fp8Format::kE4M3;
    } else if (key == "margin" && scaled_f32) {
      const std::optional<int64_t> v = integer_from(value);
      if (!v) return bad(text, detail::cat(key, "=", value, " is not an integer"));
      for (Fp8Role role : kFp8Roles) r.role(role).margin = *v;
    } else if (key == "pow2" && scaled_f32) {
      status = boolean(r.pow2_scales);
    } else if ((key == "forward_overflow" || key == "backward_overflow") && scaled_f32) {
      if (value != "saturate" && value != "no_saturate")
        return bad(text, detail::cat(key, "=", value, ", expected saturate or no_saturate"));
      (key == "forward_overflow" ? r.forward_overflow : r.backward_overflow) =
          value == "saturate" ? Fp8Overflow::kSaturate : Fp8Overflow::kNoSaturate;
    } else if (key == "sr" && fp4) {
      status = boolean(r.stochastic_rounding);
    } else if (key == "hadamard" && fp4) {
      status = boolean(r.hadamard);
    } else if (key == "weight_2d" && r.granularity == Fp8Granularity::kNvfp4) {
      status = boolean(r.weight_2d);
    } else if (key == "scale" && mx) {
      if (value != "floor" && value != "rceil")
        return bad(text, detail::cat("scale=", value, ", expected floor or rceil"));
      r.rceil_scales = value == "rceil";
    } else {
      const char* keys =
          fp4          ? (r.granularity == Fp8Granularity::kNvfp4 ? "sr, hadamard, weight_2d" : "sr, hadamard, scale")
          : scaled_f32 ? "format, margin, pow2, forward_overflow, backward_overflow"
                       : "format, scale";
      return bad(text, detail::cat("\"", key, "\" is not an option of the ", head, " recipe (it takes ", keys,
                                   "; its roles are all scaled from the values they cast)"));
    }
    if (!status.ok()) return status;
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (const std::string problem = range_problem(r); !problem.empty()) return bad(text, problem);
  return r;
}

std::optional<Fp8Recipe> block_preset(std::string_view head) {
  if (head == "rowwise") return Fp8Recipe::rowwise();
  if (head == "blockwise") return Fp8Recipe::blockwise();
  if (head == "mxfp8") return Fp8Recipe::mxfp8();
  if (head == "nvfp4") return Fp8Recipe::nvfp4();
  if (head == "mxfp4") return Fp8Recipe::mxfp4();
  return std::nullopt;
}

}  // namespace

absl::StatusOr<Fp8Recipe> parse_fp8_recipe(std::string_view text) {
  const size_t colon = text.find(':');
  const std::string_view head_word = text.substr(0, colon);
  if (const std::optional<Fp8Recipe> preset = block_preset(head_word)) {
    if (colon == std::string_view::npos) return *preset;
    if (colon + 1 == text.size()) return bad(text, "nothing after ':'");
    return parse_block_recipe(text, *preset, text.substr(colon + 1));
  }
  const std::optional<Fp8Scaling> head = scaling_from(head_word);
  if (!head)
    return bad(text, detail::cat("unknown recipe \"", head_word,
                                 "\", expected delayed, dynamic, rowwise, blockwise, mxfp8, nvfp4 or mxfp4"));
  Fp8Recipe r = *head == Fp8Scaling::kDelayed ? Fp8Recipe::delayed() : Fp8Recipe::dynamic();
  // Which roles had history/algo set by a prefixed key (a dynamic role must not be), and whether an
  // unprefixed one was given (some role must then be delayed).
  std::array<bool, 3> delayed_key_given{false, false, false};
  bool delayed_key_for_all = false;
  if (colon != std::string_view::npos) {
    const std::string_view rest = text.substr(colon + 1);
    if (rest.empty()) return bad(text, "nothing after ':'");
    std::vector<std::string_view> seen;
    auto mark_delayed_key = [&](const std::vector<Fp8Role>& roles, bool prefixed) {
      if (!prefixed) delayed_key_for_all = true;
      if (prefixed)
        for (Fp8Role role : roles) delayed_key_given[static_cast<size_t>(role)] = true;
    };
    // Role-prefixed keys refine the unprefixed ones whatever their order: the unprefixed go first.
    std::vector<std::string_view> items;
    for (size_t start = 0;;) {
      const size_t comma = rest.find(',', start);
      items.push_back(rest.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    std::stable_partition(items.begin(), items.end(), [](std::string_view item) {
      return item.substr(0, item.find('=')).find('.') == std::string_view::npos;
    });
    for (std::string_view item : items) {
      const size_t eq = item.find('=');
      if (eq == std::string_view::npos || eq == 0 || eq + 1 == item.size())
        return bad(text, detail::cat("\"", item, "\" is not key=value"));
      std::string_view key = item.substr(0, eq);
      const std::string_view value = item.substr(eq + 1);
      for (std::string_view k : seen)
        if (k == key) return bad(text, detail::cat("\"", key, "\" is given twice"));
      seen.push_back(key);
      // An optional role prefix: the roles this key sets.
      std::vector<Fp8Role> roles(std::begin(kFp8Roles), std::end(kFp8Roles));
      bool prefixed = false;
      if (const size_t dot = key.find('.'); dot != std::string_view::npos) {
        const std::string_view prefix = key.substr(0, dot);
        roles.clear();
        for (Fp8Role role : kFp8Roles)
          if (prefix == fp8_role_name(role)) roles.push_back(role);
        if (roles.empty())
          return bad(text, detail::cat("unknown role \"", prefix, "\", expected input, weight or grad_output"));
        key = key.substr(dot + 1);
        prefixed = true;
        if (key != "history" && key != "algo" && key != "margin" && key != "scaling")
          return bad(text, detail::cat("\"", key, "\" is not a per-role key (history, algo, margin, scaling)"));
      }
      if (key == "history" || key == "margin") {
        const std::optional<int64_t> v = integer_from(value);
        if (!v) return bad(text, detail::cat(key, "=", value, " is not an integer"));
        for (Fp8Role role : roles) (key == "history" ? r.role(role).history_len : r.role(role).margin) = *v;
        if (key == "history") mark_delayed_key(roles, prefixed);
      } else if (key == "algo") {
        if (value != "max" && value != "most_recent")
          return bad(text, detail::cat("algo=", value, ", expected max or most_recent"));
        for (Fp8Role role : roles)
          r.role(role).amax_compute = value == "max" ? AmaxCompute::kMax : AmaxCompute::kMostRecent;
        mark_delayed_key(roles, prefixed);
      } else if (key == "scaling") {
        const std::optional<Fp8Scaling> s = scaling_from(value);
        if (!s) return bad(text, detail::cat("scaling=", value, ", expected delayed or dynamic"));
        for (Fp8Role role : roles) r.role(role).scaling = *s;
      } else if (key == "format") {
        if (value != "hybrid" && value != "e4m3")
          return bad(text, detail::cat("format=", value, ", expected hybrid or e4m3"));
        r.format = value == "hybrid" ? Fp8Format::kHybrid : Fp8Format::kE4M3;
      } else if (key == "forward_overflow" || key == "backward_overflow") {
        if (value != "saturate" && value != "no_saturate")
          return bad(text, detail::cat(key, "=", value, ", expected saturate or no_saturate"));
        (key == "forward_overflow" ? r.forward_overflow : r.backward_overflow) =
            value == "saturate" ? Fp8Overflow::kSaturate : Fp8Overflow::kNoSaturate;
      } else {
        return bad(text, detail::cat("unknown key \"", key, "\""));
      }
    }
  }
  bool any_delayed = false;
  for (Fp8Role role : kFp8Roles) any_delayed = any_delayed || r.role(role).scaling == Fp8Scaling::kDelayed;
  if (delayed_key_for_all && !any_delayed)
    return bad(text, "history and algo apply to delayed scaling, but every role is scaled dynamically");
  for (Fp8Role role : kFp8Roles)
    if (delayed_key_given[static_cast<size_t>(role)] && r.role(role).scaling == Fp8Scaling::kDynamic)
      return bad(text, detail::cat("history and algo apply to delayed scaling, but ", fp8_role_name(role),
                                   " is scaled dynamically"));
  if (const std::string problem = range_problem(r); !problem.empty()) return bad(text, problem);
  return r;
}

void check_fp8_recipe(const Fp8Recipe& recipe) {
  const std::string problem = range_problem(recipe);
  MT_CHECK(problem.empty(), "Fp8Recipe ", recipe.str(), ": ", problem);
}

float fp8_max(DType fp8) {
  MT_CHECK(is_float8(fp8), "fp8_max: ", dtype_name(fp8), " is not an FP8 dtype");
  return fp8 == DType::kF8E4M3 ? Float8E4M3::kMax : Float8E5M2::kMax;
}

}  // namespace mantissa::amp
