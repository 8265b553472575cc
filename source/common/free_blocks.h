// FreeBlocks<kSize, kMaxKept>: freed blocks of kSize bytes kept on a per-thread list, for memory a
// worker takes and gives back at the request rate (buffer storage, per-request streams): the
// next Take() gets a block that is likely still in cache, without a trip through malloc.
//
// Threads: each thread has its own list, so there are no locks; a block given back on another
// thread than the one that took it joins that thread's list. At most kMaxKept blocks are kept
// per thread; the rest go back to the allocator. A thread's list is freed when the thread ends,
// and a block given back after that (from another thread-local's destructor) is freed at once.
//
// The list runs through the free blocks themselves, and the per-thread state is trivially
// constructed and destroyed, so reaching it costs no thread-local initialization check; the
// freeing at thread exit is registered the first time a block is kept.
#pragma once

#include <cstddef>
#include <new>

namespace rpx {

template <size_t kSize, size_t kMaxKept>
class FreeBlocks {
  static_assert(kSize >= sizeof(void*), "a free block holds the link to the next");

 public:
  static void* Take() {
    if (head_ == nullptr) return ::operator new(kSize);
    void* p = head_;
    head_ = *static_cast<void**>(p);
    --count_;
    return p;
  }
  static void Give(void* p) {
    if (gone_ || count_ >= kMaxKept) return ::operator delete(p);
    if (!reaper_registered_) {
      static thread_local Reaper reaper;  // frees the list when the thread ends
      reaper_registered_ = true;
    }
    *static_cast<void**>(p) = head_;
    head_ = p;
    ++count_;
  }

 private:
  struct Reaper {
    ~Reaper() {
      gone_ = true;
      while (head_) ::operator delete(Take());
    }
  };
  static inline thread_local void* head_ = nullptr;
  static inline thread_local size_t count_ = 0;
  static inline thread_local bool gone_ = false;
  static inline thread_local bool reaper_registered_ = false;
};

}  // namespace rpx
