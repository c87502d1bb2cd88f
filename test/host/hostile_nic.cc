// A stand-in mrc-nic that breaks the host ABI on purpose, for lib_mrc.so to
// refuse or bound what it reports. It serves one device in a private run
// directory; this program then opens it through lib_mrc.so's verbs calls.
//
//   hostile-nic WORKDIR
//
// Checks: a hello reply claiming more GIDs than the ABI's table holds is
// bounded by the table (lookups past it fail with EINVAL, never read past).
#include <infiniband/verbs.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "host/abi.h"
#include "tap.h"

namespace abi = mrc::host::abi;

namespace {

constexpr uint32_t kClaimedGids = 1000;  // far beyond abi::kGidTableLen

// Answers every request with success; hello gets a device whose GID count
// is a lie. An events connection only waits for the client to go.
void serve(int fd) {
  std::vector<uint8_t> buf(sizeof(abi::Request) + abi::kMaxPayload);
  for (;;) {
    const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
    if (n < ssize_t(sizeof(abi::Request))) break;
    abi::Request rq;
    std::memcpy(&rq, buf.data(), sizeof rq);
    if (rq.op == abi::Op::events) continue;
    auto* rs = new abi::Response{};
    if (rq.op == abi::Op::hello) {
      abi::DeviceInfo& d = rs->device;
      d.abi_version = abi::kAbiVersion;
      std::snprintf(d.name, sizeof d.name, "fake0");
      d.num_planes = 1;
      d.mtu = 4096;
      d.gid_count = kClaimedGids;
      for (uint32_t i = 0; i < abi::kGidTableLen; ++i) d.gids[i][15] = uint8_t(i + 1);
      d.max_qp = d.max_cq = d.max_mr = d.max_pd = 16;
      d.max_sq_depth = d.max_rq_depth = d.max_cq_depth = 64;
      d.max_mr_size = 1 << 20;
      d.events_token = 42;
    }
    const bool sent = send(fd, rs, sizeof *rs, MSG_NOSIGNAL) == ssize_t(sizeof *rs);
    delete rs;
    if (!sent) break;
  }
  close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: hostile-nic WORKDIR\n");
    return 2;
  }
  const std::string dir = std::string(argv[1]) + "/run";
  mkdir(argv[1], 0700);
  mkdir(dir.c_str(), 0700);
  const std::string path = dir + "/fake0.sock";
  unlink(path.c_str());
  setenv("MRC_RUN_DIR", dir.c_str(), 1);

  const int ls = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path.c_str());
  if (ls < 0 || bind(ls, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || listen(ls, 16) != 0) {
    std::perror("hostile-nic: listen");
    return 2;
  }
  std::thread([ls] {
    for (;;) {
      const int fd = accept(ls, nullptr, nullptr);
      if (fd < 0) return;
      std::thread(serve, fd).detach();
    }
  }).detach();

  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ibv_device* dev = nullptr;
  for (int i = 0; list && i < n; ++i)
    if (std::strcmp(ibv_get_device_name(list[i]), "fake0") == 0) dev = list[i];
  check(dev != nullptr, "the stand-in device is listed");
  ibv_context* ctx = dev ? ibv_open_device(dev) : nullptr;
  check(ctx != nullptr, "the stand-in device opens");
  if (ctx) {
    ibv_gid g{};
    check(ibv_query_gid(ctx, 1, int(abi::kGidTableLen) - 1, &g) == 0 && g.raw[15] == abi::kGidTableLen,
          "the table's last GID is read");
    errno = 0;
    const int rc = ibv_query_gid(ctx, 1, int(abi::kGidTableLen), &g);
    check(rc != 0 && errno == EINVAL, "a GID index past the table is refused (EINVAL) despite gid_count " +
                                          std::to_string(kClaimedGids) + " (rc " + std::to_string(rc) + ")");
    ibv_gid_entry e{};
    check(ibv_query_gid_ex(ctx, 1, abi::kGidTableLen + 5, &e, 0) != 0,
          "ibv_query_gid_ex past the table is refused");
    ibv_port_attr pa{};
    const int prc = ibv_query_port(ctx, 1, &pa);
    check(prc == 0 && uint32_t(pa.gid_tbl_len) <= abi::kGidTableLen,
          "ibv_query_port's gid_tbl_len is bounded by the table (" + std::to_string(pa.gid_tbl_len) + ")");
    ibv_close_device(ctx);
  }
  if (list) ibv_free_device_list(list);
  std::printf("# %d failed\n", n_fail);
  return n_fail ? 1 : 0;
}
