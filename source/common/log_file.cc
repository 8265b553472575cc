#include "source/common/log_file.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "source/common/logger.h"

namespace rpx {

LogFile::LogFile(std::string path, int fd, uint32_t slots)
    : path_(std::move(path)),
      fd_(fd),
      owns_fd_(fd < 0),
      slots_(new Slot[slots]),
      slot_count_(slots) {}

LogFile::~LogFile() {
  Stop();
  if (owns_fd_ && fd_ >= 0) ::close(fd_);
}

bool LogFile::Open(std::string* error) {
  int fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (error) *error = strerror(errno);
    return false;
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  return true;
}

bool LogFile::Start(std::string* error) {
  if (owns_fd_ && !Open(error)) return false;
  thread_ = std::thread([this] { Run(); });
  return true;
}

void LogFile::Handoff(uint32_t slot) {
  std::string data;
  data.reserve(kFlushBytes + 1024);
  data.swap(slots_[slot].buffer);
  size_t n = data.size();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queued_bytes_ + n > kMaxQueuedBytes) {
      stats_.write_dropped.fetch_add(1, std::memory_order_relaxed);
      stats_.write_dropped_bytes.fetch_add(n, std::memory_order_relaxed);
      return;
    }
    queued_bytes_ += n;
    queue_.push_back(std::move(data));
  }
  stats_.write_buffered.fetch_add(1, std::memory_order_relaxed);
  stats_.write_total_buffered.fetch_add(n, std::memory_order_relaxed);
  cv_.notify_one();
}

void LogFile::Reopen() {
  if (!owns_fd_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    reopen_ = true;
  }
  cv_.notify_one();
}

void LogFile::WriteAll(const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t w = ::write(fd_, data.data() + off, data.size() - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      stats_.write_failed.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    off += static_cast<size_t>(w);
  }
  stats_.write_completed.fetch_add(1, std::memory_order_relaxed);
}

void LogFile::Run() {
  // Signals are for the main thread (it may start this thread before blocking them there).
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || reopen_ || !queue_.empty(); });
    bool reopen = reopen_;
    reopen_ = false;
    std::vector<std::string> batch;
    batch.swap(queue_);
    size_t bytes = queued_bytes_;
    queued_bytes_ = 0;
    bool stop = stop_;
    writing_ = true;
    lock.unlock();
    if (reopen) {
      // What was queued before the reopen was asked for belongs to the old file: a rotation
      // then moves whole lines, and none is lost.
      for (const auto& b : batch) WriteAll(b);
      batch.clear();
      std::string error;
      if (!Open(&error)) {
        stats_.reopen_failed.fetch_add(1, std::memory_order_relaxed);
        RPX_LOG(kError, "access log %s: cannot reopen: %s", path_, error);
      }
    }
    for (const auto& b : batch) WriteAll(b);
    stats_.write_total_buffered.fetch_sub(bytes, std::memory_order_relaxed);
    lock.lock();
    writing_ = false;
    if (queue_.empty()) idle_cv_.notify_all();
    if (stop && queue_.empty()) return;
  }
}

void LogFile::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!thread_.joinable()) return;
  idle_cv_.wait(lock, [this] { return queue_.empty() && !writing_ && !reopen_; });
}

void LogFile::Stop() {
  if (!thread_.joinable()) return;
  for (uint32_t i = 0; i < slot_count_; ++i) FlushWorker(i);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

std::shared_ptr<LogFile> LogFileManager::Get(const std::string& path, std::string* error) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(path);
  if (it != files_.end()) return it->second;
  int fd = path == "/dev/stdout" ? 1 : path == "/dev/stderr" ? 2 : -1;
  auto f = std::make_shared<LogFile>(path, fd, slots_);
  if (!f->Start(error)) return nullptr;
  files_.emplace(path, f);
  return f;
}

std::vector<std::shared_ptr<LogFile>> LogFileManager::Files() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<LogFile>> out;
  for (const auto& [p, f] : files_) out.push_back(f);
  return out;
}

void LogFileManager::ReopenAll() {
  for (const auto& f : Files()) f->Reopen();
}

void LogFileManager::DrainAll() {
  for (const auto& f : Files()) f->Drain();
}

void LogFileManager::Stop() {
  for (const auto& f : Files()) f->Stop();
}

}  // namespace rpx
