#include "wire/ev.h"

#include <bit>
#include <numeric>

#include <fmt/format.h>

namespace mrc::wire {
namespace {

// MSB-first bit cursor over a byte buffer; reads past the end yield zeros
// and writes past it are dropped, so a bad profile cannot overrun.
uint64_t read_bits(std::span<const uint8_t> buf, unsigned& pos, unsigned n) {
  uint64_t v = 0;
  for (unsigned i = 0; i < n; ++i, ++pos) {
    unsigned byte = pos / 8;
    unsigned bit = byte < buf.size() ? (buf[byte] >> (7 - pos % 8)) & 1 : 0;
    v = (v << 1) | bit;
  }
  return v;
}

void write_bits(std::span<uint8_t> buf, unsigned& pos, unsigned n, uint64_t v) {
  for (unsigned i = 0; i < n; ++i, ++pos) {
    unsigned byte = pos / 8;
    if (byte >= buf.size()) continue;
    uint8_t bit = static_cast<uint8_t>((v >> (n - 1 - i)) & 1);
    buf[byte] = static_cast<uint8_t>(buf[byte] | bit << (7 - pos % 8));
  }
}

// Deposits the low popcount(mask) bits of x into the set bits of mask, the
// lowest bit of x into the lowest mask bit.
uint64_t deposit(uint64_t x, uint32_t mask) {
  uint64_t out = 0;
  for (unsigned k = 0; mask; mask &= mask - 1, ++k) {
    if ((x >> k) & 1) out |= uint64_t(mask & -mask);
  }
  return out;
}

}  // namespace

void ev_encode(EvFormat fmt, uint32_t ev, Addressing& addr) {
  switch (fmt) {
    case EvFormat::udp: addr.udp_src_port = static_cast<uint16_t>(ev & kUdpEvMask); break;
    case EvFormat::stev:
      addr.udp_src_port = static_cast<uint16_t>((ev >> kStevSportShift) & kStevSportMask);
      addr.flow_label = (addr.flow_label & ~(kStevFlowLabelMask << kStevFlowLabelShift)) |
                        (((ev)&kStevFlowLabelMask) << kStevFlowLabelShift);
      break;
    case EvFormat::srv6: break;
  }
}

void ev_apply(EvFormat fmt, uint32_t ev, const MutablePacket& m) {
  if (fmt == EvFormat::stev && m.at.ip_version == 6) {
    m.udp().set_src_port((ev >> kStevSportShift) & kStevSportMask);
    Ipv6Ref ip(m.base + m.at.l3);
    ip.set_flow_label((ip.flow_label() & ~(kStevFlowLabelMask << kStevFlowLabelShift)) |
                      ((ev & kStevFlowLabelMask) << kStevFlowLabelShift));
  } else if (fmt != EvFormat::srv6) {
    m.udp().set_src_port(ev & kUdpEvMask);
  }
}

uint32_t ev_decode(EvFormat fmt, const Packet& pkt) {
  const uint32_t sport = pkt.udp().src_port();
  switch (fmt) {
    case EvFormat::udp: return sport & kUdpEvMask;
    case EvFormat::stev:
      return ((sport & kStevSportMask) << kStevSportShift) |
             ((pkt.flow_label() >> kStevFlowLabelShift) & kStevFlowLabelMask);
    case EvFormat::srv6: return 0;
  }
  return 0;
}

unsigned ev_format_bits(const EvGenProfile& prof) {
  return std::accumulate(prof.fmt_widths.begin(), prof.fmt_widths.end(), 0u);
}

std::string ev_profile_check(const EvGenProfile& prof) {
  if (prof.fields.empty()) return "profile has no fields";
  if (prof.fields.size() > prof.fmt_widths.size())
    return fmt::format("{} fields but the format has only {}", prof.fields.size(), prof.fmt_widths.size());
  unsigned fmt_bits = ev_format_bits(prof);
  if (fmt_bits > 8 * sizeof(EvBytes)) return fmt::format("format is {} bits, more than 256", fmt_bits);
  unsigned field_bits = 0;
  for (size_t i = 0; i < prof.fields.size(); ++i) {
    const EvField& f = prof.fields[i];
    field_bits += f.width;
    if (f.width == 0 || f.width > 32) return fmt::format("field {}: width {} not in 1..32", i, f.width);
    if (f.width > prof.fmt_widths[i])
      return fmt::format("field {}: width {} exceeds its format width {}", i, f.width, prof.fmt_widths[i]);
    const uint64_t limit = (1ull << f.width) - 1;
    if (f.init_val > limit) return fmt::format("field {}: init_val {:#x} exceeds width", i, f.init_val);
    if (f.mask > limit) return fmt::format("field {}: mask {:#x} exceeds width", i, f.mask);
    if (f.mask == 0) {
      if (f.min_val || f.max_val) return fmt::format("field {}: fixed field with min/max set", i);
      continue;
    }
    const uint64_t gen_limit = (1ull << std::popcount(f.mask)) - 1;
    if (f.max_val > gen_limit)
      return fmt::format("field {}: max_val {} needs more than the {} mask bits", i, f.max_val, std::popcount(f.mask));
    if (f.min_val > f.max_val) return fmt::format("field {}: min_val {} > max_val {}", i, f.min_val, f.max_val);
  }
  if (field_bits > fmt_bits) return fmt::format("fields total {} bits, the format only {}", field_bits, fmt_bits);
  return {};
}

uint64_t ev_gen_count(const EvGenProfile& prof) {
  uint64_t count = 1;
  for (const EvField& f : prof.fields) {
    if (f.mask) count *= uint64_t(f.max_val) - f.min_val + 1;
  }
  return count;
}

EvBytes ev_expand(const EvGenProfile& prof, std::span<const uint8_t> compact) {
  EvBytes out{};
  unsigned src = 0, dst = 0;
  for (size_t i = 0; i < prof.fields.size() && i < prof.fmt_widths.size(); ++i) {
    const EvField& f = prof.fields[i];
    uint64_t v = f.init_val;
    if (f.mask) {
      uint64_t x = read_bits(compact, src, std::popcount(f.mask));
      v = (v & ~uint64_t(f.mask)) | deposit(x, f.mask);
    }
    write_bits(out, dst, prof.fmt_widths[i], v);
  }
  return out;
}

EvBytes ev_generate(const EvGenProfile& prof, uint64_t index) {
  // Split the index into per-field values, last field fastest, then pack
  // them as the compact EV that ev_expand reads.
  std::vector<uint64_t> values(prof.fields.size());
  for (size_t i = prof.fields.size(); i-- > 0;) {
    const EvField& f = prof.fields[i];
    if (!f.mask) continue;
    const uint64_t range = uint64_t(f.max_val) - f.min_val + 1;
    values[i] = f.min_val + index % range;
    index /= range;
  }
  EvBytes compact{};
  unsigned pos = 0;
  for (size_t i = 0; i < prof.fields.size(); ++i) {
    if (prof.fields[i].mask) write_bits(compact, pos, std::popcount(prof.fields[i].mask), values[i]);
  }
  return ev_expand(prof, compact);
}

uint32_t ev_value(const EvBytes& ev, unsigned bits) {
  if (bits == 0) return 0;
  if (bits > 32) bits = 32;
  return static_cast<uint32_t>(load_be32(ev.data()) >> (32 - bits));
}

}  // namespace mrc::wire
