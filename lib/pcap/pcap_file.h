// Minimal classic-pcap reader and writer (Ethernet link type, microsecond
// timestamps), enough for test vectors and captures without pulling libpcap
// into DPDK-free code.
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

namespace mrc::pcap {

class Writer {
 public:
  Writer() = default;
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;
  ~Writer();

  // Returns false and leaves the writer closed if the file cannot be created.
  bool open(const std::string& path, uint32_t snaplen = 65535);
  bool write(std::span<const uint8_t> frame, uint64_t time_ns);
  bool close();
  uint64_t frames() const { return frames_; }

 private:
  std::FILE* f_ = nullptr;
  uint32_t snaplen_ = 0;
  uint64_t frames_ = 0;
};

struct Record {
  uint64_t time_ns = 0;
  std::vector<uint8_t> data;
};

// Reads every record of a classic pcap (either byte order, micro- or
// nanosecond magic). Returns false with `error` set on a malformed file.
bool read_all(const std::string& path, std::vector<Record>& out, std::string& error);

}  // namespace mrc::pcap
