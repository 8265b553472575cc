// Throwaway certificates for TLS tests, made with OpenSSL's API in memory: a CA, and leaf
// certificates it signs with the names (subject alternative names) and validity a test needs.
#pragma once

#include <string>
#include <vector>

namespace rpx {

struct TestCert {
  std::string cert_pem;
  std::string key_pem;
};

enum class TestKeyType { kEcdsaP256, kRsa2048 };

struct LeafOptions {
  std::string common_name = "leaf";
  std::vector<std::string> sans;  // "DNS:a.example.com", "URI:spiffe://x/y", "IP:127.0.0.1"
  TestKeyType key = TestKeyType::kEcdsaP256;
  long not_before_days = -1;  // relative to now
  long not_after_days = 365;
};

TestCert MakeTestCa(const std::string& common_name = "rpx test CA",
                    TestKeyType key = TestKeyType::kEcdsaP256);
TestCert MakeTestLeaf(const TestCert& ca, const LeafOptions& options);

}  // namespace rpx
