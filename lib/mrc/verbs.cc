// The libibverbs entry points MRC programs call, for mrc-nic devices.
//
// Programs link lib_mrc.so ahead of libibverbs, so these definitions win.
// Every call on an object that is not ours goes on to the real libibverbs
// (found with RTLD_NEXT), so real RDMA devices keep working. Several verbs
// are macros or inline wrappers in <infiniband/verbs.h>; each path they can
// take ends in a symbol defined here or in an op of our verbs_context.
#include <dirent.h>
#include <dlfcn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "internal.h"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova
#undef ibv_query_port

using namespace mrc::lib;

namespace {

template <typename Fn>
Fn real(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

// The real libibverbs' list and ours share one allocation: a header before
// the array the program sees.
struct ListHeader {
  uint64_t magic;
  ibv_device** real;
};
constexpr uint64_t kListMagic = 0x6d72632d6c697374;  // "mrc-list"

bool alive(const std::string& path) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.size() >= sizeof sa.sun_path) return false;
  std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
  // Non-blocking: a listener with a full backlog (a stopped NIC) is
  // there, and must not block the listing.
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return false;
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0 || errno == EAGAIN;
  close(fd);
  return ok;
}

// Devices whose mrc-nic is running, by name (mrc0 before mrc1 before mrc10).
std::vector<Device*> live_devices() {
  std::vector<std::pair<std::string, std::string>> found;
  const std::string dir = abi::run_dir(getuid());
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n.size() <= 5 || n.compare(n.size() - 5, 5, ".sock") != 0) continue;
      n.resize(n.size() - 5);
      if (n.size() >= IBV_SYSFS_NAME_MAX) continue;
      const std::string path = dir + "/" + e->d_name;
      if (alive(path)) found.emplace_back(n, path);
    }
    closedir(d);
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
    return a.first.size() != b.first.size() ? a.first.size() < b.first.size() : a.first < b.first;
  });
  std::vector<Device*> out;
  for (auto& [name, path] : found)
    if (Device* dev = find_or_add_device(name, path)) out.push_back(dev);
  return out;
}

Pd* our_pd(ibv_pd* pd) { return pd && Context::from(pd->context) ? reinterpret_cast<Pd*>(pd) : nullptr; }

void fill_port(const Context& c, uint8_t port, const abi::PortInfo& p, ibv_port_attr* a) {
  std::memset(a, 0, sizeof *a);
  const auto mtu_enum = [](uint32_t bytes) {
    return bytes >= 4096 ? IBV_MTU_4096 : bytes >= 2048 ? IBV_MTU_2048 : bytes >= 1024 ? IBV_MTU_1024
                                      : bytes >= 512    ? IBV_MTU_512
                                                        : IBV_MTU_256;
  };
  const bool up = (p.planes_up >> (port - 1)) & 1;
  a->state = up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  a->max_mtu = IBV_MTU_4096;
  a->active_mtu = mtu_enum(p.mtu);
  a->gid_tbl_len = int(c.info.gid_count);
  a->port_cap_flags = 0;
  a->max_msg_sz = 1u << 31;
  a->pkey_tbl_len = 1;
  a->phys_state = up ? 5 : 3;  // LinkUp : Disabled
  a->link_layer = IBV_LINK_LAYER_ETHERNET;
  a->active_width = 2;   // 4x
  a->active_speed = 32;  // EDR-class: what the port's software rate most resembles
}

int query_port(Context* c, uint8_t port, ibv_port_attr* out) {
  if (!c->is_port(port) || !out) return fail(EINVAL);
  abi::Request rq{};
  rq.op = abi::Op::query_port;
  abi::Response rs{};
  if (int e = c->call(rq, rs); e) return fail(e);
  fill_port(*c, port, rs.port, out);
  return 0;
}

// The extended-context op ibv_query_port's inline wrapper calls.
int ctx_query_port(ibv_context* ctx, uint8_t port, ibv_port_attr* out, size_t len) {
  Context* c = Context::from(ctx);
  if (!c) return fail(EINVAL);
  ibv_port_attr full;
  if (int e = query_port(c, port, &full); e) return e;
  std::memcpy(out, &full, std::min(len, sizeof full));
  return 0;
}

