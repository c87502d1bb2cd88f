// Survives a memory fault inside one call on the current thread.
//
// DPDK 22.11's memif PMD unmaps a departed peer's shared memory from the
// interrupt thread while a worker may be inside a burst on it, and offers no
// hook to wait for (memif_disconnect). A worker survives that: such bursts
// run through guarded(), whose SIGSEGV/SIGBUS handler jumps back to it.
// A fault anywhere else still kills the process, with its usual core dump.
#pragma once

#include <csetjmp>

namespace mrc::nic {

namespace detail {
extern thread_local sigjmp_buf* t_fault_jump;
}

// Installs the SIGSEGV/SIGBUS handler (once per process).
void install_fault_guard();

// Runs f() and returns true, or returns false if f() faulted (f's partial
// effects stay as they were). install_fault_guard() must have been called.
template <class F>
bool guarded(F&& f) {
  sigjmp_buf jb;
  if (sigsetjmp(jb, 0) != 0) return false;  // the handler jumped here; it cleared the guard
  detail::t_fault_jump = &jb;
  f();
  detail::t_fault_jump = nullptr;
  return true;
}

}  // namespace mrc::nic
