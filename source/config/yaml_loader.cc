#include "source/config/yaml_loader.h"

#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/any.pb.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/duration.pb.h"
#include "google/protobuf/struct.pb.h"
#include "yaml-cpp/yaml.h"

namespace rpx {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

class Loader {
 public:
  Loader(std::string source, std::vector<std::string>* errors)
      : source_(std::move(source)), errors_(errors) {}

  void LoadMessage(const YAML::Node& node, Message* msg, const std::string& path,
                   bool skip_type_key = false);
  bool ok() const { return ok_; }

 private:
  void Error(const YAML::Node& node, const std::string& path, const std::string& what) {
    ok_ = false;
    std::string where = source_;
    if (node.IsDefined() && node.Mark().line >= 0) {
      where = absl::StrCat(source_, ":", node.Mark().line + 1, ":", node.Mark().column + 1);
    }
    errors_->push_back(absl::StrCat(where, ": ", path.empty() ? "(top level)" : path, ": ", what));
  }
  bool LoadWellKnown(const YAML::Node& node, Message* msg, const std::string& path);
  void LoadAny(const YAML::Node& node, google::protobuf::Any* any, const std::string& path);
  void LoadDuration(const YAML::Node& node, google::protobuf::Duration* d, const std::string& path);
  void LoadValue(const YAML::Node& node, google::protobuf::Value* v);
  void SetField(const YAML::Node& node, Message* msg, const FieldDescriptor* f,
                const std::string& path);
  void SetScalar(const YAML::Node& node, Message* msg, const FieldDescriptor* f,
                 const std::string& path, bool repeated);

  std::string source_;
  std::vector<std::string>* errors_;
  bool ok_ = true;
};

std::string Join(const std::string& path, const std::string& name) {
  return path.empty() ? name : absl::StrCat(path, ".", name);
}

const char* NodeKind(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Scalar:
      return "a scalar";
    case YAML::NodeType::Null:
      return "null";
    default:
      return "nothing";
  }
}

void Loader::LoadMessage(const YAML::Node& node, Message* msg, const std::string& path,
                         bool skip_type_key) {
  if (!skip_type_key && LoadWellKnown(node, msg, path)) return;
  if (node.IsNull()) return;
  if (!node.IsMap()) {
    Error(node, path,
          absl::StrCat("expected a map for ", msg->GetDescriptor()->full_name(), ", got ",
                       NodeKind(node)));
    return;
  }
  const Descriptor* d = msg->GetDescriptor();
  std::set<std::string> seen;
  std::map<const google::protobuf::OneofDescriptor*, std::string> oneofs_set;
  for (auto it = node.begin(); it != node.end(); ++it) {
    std::string key = it->first.as<std::string>();
    if (skip_type_key && key == "@type") continue;
    const FieldDescriptor* f = d->FindFieldByName(key);
    if (!f) f = d->FindFieldByCamelcaseName(key);
    if (!f) {
      for (int i = 0; i < d->field_count() && !f; ++i) {
        if (d->field(i)->json_name() == key) f = d->field(i);
      }
    }
    std::string fpath = Join(path, key);
    if (!f) {
      Error(it->first, fpath,
            absl::StrCat("unknown field '", key, "' in ", d->full_name(),
                         " (not in Envoy's v3 API, or not supported by rpx)"));
      continue;
    }
    if (!seen.insert(f->name()).second) {
      Error(it->first, fpath, "field given twice");
      continue;
    }
    if (it->second.IsNull()) continue;
    if (const auto* oneof = f->containing_oneof()) {
      auto [pos, inserted] = oneofs_set.emplace(oneof, f->name());
      if (!inserted) {
        Error(it->first, fpath,
              absl::StrCat("only one of the '", oneof->name(), "' fields may be set, but both '",
                           pos->second, "' and '", f->name(), "' are"));
        continue;
      }
    }
    SetField(it->second, msg, f, Join(path, f->name()));
  }
}