int ctx_query_device_ex(ibv_context* ctx, const ibv_query_device_ex_input*, ibv_device_attr_ex* attr, size_t size);

void fill_device_attr(const Context& c, ibv_device_attr* a) {
  std::memset(a, 0, sizeof *a);
  std::snprintf(a->fw_ver, sizeof a->fw_ver, "mrcnic-abi%u", c.info.abi_version);
  a->node_guid = __builtin_bswap64(c.info.node_guid);
  a->sys_image_guid = a->node_guid;
  a->max_mr_size = c.info.max_mr_size;
  a->page_size_cap = 4096;
  a->vendor_id = 0;
  a->hw_ver = 1;
  a->max_qp = int(c.info.max_qp);
  a->max_qp_wr = int(c.info.max_sq_depth);
  a->max_sge = 1;
  a->max_cq = int(c.info.max_cq);
  a->max_cqe = int(c.info.max_cq_depth);
  a->max_mr = int(c.info.max_mr);
  a->max_pd = int(c.info.max_pd);
  a->phys_port_cnt = uint8_t(c.info.num_planes);
  a->max_pkeys = 1;
  a->atomic_cap = IBV_ATOMIC_NONE;
}

int ctx_query_device_ex(ibv_context* ctx, const ibv_query_device_ex_input*, ibv_device_attr_ex* attr, size_t size) {
  Context* c = Context::from(ctx);
  if (!c || !attr || size < sizeof(ibv_device_attr)) return fail(EINVAL);
  std::memset(attr, 0, size);
  fill_device_attr(*c, &attr->orig_attr);
  return 0;
}

}  // namespace

MRC_EXPORT ibv_device** ibv_get_device_list(int* num) {
  int real_n = 0;
  ibv_device** real_list = nullptr;
  if (auto f = real<ibv_device** (*)(int*)>("ibv_get_device_list")) real_list = f(&real_n);
  if (!real_list) real_n = 0;
  const std::vector<Device*> ours = live_devices();
  const size_t n = size_t(real_n) + ours.size();
  void* mem = std::calloc(1, sizeof(ListHeader) + (n + 1) * sizeof(ibv_device*));
  if (!mem) {
    if (real_list)
      if (auto f = real<void (*)(ibv_device**)>("ibv_free_device_list")) f(real_list);
    errno = ENOMEM;
    return nullptr;
  }
  auto* h = static_cast<ListHeader*>(mem);
  h->magic = kListMagic;
  h->real = real_list;
  auto** list = reinterpret_cast<ibv_device**>(h + 1);
  for (int i = 0; i < real_n; ++i) list[i] = real_list[i];
  for (size_t i = 0; i < ours.size(); ++i) list[size_t(real_n) + i] = &ours[i]->dev;
  if (num) *num = int(n);
  return list;
}

MRC_EXPORT void ibv_free_device_list(ibv_device** list) {
  if (!list) return;
  auto* h = reinterpret_cast<ListHeader*>(list) - 1;
  if (h->magic != kListMagic) {  // not from us
    if (auto f = real<void (*)(ibv_device**)>("ibv_free_device_list")) f(list);
    return;
  }
  if (h->real)
    if (auto f = real<void (*)(ibv_device**)>("ibv_free_device_list")) f(h->real);
  h->magic = 0;
  std::free(h);
}

MRC_EXPORT const char* ibv_get_device_name(ibv_device* dev) {
  if (Device* d = as_device(dev)) return d->dev.name;
  auto f = real<const char* (*)(ibv_device*)>("ibv_get_device_name");
  return f ? f(dev) : nullptr;
}

