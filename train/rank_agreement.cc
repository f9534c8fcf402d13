// ranks_disagree, fields_disagree, parameters_disagree and agreed errors (train/rank_agreement.h).
#include "train/rank_agreement.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "framework/tensor.h"

namespace mantissa {
namespace {

// Marks a status as decided by a collective (its payload's value is unused).
constexpr absl::string_view kAgreedPayload = "mantissa/rank_agreement/agreed";

// Fields as one text: name, NUL, value, NUL, ... (flag values come from a command line, which has no NUL).
std::string serialize(const std::vector<Field>& fields) {
  std::string text;
  for (const Field& f : fields) {
    text += f.name;
    text += '\0';
    text += f.value;
    text += '\0';
  }
  return text;
}

std::vector<Field> deserialize(std::string_view text) {
  std::vector<Field> fields;
  while (!text.empty()) {
    const size_t a = text.find('\0');
    const size_t b = a == std::string_view::npos ? a : text.find('\0', a + 1);
    if (b == std::string_view::npos) break;
    fields.push_back({std::string(text.substr(0, a)), std::string(text.substr(a + 1, b - a - 1))});
    text.remove_prefix(b + 1);
  }
  return fields;
}

// FNV-1a, 64 bits: equal texts give equal hashes on every rank and build.
int64_t hash_text(std::string_view text) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  int64_t out = 0;
  std::memcpy(&out, &h, sizeof out);
  return out;
}

std::string ranks_text(const std::vector<int>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(ranks, ", "));
}

}  // namespace

std::optional<RankDisagreement> ranks_disagree(ProcessGroup& group, int64_t value) {
  const Tensor all = group.all_gather(from_vector(std::vector<int64_t>{value})).contiguous();
  const int64_t* values = all.data<int64_t>();
  for (int q = 1; q < group.size(); ++q) {
    if (values[q] != values[0]) return RankDisagreement{.rank = q, .value = values[q], .rank0_value = values[0]};
  }
  return std::nullopt;
}

std::vector<std::string> all_gather_text(ProcessGroup& group, std::string_view text) {
  const Tensor lengths =
      group.all_gather(from_vector(std::vector<int64_t>{static_cast<int64_t>(text.size())})).contiguous();
  const int64_t* length = lengths.data<int64_t>();
  const int64_t longest = std::max<int64_t>(1, *std::max_element(length, length + group.size()));
  Tensor mine = zeros({longest}, {.dtype = DType::kI32});  // one character per element: no 8-bit dtype here
  for (size_t i = 0; i < text.size(); ++i) mine.data<int32_t>()[i] = static_cast<unsigned char>(text[i]);
  const Tensor all = group.all_gather(mine).contiguous();
  std::vector<std::string> texts(static_cast<size_t>(group.size()));
  for (int r = 0; r < group.size(); ++r) {
    const int32_t* chars = all.data<int32_t>() + r * longest;
    for (int64_t i = 0; i < length[r]; ++i) texts[r] += static_cast<char>(chars[i]);
  }
  return texts;
}

std::string FieldDisagreement::describe(std::string (*quote)(const std::string&)) const {
  std::vector<std::string> parts;
  for (const Holders& h : values)
    parts.push_back(absl::StrCat(quote ? quote(h.value) : h.value, " on ", ranks_text(h.ranks)));
  return absl::StrJoin(parts, ", ");
}

std::optional<FieldDisagreement> fields_disagree(ProcessGroup& group, const std::vector<Field>& fields) {
  const std::string text = serialize(fields);
  if (!ranks_disagree(group, hash_text(text))) return std::nullopt;
  std::vector<std::vector<Field>> all;
  for (const std::string& t : all_gather_text(group, text)) all.push_back(deserialize(t));
  const std::vector<Field>& first = all[0];
  size_t longest = 0;
  for (const auto& f : all) longest = std::max(longest, f.size());
  for (size_t i = 0; i < longest; ++i) {
    const std::string name = i < first.size() ? first[i].name : absl::StrCat("#", i + 1);
    FieldDisagreement d{.name = name};
    for (int r = 0; r < group.size(); ++r) {
      const std::vector<Field>& f = all[r];
      const std::string held = i >= f.size()       ? std::string("nothing")
                               : f[i].name == name ? f[i].value
                                                   : absl::StrCat("'", f[i].name, "' ", f[i].value);
      auto same = std::find_if(d.values.begin(), d.values.end(), [&](const auto& h) { return h.value == held; });
      if (same == d.values.end()) {
        d.values.push_back({.value = held, .ranks = {r}});
      } else {
        same->ranks.push_back(r);
      }
    }
    if (d.values.size() > 1) return d;
  }
  // The texts differ but no field does: only a hash collision of equal fields could get here.
  return std::nullopt;
}

std::optional<std::string> parameters_disagree(ProcessGroup& group, const std::vector<NamedTensor>& parameters) {
  std::vector<Field> fields;
  fields.reserve(parameters.size());
  for (const NamedTensor& p : parameters) {
    fields.push_back(
        {p.name, absl::StrCat(shape_str(p.tensor.shape()), " ", std::string(dtype_name(p.tensor.dtype())))});
  }
  const std::optional<FieldDisagreement> d = fields_disagree(group, fields);
  if (!d) return std::nullopt;
  return absl::StrCat("the ranks' models differ: parameter '", d->name, "': ", d->describe());
}

absl::Status agreed_error(absl::Status status) {
  status.SetPayload(kAgreedPayload, absl::Cord());
  return status;
}

bool is_agreed_error(const absl::Status& status) { return status.GetPayload(kAgreedPayload).has_value(); }

}  // namespace mantissa