bool Loader::LoadWellKnown(const YAML::Node& node, Message* msg, const std::string& path) {
  const std::string& name = msg->GetDescriptor()->full_name();
  if (name == "google.protobuf.Any") {
    LoadAny(node, static_cast<google::protobuf::Any*>(msg), path);
    return true;
  }
  if (name == "google.protobuf.Duration") {
    LoadDuration(node, static_cast<google::protobuf::Duration*>(msg), path);
    return true;
  }
  if (name == "google.protobuf.Struct") {
    if (!node.IsMap()) {
      Error(node, path, "expected a map");
      return true;
    }
    auto* s = static_cast<google::protobuf::Struct*>(msg);
    for (auto it = node.begin(); it != node.end(); ++it) {
      LoadValue(it->second, &(*s->mutable_fields())[it->first.as<std::string>()]);
    }
    return true;
  }
  if (name == "google.protobuf.Value") {
    LoadValue(node, static_cast<google::protobuf::Value*>(msg));
    return true;
  }
  static const std::set<std::string> kWrappers = {
      "google.protobuf.DoubleValue", "google.protobuf.FloatValue",  "google.protobuf.Int64Value",
      "google.protobuf.UInt64Value", "google.protobuf.Int32Value",  "google.protobuf.UInt32Value",
      "google.protobuf.BoolValue",   "google.protobuf.StringValue", "google.protobuf.BytesValue"};
  if (kWrappers.count(name)) {
    if (node.IsMap() && node["value"]) {
      SetScalar(node["value"], msg, msg->GetDescriptor()->FindFieldByName("value"), path, false);
    } else {
      SetScalar(node, msg, msg->GetDescriptor()->FindFieldByName("value"), path, false);
    }
    return true;
  }
  return false;
}

void Loader::LoadValue(const YAML::Node& node, google::protobuf::Value* v) {
  if (node.IsNull()) {
    v->set_null_value(google::protobuf::NULL_VALUE);
  } else if (node.IsMap()) {
    auto* s = v->mutable_struct_value();
    for (auto it = node.begin(); it != node.end(); ++it) {
      LoadValue(it->second, &(*s->mutable_fields())[it->first.as<std::string>()]);
    }
  } else if (node.IsSequence()) {
    auto* l = v->mutable_list_value();
    for (const auto& item : node) LoadValue(item, l->add_values());
  } else {
    std::string s = node.Scalar();
    double d;
    if (node.Tag() != "!" && (s == "true" || s == "false")) {
      v->set_bool_value(s == "true");
    } else if (node.Tag() != "!" && absl::SimpleAtod(s, &d)) {
      v->set_number_value(d);
    } else {
      v->set_string_value(s);
    }
  }
}

void Loader::LoadAny(const YAML::Node& node, google::protobuf::Any* any, const std::string& path) {
  if (!node.IsMap()) {
    Error(node, path, "expected a map with '@type'");
    return;
  }
  YAML::Node type = node["@type"];
  if (!type || !type.IsScalar()) {
    Error(node, path, "'@type' is required in a typed_config");
    return;
  }
  std::string url = type.as<std::string>();
  std::string type_name = url.substr(url.rfind('/') + 1);
  const Descriptor* d =
      google::protobuf::DescriptorPool::generated_pool()->FindMessageTypeByName(type_name);
  if (!d) {
    Error(type, Join(path, "@type"), absl::StrCat("unknown or unsupported type '", url, "'"));
    return;
  }
  std::unique_ptr<Message> msg(
      google::protobuf::MessageFactory::generated_factory()->GetPrototype(d)->New());
  LoadMessage(node, msg.get(), path, /*skip_type_key=*/true);
  any->PackFrom(*msg);
}

