// tls_client_hello_fuzz: arbitrary bytes as the first bytes of a connection, given to
// InspectClientHello whole and as every prefix (what successive MSG_PEEKs return). It proves that
// on any input: the verdict is kNeedMoreData up to some length and, once it is anything else,
// never changes as bytes are added (a kTls verdict keeps the same server name, ALPN list and
// versions); the whole input's verdict agrees with a plain reference model that reassembles the
// records and parses a complete ClientHello in one go (kTls exactly when the model finds a valid
// hello ending within kMaxClientHelloBytes, with the same fields, reached exactly at the hello's
// last byte; kNotTls when the model finds it invalid or too large; never kTls while incomplete);
// and a valid hello cut into other records (input-derived cuts) reads the same. ASan catches any
// read outside the bytes given.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "source/network/tls_inspector.h"
#include "test/fuzz/fuzz_common.h"

namespace rpx {
namespace fuzz {
namespace {

bool SameInfo(const ClientHelloInfo& a, const ClientHelloInfo& b) {
  return a.server_name == b.server_name && a.alpn == b.alpn &&
         a.legacy_version == b.legacy_version && a.supports_tls13 == b.supports_tls13;
}

// ---- The reference model: whole bytes only, no incremental state, no early verdicts ----

enum class Model { kIncomplete, kValid, kInvalid };

// Bounds-checked reads over complete bytes; any overrun makes `ok` false for good.
struct Cursor {
  const uint8_t* p;
  size_t n;
  size_t i = 0;
  bool ok = true;
  bool Has(size_t k) {
    ok = ok && k <= n - i;
    return ok;
  }
  uint32_t Int(size_t bytes) {
    if (!Has(bytes)) return 0;
    uint32_t v = 0;
    for (size_t k = 0; k < bytes; ++k) v = v << 8 | p[i++];
    return v;
  }
  // A length-prefixed vector as a cursor of its own.
  Cursor Vec(size_t len_bytes) {
    size_t len = Int(len_bytes);
    if (!Has(len)) return Cursor{p, 0, 0, false};
    Cursor c{p + i, len};
    i += len;
    return c;
  }
  bool End() const { return ok && i == n; }
};

bool ModelExtensions(Cursor ext, ClientHelloInfo* info) {
  std::vector<uint16_t> seen;
  while (ext.ok && ext.i < ext.n) {
    uint16_t type = static_cast<uint16_t>(ext.Int(2));
    Cursor body = ext.Vec(2);
    if (!ext.ok) return false;
    for (uint16_t t : seen) {
      if (t == type) return false;
    }
    seen.push_back(type);
    if (type == 0) {
      Cursor list = body.Vec(2);
      if (!body.End() || list.n == 0) return false;
      bool found = false;
      while (list.ok && list.i < list.n) {
        uint32_t name_type = list.Int(1);
        Cursor name = list.Vec(2);
        if (!list.ok) return false;
        if (name_type == 0 && !found) {
          found = true;
          for (size_t k = 0; k < name.n; ++k) {
            char c = static_cast<char>(name.p[k]);
            info->server_name += (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c;
          }
        }
      }
      if (!list.End()) return false;
    } else if (type == 16) {
      Cursor list = body.Vec(2);
      if (!body.End() || list.n == 0) return false;
      while (list.ok && list.i < list.n) {
        Cursor name = list.Vec(1);
        if (!list.ok || name.n == 0) return false;
        info->alpn.emplace_back(reinterpret_cast<const char*>(name.p), name.n);
      }
      if (!list.End()) return false;
    } else if (type == 43) {
      Cursor list = body.Vec(1);
      if (!body.End() || list.n == 0 || list.n % 2 != 0) return false;
      while (list.i < list.n) {
        if (list.Int(2) == 0x0304) info->supports_tls13 = true;
      }
    }
  }
  return ext.End();
}

bool ModelHello(Cursor h, ClientHelloInfo* info) {
  info->legacy_version = static_cast<uint16_t>(h.Int(2));
  if ((info->legacy_version >> 8) != 3) return false;
  if (!h.Has(32)) return false;
  h.i += 32;
  Cursor session_id = h.Vec(1);
  Cursor suites = h.Vec(2);
  Cursor compression = h.Vec(1);
  if (!h.ok || session_id.n > 32 || suites.n == 0 || suites.n % 2 != 0 || compression.n == 0) {
    return false;
  }
  if (h.End()) return true;
  Cursor ext = h.Vec(2);
  return h.End() && ModelExtensions(ext, info);
}

// Reassembles the handshake bytes record by record, keeping each byte's offset in the input, until
// the ClientHello is complete; then parses it.
Model RunModel(const uint8_t* data, size_t size, ClientHelloInfo* info, size_t* hello_end) {
  std::string hs;
  std::vector<size_t> offset;
  size_t pos = 0;
  size_t total = 0;
  while (total == 0 || hs.size() < total) {
    if (pos < size && data[pos] != 22) return Model::kInvalid;
    if (pos + 1 < size && data[pos + 1] != 3) return Model::kInvalid;
    if (size - pos < 5) return Model::kIncomplete;
    size_t len = static_cast<size_t>(data[pos + 3]) << 8 | data[pos + 4];
    if (len == 0 || len > 16384 + 2048) return Model::kInvalid;
    for (size_t k = 0; k < len && pos + 5 + k < size; ++k) {
      hs.push_back(static_cast<char>(data[pos + 5 + k]));
      offset.push_back(pos + 5 + k);
    }
    if (!hs.empty() && hs[0] != 1) return Model::kInvalid;
    if (total == 0 && hs.size() >= 4) {
      total =
          4 + (static_cast<size_t>(static_cast<uint8_t>(hs[1])) << 16 |
               static_cast<size_t>(static_cast<uint8_t>(hs[2])) << 8 | static_cast<uint8_t>(hs[3]));
    }
    if (pos + 5 + len > size) break;
    pos += 5 + len;
  }
  if (total == 0 || hs.size() < total) return Model::kIncomplete;
  *hello_end = offset[total - 1] + 1;
  if (*hello_end > kMaxClientHelloBytes) return Model::kInvalid;
  Cursor hello{reinterpret_cast<const uint8_t*>(hs.data()) + 4, total - 4};
  return ModelHello(hello, info) ? Model::kValid : Model::kInvalid;
}

const char* Name(InspectResult r) {
  switch (r) {
    case InspectResult::kNeedMoreData:
      return "need-more-data";
    case InspectResult::kTls:
      return "tls";
    case InspectResult::kNotTls:
      return "not-tls";
  }
  return "?";
}

// The verdict of every prefix; returns the first length with a verdict other than kNeedMoreData
// (size + 1 if none) and checks that it never changes after that.
size_t CheckPrefixes(const uint8_t* data, size_t size, InspectResult whole,
                     const ClientHelloInfo& whole_info) {
  size_t decided = size + 1;
  InspectResult first = InspectResult::kNeedMoreData;
  ClientHelloInfo first_info;
  // A copy per prefix, so that ASan sees a read past the prefix as an overflow.
  std::vector<uint8_t> prefix;
  for (size_t n = 0; n <= size; ++n) {
    prefix.assign(data, data + n);
    ClientHelloInfo info;
    info.server_name = "stale";
    InspectResult r = InspectClientHello(prefix.data(), n, &info);
    if (r != InspectResult::kTls) FUZZ_CHECK(SameInfo(info, ClientHelloInfo()));
    if (decided > size) {
      if (r == InspectResult::kNeedMoreData) continue;
      decided = n;
      first = r;
      first_info = info;
      continue;
    }
    if (r != first || (r == InspectResult::kTls && !SameInfo(info, first_info))) {
      std::fprintf(stderr, "verdict at %zu bytes: %s, at %zu bytes: %s\n", decided, Name(first), n,
                   Name(r));
      FUZZ_CHECK(r == first);
      FUZZ_CHECK(SameInfo(info, first_info));
    }
  }
  FUZZ_CHECK(decided > size ? whole == InspectResult::kNeedMoreData : whole == first);
  if (whole == InspectResult::kTls) FUZZ_CHECK(SameInfo(whole_info, first_info));
  return decided;
}

void CheckAgainstModel(const uint8_t* data, size_t size, InspectResult got,
                       const ClientHelloInfo& info, size_t decided) {
  ClientHelloInfo want;
  size_t hello_end = 0;
  Model m = RunModel(data, size, &want, &hello_end);
  if (m == Model::kValid) {
    if (got != InspectResult::kTls) {
      std::fprintf(stderr, "model: a valid hello of %zu bytes; inspector: %s\n", hello_end,
                   Name(got));
    }
    FUZZ_CHECK(got == InspectResult::kTls);
    FUZZ_CHECK(SameInfo(info, want));
    FUZZ_CHECK(decided == hello_end);  // not one byte early or late
    FUZZ_CHECK(decided <= kMaxClientHelloBytes);
  } else if (m == Model::kInvalid) {
    if (got != InspectResult::kNotTls) std::fprintf(stderr, "model: invalid; got %s\n", Name(got));
    FUZZ_CHECK(got == InspectResult::kNotTls);
  } else {
    FUZZ_CHECK(got != InspectResult::kTls);
  }
}

// Cuts a valid hello's handshake bytes into records elsewhere; the fields must not change.
void CheckRefragmented(const uint8_t* data, size_t size, const ClientHelloInfo& info) {
  ClientHelloInfo model_info;
  size_t hello_end = 0;
  if (RunModel(data, size, &model_info, &hello_end) != Model::kValid) return;
  // The handshake bytes again (the model already proved the records well-formed).
  std::string hs;
  for (size_t pos = 0; pos < hello_end;) {
    size_t len = static_cast<size_t>(data[pos + 3]) << 8 | data[pos + 4];
    size_t take = std::min(len, hello_end - pos - 5);
    hs.append(reinterpret_cast<const char*>(data) + pos + 5, take);
    pos += 5 + len;
  }
  Choices choices(HashInput(data, size));
  std::vector<size_t> cuts = SplitPoints(hs.size(), choices, 6);
  cuts.push_back(hs.size());
  std::string records;
  size_t from = 0;
  for (size_t cut : cuts) {
    while (cut - from > 0) {
      size_t len = std::min<size_t>(cut - from, 16384);
      records += "\x16\x03";
      records += static_cast<char>(choices.Below(5));  // any 3.x record version
      records += static_cast<char>(len >> 8);
      records += static_cast<char>(len);
      records.append(hs, from, len);
      from += len;
    }
  }
  ClientHelloInfo got;
  InspectResult r =
      InspectClientHello(reinterpret_cast<const uint8_t*>(records.data()), records.size(), &got);
  if (records.size() > kMaxClientHelloBytes) {
    FUZZ_CHECK(r == InspectResult::kNotTls);
  } else {
    FUZZ_CHECK(r == InspectResult::kTls);
    FUZZ_CHECK(SameInfo(got, info));
  }
}

}  // namespace
}  // namespace fuzz
}  // namespace rpx

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rpx::fuzz;
  // Exactly the input's bytes, so that ASan reports a read past them.
  std::vector<uint8_t> copy(data, data + size);
  rpx::ClientHelloInfo info;
  rpx::InspectResult whole = rpx::InspectClientHello(copy.data(), size, &info);
  FUZZ_CHECK(rpx::InspectClientHello(copy.data(), size, nullptr) == whole);
  size_t decided = CheckPrefixes(copy.data(), size, whole, info);
  CheckAgainstModel(copy.data(), size, whole, info, decided);
  if (whole == rpx::InspectResult::kTls) CheckRefragmented(copy.data(), size, info);
  return 0;
}
