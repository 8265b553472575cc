#include "source/server/config_dump.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "envoy/admin/v3/config_dump.pb.h"
#include "google/protobuf/any.pb.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/dynamic_message.h"
#include "google/protobuf/field_mask.pb.h"
#include "google/protobuf/util/field_mask_util.h"
#include "google/protobuf/util/json_util.h"
#include "source/common/json.h"

namespace rpx {
namespace {

using google::protobuf::Any;
using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::FieldMask;
using google::protobuf::Message;
using google::protobuf::Reflection;
using google::protobuf::util::FieldMaskUtil;

constexpr char kRedacted[] = "[redacted]";

// Envoy marks these `(udpa.annotations.sensitive) = true`; rpx's api/ drops annotations, so
// they are listed here.
const std::set<std::string>& SensitiveFields() {
  static const auto* fields = new std::set<std::string>{
      "envoy.extensions.transport_sockets.tls.v3.TlsCertificate.private_key",
      "envoy.extensions.transport_sockets.tls.v3.TlsCertificate.password",
      "envoy.extensions.transport_sockets.tls.v3.TlsSessionTicketKeys.keys",
      "envoy.extensions.transport_sockets.tls.v3.GenericSecret.secret",
  };
  return *fields;
}

// A DataSource (or any message) that is sensitive: its inline values are replaced; a file name
// is kept (it is where the secret is, not the secret).
void RedactValue(Message* m) {
  const Descriptor* d = m->GetDescriptor();
  const Reflection* r = m->GetReflection();
  if (d->full_name() == "envoy.config.core.v3.DataSource") {
    const FieldDescriptor* filename = d->FindFieldByName("filename");
    if (filename && r->HasField(*m, filename)) return;
    const FieldDescriptor* inline_string = d->FindFieldByName("inline_string");
    if (inline_string) r->SetString(m, inline_string, kRedacted);
    return;
  }
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(*m, &fields);
  for (const FieldDescriptor* f : fields) {
    if (f->type() == FieldDescriptor::TYPE_STRING || f->type() == FieldDescriptor::TYPE_BYTES) {
      if (f->is_repeated()) {
        for (int i = 0; i < r->FieldSize(*m, f); ++i) r->SetRepeatedString(m, f, i, kRedacted);
      } else {
        r->SetString(m, f, kRedacted);
      }
    }
  }
}

void Redact(Message* m, int depth) {
  if (depth > 64) return;
  const Descriptor* d = m->GetDescriptor();
  const Reflection* r = m->GetReflection();
  if (d->full_name() == Any::descriptor()->full_name()) {
    // Unpack into the generated type, redact, pack again (types rpx does not know stay as
    // they are: rpx refuses them in configuration, so they hold nothing of its own).
    auto* any = static_cast<Any*>(m);
    std::string type = any->type_url().substr(any->type_url().rfind('/') + 1);
    const Descriptor* inner =
        google::protobuf::DescriptorPool::generated_pool()->FindMessageTypeByName(type);
    if (!inner) return;
    const Message* proto =
        google::protobuf::MessageFactory::generated_factory()->GetPrototype(inner);
    if (!proto) return;
    std::unique_ptr<Message> unpacked(proto->New());
    if (!any->UnpackTo(unpacked.get())) return;
    Redact(unpacked.get(), depth + 1);
    any->PackFrom(*unpacked);
    return;
  }
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(*m, &fields);
  for (const FieldDescriptor* f : fields) {
    if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) continue;
    bool sensitive = SensitiveFields().count(f->full_name()) > 0;
    if (f->is_repeated()) {
      for (int i = 0; i < r->FieldSize(*m, f); ++i) {
        Message* child = r->MutableRepeatedMessage(m, f, i);
        sensitive ? RedactValue(child) : Redact(child, depth + 1);
      }
    } else {
      Message* child = r->MutableMessage(m, f);
      sensitive ? RedactValue(child) : Redact(child, depth + 1);
    }
  }
}

bool ParseMask(const std::string& text, const Descriptor* d, FieldMask* mask, std::string* bad) {
  for (absl::string_view path : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    mask->add_paths(std::string(path));
  }
  for (const auto& path : mask->paths()) {
    if (!FieldMaskUtil::GetFieldDescriptors(d, path, nullptr)) {
      *bad = path;
      return false;
    }
  }
  return true;
}

}  // namespace

void RedactSensitive(Message* m) { Redact(m, 0); }

int RenderConfigDump(std::vector<std::unique_ptr<Message>> dumps, const ConfigDumpQuery& query,
                     std::string* body) {
  std::vector<std::unique_ptr<Message>> items;
  if (query.resource.empty()) {
    items = std::move(dumps);
  } else {
    bool found = false;
    for (auto& dump : dumps) {
      const FieldDescriptor* f = dump->GetDescriptor()->FindFieldByName(query.resource);
      if (!f || !f->is_repeated() || f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) continue;
      found = true;
      const Reflection* r = dump->GetReflection();
      for (int i = 0; i < r->FieldSize(*dump, f); ++i) {
        const Message& element = r->GetRepeatedMessage(*dump, f, i);
        std::unique_ptr<Message> copy(element.New());
        copy->CopyFrom(element);
        items.push_back(std::move(copy));
      }
    }
    if (!found) {
      *body =
          absl::StrCat("{\"error\": ",
                       JsonQuote(absl::StrCat("no config dump has a repeated field named '",
                                              query.resource, "' (e.g. dynamic_active_clusters)")),
                       "}\n");
      return 404;
    }
  }
  envoy::admin::v3::ConfigDump dump;
  for (auto& item : items) {
    if (!query.mask.empty()) {
      FieldMask mask;
      std::string bad;
      if (!ParseMask(query.mask, item->GetDescriptor(), &mask, &bad)) {
        // As Envoy: a mask naming no field of the dump is an error only with ?resource (each
        // element has one type); without it, dumps the path does not fit are left whole.
        if (!query.resource.empty()) {
          *body = absl::StrCat("{\"error\": ",
                               JsonQuote(absl::StrCat("mask path '", bad, "' is not a field of ",
                                                      item->GetDescriptor()->full_name())),
                               "}\n");
          return 400;
        }
      } else {
        FieldMaskUtil::TrimMessage(mask, item.get());
      }
    }
    RedactSensitive(item.get());
    dump.add_configs()->PackFrom(*item);
  }
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  o.add_whitespace = true;
  auto st = google::protobuf::util::MessageToJsonString(dump, &out, o);
  if (!st.ok()) {
    *body = absl::StrCat(
        "{\"error\": ",
        JsonQuote(absl::StrCat("cannot print the dump: ", std::string(st.message()))), "}\n");
    return 500;
  }
  *body = std::move(out);
  return 200;
}

}  // namespace rpx