void Loader::LoadDuration(const YAML::Node& node, google::protobuf::Duration* d,
                          const std::string& path) {
  if (node.IsMap()) {
    int64_t s = 0;
    int32_t n = 0;
    if (node["seconds"] && !absl::SimpleAtoi(node["seconds"].Scalar(), &s)) {
      Error(node, path, "seconds must be an integer");
    }
    if (node["nanos"] && !absl::SimpleAtoi(node["nanos"].Scalar(), &n)) {
      Error(node, path, "nanos must be an integer");
    }
    d->set_seconds(s);
    d->set_nanos(n);
    return;
  }
  std::string s = node.IsScalar() ? node.Scalar() : "";
  double secs;
  if (s.size() < 2 || s.back() != 's' || !absl::SimpleAtod(s.substr(0, s.size() - 1), &secs) ||
      secs < 0 || secs > 315576000000.0) {
    Error(node, path, absl::StrCat("expected a duration like \"5s\" or \"0.25s\", got '", s, "'"));
    return;
  }
  int64_t whole = static_cast<int64_t>(secs);
  d->set_seconds(whole);
  d->set_nanos(static_cast<int32_t>((secs - whole) * 1e9 + 0.5));
}

void Loader::SetField(const YAML::Node& node, Message* msg, const FieldDescriptor* f,
                      const std::string& path) {
  const Reflection* r = msg->GetReflection();
  if (f->is_map()) {
    if (!node.IsMap()) {
      Error(node, path, absl::StrCat("expected a map, got ", NodeKind(node)));
      return;
    }
    const FieldDescriptor* key_f = f->message_type()->FindFieldByName("key");
    const FieldDescriptor* val_f = f->message_type()->FindFieldByName("value");
    for (auto it = node.begin(); it != node.end(); ++it) {
      Message* entry = r->AddMessage(msg, f);
      std::string key = it->first.as<std::string>();
      std::string epath = absl::StrCat(path, "[\"", key, "\"]");
      SetScalar(it->first, entry, key_f, epath, false);
      if (val_f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        LoadMessage(it->second, entry->GetReflection()->MutableMessage(entry, val_f), epath);
      } else {
        SetScalar(it->second, entry, val_f, epath, false);
      }
    }
    return;
  }
  if (f->is_repeated()) {
    if (!node.IsSequence()) {
      // One value where a list belongs is a list of one, as Envoy's loader (protobuf's JSON
      // parser) takes it: Envoy's own dynamic-config-fs example writes `filters:` so.
      if (node.IsNull()) return;
      std::string ipath = absl::StrCat(path, "[0]");
      if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        if (!node.IsMap()) {
          Error(node, path, absl::StrCat("expected a list, got ", NodeKind(node)));
          return;
        }
        LoadMessage(node, r->AddMessage(msg, f), ipath);
      } else {
        SetScalar(node, msg, f, ipath, true);
      }
      return;
    }
    for (size_t i = 0; i < node.size(); ++i) {
      std::string ipath = absl::StrCat(path, "[", i, "]");
      if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        LoadMessage(node[i], r->AddMessage(msg, f), ipath);
      } else {
        SetScalar(node[i], msg, f, ipath, true);
      }
    }
    return;
  }
  if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
    LoadMessage(node, r->MutableMessage(msg, f), path);
  } else {
    SetScalar(node, msg, f, path, false);
  }
}

