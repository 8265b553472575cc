// gRPC load for bench/grpc.sh, on Debian's libgrpc++ (no generated code: raw-bytes messages
// through the generic APIs), so no python sits on the load side.
//
//   grpc_bench server PORT
//       an echo service on 127.0.0.1:PORT: every method echoes each message it reads (a unary
//       call gets its request back; a stream gets every message back), callback API.
//   grpc_bench client TARGET MODE CONNS CALLS SECONDS BYTES
//       MODE unary: CONNS channels (separate connections) x CALLS calls in flight each, every
//       call answered starts the next; MODE stream: CONNS x CALLS bidirectional streams, each
//       sending its next BYTES-byte message when the last came back. Prints one line:
//       "mode=M messages=N seconds=S rate=R errors=E", messages being answers received.
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/byte_buffer.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

class EchoReactor : public grpc::ServerGenericBidiReactor {
 public:
  EchoReactor() { StartRead(&buf_); }
  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::OK);  // the client half-closed: done
      return;
    }
    StartWrite(&buf_);
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "write failed"));
      return;
    }
    StartRead(&buf_);
  }
  void OnDone() override { delete this; }

 private:
  grpc::ByteBuffer buf_;
};

class EchoService : public grpc::CallbackGenericService {
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext*) override {
    return new EchoReactor;
  }
};

int Serve(int port) {
  EchoService service;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:" + std::to_string(port), grpc::InsecureServerCredentials());
  builder.RegisterCallbackGenericService(&service);
  builder.SetMaxReceiveMessageSize(16 << 20);
  builder.SetMaxSendMessageSize(16 << 20);
  auto server = builder.BuildAndStart();
  if (!server) {
    fprintf(stderr, "cannot listen on 127.0.0.1:%d\n", port);
    return 1;
  }
  fprintf(stderr, "grpc_bench server on 127.0.0.1:%d\n", port);
  server->Wait();
  return 0;
}

struct Load {
  std::atomic<uint64_t> messages{0};
  std::atomic<uint64_t> errors{0};
  std::atomic<bool> stop{false};
  std::atomic<int> running{0};
  grpc::ByteBuffer message;
};

const char kMethod[] = "/bench.Echo/Call";

// One unary call slot: each answer starts the next call.
class UnarySlot {
 public:
  UnarySlot(grpc::GenericStub& stub, Load& load) : stub_(stub), load_(load) {}
  void Start() {
    ctx_ = std::make_unique<grpc::ClientContext>();
    response_.Clear();
    stub_.UnaryCall(ctx_.get(), kMethod, grpc::StubOptions(), &load_.message, &response_,
                    [this](grpc::Status s) {
                      if (s.ok()) {
                        load_.messages++;
                      } else {
                        load_.errors++;
                      }
                      if (load_.stop) {
                        load_.running--;
                        return;
                      }
                      Start();
                    });
  }

 private:
  grpc::GenericStub& stub_;
  Load& load_;
  std::unique_ptr<grpc::ClientContext> ctx_;
  grpc::ByteBuffer response_;
};

// One bidirectional stream: ping-pong, the next message once the last one came back and its
// write completed.
class StreamSlot : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  StreamSlot(grpc::GenericStub& stub, Load& load) : load_(load) {
    stub.PrepareBidiStreamingCall(&ctx_, kMethod, grpc::StubOptions(), this);
  }
  void Start() {
    Round();
    StartCall();
  }
  void OnWriteDone(bool ok) override { Step(ok); }
  void OnReadDone(bool ok) override {
    if (ok) load_.messages++;
    Step(ok);
  }
  void OnWritesDoneDone(bool) override {}
  void OnDone(const grpc::Status& s) override {
    if (!s.ok() && !load_.stop) load_.errors++;
    load_.running--;
  }

 private:
  void Round() {
    pending_ = 2;
    StartWrite(&load_.message);
    StartRead(&response_);
  }
  void Step(bool ok) {
    if (!ok) {
      failed_ = true;
    }
    if (--pending_ > 0) return;
    if (failed_) return;  // OnDone follows
    if (load_.stop) {
      StartWritesDone();
      return;
    }
    Round();
  }

  Load& load_;
  grpc::ClientContext ctx_;
  grpc::ByteBuffer response_;
  std::atomic<int> pending_{0};
  bool failed_ = false;
};

int Client(const std::string& target, const std::string& mode, int conns, int calls, double seconds,
           size_t bytes) {
  Load load;
  std::string payload(bytes, 'x');
  grpc::Slice slice(payload);
  load.message = grpc::ByteBuffer(&slice, 1);
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
  for (int i = 0; i < conns; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("rpx.bench.channel", i);  // distinct arguments: a connection per channel
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetMaxReceiveMessageSize(16 << 20);
    args.SetMaxSendMessageSize(16 << 20);
    channels.push_back(grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args));
    if (!channels.back()->WaitForConnected(std::chrono::system_clock::now() +
                                           std::chrono::seconds(5))) {
      fprintf(stderr, "cannot connect to %s\n", target.c_str());
      return 1;
    }
    stubs.push_back(std::make_unique<grpc::GenericStub>(channels.back()));
  }
  std::vector<std::unique_ptr<UnarySlot>> unary;
  std::vector<std::unique_ptr<StreamSlot>> streams;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < conns; ++i) {
    for (int j = 0; j < calls; ++j) {
      load.running++;
      if (mode == "unary") {
        unary.push_back(std::make_unique<UnarySlot>(*stubs[i], load));
        unary.back()->Start();
      } else {
        streams.push_back(std::make_unique<StreamSlot>(*stubs[i], load));
        streams.back()->Start();
      }
    }
  }
  // One second of warm-up, then the measured window.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  uint64_t m0 = load.messages, e0 = load.errors;
  auto w0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  uint64_t m1 = load.messages, e1 = load.errors;
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  load.stop = true;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (load.running > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  (void)t0;
  printf("mode=%s messages=%llu seconds=%.2f rate=%.0f errors=%llu\n", mode.c_str(),
         static_cast<unsigned long long>(m1 - m0), secs, (m1 - m0) / secs,
         static_cast<unsigned long long>(e1 - e0));
  fflush(stdout);
  if (load.running > 0) _exit(0);  // calls that never ended: do not wait for them in teardown
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "server") return Serve(atoi(argv[2]));
  if (argc == 8 && std::string(argv[1]) == "client") {
    return Client(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]), atof(argv[6]),
                  static_cast<size_t>(atol(argv[7])));
  }
  fprintf(stderr,
          "usage: grpc_bench server PORT\n"
          "       grpc_bench client TARGET unary|stream CONNS CALLS SECONDS BYTES\n");
  return 2;
}