MRC_EXPORT __be64 ibv_get_device_guid(ibv_device* dev) {
  if (Device* d = as_device(dev)) {
    // The GUID comes from the device; ask it once.
    if (Context* c = Context::open(d)) {
      const __be64 g = __builtin_bswap64(c->info.node_guid);
      delete c;
      return g;
    }
    return 0;
  }
  auto f = real<__be64 (*)(ibv_device*)>("ibv_get_device_guid");
  return f ? f(dev) : 0;
}

MRC_EXPORT ibv_context* ibv_open_device(ibv_device* dev) {
  if (Device* d = as_device(dev)) {
    Context* c = Context::open(d);
    if (!c) return nullptr;
    c->shell->vctx.query_port = ctx_query_port;
    c->shell->vctx.query_device_ex = ctx_query_device_ex;
    return c->verbs();
  }
  auto f = real<ibv_context* (*)(ibv_device*)>("ibv_open_device");
  if (!f) {
    errno = ENODEV;
    return nullptr;
  }
  return f(dev);
}

MRC_EXPORT int ibv_close_device(ibv_context* ctx) {
  if (Context* c = Context::from(ctx)) {
    if (c->closed.exchange(true)) return fail(EINVAL);
    c->unref();
    return 0;
  }
  auto f = real<int (*)(ibv_context*)>("ibv_close_device");
  return f ? f(ctx) : fail(EINVAL);
}

MRC_EXPORT int ibv_query_device(ibv_context* ctx, ibv_device_attr* attr) {
  if (Context* c = Context::from(ctx)) {
    if (!attr) return fail(EINVAL);
    fill_device_attr(*c, attr);
    return 0;
  }
  auto f = real<int (*)(ibv_context*, ibv_device_attr*)>("ibv_query_device");
  return f ? f(ctx, attr) : fail(EINVAL);
}

// The compat symbol the inline wrapper falls back to for contexts without
// the extended op, and what older binaries call directly.
MRC_EXPORT int ibv_query_port(ibv_context* ctx, uint8_t port, _compat_ibv_port_attr* attr) {
  if (Context* c = Context::from(ctx)) {
    ibv_port_attr full;
    if (int e = query_port(c, port, &full); e) return e;
    // The compat layout is the current one minus fields added at its end.
    std::memcpy(attr, &full, offsetof(ibv_port_attr, link_layer) + sizeof full.link_layer);
    return 0;
  }
  auto f = real<int (*)(ibv_context*, uint8_t, _compat_ibv_port_attr*)>("ibv_query_port");
  return f ? f(ctx, port, attr) : fail(EINVAL);
}

MRC_EXPORT int ibv_query_gid(ibv_context* ctx, uint8_t port, int index, ibv_gid* gid) {
  if (Context* c = Context::from(ctx)) {
    if (!c->is_port(port) || index < 0 || uint32_t(index) >= c->info.gid_count || !gid) return fail(EINVAL);
    std::memcpy(gid->raw, c->info.gids[index], 16);
    return 0;
  }
  auto f = real<int (*)(ibv_context*, uint8_t, int, ibv_gid*)>("ibv_query_gid");
  return f ? f(ctx, port, index, gid) : fail(EINVAL);
}

MRC_EXPORT int _ibv_query_gid_ex(ibv_context* ctx, uint32_t port, uint32_t index, ibv_gid_entry* entry,
                                 uint32_t flags, size_t entry_size) {
  if (Context* c = Context::from(ctx)) {
    if (port > 0xFF || !c->is_port(uint8_t(port)) || index >= c->info.gid_count || !entry ||
        entry_size < sizeof(ibv_gid_entry) || flags)
      return fail(EINVAL);
    std::memset(entry, 0, entry_size);
    std::memcpy(entry->gid.raw, c->info.gids[index], 16);
    entry->gid_index = index;
    entry->port_num = port;
    entry->gid_type = (index % 2) ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1;
    entry->ndev_ifindex = 0;
    return 0;
  }
  auto f = real<int (*)(ibv_context*, uint32_t, uint32_t, ibv_gid_entry*, uint32_t, size_t)>("_ibv_query_gid_ex");
  return f ? f(ctx, port, index, entry, flags, entry_size) : fail(EINVAL);
}

