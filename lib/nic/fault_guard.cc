#include "nic/fault_guard.h"

#include <csignal>

namespace mrc::nic {

namespace detail {
thread_local sigjmp_buf* t_fault_jump = nullptr;
}

namespace {

struct sigaction g_old_segv, g_old_bus;

void on_fault(int sig, siginfo_t*, void*) {
  if (sigjmp_buf* jb = detail::t_fault_jump) {
    detail::t_fault_jump = nullptr;
    siglongjmp(*jb, 1);
  }
  // Not ours: put the previous disposition back; the faulting instruction
  // runs again and the process dies as it would have.
  sigaction(sig, sig == SIGSEGV ? &g_old_segv : &g_old_bus, nullptr);
}

}  // namespace

void install_fault_guard() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  struct sigaction sa {};
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;  // NODEFER: the jump must not leave the signal blocked
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &g_old_segv);
  sigaction(SIGBUS, &sa, &g_old_bus);
}

}  // namespace mrc::nic
