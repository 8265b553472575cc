// LogFile: an append-only file (or stdout / stderr) that worker threads write lines to without
// ever blocking on the disk. Each worker appends to its own buffer (no lock); a full buffer
// (64 KiB) or the worker's periodic flush (FlushWorker, once a second) hands it to the file's
// writer thread under a mutex taken once per buffer, not per line. The writer thread does the
// write(2) calls, so a slow disk never stalls an event loop.
//
// Lines are never interleaved (buffers hold whole lines and one thread writes them) and never
// lost on rotation: Reopen() (SIGUSR1, /reopen_logs) makes the writer reopen the path before its
// next write, so lines written before the reopen go to the renamed file and later ones to the new
// file. If the writer falls more than kMaxQueuedBytes behind, whole buffers are dropped and
// counted rather than letting memory grow without bound.
//
// LogFileManager owns one LogFile per path (listeners that log to the same path share it). It is
// created on the main thread before the workers start and outlives them; Stop() flushes what is
// left after the workers have stopped.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace rpx {

class LogFile {
 public:
  static constexpr size_t kFlushBytes = 64 * 1024;
  static constexpr size_t kMaxQueuedBytes = 16 * 1024 * 1024;

  // `fd` >= 0: write to that descriptor (stdout, stderr), never reopened. Otherwise open `path`.
  // `slots`: the number of writer threads (workers) that may call Append / FlushWorker.
  LogFile(std::string path, int fd, uint32_t slots);
  ~LogFile();
  // Opens the file and starts the writer thread; false with `*error` when it cannot be opened.
  bool Start(std::string* error);

  // Worker `slot`'s thread only.
  void Append(uint32_t slot, std::string_view line) {
    std::string& b = slots_[slot].buffer;
    b.append(line);
    if (b.size() >= kFlushBytes) Handoff(slot);
  }
  void FlushWorker(uint32_t slot) {
    if (!slots_[slot].buffer.empty()) Handoff(slot);
  }
  // Any thread.
  void Reopen();
  // Waits until everything handed off so far is written (tests, shutdown).
  void Drain();
  // After every worker stopped: hands off their buffers, writes everything, stops the thread.
  void Stop();

  const std::string& path() const { return path_; }
  struct Stats {
    std::atomic<uint64_t> write_buffered{0};   // buffers handed to the writer
    std::atomic<uint64_t> write_completed{0};  // write(2) calls that wrote a buffer
    std::atomic<uint64_t> write_failed{0};
    std::atomic<uint64_t> write_dropped{0};        // buffers dropped: the writer was too far behind
    std::atomic<uint64_t> write_dropped_bytes{0};  // the bytes in those buffers
    std::atomic<uint64_t> reopen_failed{0};
    std::atomic<uint64_t> write_total_buffered{0};  // bytes waiting for the writer (gauge)
  };
  const Stats& stats() const { return stats_; }

 private:
  struct alignas(64) Slot {
    std::string buffer;
  };
  void Handoff(uint32_t slot);
  void Run();
  bool Open(std::string* error);
  void WriteAll(const std::string& data);

  const std::string path_;
  int fd_;
  const bool owns_fd_;
  std::unique_ptr<Slot[]> slots_;
  const uint32_t slot_count_;
  std::mutex mu_;
  std::condition_variable cv_;       // work for the writer
  std::condition_variable idle_cv_;  // the writer caught up
  std::vector<std::string> queue_;   // guarded by mu_
  size_t queued_bytes_ = 0;          // guarded by mu_
  bool reopen_ = false;              // guarded by mu_
  bool stop_ = false;                // guarded by mu_
  bool writing_ = false;             // guarded by mu_
  std::thread thread_;
  Stats stats_;
};

class LogFileManager {
 public:
  explicit LogFileManager(uint32_t slots) : slots_(slots) {}
  ~LogFileManager() { Stop(); }
  // The file for `path` ("/dev/stdout" and "/dev/stderr" write to fds 1 and 2), opened and
  // started on first use; nullptr with `*error` if it cannot be opened. Main thread.
  std::shared_ptr<LogFile> Get(const std::string& path, std::string* error);
  // Every file, for the workers' periodic flush and for stats. Any thread.
  std::vector<std::shared_ptr<LogFile>> Files() const;
  void ReopenAll();
  void DrainAll();
  void Stop();
  uint32_t slots() const { return slots_; }

 private:
  const uint32_t slots_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<LogFile>> files_;
};

}  // namespace rpx
