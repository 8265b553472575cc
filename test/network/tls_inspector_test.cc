// Tests of InspectClientHello on real ClientHellos and on hand-built ones.
//
// testdata/client_hello_*.bin are the first bytes real clients sent to a listener that only
// recorded them (OpenSSL 3.0.22, curl 7.88.1 on Debian 12):
//   openssl_tls12      openssl s_client -servername api.example.com -alpn h2,http/1.1 -tls1_2
//   openssl_tls13      openssl s_client -servername api.example.com -alpn h2,http/1.1 -tls1_3
//   openssl_no_sni     openssl s_client -noservername
//   openssl_upper_sni  openssl s_client -servername API.Example.COM -alpn h2
//   curl_http2         curl --http2 https://www.Example.org:PORT/ (curl lowercases the name)
// The same files seed test/fuzz/corpus/tls_client_hello_fuzz/.
#include "source/network/tls_inspector.h"

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rpx {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using std::string_literals::operator""s;

std::string ReadTestData(const std::string& name) {
  std::ifstream in("test/network/testdata/" + name, std::ios::binary);
  EXPECT_TRUE(in.good()) << name;
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

InspectResult Inspect(const std::string& bytes, ClientHelloInfo* info = nullptr) {
  return InspectClientHello(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), info);
}

// Builders for hand-made hellos, in the TLS presentation language's terms.
std::string Be16(size_t v) { return {static_cast<char>(v >> 8), static_cast<char>(v)}; }
std::string Be24(size_t v) {
  return {static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}
std::string Vec8(const std::string& s) { return static_cast<char>(s.size()) + s; }
std::string Vec16(const std::string& s) { return Be16(s.size()) + s; }
std::string Extension(uint16_t type, const std::string& data) { return Be16(type) + Vec16(data); }
std::string Sni(const std::string& host) {
  return Extension(0, Vec16(std::string(1, '\0') + Vec16(host)));
}
std::string Alpn(const std::vector<std::string>& names) {
  std::string list;
  for (const auto& n : names) list += Vec8(n);
  return Extension(16, Vec16(list));
}

struct Hello {
  std::string version = "\x03\x03";
  std::string session_id = std::string(32, 's');
  std::string cipher_suites = "\x13\x01\x00\x2f"s;
  std::string compression = std::string(1, '\0');
  bool has_extensions = true;
  std::string extensions;

  // The handshake message: type, 24-bit length, body.
  std::string Message() const {
    std::string body = version + std::string(32, 'r') + Vec8(session_id) + Vec16(cipher_suites) +
                       Vec8(compression);
    if (has_extensions) body += Vec16(extensions);
    return "\x01" + Be24(body.size()) + body;
  }
};

// Handshake bytes as records of at most `fragment` bytes each.
std::string Records(const std::string& handshake, size_t fragment = 16384) {
  std::string out;
  for (size_t i = 0; i < handshake.size(); i += fragment) {
    std::string piece = handshake.substr(i, fragment);
    out += "\x16\x03\x01" + Vec16(piece);
  }
  return out;
}

std::string Record(const Hello& h) { return Records(h.Message()); }

// The handshake bytes of a single-record capture.
std::string HandshakeOf(const std::string& records) {
  EXPECT_EQ(records.size(),
            size_t{5} + (static_cast<uint8_t>(records[3]) << 8 | static_cast<uint8_t>(records[4])));
  return records.substr(5);
}

const char* const kCaptures[] = {
    "client_hello_openssl_tls12.bin",  "client_hello_openssl_tls13.bin",
    "client_hello_openssl_no_sni.bin", "client_hello_openssl_upper_sni.bin",
    "client_hello_curl_http2.bin",
};

TEST(TlsInspectorTest, OpensslTls12SniAndAlpn) {
  ClientHelloInfo info;
  ASSERT_EQ(Inspect(ReadTestData("client_hello_openssl_tls12.bin"), &info), InspectResult::kTls);
  EXPECT_EQ(info.server_name, "api.example.com");
  EXPECT_THAT(info.alpn, ElementsAre("h2", "http/1.1"));
  EXPECT_EQ(info.legacy_version, 0x0303);
  EXPECT_FALSE(info.supports_tls13);  // -tls1_2 sends no supported_versions
}

TEST(TlsInspectorTest, OpensslTls13SniAndAlpn) {
  ClientHelloInfo info;
  ASSERT_EQ(Inspect(ReadTestData("client_hello_openssl_tls13.bin"), &info), InspectResult::kTls);
  EXPECT_EQ(info.server_name, "api.example.com");
  EXPECT_THAT(info.alpn, ElementsAre("h2", "http/1.1"));
  EXPECT_EQ(info.legacy_version, 0x0303);
  EXPECT_TRUE(info.supports_tls13);
}

TEST(TlsInspectorTest, CurlHttp2) {
  ClientHelloInfo info;
  ASSERT_EQ(Inspect(ReadTestData("client_hello_curl_http2.bin"), &info), InspectResult::kTls);
  EXPECT_EQ(info.server_name, "www.example.org");
  EXPECT_THAT(info.alpn, ElementsAre("h2", "http/1.1"));
  EXPECT_TRUE(info.supports_tls13);
}

TEST(TlsInspectorTest, NoSni) {
  ClientHelloInfo info;
  ASSERT_EQ(Inspect(ReadTestData("client_hello_openssl_no_sni.bin"), &info), InspectResult::kTls);
  EXPECT_EQ(info.server_name, "");
  EXPECT_THAT(info.alpn, IsEmpty());
  EXPECT_TRUE(info.supports_tls13);
}

TEST(TlsInspectorTest, UppercaseSniLowercased) {
  ClientHelloInfo info;
  const std::string hello = ReadTestData("client_hello_openssl_upper_sni.bin");
  ASSERT_NE(hello.find("API.Example.COM"), std::string::npos);
  ASSERT_EQ(Inspect(hello, &info), InspectResult::kTls);
  EXPECT_EQ(info.server_name, "api.example.com");
  EXPECT_THAT(info.alpn, ElementsAre("h2"));
}

TEST(TlsInspectorTest, EveryStrictPrefixNeedsMoreData) {
  for (const char* name : kCaptures) {
    const std::string hello = ReadTestData(name);
    ASSERT_FALSE(hello.empty()) << name;
    for (size_t n = 0; n < hello.size(); ++n) {
      ASSERT_EQ(Inspect(hello.substr(0, n)), InspectResult::kNeedMoreData) << name << " " << n;
    }
  }
}

TEST(TlsInspectorTest, BytesAfterTheHelloAreNotLookedAt) {
  ClientHelloInfo whole, more;
  const std::string hello = ReadTestData("client_hello_openssl_tls13.bin");
  ASSERT_EQ(Inspect(hello, &whole), InspectResult::kTls);
  // TLS 1.3 middlebox compatibility: change_cipher_spec, then early data, or anything at all.
  ASSERT_EQ(Inspect(hello + "\x14\x03\x03\x00\x01\x01"s + "GET / HTTP/1.1\r\n", &more),
            InspectResult::kTls);
  EXPECT_EQ(more.server_name, whole.server_name);
  EXPECT_EQ(more.alpn, whole.alpn);
}

TEST(TlsInspectorTest, HelloSplitAcrossTwoRecords) {
  const std::string handshake = HandshakeOf(ReadTestData("client_hello_curl_http2.bin"));
  // Every cut, including inside the 4-byte handshake header and inside the SNI extension.
  for (size_t cut = 1; cut < handshake.size(); ++cut) {
    const std::string split = "\x16\x03\x01" + Vec16(handshake.substr(0, cut)) + "\x16\x03\x03" +
                              Vec16(handshake.substr(cut));
    ClientHelloInfo info;
    ASSERT_EQ(Inspect(split, &info), InspectResult::kTls) << cut;
    EXPECT_EQ(info.server_name, "www.example.org") << cut;
    EXPECT_THAT(info.alpn, ElementsAre("h2", "http/1.1")) << cut;
    EXPECT_TRUE(info.supports_tls13) << cut;
    if (cut % 61 == 0) {
      for (size_t n = 0; n < split.size(); ++n) {
        ASSERT_EQ(Inspect(split.substr(0, n)), InspectResult::kNeedMoreData) << cut << " " << n;
      }
    }
  }
}

TEST(TlsInspectorTest, HelloInOneByteRecords) {
  const std::string records =
      Records(HandshakeOf(ReadTestData("client_hello_openssl_tls12.bin")), 1);
  ClientHelloInfo info;
  ASSERT_EQ(Inspect(records, &info), InspectResult::kTls);
  EXPECT_EQ(info.server_name, "api.example.com");
  EXPECT_EQ(Inspect(records.substr(0, records.size() - 1)), InspectResult::kNeedMoreData);
}

TEST(TlsInspectorTest, ShortInputs) {
  EXPECT_EQ(Inspect(""), InspectResult::kNeedMoreData);
  EXPECT_EQ(Inspect("\x16"), InspectResult::kNeedMoreData);
  EXPECT_EQ(Inspect("\x16\x03"), InspectResult::kNeedMoreData);
  EXPECT_EQ(Inspect("\x16\x03\x01\x02"), InspectResult::kNeedMoreData);
  EXPECT_EQ(Inspect("\x16\x03\x01\x02\x00"s), InspectResult::kNeedMoreData);
  EXPECT_EQ(Inspect("\x16\x03\x01\x02\x00\x01\x00"s), InspectResult::kNeedMoreData);
}

TEST(TlsInspectorTest, PlainHttpIsNotTls) {
  EXPECT_EQ(Inspect("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"), InspectResult::kNotTls);
  EXPECT_EQ(Inspect("G"), InspectResult::kNotTls);
  EXPECT_EQ(Inspect("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), InspectResult::kNotTls);
}

TEST(TlsInspectorTest, Sslv2HelloIsNotTls) {
  // An SSLv2-format ClientHello: 2-byte length with the high bit set, msg_type 1, version 3.1.
  EXPECT_EQ(Inspect("\x80\x2e\x01\x03\x01\x00\x15"s), InspectResult::kNotTls);
}

TEST(TlsInspectorTest, BadRecordHeadersAreNotTls) {
  EXPECT_EQ(Inspect("\x16\x02"), InspectResult::kNotTls);  // major version 2
  EXPECT_EQ(Inspect("\x16\x04\x01"), InspectResult::kNotTls);
  EXPECT_EQ(Inspect("\x16\x03\x01\x00\x00"s), InspectResult::kNotTls);  // empty
  EXPECT_EQ(Inspect("\x16\x03\x01\xff\xff"), InspectResult::kNotTls);   // longer than 2^14 + 2048
  EXPECT_EQ(Inspect("\x16\x03\x01\x48\x01"), InspectResult::kNotTls);
  EXPECT_EQ(Inspect("\x16\x03\x01\x48\x00"s), InspectResult::kNeedMoreData);  // exactly the max
  // Not a client_hello: a server_hello, a finished.
  EXPECT_EQ(Inspect("\x16\x03\x01\x00\x30\x02"s), InspectResult::kNotTls);
  EXPECT_EQ(Inspect("\x16\x03\x01\x00\x30\x14"s), InspectResult::kNotTls);
}

TEST(TlsInspectorTest, GarbageLengthsAreNotTls) {
  // A handshake length far beyond what a record can carry and beyond the cap.
  EXPECT_EQ(Inspect("\x16\x03\x01\x00\x04\x01\xff\xff\xff"s), InspectResult::kNotTls);
  // A 2-byte handshake message: too short for any ClientHello.
  EXPECT_EQ(Inspect("\x16\x03\x01\x00\x06\x01\x00\x00\x02\x03\x03"s), InspectResult::kNotTls);
  // The session id length overruns the message.
  std::string hello = Hello().Message();
  hello[1 + 3 + 2 + 32] = 40;
  EXPECT_EQ(Inspect(Records(hello)), InspectResult::kNotTls);
}

TEST(TlsInspectorTest, SecondRecordMustBeHandshake) {
  const std::string handshake = HandshakeOf(ReadTestData("client_hello_openssl_tls12.bin"));
  const std::string first = "\x16\x03\x01" + Vec16(handshake.substr(0, 100));
  EXPECT_EQ(Inspect(first + "\x17"), InspectResult::kNotTls);  // application data
  EXPECT_EQ(Inspect(first + "\x16\x02"), InspectResult::kNotTls);
  EXPECT_EQ(Inspect(first + "\x16\x03\x03\x00\x00"s), InspectResult::kNotTls);
  EXPECT_EQ(Inspect(first + "\x16\x03\x03"), InspectResult::kNeedMoreData);
}

TEST(TlsInspectorTest, HandBuiltHelloParses) {
  Hello h;
  // Both ends of A-Z, and the bytes just outside it, which stay as they are.
  h.extensions = Sni("Mixed.Case.EXAMPLE.AZ@[`{") + Alpn({"h2", "http/1.1", "x"}) +
                 Extension(43, Vec8("\x7a\x7a\x03\x04\x03\x03"s));
  ClientHelloInfo info;
  ASSERT_EQ(Inspect(Record(h), &info), InspectResult::kTls);
  EXPECT_EQ(info.server_name, "mixed.case.example.az@[`{");
  EXPECT_THAT(info.alpn, ElementsAre("h2", "http/1.1", "x"));
  EXPECT_TRUE(info.supports_tls13);
}

TEST(TlsInspectorTest, HelloWithoutExtensions) {
  Hello h;
  h.version = "\x03\x01";
  h.has_extensions = false;
  ClientHelloInfo info;
  ASSERT_EQ(Inspect(Record(h), &info), InspectResult::kTls);
  EXPECT_EQ(info.legacy_version, 0x0301);
  EXPECT_EQ(info.server_name, "");
  EXPECT_FALSE(info.supports_tls13);
}

TEST(TlsInspectorTest, FirstHostNameWins) {
  Hello h;
  // An unknown name type first, then two host names.
  h.extensions =
      Extension(0, Vec16("\x07"s + Vec16("other") + std::string(1, '\0') + Vec16("first.example") +
                         std::string(1, '\0') + Vec16("second.example")));
  ClientHelloInfo info;
  ASSERT_EQ(Inspect(Record(h), &info), InspectResult::kTls);
  EXPECT_EQ(info.server_name, "first.example");
}

TEST(TlsInspectorTest, LenientHostNames) {
  // Not this function's call: the TLS stack or the filter chain match decides what to do with it.
  Hello h;
  h.extensions = Sni("\x01\xff"s + "A b");
  ClientHelloInfo info;
  ASSERT_EQ(Inspect(Record(h), &info), InspectResult::kTls);
  EXPECT_EQ(info.server_name, "\x01\xff"s + "a b");
  h.extensions = Sni("");
  ASSERT_EQ(Inspect(Record(h), &info), InspectResult::kTls);
  EXPECT_EQ(info.server_name, "");
}

TEST(TlsInspectorTest, MalformedHelloBodiesAreNotTls) {
  std::vector<Hello> bad(8);
  bad[0].version = "\x02\x00"s;
  bad[1].session_id = std::string(33, 's');
  bad[2].cipher_suites = "";
  bad[3].cipher_suites = "\x13\x01\x00"s;
  bad[4].compression = "";
  bad[5].extensions = Sni("a") + "\x00"s;  // a byte that is no extension
  bad[6].extensions = "\x00"s;
  bad[7].has_extensions = false;
  for (size_t i = 0; i < bad.size(); ++i) {
    std::string message = bad[i].Message();
    if (i == 7) {
      // One stray byte after the compression methods, counted in the handshake length.
      message += 'x';
      message = "\x01" + Be24(message.size() - 4) + message.substr(4);
    }
    ClientHelloInfo info;
    info.server_name = "stale";
    EXPECT_EQ(Inspect(Records(message), &info), InspectResult::kNotTls) << i;
    EXPECT_EQ(info.server_name, "") << i;
  }
}

TEST(TlsInspectorTest, OverrunningExtensionsAreNotTls) {
  const std::string capture = ReadTestData("client_hello_openssl_tls12.bin");
  // The SNI extension (type 0) starts right after the 2-byte extensions length: make it, then its
  // list, then its name claim one more byte than there is.
  const size_t sni = capture.find("\x00\x00\x00\x14\x00\x12\x00\x00\x0f"s);
  ASSERT_NE(sni, std::string::npos);
  for (size_t field : {sni + 3, sni + 5, sni + 8}) {
    std::string bad = capture;
    ++bad[field];
    EXPECT_EQ(Inspect(bad), InspectResult::kNotTls) << field - sni;
  }
  // The extensions block claims more than the message holds.
  std::string bad = capture;
  ++bad[sni - 1];
  EXPECT_EQ(Inspect(bad), InspectResult::kNotTls);
  // Truncated: the message ends inside an extension (the lengths say so, not missing bytes).
  Hello h;
  h.extensions = Sni("api.example.com");
  std::string message = h.Message();
  message = message.substr(0, message.size() - 3);
  message = "\x01" + Be24(message.size() - 4) + message.substr(4);
  EXPECT_EQ(Inspect(Records(message)), InspectResult::kNotTls);
}

TEST(TlsInspectorTest, MalformedKnownExtensionsAreNotTls) {
  const std::vector<std::string> bad = {
      Extension(0, ""),                                              // no list length
      Extension(0, Vec16("")),                                       // empty server_name_list
      Extension(0, Vec16("\x00\x00\x05"s + "ab")),                   // name overruns its list
      Extension(0, Vec16(std::string(1, '\0') + Vec16("a")) + "x"),  // a byte after the list
      Extension(16, Vec16("")),                                      // empty ALPN list
      Extension(16, Vec16(Vec8("h2") + Vec8(""))),                   // empty protocol name
      Extension(16, Vec16("\x05h2")),                                // name overruns its list
      Extension(43, Vec8("")),                                       // no versions
      Extension(43, Vec8("\x03\x04\x03")),                           // odd length
      Extension(43, Vec8("\x03\x04") + "\x03\x03"),                  // bytes after the list
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    Hello h;
    h.extensions = Alpn({"h2"}) + bad[i];
    EXPECT_EQ(Inspect(Record(h)), InspectResult::kNotTls) << i;
  }
  // Unknown extensions are not looked into, whatever they hold.
  Hello h;
  h.extensions = Extension(0x1234, "\xff\xff\xff") + Extension(21, "");
  EXPECT_EQ(Inspect(Record(h)), InspectResult::kTls);
}

TEST(TlsInspectorTest, DuplicateExtensionIsNotTls) {
  Hello h;
  h.extensions = Sni("a.example") + Alpn({"h2"}) + Sni("b.example");
  EXPECT_EQ(Inspect(Record(h)), InspectResult::kNotTls);
  h.extensions = Extension(0xfe0d, "x") + Extension(0xfe0d, "x");  // unknown types too
  EXPECT_EQ(Inspect(Record(h)), InspectResult::kNotTls);
}

TEST(TlsInspectorTest, MalformedPrefixIsRefusedEarly) {
  // The session id length is wrong; the rest of the hello has not arrived, and need not.
  std::string records = Records(Hello().Message());
  records[5 + 4 + 2 + 32] = 33;
  EXPECT_EQ(Inspect(records.substr(0, 5 + 4 + 2 + 32 + 1)), InspectResult::kNotTls);
  EXPECT_EQ(Inspect(records.substr(0, 5 + 4 + 2 + 32)), InspectResult::kNeedMoreData);
}

// A hello of `total` bytes of input (records included) in 16 KiB records.
std::string HelloOfInputSize(size_t total) {
  Hello h;
  // Padding in several extensions: one extension holds at most 65535 bytes.
  const size_t records = (total + 16383) / 16384;  // a guess, checked below
  size_t left = total - records * 5 - (Hello().Message().size() + 2 * 4);
  h.extensions = Extension(21, std::string(left / 2, 'p'));
  h.extensions += Extension(0xfffe, std::string(left - left / 2, 'q'));
  h.extensions += Sni("big.example");
  std::string out = Records(h.Message());
  EXPECT_EQ(out.size(), total + Sni("big.example").size());
  return out;
}

TEST(TlsInspectorTest, HelloLargerThanTheCapIsNotTls) {
  // The largest hello that fits, and one byte more.
  std::string fits = HelloOfInputSize(kMaxClientHelloBytes - Sni("big.example").size());
  ASSERT_EQ(fits.size(), kMaxClientHelloBytes);
  ClientHelloInfo info;
  EXPECT_EQ(Inspect(fits, &info), InspectResult::kTls);
  EXPECT_EQ(info.server_name, "big.example");
  std::string over = HelloOfInputSize(kMaxClientHelloBytes + 1 - Sni("big.example").size());
  ASSERT_EQ(over.size(), kMaxClientHelloBytes + 1);
  EXPECT_EQ(Inspect(over), InspectResult::kNotTls);
  // Refused as soon as the record headers show that it cannot fit: at the third one, as the
  // fourth's header is then certain to push its end past the cap.
  EXPECT_EQ(Inspect(over.substr(0, 2 * (16384 + 5) + 5)), InspectResult::kNotTls);
  EXPECT_EQ(Inspect(over.substr(0, 2 * (16384 + 5) + 4)), InspectResult::kNeedMoreData);
  // A handshake length that cannot fit is refused from the first record's first bytes.
  EXPECT_EQ(Inspect("\x16\x03\x01\x40\x00\x01\x01\x00\x00"s), InspectResult::kNotTls);
}

}  // namespace
}  // namespace rpx