MRC_EXPORT int ibv_query_pkey(ibv_context* ctx, uint8_t port, int index, __be16* pkey) {
  if (Context* c = Context::from(ctx)) {
    if (!c->is_port(port) || index != 0 || !pkey) return fail(EINVAL);
    *pkey = 0xFFFF;
    return 0;
  }
  auto f = real<int (*)(ibv_context*, uint8_t, int, __be16*)>("ibv_query_pkey");
  return f ? f(ctx, port, index, pkey) : fail(EINVAL);
}

MRC_EXPORT ibv_pd* ibv_alloc_pd(ibv_context* ctx) {
  if (Context* c = Context::from(ctx)) {
    abi::Request rq{};
    rq.op = abi::Op::alloc_pd;
    abi::Response rs{};
    if (int e = c->call(rq, rs); e) {
      errno = e;
      return nullptr;
    }
    auto* pd = new (std::nothrow) Pd;
    if (!pd) {
      errno = ENOMEM;
      return nullptr;
    }
    pd->pd.context = ctx;
    pd->pd.handle = rs.handle;
    pd->handle = rs.handle;
    c->users.fetch_add(1);
    return &pd->pd;
  }
  auto f = real<ibv_pd* (*)(ibv_context*)>("ibv_alloc_pd");
  if (!f) {
    errno = ENODEV;
    return nullptr;
  }
  return f(ctx);
}

MRC_EXPORT int ibv_dealloc_pd(ibv_pd* pd) {
  if (Pd* p = our_pd(pd)) {
    abi::Request rq{};
    rq.op = abi::Op::dealloc_pd;
    rq.handle = p->handle;
    Context* c = Context::from(pd->context);
    if (int e = c->release(rq); e) return fail(e);
    delete p;
    c->unref();
    return 0;
  }
  auto f = real<int (*)(ibv_pd*)>("ibv_dealloc_pd");
  return f ? f(pd) : fail(EINVAL);
}

MRC_EXPORT ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned int access) {
  if (Pd* p = our_pd(pd)) return Context::from(pd->context)->reg_mr(p, addr, length, iova, access);
  auto f = real<ibv_mr* (*)(ibv_pd*, void*, size_t, uint64_t, unsigned)>("ibv_reg_mr_iova2");
  if (!f) {
    errno = EINVAL;
    return nullptr;
  }
  return f(pd, addr, length, iova, access);
}

MRC_EXPORT ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  if (Pd* p = our_pd(pd))
    return Context::from(pd->context)->reg_mr(p, addr, length, reinterpret_cast<uintptr_t>(addr), unsigned(access));
  auto f = real<ibv_mr* (*)(ibv_pd*, void*, size_t, int)>("ibv_reg_mr");
  if (!f) {
    errno = EINVAL;
    return nullptr;
  }
  return f(pd, addr, length, access);
}

MRC_EXPORT ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova, int access) {
  if (Pd* p = our_pd(pd)) return Context::from(pd->context)->reg_mr(p, addr, length, iova, unsigned(access));
  auto f = real<ibv_mr* (*)(ibv_pd*, void*, size_t, uint64_t, int)>("ibv_reg_mr_iova");
  if (!f) {
    errno = EINVAL;
    return nullptr;
  }
  return f(pd, addr, length, iova, access);
}

MRC_EXPORT int ibv_dereg_mr(ibv_mr* mr) {
  if (mr && Context::from(mr->context)) return Context::from(mr->context)->dereg_mr(reinterpret_cast<Mr*>(mr));
  auto f = real<int (*)(ibv_mr*)>("ibv_dereg_mr");
  return f ? f(mr) : fail(EINVAL);
}

MRC_EXPORT const char* ibv_wc_status_str(ibv_wc_status status) {
  // Status texts are libibverbs' own, so logs read the same on any device.
  if (auto f = real<const char* (*)(ibv_wc_status)>("ibv_wc_status_str")) return f(status);
  return "unknown status";
}
