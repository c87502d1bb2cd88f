#include "pcap/pcap_file.h"

#include <cstring>

namespace mrc::pcap {
namespace {

constexpr uint32_t kMagicUsec = 0xA1B2C3D4;
constexpr uint32_t kMagicNsec = 0xA1B23C4D;
constexpr uint32_t kLinkTypeEthernet = 1;

struct FileHeader {
  uint32_t magic;
  uint16_t version_major;
  uint16_t version_minor;
  int32_t thiszone;
  uint32_t sigfigs;
  uint32_t snaplen;
  uint32_t linktype;
};
struct RecordHeader {
  uint32_t ts_sec;
  uint32_t ts_frac;
  uint32_t incl_len;
  uint32_t orig_len;
};
static_assert(sizeof(FileHeader) == 24 && sizeof(RecordHeader) == 16);

uint32_t swap32(uint32_t v) { return __builtin_bswap32(v); }

}  // namespace

Writer::~Writer() { close(); }

bool Writer::open(const std::string& path, uint32_t snaplen) {
  close();
  f_ = std::fopen(path.c_str(), "wb");
  if (!f_) return false;
  snaplen_ = snaplen;
  FileHeader h{kMagicUsec, 2, 4, 0, 0, snaplen, kLinkTypeEthernet};
  if (std::fwrite(&h, sizeof h, 1, f_) != 1) {
    close();
    return false;
  }
  return true;
}

bool Writer::write(std::span<const uint8_t> frame, uint64_t time_ns) {
  if (!f_) return false;
  const uint32_t incl = frame.size() > snaplen_ ? snaplen_ : static_cast<uint32_t>(frame.size());
  RecordHeader r{static_cast<uint32_t>(time_ns / 1000000000), static_cast<uint32_t>(time_ns % 1000000000 / 1000), incl,
                 static_cast<uint32_t>(frame.size())};
  if (std::fwrite(&r, sizeof r, 1, f_) != 1) return false;
  if (incl && std::fwrite(frame.data(), incl, 1, f_) != 1) return false;
  ++frames_;
  return true;
}

bool Writer::close() {
  if (!f_) return true;
  bool ok = std::fclose(f_) == 0;
  f_ = nullptr;
  return ok;
}

bool read_all(const std::string& path, std::vector<Record>& out, std::string& error) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    error = "cannot open " + path + ": " + std::strerror(errno);
    return false;
  }
  FileHeader h;
  bool ok = std::fread(&h, sizeof h, 1, f) == 1;
  bool swap = false, nsec = false;
  if (ok) {
    if (h.magic == kMagicUsec || h.magic == kMagicNsec) {
      nsec = h.magic == kMagicNsec;
    } else if (swap32(h.magic) == kMagicUsec || swap32(h.magic) == kMagicNsec) {
      swap = true;
      nsec = swap32(h.magic) == kMagicNsec;
    } else {
      ok = false;
    }
  }
  if (!ok) {
    error = path + ": not a pcap file";
    std::fclose(f);
    return false;
  }
  RecordHeader r;
  while (std::fread(&r, sizeof r, 1, f) == 1) {
    if (swap) {
      r.ts_sec = swap32(r.ts_sec);
      r.ts_frac = swap32(r.ts_frac);
      r.incl_len = swap32(r.incl_len);
    }
    if (r.incl_len > (1u << 18)) {
      error = path + ": record length " + std::to_string(r.incl_len) + " is implausible";
      std::fclose(f);
      return false;
    }
    Record rec;
    rec.time_ns = uint64_t(r.ts_sec) * 1000000000 + (nsec ? r.ts_frac : uint64_t(r.ts_frac) * 1000);
    rec.data.resize(r.incl_len);
    if (r.incl_len && std::fread(rec.data.data(), r.incl_len, 1, f) != 1) {
      error = path + ": truncated record";
      std::fclose(f);
      return false;
    }
    out.push_back(std::move(rec));
  }
  std::fclose(f);
  return true;
}

}  // namespace mrc::pcap
