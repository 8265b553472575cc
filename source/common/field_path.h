// FieldPath: the path of a field in a configuration message ("virtual_hosts[3].routes[0].match"),
// built as a chain of stack nodes that costs nothing until an error needs it as a string. Lets
// validation of very large configurations (10,000 virtual hosts) avoid one string per field.
// A node must not outlive its parent. Any thread.
#pragma once

#include <string>

namespace rpx {

class FieldPath {
 public:
  // A root: `prefix` is used as is (e.g. "route_config" or "RouteConfiguration 'x'").
  explicit FieldPath(const std::string& prefix) : prefix_(&prefix) {}
  // A field below `parent`; with index >= 0, an element of a repeated field.
  FieldPath(const FieldPath& parent, const char* name, long index = -1)
      : parent_(&parent), name_(name), index_(index) {}
  FieldPath(const FieldPath& parent, const std::string& name, long index = -1)
      : parent_(&parent), name_(name.c_str()), index_(index) {}

  std::string str() const {
    std::string out;
    Append(&out);
    return out;
  }

 private:
  void Append(std::string* out) const {
    if (prefix_) {
      *out += *prefix_;
      return;
    }
    parent_->Append(out);
    if (!out->empty()) *out += '.';
    *out += name_;
    if (index_ >= 0) {
      *out += '[';
      *out += std::to_string(index_);
      *out += ']';
    }
  }
  const std::string* prefix_ = nullptr;
  const FieldPath* parent_ = nullptr;
  const char* name_ = "";
  long index_ = -1;
};

}  // namespace rpx
