// Where the ranks of a command case meet: text exchanged between them over the case's
// communicator, and torchrun's MASTER_ADDR, MASTER_PORT, LOCAL_RANK and LOCAL_WORLD_SIZE agreed
// on before any program starts.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <stdexcept>

#include "kinds/command/command_case.hpp"

namespace meshgate::runner::command_kind {
namespace {

// Memory of the communicator's space (device memory for nccl), freed on scope exit.
class CommBuffer {
 public:
  CommBuffer(comm::Communicator& comm, std::size_t bytes)
      : comm_(comm), data_(comm.allocate(std::max<std::size_t>(bytes, 1))) {}
  ~CommBuffer() { comm_.deallocate(data_); }
  CommBuffer(const CommBuffer&) = delete;
  CommBuffer& operator=(const CommBuffer&) = delete;
  void* data() const { return data_; }

 private:
  comm::Communicator& comm_;
  void* data_;
};

// A TCP port that nothing listens on now, different from every port this runner handed out
// before, so that two cases never share one even when the kernel offers the same port again.
int pick_free_port() {
  static std::mutex mutex;
  static std::set<int> handed_out;
  const std::lock_guard<std::mutex> lock(mutex);
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw std::runtime_error(std::string("socket failed: ") + std::strerror(errno));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_ANY);
    address.sin_port = 0;
    socklen_t length = sizeof address;
    const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                       ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
    const int error = errno;
    ::close(fd);
    if (!bound) {
      throw std::runtime_error(std::string("cannot find a free port for MASTER_PORT: ") +
                               std::strerror(error));
    }
    const int port = ntohs(address.sin_port);
    if (handed_out.insert(port).second) return port;
  }
  throw std::runtime_error("cannot find a free port for MASTER_PORT that no case used before");
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

}  // namespace

std::vector<std::string> all_gather_text(comm::Communicator& comm, const std::string& mine) {
  const auto ranks = static_cast<std::size_t>(comm.size());
  const std::int64_t my_length = static_cast<std::int64_t>(mine.size());
  std::vector<std::int64_t> lengths(ranks);
  {
    CommBuffer send(comm, sizeof my_length), receive(comm, sizeof my_length * ranks);
    comm.copy_from_host(send.data(), &my_length, sizeof my_length);
    comm.all_gather(send.data(), receive.data(), 1, comm::DType::i64);
    comm.synchronize();
    comm.copy_to_host(lengths.data(), receive.data(), sizeof my_length * ranks);
  }
  const auto longest = static_cast<std::size_t>(*std::max_element(lengths.begin(), lengths.end()));
  std::vector<std::string> texts(ranks);
  if (longest == 0) return texts;
  std::string padded = mine;
  padded.resize(longest);
  std::string all(longest * ranks, '\0');
  {
    CommBuffer send(comm, longest), receive(comm, longest * ranks);
    comm.copy_from_host(send.data(), padded.data(), longest);
    comm.all_gather(send.data(), receive.data(), longest, comm::DType::u8);
    comm.synchronize();
    comm.copy_to_host(all.data(), receive.data(), all.size());
  }
  for (std::size_t r = 0; r < ranks; ++r) {
    texts[r] = all.substr(r * longest, static_cast<std::size_t>(lengths[r]));
  }
  return texts;
}

Rendezvous agree_on_rendezvous(comm::Communicator& comm) {
  const std::string me = host_name();
  int port = 0;
  std::string port_problem;
  if (comm.rank() == 0) {
    try {
      port = pick_free_port();
    } catch (const std::exception& e) {
      port_problem = e.what();
    }
  }
  const std::vector<std::string> seen = all_gather_text(comm, std::to_string(port) + " " + me);
  std::vector<std::string> hosts;
  for (const std::string& entry : seen) hosts.push_back(entry.substr(entry.find(' ') + 1));
  Rendezvous out;
  out.master_port = std::atoi(seen[0].c_str());
  const bool one_host =
      std::all_of(hosts.begin(), hosts.end(), [&](const std::string& h) { return h == hosts[0]; });
  out.master_addr = one_host ? "127.0.0.1" : hosts[0];
  out.local_rank = static_cast<int>(std::count(hosts.begin(), hosts.begin() + comm.rank(), me));
  out.local_world_size = static_cast<int>(std::count(hosts.begin(), hosts.end(), me));
  if (out.master_port == 0) {
    out.problem = comm.rank() == 0 ? port_problem : "not started: rank 0 found no MASTER_PORT";
  }
  return out;
}

}  // namespace meshgate::runner::command_kind
