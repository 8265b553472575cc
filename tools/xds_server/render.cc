#include "tools/xds_server/render.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/json_util.h"

namespace rpx {
namespace xds_server {
namespace {

// Protobuf's JSON (valid, compact) turned into block-style YAML in one pass. yaml-cpp's
// load-and-emit took about a second for a 10,000-virtual-host RouteConfiguration; this is linear
// and allocates little. Strings stay JSON literals (valid YAML double-quoted scalars) unless they
// are plainly safe to write bare.
class JsonToYaml {
 public:
  explicit JsonToYaml(const std::string& json) : in_(json) {}

  std::string Run() {
    SkipSpace();
    Value(0, Context::kTop);
    return out_;
  }

 private:
  enum class Context { kTop, kMapValue, kListItem };

  void SkipSpace() {
    while (pos_ < in_.size() &&
           (in_[pos_] == ' ' || in_[pos_] == '\n' || in_[pos_] == '\t' || in_[pos_] == '\r')) {
      ++pos_;
    }
  }

  // The JSON string literal at pos_ (quotes included), advancing past it.
  std::string StringLiteral() {
    size_t start = pos_++;
    while (pos_ < in_.size() && in_[pos_] != '"') pos_ += in_[pos_] == '\\' ? 2 : 1;
    ++pos_;
    return in_.substr(start, pos_ - start);
  }

  static bool PlainSafe(const std::string& literal) {
    // literal includes the quotes; only simple contents are written bare.
    std::string v = literal.substr(1, literal.size() - 2);
    if (v.empty() || v.size() > 200) return false;
    static const char* const kReserved[] = {
        "true", "false", "null", "yes",  "no",   "on",    "off", "y",  "n",  "~",
        "True", "False", "Null", "NULL", "TRUE", "FALSE", "Yes", "No", "On", "Off"};
    for (const char* r : kReserved) {
      if (v == r) return false;
    }
    bool numeric_looking = true;
    for (char c : v) {
      bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '_' || c == '.' || c == '/' || c == '-';
      if (!ok) return false;
      numeric_looking = numeric_looking && ((c >= '0' && c <= '9') || c == '.' || c == '-' ||
                                            c == 'e' || c == 'E' || c == '_');
    }
    if (numeric_looking) return false;
    return v[0] != '-' && v[0] != '.';
  }

  static std::string Scalar(const std::string& literal) {
    if (literal[0] != '"') return literal;  // number, true, false, null
    return PlainSafe(literal) ? literal.substr(1, literal.size() - 2) : literal;
  }

  void Indent(int n) { out_.append(n, ' '); }

  // Writes the value at pos_. A map value or list item that is a non-empty container starts on
  // the line after its key ("key:\n") or after "- " for maps.
  void Value(int indent, Context ctx) {
    SkipSpace();
    char c = in_[pos_];
    if (c == '{') {
      ++pos_;
      SkipSpace();
      if (in_[pos_] == '}') {
        ++pos_;
        out_ += ctx == Context::kTop ? "{}\n" : " {}\n";
        return;
      }
      if (ctx == Context::kMapValue) out_ += "\n";
      bool first = true;
      while (true) {
        SkipSpace();
        std::string key = StringLiteral();
        SkipSpace();
        ++pos_;  // ':'
        // The first key of a list item's map follows "- " on the same line.
        if (!(first && ctx == Context::kListItem)) Indent(indent);
        out_ += Scalar(key);
        out_ += ":";
        Value(indent + 2, Context::kMapValue);
        first = false;
        SkipSpace();
        if (in_[pos_] == ',') {
          ++pos_;
          continue;
        }
        ++pos_;  // '}'
        return;
      }
    }
    if (c == '[') {
      ++pos_;
      SkipSpace();
      if (in_[pos_] == ']') {
        ++pos_;
        out_ += ctx == Context::kTop ? "[]\n" : " []\n";
        return;
      }
      if (ctx == Context::kMapValue) out_ += "\n";
      bool first = true;
      while (true) {
        if (!(first && ctx == Context::kListItem)) Indent(indent);
        out_ += "- ";
        Value(indent + 2, Context::kListItem);
        first = false;
        SkipSpace();
        if (in_[pos_] == ',') {
          ++pos_;
          continue;
        }
        ++pos_;  // ']'
        return;
      }
    }
    std::string literal;
    if (c == '"') {
      literal = StringLiteral();
    } else {
      size_t start = pos_;
      while (pos_ < in_.size() && in_[pos_] != ',' && in_[pos_] != '}' && in_[pos_] != ']' &&
             in_[pos_] != ' ' && in_[pos_] != '\n') {
        ++pos_;
      }
      literal = in_.substr(start, pos_ - start);
    }
    if (ctx == Context::kMapValue) out_ += " ";
    out_ += Scalar(literal);
    out_ += "\n";
  }

  const std::string& in_;
  size_t pos_ = 0;
  std::string out_;
};

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
  return JsonToYaml(json).Run();
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