void Loader::SetScalar(const YAML::Node& node, Message* msg, const FieldDescriptor* f,
                       const std::string& path, bool repeated) {
  const Reflection* r = msg->GetReflection();
  if (!node.IsScalar()) {
    Error(node, path, absl::StrCat("expected a ", f->cpp_type_name(), ", got ", NodeKind(node)));
    return;
  }
  const std::string& s = node.Scalar();
  auto bad = [&](const char* what) {
    Error(node, path, absl::StrCat("expected ", what, ", got '", s, "'"));
  };
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: {
      int32_t v;
      if (!absl::SimpleAtoi(s, &v)) return bad("a 32-bit integer");
      repeated ? r->AddInt32(msg, f, v) : r->SetInt32(msg, f, v);
      return;
    }
    case FieldDescriptor::CPPTYPE_INT64: {
      int64_t v;
      if (!absl::SimpleAtoi(s, &v)) return bad("an integer");
      repeated ? r->AddInt64(msg, f, v) : r->SetInt64(msg, f, v);
      return;
    }
    case FieldDescriptor::CPPTYPE_UINT32: {
      uint32_t v;
      if (!absl::SimpleAtoi(s, &v)) return bad("a non-negative 32-bit integer");
      repeated ? r->AddUInt32(msg, f, v) : r->SetUInt32(msg, f, v);
      return;
    }
    case FieldDescriptor::CPPTYPE_UINT64: {
      uint64_t v;
      if (!absl::SimpleAtoi(s, &v)) return bad("a non-negative integer");
      repeated ? r->AddUInt64(msg, f, v) : r->SetUInt64(msg, f, v);
      return;
    }
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT: {
      double v;
      if (!absl::SimpleAtod(s, &v)) return bad("a number");
      if (f->cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE) {
        repeated ? r->AddDouble(msg, f, v) : r->SetDouble(msg, f, v);
      } else {
        repeated ? r->AddFloat(msg, f, v) : r->SetFloat(msg, f, static_cast<float>(v));
      }
      return;
    }
    case FieldDescriptor::CPPTYPE_BOOL: {
      std::string l = absl::AsciiStrToLower(s);
      bool v;
      if (l == "true") {
        v = true;
      } else if (l == "false") {
        v = false;
      } else {
        return bad("true or false");
      }
      repeated ? r->AddBool(msg, f, v) : r->SetBool(msg, f, v);
      return;
    }
    case FieldDescriptor::CPPTYPE_ENUM: {
      const auto* value = f->enum_type()->FindValueByName(s);
      // Envoy parses enums case-insensitively (round_robin is ROUND_ROBIN).
      if (!value) value = f->enum_type()->FindValueByName(absl::AsciiStrToUpper(s));
      int n;
      if (!value && absl::SimpleAtoi(s, &n)) value = f->enum_type()->FindValueByNumber(n);
      if (!value) {
        std::vector<std::string> names;
        for (int i = 0; i < f->enum_type()->value_count(); ++i) {
          names.push_back(f->enum_type()->value(i)->name());
        }
        Error(node, path,
              absl::StrCat("unknown value '", s, "' (expected one of ", absl::StrJoin(names, ", "),
                           ")"));
        return;
      }
      repeated ? r->AddEnum(msg, f, value) : r->SetEnum(msg, f, value);
      return;
    }
    case FieldDescriptor::CPPTYPE_STRING: {
      std::string v = s;
      if (f->type() == FieldDescriptor::TYPE_BYTES) {
        // As in Envoy's JSON/YAML: bytes are base64.
        if (!absl::Base64Unescape(s, &v)) return bad("base64 data");
      }
      repeated ? r->AddString(msg, f, v) : r->SetString(msg, f, v);
      return;
    }
    default:
      Error(node, path, "unsupported field type");
  }
}

}  // namespace

bool LoadYamlIntoMessage(const std::string& yaml_text, const std::string& source_name,
                         google::protobuf::Message* out, std::vector<std::string>* errors) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    errors->push_back(absl::StrCat(source_name, ":", e.mark.line + 1, ":", e.mark.column + 1,
                                   ": invalid YAML: ", e.msg));
    return false;
  }
  if (!root.IsDefined() || root.IsNull()) {
    errors->push_back(absl::StrCat(source_name, ": the configuration is empty"));
    return false;
  }
  Loader loader(source_name, errors);
  try {
    loader.LoadMessage(root, out, "");
  } catch (const YAML::Exception& e) {
    errors->push_back(absl::StrCat(source_name, ":", e.mark.line + 1, ": ", e.msg));
    return false;
  }
  return loader.ok();
}

bool LoadYamlFile(const std::string& path, google::protobuf::Message* out,
                  std::vector<std::string>* errors) {
  std::ifstream f(path);
  if (!f) {
    errors->push_back(absl::StrCat(path, ": cannot open the file"));
    return false;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return LoadYamlIntoMessage(ss.str(), path, out, errors);
}

}  // namespace rpx
