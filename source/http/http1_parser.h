// Http1Parser: an HTTP/1.x request or response parser over llhttp (strict mode: no lenient flags,
// so conflicting Content-Length/Transfer-Encoding and other smuggling shapes are errors). It fills
// a RequestHead or ResponseHead and streams body bytes (de-chunked) to its callbacks. It pauses
// after every complete message so pipelined requests are handled one at a time.
// One parser per connection, on that connection's worker.
//
// A fast path comes first: a head that arrives whole in one Execute call and is plainly formed
// (HTTP/1.1, or 1.0 with keep-alive; a request with GET, HEAD, POST, PUT, DELETE, OPTIONS or PATCH,
// an origin-form target and its Host; a 2xx-5xx response with a body framed by Content-Length;
// token names, printable ASCII values, CRLF line ends, no Transfer-Encoding or Upgrade, within
// the limits) is parsed in one pass, and a Content-Length body counted off, with the results and
// callbacks llhttp would give. Anything else, including everything malformed, goes to llhttp from
// the message's first byte, so llhttp keeps the last word on what is an error (the fuzz targets
// check both paths against each other).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <variant>

#include "llhttp.h"
#include "source/http/headers.h"

namespace rpx {

class Http1ParserCallbacks {
 public:
  virtual ~Http1ParserCallbacks() = default;
  // The head is complete (available from the parser). For responses, 1xx heads arrive here too.
  virtual void OnHead() = 0;
  virtual void OnBody(const char* data, size_t len) = 0;
  virtual void OnMessageComplete() = 0;
};

class Http1Parser {
 public:
  enum class Type { kRequest, kResponse };
  struct Limits {
    uint32_t max_header_bytes = 60 * 1024;  // request line / status line + all headers
    uint32_t max_headers = 100;
  };
  enum class Result { kOk, kPaused, kError };

  Http1Parser(Type type, Http1ParserCallbacks& callbacks, Limits limits);
  // The fast path (on by default; rpx --disable-fast-parse and the fuzz targets turn it off).
  // Set before parsers run: it is read without synchronization.
  static void SetFastPathEnabled(bool enabled);
  Http1Parser(const Http1Parser&) = delete;
  Http1Parser& operator=(const Http1Parser&) = delete;

  // Request parsers come and go with every request of a keep-alive connection (an idle
  // connection holds none). Acquire takes one from this thread's pool of released parsers, whose
  // heads keep the memory they grew to, so a request in steady state allocates nothing for its
  // parser or head; Release gives it back (at most kPoolSize are kept, and none whose head grew
  // past kPoolMaxHeadBytes). The pool belongs to the calling thread: a parser must be released
  // on the thread that acquired it. kPoolSize is sized for the requests a worker has in flight:
  // with hundreds of clients the number holding a parser swings by hundreds between two epoll
  // batches, and at 64 every swing past that freed parsers and allocated them again (1.5 mallocs
  // per request at 400 connections). The pool only ever holds parsers that were in use at once.
  static constexpr size_t kPoolSize = 1024;
  static constexpr size_t kPoolMaxHeadBytes = 16 * 1024;
  static std::unique_ptr<Http1Parser> Acquire(Type type, Http1ParserCallbacks& callbacks,
                                              Limits limits);
  static void Release(std::unique_ptr<Http1Parser> parser);

  // Parses from `data`. On kPaused (a message completed) *consumed says how far it got; call
  // Resume() before parsing more. On kError see error_status()/error_reason().
  Result Execute(const char* data, size_t len, size_t* consumed);
  void Resume();
  // Tells the parser the connection reached EOF (ends close-delimited response bodies).
  Result Finish();
  // Response parsers: the next response answers a HEAD request (no body whatever its headers say).
  void set_expect_no_body(bool v) { expect_no_body_ = v; }
  bool message_needs_eof() const { return !in_fast_body_ && llhttp_message_needs_eof(&parser_); }
  // Inside a Content-Length body: how many of its bytes the parser has not seen yet; else 0.
  uint64_t remaining_body_length() const;
  // The rest of the current body went past the parser (spliced): the message is complete, and
  // the parser starts over for the next one.
  void SkipRemainingBody();
  bool in_message() const { return in_message_; }

  // The head of the parser's type (request() on a response parser is an error).
  RequestHead& request() { return *std::get_if<RequestHead>(&head_); }
  ResponseHead& response() { return *std::get_if<ResponseHead>(&head_); }
  // HTTP status to answer a bad request with (400, 431, 501), and why.
  int error_status() const { return error_status_; }
  const std::string& error_reason() const { return error_reason_; }

 private:
  static int OnMessageBegin(llhttp_t* p);
  static int OnUrl(llhttp_t* p, const char* at, size_t len);
  static int OnStatus(llhttp_t* p, const char* at, size_t len);
  static int OnHeaderField(llhttp_t* p, const char* at, size_t len);
  static int OnHeaderValue(llhttp_t* p, const char* at, size_t len);
  static int OnHeaderValueComplete(llhttp_t* p);
  static int OnHeadersComplete(llhttp_t* p);
  static int OnBodyCb(llhttp_t* p, const char* at, size_t len);
  static int OnMessageCompleteCb(llhttp_t* p);
  static const llhttp_settings_t& Settings();
  int Fail(int status, const char* reason);
  // The byte `k` (1 or 2) positions before `at` in the stream, looking back into the previous
  // Execute call's data when needed.
  char Before(const char* at, int k) const {
    ptrdiff_t back = at - exec_begin_;
    if (back >= k) return at[-k];
    return prev_tail_[2 - (k - back)];  // k - back is 1 or 2
  }
  int HeadersTooLarge();
  bool AddHeaderBytes(size_t n);
  void RememberTail(const char* data, size_t len);
  // The fast path. FastMessage returns false, having called nothing, when llhttp must parse the
  // message; else it parsed the head and what of the body `data` holds.
  bool FastMessage(const char* data, size_t len, size_t* consumed, Result* result);
  Result FastBody(const char* data, size_t len, size_t* consumed);

  void Reset(Http1ParserCallbacks& callbacks, Limits limits);

  Type type_;
  Http1ParserCallbacks* callbacks_;
  Limits limits_;
  llhttp_t parser_;
  HeaderMap& headers() { return type_ == Type::kRequest ? request().headers : response().headers; }

  std::variant<RequestHead, ResponseHead> head_;
  bool in_trailers_ = false;
  bool in_message_ = false;
  bool expect_no_body_ = false;
  bool in_fast_body_ = false;  // in a body the fast path frames: fast_body_remaining_ > 0
  uint64_t fast_body_remaining_ = 0;
  // llhttp's state the fast path must honour. After a message, llhttp is paused before its
  // end-of-message step, which it takes at the next byte: until then Finish() fails (EOF state
  // "unsafe"); and once it takes it after a message that closes the connection, it drops
  // whatever follows.
  bool fast_finish_unsafe_ = false;  // the fast path ended a message; no byte since
  bool llhttp_closing_ = false;      // llhttp ended a message that closes the connection
  size_t header_bytes_ = 0;
  const char* exec_begin_ = nullptr;  // data of the current Execute call
  char prev_tail_[2] = {0, 0};        // last two bytes of the previous call's data
  int error_status_ = 0;
  std::string error_reason_;
};

}  // namespace rpx
