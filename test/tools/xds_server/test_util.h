// Helpers shared by the xds_server tests: temporary directories, files written the way deploy
// tools should (aside, then renamed into place) and a thread-safe capture of the log.
#pragma once

#include <stdlib.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tools/xds_server/snapshot.h"

namespace rpx {
namespace xds_server {

// Two clusters, in the directory's file format.
constexpr char kClusters[] = R"(clusters:
- name: a
  type: STATIC
  connect_timeout: 1s
- name: b
  connect_timeout: 2s
)";

inline std::string MakeTempDir() {
  const char* base = getenv("TEST_TMPDIR");
  std::string templ = std::string(base ? base : "/tmp") + "/xds_test_XXXXXX";
  EXPECT_NE(mkdtemp(templ.data()), nullptr);
  return templ;
}

// Written aside and renamed into place, so a poll never sees half a file.
inline void WriteFile(const std::string& dir, const std::string& name, const std::string& content) {
  std::string tmp = dir + "/.tmp-" + name;
  {
    std::ofstream out(tmp);
    out << content;
  }
  ASSERT_EQ(rename(tmp.c_str(), (dir + "/" + name).c_str()), 0);
}

inline std::string ReadFileText(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class LogCapture {
 public:
  LogFn fn() {
    return [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu_);
      lines_.push_back(line);
      cv_.notify_all();
    };
  }
  // True once a line containing `text` has been logged.
  bool WaitFor(const std::string& text,
               std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return CountLocked(text) > 0; });
  }
  std::string All() {
    std::lock_guard<std::mutex> lock(mu_);
    std::string out;
    for (const auto& l : lines_) out += l + "\n";
    return out;
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_.size();
  }
  int Count(const std::string& text) {
    std::lock_guard<std::mutex> lock(mu_);
    return CountLocked(text);
  }

 private:
  int CountLocked(const std::string& text) {
    int n = 0;
    for (const auto& l : lines_) n += l.find(text) != std::string::npos;
    return n;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> lines_;
};

}  // namespace xds_server
}  // namespace rpx
