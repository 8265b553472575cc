#include "tools/xds_server/render.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/json_util.h"
#include "yaml-cpp/yaml.h"

namespace rpx {
namespace xds_server {
namespace {

void BlockStyle(YAML::Node node) {
  if (node.IsMap() || node.IsSequence()) {
    // "{}" and "[]" stay on their key's line.
    node.SetStyle(node.size() == 0 ? YAML::EmitterStyle::Flow : YAML::EmitterStyle::Block);
    if (node.IsMap()) {
      for (auto it = node.begin(); it != node.end(); ++it) BlockStyle(it->second);
    } else {
      for (auto it = node.begin(); it != node.end(); ++it) BlockStyle(*it);
    }
  }
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out = absl::StrSplit(text, '\n');
  if (!out.empty() && out.back().empty()) out.pop_back();
  return out;
}

}  // namespace

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.add_whitespace = true;
  std::string out;
  auto status = google::protobuf::util::MessageToJsonString(message, &out, options);
  if (!status.ok()) return absl::StrCat("{\"error\": \"", status.ToString(), "\"}\n");
  return out;
}

std::string ToYaml(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string json;
  auto status = google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok()) return absl::StrCat("# cannot render: ", status.ToString(), "\n");
  YAML::Node node = YAML::Load(json);
  if (node.IsMap() && node.size() == 0) return "{}\n";
  BlockStyle(node);
  YAML::Emitter out;
  out << node;
  return absl::StrCat(out.c_str(), "\n");
}

std::string UnifiedDiff(const std::string& a, const std::string& b, const std::string& a_label,
                        const std::string& b_label, int context) {
  if (a == b) return "";
  std::vector<std::string> x = Lines(a), y = Lines(b);
  // Common head and tail first: a change to one virtual host of thousands leaves a small middle.
  size_t head = 0;
  while (head < x.size() && head < y.size() && x[head] == y[head]) ++head;
  size_t tail = 0;
  while (tail < x.size() - head && tail < y.size() - head &&
         x[x.size() - 1 - tail] == y[y.size() - 1 - tail]) {
    ++tail;
  }
  size_t n = x.size() - head - tail, m = y.size() - head - tail;
  // The middle as a sequence of ' ', '-', '+' marks: by longest common subsequence when it is
  // small enough, else all of the old lines out and all of the new ones in.
  std::vector<std::pair<char, std::string>> middle;
  if (n * m <= 4000000) {
    std::vector<std::vector<uint32_t>> lcs(n + 1, std::vector<uint32_t>(m + 1, 0));
    for (size_t i = n; i-- > 0;) {
      for (size_t j = m; j-- > 0;) {
        lcs[i][j] = x[head + i] == y[head + j] ? lcs[i + 1][j + 1] + 1
                                               : std::max(lcs[i + 1][j], lcs[i][j + 1]);
      }
    }
    size_t i = 0, j = 0;
    while (i < n || j < m) {
      if (i < n && j < m && x[head + i] == y[head + j]) {
        middle.emplace_back(' ', x[head + i]);
        ++i, ++j;
      } else if (i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1])) {
        middle.emplace_back('-', x[head + i++]);  // removals first, as diff(1) prints them
      } else {
        middle.emplace_back('+', y[head + j++]);
      }
    }
  } else {
    for (size_t i = 0; i < n; ++i) middle.emplace_back('-', x[head + i]);
    for (size_t j = 0; j < m; ++j) middle.emplace_back('+', y[head + j]);
  }
  size_t before = std::min<size_t>(head, context), after = std::min<size_t>(tail, context);
  size_t a_start = head - before, a_count = before + n + after;
  size_t b_start = head - before, b_count = before + m + after;
  std::string out = absl::StrCat("--- ", a_label, "\n+++ ", b_label, "\n");
  absl::StrAppend(&out, "@@ -", a_count ? a_start + 1 : a_start, ",", a_count, " +",
                  b_count ? b_start + 1 : b_start, ",", b_count, " @@\n");
  for (size_t i = a_start; i < head; ++i) absl::StrAppend(&out, " ", x[i], "\n");
  for (const auto& [mark, line] : middle) absl::StrAppend(&out, std::string(1, mark), line, "\n");
  for (size_t i = x.size() - tail; i < x.size() - tail + after; ++i) {
    absl::StrAppend(&out, " ", x[i], "\n");
  }
  return out;
}

}  // namespace xds_server
}  // namespace rpx
