// mrcctl: the network controller's command line for MRC devices, in the
// manner of ip(8) and rdma(8). It drives the OCP controller API (mrc_ctl.h)
// of lib_mrc.so, plus mrc.h and verbs for device facts, and reads mrc-nic's
// counters over the DPDK telemetry socket.
//
//   mrcctl dev [show [DEV]]
//   mrcctl port show DEV | port set DEV PORT up|down
//   mrcctl fmt add DEV ID --mode udp|stev --fields 16[,16...] [--online]
//   mrcctl fmt show|online|offline|del DEV ID
//   mrcctl ev add DEV ID --fmt FID --mode exp|gen [--count N]
//                (--evs LIST | --field W:INIT:MIN:MAX:MASK ...)
//                [--min-active N] [--events good,bad|none] [--online]
//   mrcctl ev show|online|offline|del DEV ID
//   mrcctl ev deny|restore|state DEV ID EV[@PORT][,...]
//   mrcctl cc add DEV ID --algo NAME [--base-rtt NS ...] [--online]
//   mrcctl cc set DEV ID [--base-rtt NS ...]       (config of a live profile)
//   mrcctl cc show|online|offline|del DEV ID
//   mrcctl probe DEV --dgid ADDR[@PORT][,...]|PEERDEV --ev LIST [--count N]
//                [--timeout-us T] [--tc DSCP] [--fmt udp|stev]
//   mrcctl port-status DEV --dgid ... --status MASK [--port P] [--ev EV]
//   mrcctl monitor DEV [--seconds S]
//   mrcctl stats [--prefix P] devices|planes [DEV]|plane DEV:P|qps|qp N|
//                evs N [FIRST]|counters [DEV]|host|raw CMD
//
// Global: --json prints JSON instead of tables (monitor: one object per
// line); --config FILE reads options from a CLI11 (TOML) file, e.g. a
// section [ev.add] holding a profile. EV lists are VALUE[-VALUE][@PORT]
// items joined by commas; values are decimal or 0x hex.
//
// Exit status: 0 success, 1 the operation failed, 2 usage error.

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <infiniband/verbs.h>
#include <mrc.h>
#include <mrc_ctl.h>

#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "cli_checks.h"

namespace {

using mrc::app::finite_range;
using mrc::app::not_negative;

// ---------------------------------------------------------------- errors

// Bad command line content found after CLI11 parsing: exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An operation failed: exit status 1.
struct Failure : std::runtime_error {
  int err = 0;
  Failure(const std::string& what, int e) : std::runtime_error(what), err(e) {}
};

std::string errno_text(int e) { return std::strerror(e); }

// What an errno usually means coming from a controller call.
std::string ctl_errno_text(int e, bool ev_op = false) {
  std::string s = std::strerror(e);
  switch (e) {
    case EPERM: s += " (controller calls need CAP_NET_ADMIN)"; break;
    case EBUSY: s += " (in use: live QPs or an ONLINE profile depend on it)"; break;
    case ENOENT:
      if (ev_op) s += " (EV not in the profile)";
      break;
    case E2BIG: s += " (beyond a device limit; see 'mrcctl dev show')"; break;
    default: break;
  }
  return s;
}

[[noreturn]] void fail(const std::string& what, int e = errno) {
  throw Failure(fmt::format("{}: {}", what, errno_text(e)), e);
}

[[noreturn]] void fail_ctl(const std::string& what, int e = errno, bool ev_op = false) {
  throw Failure(fmt::format("{}: {}", what, ctl_errno_text(e, ev_op)), e);
}

[[noreturn]] void fail_msg(const std::string& what) { throw Failure(what, 0); }

// MRC calls return 0, or -1 with errno set.
void check(int rc, const std::string& what) {
  if (rc != 0) fail_ctl(what, rc > 0 ? rc : errno);
}

// ---------------------------------------------------------------- JSON

// A JSON value of another type than the reader expected: a reply not shaped
// as mrc-nic shapes it.
struct JsonTypeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A small JSON value: enough to print our own output and to read DPDK
// telemetry replies. Objects keep their insertion order.
class Json {
 public:
  using Array = std::vector<Json>;
  using Object = std::vector<std::pair<std::string, Json>>;

  Json() = default;
  Json(std::nullptr_t) {}
  Json(bool b) : v_(b) {}
  template <std::integral T>
  requires(!std::same_as<T, bool>) Json(T x) {
    if constexpr (std::is_signed_v<T>)
      v_ = int64_t(x);
    else
      v_ = uint64_t(x);
  }
  Json(double d) : v_(d) {}
  // Through its shortest text, so 0.2f shows as 0.2.
  Json(float f) : v_(std::strtod(fmt::format("{}", f).c_str(), nullptr)) {}
  Json(const char* s) : v_(std::string(s ? s : "")) {}
  Json(std::string s) : v_(std::move(s)) {}
  Json(std::string_view s) : v_(std::string(s)) {}
  Json(Array a) : v_(std::move(a)) {}
  Json(Object o) : v_(std::move(o)) {}

  static Json object() { return Json(Object{}); }
  static Json array() { return Json(Array{}); }

  bool is_null() const { return std::holds_alternative<std::nullptr_t>(v_); }
  bool is_object() const { return std::holds_alternative<Object>(v_); }
  bool is_array() const { return std::holds_alternative<Array>(v_); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_number() const {
    return std::holds_alternative<int64_t>(v_) || std::holds_alternative<uint64_t>(v_) ||
           std::holds_alternative<double>(v_);
  }

  // Checked: std::get's bad_variant_access would reach the user as
  // "std::get: wrong index for variant".
  const Object& obj() const { return as<Object>("an object"); }
  Object& obj() { return const_cast<Object&>(as<Object>("an object")); }
  const Array& arr() const { return as<Array>("an array"); }
  Array& arr() { return const_cast<Array&>(as<Array>("an array")); }
  const std::string& str() const { return as<std::string>("a string"); }

  uint64_t u64() const {
    if (auto p = std::get_if<uint64_t>(&v_)) return *p;
    if (auto p = std::get_if<int64_t>(&v_)) return uint64_t(*p);
    if (auto p = std::get_if<double>(&v_)) return uint64_t(*p);
    if (auto p = std::get_if<bool>(&v_)) return *p;
    return 0;
  }

  // Object member, created if missing.
  Json& operator[](std::string_view key) {
    if (is_null()) v_ = Object{};
    for (auto& [k, v] : obj())
      if (k == key) return v;
    obj().emplace_back(std::string(key), Json());
    return obj().back().second;
  }
  const Json* find(std::string_view key) const {
    if (!is_object()) return nullptr;
    for (const auto& [k, v] : obj())
      if (k == key) return &v;
    return nullptr;
  }
  void push(Json x) {
    if (is_null()) v_ = Array{};
    arr().push_back(std::move(x));
  }

  // Text of a scalar as a table cell.
  std::string cell() const {
    if (is_string()) return str();
    if (is_null()) return "-";
    return dump(-1);
  }

  // indent < 0: one line.
  std::string dump(int indent = 2) const {
    std::string out;
    write(out, indent, 0);
    return out;
  }

  static Json parse(std::string_view text);

 private:
  static void quote(std::string& out, const std::string& s) {
    out += '"';
    for (unsigned char c : s) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
          if (c < 0x20)
            out += fmt::format("\\u{:04x}", c);
          else
            out += char(c);
      }
    }
    out += '"';
  }

  void write(std::string& out, int indent, int depth) const {
    const auto newline = [&](int d) {
      if (indent < 0) return;
      out += '\n';
      out.append(size_t(indent * d), ' ');
    };
    if (is_null()) {
      out += "null";
    } else if (auto b = std::get_if<bool>(&v_)) {
      out += *b ? "true" : "false";
    } else if (auto i = std::get_if<int64_t>(&v_)) {
      out += std::to_string(*i);
    } else if (auto u = std::get_if<uint64_t>(&v_)) {
      out += std::to_string(*u);
    } else if (auto d = std::get_if<double>(&v_)) {
      out += std::isfinite(*d) ? fmt::format("{}", *d) : "null";
    } else if (is_string()) {
      quote(out, str());
    } else if (is_array()) {
      const auto& a = arr();
      // Arrays of scalars stay on one line.
      const bool flat = std::all_of(a.begin(), a.end(), [](const Json& x) { return !x.is_array() && !x.is_object(); });
      out += '[';
      for (size_t k = 0; k < a.size(); ++k) {
        if (k) out += flat || indent < 0 ? ", " : ",";
        if (!flat) newline(depth + 1);
        a[k].write(out, indent, depth + 1);
      }
      if (!flat && !a.empty()) newline(depth);
      out += ']';
    } else {
      const auto& o = obj();
      out += '{';
      for (size_t k = 0; k < o.size(); ++k) {
        if (k) out += indent < 0 ? ", " : ",";
        newline(depth + 1);
        quote(out, o[k].first);
        out += ": ";
        o[k].second.write(out, indent, depth + 1);
      }
      if (!o.empty()) newline(depth);
      out += '}';
    }
  }

  template <class T>
  const T& as(const char* what) const {
    if (const T* p = std::get_if<T>(&v_)) return *p;
    std::string got = dump(-1);
    if (got.size() > 60) got = got.substr(0, 57) + "...";
    throw JsonTypeError(fmt::format("{} where {} was expected", got, what));
  }

  std::variant<std::nullptr_t, bool, int64_t, uint64_t, double, std::string, Array, Object> v_{nullptr};
};

class JsonParser {
 public:
  explicit JsonParser(std::string_view s) : s_(s) {}

  Json document() {
    Json v = value(0);
    skip_ws();
    if (pos_ != s_.size()) error("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void error(const char* what) const {
    throw std::runtime_error(fmt::format("bad JSON at offset {}: {}", pos_, what));
  }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) ++pos_;
  }
  bool eat(char c) {
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) error("unexpected character");
  }
  bool literal(std::string_view w) {
    if (s_.substr(pos_, w.size()) == w) {
      pos_ += w.size();
      return true;
    }
    return false;
  }

  std::string string_body() {
    std::string out;
    while (pos_ < s_.size()) {
      char c = s_[pos_++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) break;
      char e = s_[pos_++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': {
          if (pos_ + 4 > s_.size()) error("short \\u escape");
          unsigned cp = 0;
          auto [p, ec] = std::from_chars(s_.data() + pos_, s_.data() + pos_ + 4, cp, 16);
          if (ec != std::errc() || p != s_.data() + pos_ + 4) error("bad \\u escape");
          pos_ += 4;
          // UTF-8 for the basic plane; telemetry strings are ASCII anyway.
          if (cp < 0x80) {
            out += char(cp);
          } else if (cp < 0x800) {
            out += char(0xC0 | (cp >> 6));
            out += char(0x80 | (cp & 0x3F));
          } else {
            out += char(0xE0 | (cp >> 12));
            out += char(0x80 | ((cp >> 6) & 0x3F));
            out += char(0x80 | (cp & 0x3F));
          }
          break;
        }
        default: out += e;
      }
    }
    error("unterminated string");
  }

  Json number() {
    const size_t start = pos_;
    bool real = false;
    if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c >= '0' && c <= '9') {
        ++pos_;
      } else if (c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
        real = true;
        ++pos_;
      } else {
        break;
      }
    }
    std::string_view t = s_.substr(start, pos_ - start);
    if (t.empty() || t == "-") error("bad number");
    if (!real) {
      if (t[0] == '-') {
        int64_t v = 0;
        auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
        if (ec == std::errc() && p == t.data() + t.size()) return Json(v);
      } else {
        uint64_t v = 0;
        auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
        if (ec == std::errc() && p == t.data() + t.size()) return Json(v);
      }
    }
    return Json(std::strtod(std::string(t).c_str(), nullptr));
  }

  Json value(int depth) {
    if (depth > 64) error("nested too deeply");
    skip_ws();
    if (pos_ >= s_.size()) error("unexpected end");
    const char c = s_[pos_];
    if (c == '{') {
      ++pos_;
      Json o = Json::object();
      if (eat('}')) return o;
      do {
        skip_ws();
        expect('"');
        std::string k = string_body();
        expect(':');
        o.obj().emplace_back(std::move(k), value(depth + 1));
      } while (eat(','));
      expect('}');
      return o;
    }
    if (c == '[') {
      ++pos_;
      Json a = Json::array();
      if (eat(']')) return a;
      do a.arr().push_back(value(depth + 1));
      while (eat(','));
      expect(']');
      return a;
    }
    if (c == '"') {
      ++pos_;
      return Json(string_body());
    }
    if (literal("true")) return Json(true);
    if (literal("false")) return Json(false);
    if (literal("null")) return Json();
    return number();
  }

  std::string_view s_;
  size_t pos_ = 0;
};

Json Json::parse(std::string_view text) { return JsonParser(text).document(); }

// ---------------------------------------------------------------- output

bool g_json = false;

void emit(const Json& j) { fmt::print("{}\n", j.dump(2)); }

// A decimal number, possibly negative or with a fraction.
bool is_number_text(std::string_view t) {
  if (!t.empty() && t[0] == '-') t.remove_prefix(1);
  if (t.empty() || t.front() == '.' || t.back() == '.') return false;
  return t.find_first_not_of("0123456789.") == std::string_view::npos && std::count(t.begin(), t.end(), '.') <= 1;
}

// Columns aligned on the widest cell; numeric columns go right.
void print_table(const std::vector<std::string>& head, const std::vector<std::vector<std::string>>& rows,
                 const std::string& indent = "") {
  std::vector<size_t> w(head.size(), 0);
  std::vector<bool> numeric(head.size(), true);
  for (size_t c = 0; c < head.size(); ++c) w[c] = head[c].size();
  for (const auto& r : rows)
    for (size_t c = 0; c < r.size() && c < w.size(); ++c) {
      w[c] = std::max(w[c], r[c].size());
      if (!r[c].empty() && r[c] != "-" && !is_number_text(r[c])) numeric[c] = false;
    }
  const auto line = [&](const std::vector<std::string>& r) {
    std::string s = indent;
    for (size_t c = 0; c < w.size(); ++c) {
      const std::string& cell = c < r.size() ? r[c] : std::string();
      const bool last = c + 1 == w.size();
      if (numeric[c] && c > 0)
        s += fmt::format("{:>{}}", cell, w[c]);
      else
        s += last ? cell : fmt::format("{:<{}}", cell, w[c]);
      if (!last) s += "  ";
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    fmt::print("{}\n", s);
  };
  line(head);
  for (const auto& r : rows) line(r);
}

// A flat object as "key  value" lines.
void print_kv(const Json& o, const std::string& indent = "", bool nonzero = false) {
  if (!o.is_object()) {
    fmt::print("{}{}\n", indent, o.dump(-1));
    return;
  }
  size_t w = 0;
  for (const auto& [k, v] : o.obj()) w = std::max(w, k.size());
  for (const auto& [k, v] : o.obj()) {
    if (nonzero && v.is_number() && v.u64() == 0) continue;
    fmt::print("{}{:<{}}  {}\n", indent, k, w, v.is_array() ? v.dump(-1) : v.cell());
  }
}

// ---------------------------------------------------------------- parsing

// Whole-string unsigned number: decimal, 0x hex or 0b binary (no octal).
std::optional<uint64_t> parse_num(std::string_view s) {
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    s.remove_prefix(2);
  } else if (s.size() > 2 && s[0] == '0' && (s[1] == 'b' || s[1] == 'B')) {
    base = 2;
    s.remove_prefix(2);
  }
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

uint64_t need_num(std::string_view s, const std::string& what, uint64_t max = UINT64_MAX) {
  auto v = parse_num(s);
  if (!v) throw UsageError(fmt::format("{}: '{}' is not a number", what, s));
  if (*v > max) throw UsageError(fmt::format("{}: {} is larger than {}", what, *v, max));
  return *v;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t p = s.find(sep, start);
    out.push_back(s.substr(start, p == std::string_view::npos ? std::string_view::npos : p - start));
    if (p == std::string_view::npos) break;
    start = p + 1;
  }
  return out;
}

// One item of an EV list: a value, and the port if one was given (0: none).
struct EvItem {
  uint64_t value = 0;
  uint8_t port = 0;
};

constexpr size_t kMaxListedEvs = 1u << 20;

// VALUE[-VALUE][@PORT] items joined by commas (several strings are joined).
std::vector<EvItem> parse_ev_list(const std::vector<std::string>& parts, unsigned bits) {
  std::vector<EvItem> out;
  const uint64_t vmax = bits >= 64 ? UINT64_MAX : (uint64_t(1) << bits) - 1;
  for (const auto& part : parts) {
    for (auto item : split(part, ',')) {
      if (item.empty()) continue;
      uint8_t port = 0;
      if (auto at = item.find('@'); at != std::string_view::npos) {
        port = uint8_t(need_num(item.substr(at + 1), "EV port", 32));
        if (port == 0) throw UsageError("EV port: ports are numbered from 1");
        item = item.substr(0, at);
      }
      uint64_t lo, hi;
      // A '-' after the first character separates a range.
      if (auto dash = item.find('-', 1); dash != std::string_view::npos) {
        lo = need_num(item.substr(0, dash), "EV value", vmax);
        hi = need_num(item.substr(dash + 1), "EV value", vmax);
        if (hi < lo) throw UsageError(fmt::format("EV range {}: end before start", item));
      } else {
        lo = hi = need_num(item, "EV value", vmax);
      }
      if (hi - lo >= kMaxListedEvs || out.size() + (hi - lo) >= kMaxListedEvs)
        throw UsageError("EV list: too many EVs");
      for (uint64_t v = lo; v <= hi; ++v) out.push_back({v, port});
    }
  }
  return out;
}

// W:INIT:MIN:MAX:MASK, or W:INIT for a fixed field.
mrc_ctl_ev_field parse_field(std::string_view s) {
  auto p = split(s, ':');
  if (p.size() != 5 && p.size() != 2)
    throw UsageError(fmt::format("--field {}: want WIDTH:INIT:MIN:MAX:MASK (or WIDTH:INIT for a fixed field)", s));
  mrc_ctl_ev_field f{};
  f.width = uint32_t(need_num(p[0], "field width", 32));
  f.init_val = uint32_t(need_num(p[1], "field init_val", UINT32_MAX));
  if (p.size() == 5) {
    f.min_val = uint32_t(need_num(p[2], "field min_val", UINT32_MAX));
    f.max_val = uint32_t(need_num(p[3], "field max_val", UINT32_MAX));
    f.mask = uint32_t(need_num(p[4], "field mask", UINT32_MAX));
  }
  return f;
}

// IPv4 (as ::ffff:a.b.c.d) or IPv6 text.
std::optional<ibv_gid> parse_gid(const std::string& s) {
  ibv_gid g{};
  in_addr v4{};
  if (inet_pton(AF_INET, s.c_str(), &v4) == 1) {
    g.raw[10] = 0xff;
    g.raw[11] = 0xff;
    std::memcpy(&g.raw[12], &v4, 4);
    return g;
  }
  if (inet_pton(AF_INET6, s.c_str(), g.raw) == 1) return g;
  return std::nullopt;
}

std::string gid_text(const ibv_gid& g) {
  static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  char buf[INET6_ADDRSTRLEN] = {};
  if (std::memcmp(g.raw, v4mapped, 12) == 0) {
    inet_ntop(AF_INET, &g.raw[12], buf, sizeof(buf));
    return buf;
  }
  inet_ntop(AF_INET6, g.raw, buf, sizeof(buf));
  return buf;
}

// ---------------------------------------------------------------- names

const char* state_name(int s) {
  switch (s) {
    case MRC_CTL_PROFILE_INIT: return "init";
    case MRC_CTL_PROFILE_OFFLINE: return "offline";
    case MRC_CTL_PROFILE_ONLINE: return "online";
    default: return "?";
  }
}

std::string ev_state_text(uint32_t s) {
  std::string out;
  const std::pair<uint32_t, const char*> names[] = {{MRC_CTL_EV_GOOD, "GOOD"},
                                                    {MRC_CTL_EV_ASSUMED_BAD, "ASSUMED_BAD"},
                                                    {MRC_CTL_EV_DENIED, "DENIED"},
                                                    {uint32_t(MRC_CTL_EV_UNKNOWN), "UNKNOWN"}};
  for (auto [bit, n] : names)
    if (s & bit) {
      if (!out.empty()) out += '|';
      out += n;
      s &= ~bit;
    }
  if (s) out += fmt::format("{}0x{:x}", out.empty() ? "" : "|", s);
  return out.empty() ? "-" : out;
}

// Names of the set bits; unnamed bits in hex.
using BitName = std::pair<uint32_t, const char*>;

std::string bits_text(uint32_t v, std::span<const BitName> names) {
  std::string out;
  for (auto [bit, n] : names)
    if (v & bit) {
      if (!out.empty()) out += ' ';
      out += n;
      v &= ~bit;
    }
  if (v) out += fmt::format("{}0x{:x}", out.empty() ? "" : " ", v);
  return out.empty() ? "none" : out;
}

Json bits_json(uint32_t v, std::span<const BitName> names) {
  Json a = Json::array();
  for (auto [bit, n] : names)
    if (v & bit) a.push(n);
  return a;
}

constexpr BitName kFmtModeNames[] = {
    {MRC_CTL_EV_FMT_MODE_UDP, "udp"}, {MRC_CTL_EV_FMT_MODE_STEV, "stev"}, {MRC_CTL_EV_FMT_MODE_SRV6, "srv6"}};
constexpr BitName kEvModeNames[] = {
    {MRC_CTL_EV_MODE_AUTO, "auto"}, {MRC_CTL_EV_MODE_EXP, "exp"}, {MRC_CTL_EV_MODE_GEN, "gen"}};
constexpr BitName kOptNames[] = {{MRC_CTL_OPT_CAP_EV_PROFILE_MODIFY_ONLINE, "ev_profile_modify_online"},
                                 {MRC_CTL_OPT_CAP_CC_PROFILE_MODIFY_ONLINE, "cc_profile_modify_online"},
                                 {MRC_CTL_OPT_CAP_EV_EVENT, "ev_event"},
                                 {MRC_CTL_OPT_CAP_EV_EXPLICIT_RANGE, "ev_explicit_range"},
                                 {MRC_CTL_OPT_CAP_EV_EVENT_PRECISE_DROP_CNT, "ev_event_precise_drop_cnt"},
                                 {MRC_CTL_OPT_CAP_EP_OP_EV_PROBE, "ep_op_ev_probe"}};
constexpr BitName kDevCapNames[] = {{MRC_DEVICE_CAP_TRIM_NACK, "trim_nack"},
                                    {MRC_DEVICE_CAP_DYNAMIC_MPR, "dynamic_mpr"},
                                    {MRC_DEVICE_CAP_SVC_TIME, "svc_time"}};
constexpr BitName kEvStateNames[] = {
    {MRC_CTL_EV_GOOD, "good"}, {MRC_CTL_EV_ASSUMED_BAD, "bad"}, {MRC_CTL_EV_DENIED, "denied"}};

std::string ver_text(uint32_t v) { return fmt::format("{}.{}.{}", v >> 24, (v >> 16) & 0xff, v & 0xffff); }

const char* fmt_mode_name(uint32_t m) {
  switch (m) {
    case MRC_CTL_EV_FMT_MODE_UDP: return "udp";
    case MRC_CTL_EV_FMT_MODE_STEV: return "stev";
    case MRC_CTL_EV_FMT_MODE_SRV6: return "srv6";
    default: return "?";
  }
}

const char* ev_mode_name(uint32_t m) {
  switch (m) {
    case MRC_CTL_EV_MODE_AUTO: return "auto";
    case MRC_CTL_EV_MODE_EXP: return "exp";
    case MRC_CTL_EV_MODE_GEN: return "gen";
    default: return "?";
  }
}

// ---------------------------------------------------------------- EV values

// An EV occupies the first `bits` bits of mrc_ctl_ev_t, most significant
// bit first from byte 0 (a 16-bit UDP EV is val[0] << 8 | val[1]).
void put_ev(mrc_ctl_ev_t& val, uint64_t v, unsigned bits) {
  std::memset(val, 0, sizeof(mrc_ctl_ev_t));
  bits = std::min(bits, 64u);
  for (unsigned i = 0; i < bits; ++i)
    if ((v >> (bits - 1 - i)) & 1) val[i / 8] = uint8_t(val[i / 8] | (0x80 >> (i % 8)));
}

uint64_t get_ev(const mrc_ctl_ev_t& val, unsigned bits) {
  uint64_t v = 0;
  bits = std::min(bits, 64u);
  for (unsigned i = 0; i < bits; ++i) v = (v << 1) | ((val[i / 8] >> (7 - i % 8)) & 1);
  return v;
}

unsigned default_bits(uint32_t fmt_mode) { return fmt_mode == MRC_CTL_EV_FMT_MODE_STEV ? 32 : 16; }

std::string ev_text(uint64_t v, unsigned bits) {
  return bits <= 16 ? std::to_string(v) : fmt::format("0x{:0{}x}", v, (bits + 3) / 4);
}

// ---------------------------------------------------------------- devices

// The verbs device list, held for the whole run.
struct DeviceList {
  ibv_device** list = nullptr;
  int n = 0;
  DeviceList() {
    list = ibv_get_device_list(&n);
    if (!list) fail("ibv_get_device_list");
  }
  ~DeviceList() {
    if (list) ibv_free_device_list(list);
  }
  DeviceList(const DeviceList&) = delete;
  DeviceList& operator=(const DeviceList&) = delete;
  std::vector<std::string> names() const {
    std::vector<std::string> v;
    for (int i = 0; i < n; ++i)
      if (const char* s = ibv_get_device_name(list[i])) v.emplace_back(s);
    return v;
  }
  ibv_device* find(const std::string& name) const {
    for (int i = 0; i < n; ++i) {
      const char* s = ibv_get_device_name(list[i]);
      if (s && name == s) return list[i];
    }
    return nullptr;
  }
};

DeviceList& devices() {
  static DeviceList d;
  return d;
}

class Device {
 public:
  explicit Device(const std::string& name) : name_(name) {
    ibv_device* d = devices().find(name);
    if (!d) {
      std::string have;
      for (const auto& n : devices().names()) have += (have.empty() ? "" : ", ") + n;
      throw Failure(fmt::format("no device '{}' (devices: {})", name, have.empty() ? "none" : have), ENODEV);
    }
    ctx_ = ibv_open_device(d);
    if (!ctx_) fail(fmt::format("{}: ibv_open_device", name));
  }
  ~Device() {
    if (mctx_) mrc_destroy_context(mctx_);
    if (ctx_) ibv_close_device(ctx_);
  }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const std::string& name() const { return name_; }
  ibv_context* verbs() const { return ctx_; }

  mrc_context* mrc() {
    if (!mctx_) {
      mrc_context_attr a{};
      a.mrc_api_version_used = MRC_API_VER_USED;
      a.mrc_vendor_api_version_used = MRC_VENDOR_API_VER_USED;
      mctx_ = mrc_create_context(ctx_, &a);
      if (!mctx_) fail(fmt::format("{}: mrc_create_context", name_));
    }
    return mctx_;
  }

  const mrc_ctl_device_attr& ctl_attr() {
    if (!have_attr_) {
      int supported = 0;
      attr_ = mrc_ctl_device_attr{};
      check(mrc_ctl_query_device_ex(ctx_, mrc(), &attr_, &supported),
            fmt::format("{}: mrc_ctl_query_device_ex", name_));
      supported_ = supported != 0;
      have_attr_ = true;
    }
    return attr_;
  }
  bool ctl_supported() {
    ctl_attr();
    return supported_;
  }

  // Ports owned by this function, from phy_port_mask (1-based).
  std::vector<uint8_t> ports() {
    std::vector<uint8_t> v;
    const uint32_t m = ctl_attr().phy_port_mask;
    for (unsigned p = 1; p < 32; ++p)
      if (m & (1u << p)) v.push_back(uint8_t(p));
    return v;
  }

  // The plane addresses: the distinct GIDs of the table in order, leaving
  // out empty and link-local entries (RoCE v1/v2 pairs share one GID).
  // Plane n - 1 serves port n.
  std::vector<ibv_gid> plane_gids() {
    std::vector<ibv_gid> out;
    ibv_port_attr pa{};
    if (ibv_query_port(ctx_, 1, &pa) != 0) return out;
    for (int i = 0; i < pa.gid_tbl_len; ++i) {
      ibv_gid g{};
      if (ibv_query_gid(ctx_, 1, i, &g) != 0) continue;
      static const uint8_t zero[16] = {};
      if (std::memcmp(g.raw, zero, 16) == 0) continue;
      if (g.raw[0] == 0xfe && (g.raw[1] & 0xc0) == 0x80) continue;
      if (std::any_of(out.begin(), out.end(), [&](const ibv_gid& x) { return std::memcmp(x.raw, g.raw, 16) == 0; }))
        continue;
      out.push_back(g);
    }
    return out;
  }

  // Address of port n, if the GID table has one.
  std::optional<ibv_gid> port_gid(uint8_t port) {
    auto g = plane_gids();
    if (port == 0 || port > g.size()) return std::nullopt;
    return g[port - 1];
  }

 private:
  std::string name_;
  ibv_context* ctx_ = nullptr;
  mrc_context* mctx_ = nullptr;
  mrc_ctl_device_attr attr_{};
  bool have_attr_ = false;
  bool supported_ = false;
};

uint8_t check_port(Device& d, uint64_t port) {
  const auto ports = d.ports();
  if (std::find(ports.begin(), ports.end(), port) == ports.end()) {
    std::string have;
    for (auto p : ports) have += (have.empty() ? "" : " ") + std::to_string(p);
    throw UsageError(fmt::format("{} has no port {} (ports: {})", d.name(), port, have));
  }
  return uint8_t(port);
}

// ---------------------------------------------------------------- profiles

struct FmtInfo {
  int state = MRC_CTL_PROFILE_INIT;
  uint32_t mode = 0;
  std::vector<uint8_t> widths;
  unsigned bits() const {
    unsigned b = 0;
    for (auto w : widths) b += w;
    return b ? b : default_bits(mode);
  }
};

FmtInfo query_fmt(Device& d, uint64_t id) {
  FmtInfo info;
  std::vector<mrc_ctl_ev_fmt_field> fields(16);
  for (int attempt = 0; attempt < 3; ++attempt) {
    mrc_ctl_ev_fmt_profile_attr a{};
    a.ev_fmt_op.op = MRC_CTL_EV_FMT_OP_QUERY_FIELDS;
    a.ev_fmt_op.fmt_fields = fields.data();
    a.ev_fmt_op.fmt_field_count = int(fields.size());
    const int rc = mrc_ctl_query_ev_fmt_profile(
        d.mrc(), id, &a, MRC_CTL_EV_FMT_PROFILE_CUR_STATE | MRC_CTL_EV_FMT_PROFILE_MODE | MRC_CTL_EV_FMT_PROFILE_OP);
    if (rc != 0 && errno == E2BIG && a.ev_fmt_op.fmt_field_count > int(fields.size())) {
      fields.resize(size_t(a.ev_fmt_op.fmt_field_count));
      continue;
    }
    if (rc != 0) {
      // An unconfigured profile may have no fields to report.
      const int e = errno;
      mrc_ctl_ev_fmt_profile_attr b{};
      if (mrc_ctl_query_ev_fmt_profile(d.mrc(), id, &b, MRC_CTL_EV_FMT_PROFILE_CUR_STATE) != 0 ||
          b.cur_profile_state != MRC_CTL_PROFILE_INIT)
        fail_ctl(fmt::format("{}: mrc_ctl_query_ev_fmt_profile({})", d.name(), id), e);
      info.state = b.cur_profile_state;
      return info;
    }
    info.state = a.cur_profile_state;
    info.mode = uint32_t(a.ev_fmt_mode);
    for (int i = 0; i < a.ev_fmt_op.fmt_field_count && i < int(fields.size()); ++i)
      info.widths.push_back(fields[size_t(i)].width);
    return info;
  }
  fail_ctl(fmt::format("{}: mrc_ctl_query_ev_fmt_profile({}): field count keeps growing", d.name(), id), E2BIG);
}

struct EvProfileInfo {
  mrc_ctl_ev_profile_attr attr{};
  std::vector<mrc_ctl_ev_field> fields;
  bool have_fields = false;
  std::vector<mrc_ctl_ev_op_entry> entries;
  bool have_entries = false;
};

mrc_ctl_ev_profile_attr query_ev_basic(Device& d, uint64_t id) {
  mrc_ctl_ev_profile_attr a{};
  check(mrc_ctl_query_ev_profile(d.mrc(), id, &a,
                                 MRC_CTL_EV_PROFILE_STATE | MRC_CTL_EV_PROFILE_CUR_STATE | MRC_CTL_EV_PROFILE_MODE |
                                     MRC_CTL_EV_PROFILE_FMT_ID | MRC_CTL_EV_PROFILE_COUNT |
                                     MRC_CTL_EV_PROFILE_MIN_ACTIVE | MRC_CTL_EV_PROFILE_EVENT_MASK),
        fmt::format("{}: mrc_ctl_query_ev_profile({})", d.name(), id));
  return a;
}

std::vector<mrc_ctl_ev_op_entry> query_ev_array(Device& d, uint64_t id, uint32_t count) {
  std::vector<mrc_ctl_ev_op_entry> e(std::max<uint32_t>(count, 1));
  for (int attempt = 0; attempt < 3; ++attempt) {
    mrc_ctl_ev_profile_attr a{};
    a.ev_op.op = MRC_CTL_EV_OP_QUERY_EV_ARRAY;
    a.ev_op.entries = e.data();
    a.ev_op.entry_count = int(e.size());
    if (mrc_ctl_query_ev_profile(d.mrc(), id, &a, MRC_CTL_EV_PROFILE_EV_OP) == 0) {
      e.resize(size_t(std::clamp(a.ev_op.entry_count, 0, int(e.size()))));
      return e;
    }
    if (errno != E2BIG || a.ev_op.entry_count <= int(e.size()))
      fail_ctl(fmt::format("{}: mrc_ctl_query_ev_profile({}, QUERY_EV_ARRAY)", d.name(), id));
    e.assign(size_t(a.ev_op.entry_count), mrc_ctl_ev_op_entry{});
  }
  fail_ctl(fmt::format("{}: mrc_ctl_query_ev_profile({}, QUERY_EV_ARRAY): array keeps growing", d.name(), id), E2BIG);
}

std::optional<std::vector<mrc_ctl_ev_field>> query_ev_fields(Device& d, uint64_t id) {
  std::vector<mrc_ctl_ev_field> f(16);
  for (int attempt = 0; attempt < 3; ++attempt) {
    mrc_ctl_ev_profile_attr a{};
    a.ev_fields_op.op = MRC_CTL_EV_FIELDS_OP_QUERY_FIELDS;
    a.ev_fields_op.fields = f.data();
    a.ev_fields_op.field_count = int(f.size());
    if (mrc_ctl_query_ev_profile(d.mrc(), id, &a, MRC_CTL_EV_PROFILE_EV_FIELDS_OP) == 0) {
      f.resize(size_t(std::clamp(a.ev_fields_op.field_count, 0, int(f.size()))));
      return f;
    }
    if (errno != E2BIG || a.ev_fields_op.field_count <= int(f.size())) return std::nullopt;
    f.assign(size_t(a.ev_fields_op.field_count), mrc_ctl_ev_field{});
  }
  return std::nullopt;
}

// Walks a profile to `target` along INIT <-> OFFLINE <-> ONLINE.
template <class Attr, class Query, class Modify>
void walk_state(Device& d, uint64_t id, const char* kind, int target, int state_bit, int cur_bit, Query query,
                Modify modify) {
  for (int step = 0; step < 3; ++step) {
    Attr q{};
    check(query(d.mrc(), id, &q, cur_bit), fmt::format("{}: query {} profile {}", d.name(), kind, id));
    const int cur = q.cur_profile_state;
    if (cur == target) return;
    // One step at a time: ONLINE and INIT are both one step from OFFLINE.
    const int next = (cur == MRC_CTL_PROFILE_OFFLINE) ? target : MRC_CTL_PROFILE_OFFLINE;
    Attr m{};
    m.profile_state = mrc_ctl_profile_state(next);
    check(modify(d.mrc(), id, &m, state_bit),
          fmt::format("{}: {} profile {} {} -> {}", d.name(), kind, id, state_name(cur), state_name(next)));
  }
  fail_msg(fmt::format("{}: {} profile {} did not reach {}", d.name(), kind, id, state_name(target)));
}

void fmt_walk(Device& d, uint64_t id, int target) {
  walk_state<mrc_ctl_ev_fmt_profile_attr>(d, id, "EV format", target, MRC_CTL_EV_FMT_PROFILE_STATE,
                                          MRC_CTL_EV_FMT_PROFILE_CUR_STATE, mrc_ctl_query_ev_fmt_profile,
                                          mrc_ctl_modify_ev_fmt_profile);
}
void ev_walk(Device& d, uint64_t id, int target) {
  walk_state<mrc_ctl_ev_profile_attr>(d, id, "EV", target, MRC_CTL_EV_PROFILE_STATE, MRC_CTL_EV_PROFILE_CUR_STATE,
                                      mrc_ctl_query_ev_profile, mrc_ctl_modify_ev_profile);
}
void cc_walk(Device& d, uint64_t id, int target) {
  walk_state<mrc_ctl_cc_profile_attr>(d, id, "CC", target, MRC_CTL_CC_PROFILE_STATE, MRC_CTL_CC_PROFILE_CUR_STATE,
                                      mrc_ctl_query_cc_profile, mrc_ctl_modify_cc_profile);
}

int target_state(const std::string& verb) {
  if (verb == "online") return MRC_CTL_PROFILE_ONLINE;
  if (verb == "offline") return MRC_CTL_PROFILE_OFFLINE;
  return MRC_CTL_PROFILE_INIT;  // del
}

void state_done(const Device& d, const char* kind, uint64_t id, int target) {
  if (g_json) {
    Json j = Json::object();
    j["device"] = d.name();
    j["kind"] = kind;
    j["id"] = id;
    j["state"] = state_name(target);
    emit(j);
  } else {
    fmt::print("{} {} profile {}: {}\n", d.name(), kind, id,
               target == MRC_CTL_PROFILE_INIT ? "deleted" : state_name(target));
  }
}

// ---------------------------------------------------------------- dev

Json device_json(Device& d) {
  Json j = Json::object();
  j["name"] = d.name();
  mrc_device_attr ma{};
  int supported = 0;
  if (mrc_query_device_ex(d.verbs(), d.mrc(), &ma, &supported) == 0) {
    Json m = Json::object();
    m["supported"] = supported != 0;
    m["protocol_versions"] = ma.mrc_protocol_version;
    m["max_wimm"] = ma.wimm_attr.max_wimm;
    m["max_wimm_dest"] = ma.wimm_attr.max_wimm_dest;
    m["max_mpr"] = ma.mpr_attr.max_mpr;
    m["mpr_resolution"] = ma.mpr_attr.mpr_resolution;
    m["max_qp_hint"] = ma.qp_attr.max_qp_hint;
    m["cap"] = bits_json(ma.cap, kDevCapNames);
    j["mrc"] = m;
  } else {
    j["mrc"] = Json::object();
    j["mrc"]["error"] = ctl_errno_text(errno);
  }
  const auto& a = d.ctl_attr();
  Json c = Json::object();
  c["supported"] = d.ctl_supported();
  c["protocol_versions"] = a.mrc_ctl_protocol_version;
  Json ev = Json::object();
  ev["max_fmt_profiles"] = a.ev.ev_max_fmt_profiles;
  ev["max_profiles"] = a.ev.ev_max_profiles;
  ev["max_count"] = a.ev.ev_max_count;
  ev["free_count"] = a.ev.ev_free_count;
  ev["max_count_profile"] = a.ev.ev_max_count_profile;
  ev["count_align"] = a.ev.ev_count_align;
  ev["max_width"] = a.ev.ev_max_width;
  ev["fmt_modes"] = bits_json(a.ev.ev_fmt_mode_mask, kFmtModeNames);
  ev["modes"] = bits_json(a.ev.ev_mode_mask, kEvModeNames);
  ev["op_max_entries"] = a.ev.ev_op_max_entries;
  c["ev"] = ev;
  Json cc = Json::object();
  cc["max_profiles"] = a.cc.cc_max_profiles;
  Json algos = Json::array();
  for (const char** p = a.cc.algorithms; p && *p; ++p) algos.push(*p);
  cc["algorithms"] = algos;
  c["cc"] = cc;
  c["phy_port_mask"] = a.phy_port_mask;
  c["options"] = bits_json(a.opt_attr, kOptNames);
  j["ctl"] = c;

  Json ports = Json::array();
  const auto gids = d.plane_gids();
  for (uint8_t p : d.ports()) {
    Json pj = Json::object();
    pj["port"] = p;
    mrc_ctl_port_attr pa{};
    if (mrc_ctl_query_port(d.mrc(), p, &pa, MRC_CTL_PORT_ADMIN_STATE) == 0)
      pj["admin"] = pa.port_admin_state == MRC_CTL_PORT_ADMIN_ENABLED ? "up" : "down";
    else
      pj["admin"] = nullptr;  // e.g. EPERM for an unprivileged caller
    pj["address"] = p <= gids.size() ? Json(gid_text(gids[p - 1u])) : Json();
    // The verbs port: DOWN when the plane's link is, or it is disabled.
    ibv_port_attr va{};
    pj["state"] = ibv_query_port(d.verbs(), p, &va) == 0 ? Json(ibv_port_state_str(va.state)) : Json();
    if (p == 1 && ibv_query_port(d.verbs(), p, &va) == 0) {
      Json v = Json::object();
      v["active_mtu"] = 128u << unsigned(va.active_mtu);
      v["gid_tbl_len"] = va.gid_tbl_len;
      j["verbs"] = v;
    }
    ports.push(pj);
  }
  j["ports"] = ports;
  return j;
}

void print_device(const Json& j) {
  const auto& m = *j.find("mrc");
  const auto& c = *j.find("ctl");
  const auto& ev = *c.find("ev");
  const auto& cc = *c.find("cc");
  const auto list = [](const Json& a) {
    std::string s;
    for (const auto& x : a.arr()) s += (s.empty() ? "" : " ") + x.cell();
    return s.empty() ? std::string("none") : s;
  };
  fmt::print("{}: ctl {}, protocol versions 0x{:x}, port mask 0x{:x}\n", j.find("name")->str(),
             c.find("supported")->u64() ? "supported" : "NOT supported", c.find("protocol_versions")->u64(),
             c.find("phy_port_mask")->u64());
  if (const Json* v = j.find("verbs"))
    fmt::print("    verbs: active mtu {}, {} GIDs shared by every port\n", v->find("active_mtu")->u64(),
               v->find("gid_tbl_len")->u64());
  if (m.find("error")) {
    fmt::print("    mrc: {}\n", m.find("error")->str());
  } else {
    fmt::print(
        "    mrc: {}, protocol versions 0x{:x}, max_wimm {}/{} (dest), max_mpr {} step {}, qp hints {}, caps {}\n",
        m.find("supported")->u64() ? "supported" : "NOT supported", m.find("protocol_versions")->u64(),
        m.find("max_wimm")->u64(), m.find("max_wimm_dest")->u64(), m.find("max_mpr")->u64(),
        m.find("mpr_resolution")->u64(), m.find("max_qp_hint")->u64(), list(*m.find("cap")));
  }
  fmt::print(
      "    ev: {} format profiles, {} profiles, {} EVs ({} free), {} per profile, count align {}, width {} bits\n",
      ev.find("max_fmt_profiles")->u64(), ev.find("max_profiles")->u64(), ev.find("max_count")->u64(),
      ev.find("free_count")->u64(), ev.find("max_count_profile")->u64(), ev.find("count_align")->u64(),
      ev.find("max_width")->u64());
  const uint64_t maxe = ev.find("op_max_entries")->u64();
  fmt::print("        formats {}; modes {}; entries per op {}\n", list(*ev.find("fmt_modes")), list(*ev.find("modes")),
             maxe ? std::to_string(maxe) : std::string("unlimited"));
  fmt::print("    cc: {} profiles; algorithms {}\n", cc.find("max_profiles")->u64(), list(*cc.find("algorithms")));
  fmt::print("    options: {}\n", list(*c.find("options")));
  for (const auto& p : j.find("ports")->arr())
    fmt::print("    port {}: admin {}, {}, address {}\n", p.find("port")->u64(),
               p.find("admin")->is_null() ? "?" : p.find("admin")->str(),
               p.find("state")->is_null() ? "?" : p.find("state")->str(), p.find("address")->cell());
}

int cmd_dev_show(const std::string& name) {
  std::vector<std::string> names = name.empty() ? devices().names() : std::vector<std::string>{name};
  Json out = Json::object();
  uint32_t cur = 0, last = 0, vcur = 0, vlast = 0;
  mrc_ctl_query_version(&cur, &last, &vcur, &vlast);
  uint32_t acur = 0, alast = 0, avcur = 0, avlast = 0;
  mrc_query_version(&acur, &alast, &avcur, &avlast);
  Json ver = Json::object();
  ver["api"] = ver_text(acur);
  ver["api_oldest"] = ver_text(alast);
  ver["ctl_api"] = ver_text(cur);
  ver["ctl_api_oldest"] = ver_text(last);
  ver["ctl_vendor_api"] = ver_text(vcur);
  ver["ctl_vendor_api_oldest"] = ver_text(vlast);
  ver["built_for_ctl_api"] = ver_text(MRC_CTL_API_VER_USED);
  out["versions"] = ver;
  Json devs = Json::array();
  bool any_failed = false;
  for (const auto& n : names) {
    try {
      Device d(n);
      devs.push(device_json(d));
    } catch (const Failure& f) {
      if (!name.empty()) throw;
      Json e = Json::object();
      e["name"] = n;
      e["error"] = f.what();
      devs.push(e);
      any_failed = true;
    }
  }
  out["devices"] = devs;
  if (g_json) {
    emit(out);
  } else {
    fmt::print("library: API {} (oldest {}), controller API {} (oldest {}), vendor {}; mrcctl built for {}\n",
               acur ? ver_text(acur) : "?", ver_text(alast), ver_text(cur), ver_text(last), ver_text(vcur),
               ver_text(MRC_CTL_API_VER_USED));
    if (names.empty()) fmt::print("no MRC devices\n");
    for (const auto& d : devs.arr()) {
      if (const Json* e = d.find("error"))
        fmt::print("{}: {}\n", d.find("name")->str(), e->str());
      else
        print_device(d);
    }
  }
  return any_failed ? 1 : 0;
}

// ---------------------------------------------------------------- telemetry

// DPDK telemetry v2: a SOCK_SEQPACKET socket; the server greets with a JSON
// object holding max_output_len, then answers each command with one JSON
// object {"<command>": value}.
class Telemetry {
 public:
  static std::string socket_path(const std::string& prefix) {
    // Where DPDK 22.11 puts its runtime directory.
    std::string base = "/var/run";
    if (getuid() != 0) {
      const char* x = std::getenv("XDG_RUNTIME_DIR");
      base = x && *x ? x : "/tmp";
    }
    return fmt::format("{}/dpdk/{}/dpdk_telemetry.v2", base, prefix);
  }

  explicit Telemetry(const std::string& path) : path_(path) {
    fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd_ < 0) fail("telemetry: socket");
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    if (path.size() >= sizeof(sa.sun_path)) fail_msg(fmt::format("telemetry socket path too long: {}", path));
    std::memcpy(sa.sun_path, path.c_str(), path.size());
    timeval tv{5, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0)
      fail(fmt::format("telemetry: connect {} (is mrc-nic running with that --file-prefix?)", path));
    Json hello = receive();
    // Capped: the greeting is the peer's word, and a vector that size is zero-filled.
    if (const Json* m = hello.find("max_output_len"))
      buf_.resize(std::clamp<uint64_t>(m->u64(), buf_.size() - 1, kMaxReply) + 1);
  }
  ~Telemetry() {
    if (fd_ >= 0) ::close(fd_);
  }
  Telemetry(const Telemetry&) = delete;
  Telemetry& operator=(const Telemetry&) = delete;

  // The value of one command, e.g. "/mrc/qp,12".
  // A null answer (the command failed) is an error unless null_ok.
  // Whether the process lists `key` among its telemetry commands ("/").
  bool registered(const std::string& key) {
    if (::send(fd_, "/", 1, 0) < 0) return true;  // cannot tell: say nothing new
    const Json r = receive();
    const Json* list = r.find("/");
    if (!list || !list->is_array()) return true;
    for (const auto& c : list->arr())
      if (c.is_string() && c.str() == key) return true;
    return false;
  }

  Json command(const std::string& cmd, bool null_ok = false) {
    if (::send(fd_, cmd.data(), cmd.size(), 0) < 0) fail(fmt::format("telemetry: send '{}'", cmd));
    Json r = receive();
    const std::string key = cmd.substr(0, cmd.find(','));
    if (const Json* v = r.find(key)) {
      if (v->is_null() && !null_ok) {
        if (!registered(key))
          fail_msg(fmt::format("telemetry: this process has no {} (mrc-nic started with --telemetry false?)", key));
        fail_msg(fmt::format("telemetry: {} failed (unknown device, QP or bad parameters?)", cmd));
      }
      return *v;
    }
    fail_msg(fmt::format("telemetry: unexpected reply to {}: {}", cmd, r.dump(-1)));
  }

 private:
  Json receive() {
    const ssize_t n = ::recv(fd_, buf_.data(), buf_.size(), 0);
    if (n < 0) fail(fmt::format("telemetry: recv from {}", path_));
    if (n == 0) fail_msg(fmt::format("telemetry: {} closed the connection", path_));
    try {
      return Json::parse(std::string_view(buf_.data(), size_t(n)));
    } catch (const std::exception& e) {
      fail_msg(fmt::format("telemetry: {}", e.what()));
    }
  }

  // DPDK 22.11 answers at most 16 KB; later releases a little more.
  static constexpr uint64_t kMaxReply = 1 << 20;
  std::string path_;
  int fd_ = -1;
  std::vector<char> buf_ = std::vector<char>(64 * 1024);
};

struct TelemetryOpts {
  std::string prefix = "rte";
  std::string socket;
  std::string path() const { return socket.empty() ? Telemetry::socket_path(prefix) : socket; }
};

// Link state of each plane from telemetry, if mrc-nic can be reached.
std::map<uint8_t, std::string> plane_links(const TelemetryOpts& t, const std::string& dev, size_t nports) {
  std::map<uint8_t, std::string> out;
  try {
    Telemetry tel(t.path());
    for (size_t p = 0; p < nports; ++p) {
      Json r = tel.command(fmt::format("/mrc/plane,{}:{}", dev, p));
      if (const Json* l = r.find("link")) out[uint8_t(p + 1)] = l->cell();
    }
  } catch (const Failure&) {
  } catch (const JsonTypeError&) {
  }
  return out;
}

// ---------------------------------------------------------------- port

int cmd_port_show(const std::string& name, const TelemetryOpts& tel) {
  Device d(name);
  const auto ports = d.ports();
  const auto gids = d.plane_gids();
  const auto links = plane_links(tel, name, ports.size());
  Json out = Json::array();
  std::vector<std::vector<std::string>> rows;
  for (uint8_t p : ports) {
    mrc_ctl_port_attr a{};
    check(mrc_ctl_query_port(d.mrc(), p, &a, MRC_CTL_PORT_ADMIN_STATE),
          fmt::format("{}: mrc_ctl_query_port({})", name, p));
    const char* admin = a.port_admin_state == MRC_CTL_PORT_ADMIN_ENABLED ? "up" : "down";
    const std::string addr = p <= gids.size() ? gid_text(gids[p - 1u]) : "-";
    auto l = links.find(p);
    const std::string link = l == links.end() ? "-" : l->second;
    Json j = Json::object();
    j["port"] = p;
    j["plane"] = p - 1;
    j["admin"] = admin;
    j["link"] = l == links.end() ? Json() : Json(link);
    j["address"] = addr;
    out.push(j);
    rows.push_back({std::to_string(p), std::to_string(p - 1), admin, link, addr});
  }
  if (g_json) {
    Json j = Json::object();
    j["device"] = name;
    j["ports"] = out;
    emit(j);
  } else {
    print_table({"PORT", "PLANE", "ADMIN", "LINK", "ADDRESS"}, rows);
  }
  return 0;
}

int cmd_port_set(const std::string& name, uint64_t port, const std::string& how) {
  Device d(name);
  const uint8_t p = check_port(d, port);
  mrc_ctl_port_attr a{};
  a.port_admin_state = how == "up" ? MRC_CTL_PORT_ADMIN_ENABLED : MRC_CTL_PORT_ADMIN_DISABLED;
  check(mrc_ctl_modify_port(d.mrc(), p, &a, MRC_CTL_PORT_ADMIN_STATE),
        fmt::format("{}: mrc_ctl_modify_port({}, {})", name, p, how));
  if (g_json) {
    Json j = Json::object();
    j["device"] = name;
    j["port"] = p;
    j["admin"] = how;
    emit(j);
  } else {
    fmt::print("{} port {}: admin {}\n", name, p, how);
  }
  return 0;
}

// ---------------------------------------------------------------- fmt

struct FmtAddOpts {
  std::string mode = "udp";
  std::vector<std::string> fields;
  bool online = false;
};

int cmd_fmt_add(const std::string& name, uint64_t id, const FmtAddOpts& o) {
  std::vector<mrc_ctl_ev_fmt_field> fields;
  for (const auto& s : o.fields)
    for (auto w : split(s, ',')) {
      if (w.empty()) continue;
      mrc_ctl_ev_fmt_field f{};
      f.width = uint8_t(need_num(w, "--fields width", 255));
      if (!f.width) throw UsageError("--fields: a field is at least 1 bit wide");
      fields.push_back(f);
    }
  if (fields.empty()) throw UsageError("--fields: give the field widths, e.g. --fields 16 or --fields 8,8");
  Device d(name);
  mrc_ctl_ev_fmt_profile_attr a{};
  a.profile_state = MRC_CTL_PROFILE_OFFLINE;
  a.ev_fmt_mode = o.mode == "stev" ? MRC_CTL_EV_FMT_MODE_STEV : MRC_CTL_EV_FMT_MODE_UDP;
  a.ev_fmt_op.op = MRC_CTL_EV_FMT_OP_MODIFY_FIELDS;
  a.ev_fmt_op.fmt_fields = fields.data();
  a.ev_fmt_op.fmt_field_count = int(fields.size());
  check(mrc_ctl_modify_ev_fmt_profile(
            d.mrc(), id, &a, MRC_CTL_EV_FMT_PROFILE_STATE | MRC_CTL_EV_FMT_PROFILE_MODE | MRC_CTL_EV_FMT_PROFILE_OP),
        fmt::format("{}: EV format profile {}: configure (-> offline)", name, id));
  if (o.online) fmt_walk(d, id, MRC_CTL_PROFILE_ONLINE);
  state_done(d, "EV format", id, o.online ? MRC_CTL_PROFILE_ONLINE : MRC_CTL_PROFILE_OFFLINE);
  return 0;
}

int cmd_fmt_show(const std::string& name, uint64_t id) {
  Device d(name);
  const FmtInfo f = query_fmt(d, id);
  if (g_json) {
    Json j = Json::object();
    j["device"] = name;
    j["id"] = id;
    j["state"] = state_name(f.state);
    j["mode"] = f.mode ? Json(fmt_mode_name(f.mode)) : Json();
    Json w = Json::array();
    for (auto x : f.widths) w.push(x);
    j["fields"] = w;
    j["bits"] = f.widths.empty() ? Json() : Json(f.bits());
    emit(j);
  } else {
    std::string w;
    for (auto x : f.widths) w += (w.empty() ? "" : ",") + std::to_string(x);
    fmt::print("{} EV format profile {}: {}", name, id, state_name(f.state));
    if (f.mode) fmt::print(", mode {}, fields {} ({} bits)", fmt_mode_name(f.mode), w.empty() ? "-" : w, f.bits());
    fmt::print("\n");
  }
  return 0;
}

int cmd_fmt_state(const std::string& name, uint64_t id, const std::string& verb) {
  Device d(name);
  fmt_walk(d, id, target_state(verb));
  state_done(d, "EV format", id, target_state(verb));
  return 0;
}

// ---------------------------------------------------------------- ev

struct EvAddOpts {
  uint64_t fmt_id = 0;
  std::string mode;
  uint32_t count = 0;
  std::vector<std::string> evs;
  std::vector<std::string> fields;
  uint32_t min_active = 1;
  std::string events = "good,bad";
  bool online = false;
};

int parse_events(const std::string& s) {
  int m = 0;
  for (auto w : split(s, ',')) {
    if (w.empty() || w == "none") continue;
    if (w == "good")
      m |= MRC_CTL_EV_GOOD;
    else if (w == "bad" || w == "assumed_bad")
      m |= MRC_CTL_EV_ASSUMED_BAD;
    else
      throw UsageError(fmt::format("--events: '{}' is not good, bad or none", w));
  }
  return m;
}

uint64_t gen_count(const std::vector<mrc_ctl_ev_field>& fields) {
  uint64_t n = 1;
  for (const auto& f : fields)
    if (f.mask) {
      if (f.max_val < f.min_val)
        throw UsageError(fmt::format("--field: min_val {} > max_val {}", f.min_val, f.max_val));
      n *= uint64_t(f.max_val) - f.min_val + 1;
      if (n > UINT32_MAX) throw UsageError("--field: the fields generate more than 2^32 EVs; give --count");
    }
  return n;
}

// Applies an EV operation in chunks the device accepts.
void ev_op_chunks(Device& d, uint64_t id, mrc_ctl_ev_op op, std::vector<mrc_ctl_ev_op_entry>& entries,
                  const std::string& what) {
  const uint32_t max = d.ctl_attr().ev.ev_op_max_entries;
  const size_t chunk = max ? max : entries.size();
  for (size_t i = 0; i < entries.size(); i += chunk) {
    mrc_ctl_ev_profile_attr a{};
    a.ev_op.op = op;
    a.ev_op.entries = entries.data() + i;
    a.ev_op.entry_count = int(std::min(chunk, entries.size() - i));
    if (mrc_ctl_modify_ev_profile(d.mrc(), id, &a, MRC_CTL_EV_PROFILE_EV_OP) != 0)
      fail_ctl(entries.size() == 1
                   ? fmt::format("{}: EV profile {}: {}", d.name(), id, what)
                   : fmt::format("{}: EV profile {}: {} (entries {}..{}; earlier ones may have taken effect)", d.name(),
                                 id, what, i, i + size_t(a.ev_op.entry_count) - 1),
               errno, true);
  }
}

int cmd_ev_add(const std::string& name, uint64_t id, const EvAddOpts& o) {
  const bool gen = o.mode == "gen";
  std::vector<mrc_ctl_ev_field> fields;
  for (const auto& s : o.fields)
    for (auto f : split(s, ','))
      if (!f.empty()) fields.push_back(parse_field(f));
  if (gen && fields.empty()) throw UsageError("ev add --mode gen: give the fields (--field W:INIT:MIN:MAX:MASK ...)");
  if (gen && !o.evs.empty()) throw UsageError("ev add --mode gen: --evs is for explicit profiles");
  if (!gen && o.evs.empty()) throw UsageError("ev add --mode exp: list the EVs with --evs");
  const int events = parse_events(o.events);

  Device d(name);
  const FmtInfo f = query_fmt(d, o.fmt_id);
  if (f.state == MRC_CTL_PROFILE_INIT)
    throw Failure(fmt::format("{}: EV format profile {} is not configured", name, o.fmt_id), ENOENT);
  const unsigned bits = f.bits();

  std::vector<EvItem> listed;
  uint32_t count = o.count;
  if (gen) {
    if (!count) count = uint32_t(gen_count(fields));
  } else {
    listed = parse_ev_list(o.evs, bits);
    if (!count) count = uint32_t(listed.size());
    if (count != listed.size())
      throw UsageError(fmt::format("--count {} but --evs lists {} EVs", count, listed.size()));
  }
  if (o.min_active > count)
    throw UsageError(fmt::format("--min-active {} exceeds the EV count {}", o.min_active, count));

  mrc_ctl_ev_profile_attr a{};
  a.profile_state = MRC_CTL_PROFILE_OFFLINE;
  a.ev_mode = gen ? MRC_CTL_EV_MODE_GEN : MRC_CTL_EV_MODE_EXP;
  a.ev_fmt_profile_id = o.fmt_id;
  a.ev_count = count;
  a.ev_min_active = o.min_active;
  a.ev_event_mask = events;
  int mask = MRC_CTL_EV_PROFILE_STATE | MRC_CTL_EV_PROFILE_MODE | MRC_CTL_EV_PROFILE_FMT_ID | MRC_CTL_EV_PROFILE_COUNT |
             MRC_CTL_EV_PROFILE_MIN_ACTIVE | MRC_CTL_EV_PROFILE_EVENT_MASK;
  if (!fields.empty()) {
    a.ev_fields_op.op = MRC_CTL_EV_FIELDS_OP_MODIFY_FIELDS;
    a.ev_fields_op.fields = fields.data();
    a.ev_fields_op.field_count = int(fields.size());
    mask |= MRC_CTL_EV_PROFILE_EV_FIELDS_OP;
  }
  check(mrc_ctl_modify_ev_profile(d.mrc(), id, &a, mask),
        fmt::format("{}: EV profile {}: configure (-> offline)", name, id));

  if (!gen) {
    // Fill the unpopulated array; EVs without a port are dealt round-robin.
    const auto ports = d.ports();
    if (ports.empty()) fail_msg(fmt::format("{}: the device reports no ports", name));
    std::vector<mrc_ctl_ev_op_entry> e(listed.size());
    for (size_t i = 0; i < listed.size(); ++i) {
      e[i] = mrc_ctl_ev_op_entry{};
      e[i].ev_new.port = listed[i].port ? check_port(d, listed[i].port) : ports[i % ports.size()];
      put_ev(e[i].ev_new.val, listed[i].value, bits);
      e[i].state = MRC_CTL_EV_GOOD;
    }
    ev_op_chunks(d, id, MRC_CTL_EV_OP_REPLACE_EV, e, "REPLACE_EV of unpopulated entries");
  }
  if (o.online) ev_walk(d, id, MRC_CTL_PROFILE_ONLINE);
  state_done(d, "EV", id, o.online ? MRC_CTL_PROFILE_ONLINE : MRC_CTL_PROFILE_OFFLINE);
  return 0;
}

int cmd_ev_show(const std::string& name, uint64_t id) {
  Device d(name);
  const mrc_ctl_ev_profile_attr a = query_ev_basic(d, id);
  std::optional<FmtInfo> f;
  if (a.cur_profile_state != MRC_CTL_PROFILE_INIT) {
    try {
      f = query_fmt(d, a.ev_fmt_profile_id);
    } catch (const Failure&) {
    }
  }
  const unsigned bits = f && f->mode ? f->bits() : 32;
  std::optional<std::vector<mrc_ctl_ev_field>> fields;
  std::vector<mrc_ctl_ev_op_entry> arr;
  if (a.cur_profile_state != MRC_CTL_PROFILE_INIT) {
    fields = query_ev_fields(d, id);
    arr = query_ev_array(d, id, a.ev_count);
  }
  if (g_json) {
    Json j = Json::object();
    j["device"] = name;
    j["id"] = id;
    j["state"] = state_name(a.cur_profile_state);
    if (a.cur_profile_state != MRC_CTL_PROFILE_INIT) {
      j["mode"] = ev_mode_name(a.ev_mode);
      j["fmt_id"] = a.ev_fmt_profile_id;
      j["fmt_mode"] = f && f->mode ? Json(fmt_mode_name(f->mode)) : Json();
      j["bits"] = bits;
      j["count"] = a.ev_count;
      j["min_active"] = a.ev_min_active;
      j["events"] = bits_json(uint32_t(a.ev_event_mask), kEvStateNames);
      Json fj = Json::array();
      for (const auto& x : fields.value_or(std::vector<mrc_ctl_ev_field>{})) {
        Json o = Json::object();
        o["width"] = x.width;
        o["init_val"] = x.init_val;
        o["min_val"] = x.min_val;
        o["max_val"] = x.max_val;
        o["mask"] = x.mask;
        fj.push(o);
      }
      j["fields"] = fj;
      Json ej = Json::array();
      for (size_t i = 0; i < arr.size(); ++i) {
        Json o = Json::object();
        o["index"] = i;
        const bool unpop = arr[i].ev.port == 0;
        o["ev"] = unpop ? Json() : Json(get_ev(arr[i].ev.val, bits));
        o["port"] = arr[i].ev.port;
        o["state"] = unpop ? "UNPOPULATED" : ev_state_text(uint32_t(arr[i].state));
        ej.push(o);
      }
      j["evs"] = ej;
    }
    emit(j);
    return 0;
  }
  fmt::print("{} EV profile {}: {}", name, id, state_name(a.cur_profile_state));
  if (a.cur_profile_state == MRC_CTL_PROFILE_INIT) {
    fmt::print(" (not configured)\n");
    return 0;
  }
  fmt::print(", mode {}, format {} ({}, {} bits), {} EVs, min active {}, events {}\n", ev_mode_name(a.ev_mode),
             a.ev_fmt_profile_id, f && f->mode ? fmt_mode_name(f->mode) : "?", bits, a.ev_count, a.ev_min_active,
             bits_text(uint32_t(a.ev_event_mask), kEvStateNames));
  if (fields && !fields->empty()) {
    std::vector<std::vector<std::string>> rows;
    for (size_t i = 0; i < fields->size(); ++i) {
      const auto& x = (*fields)[i];
      rows.push_back({std::to_string(i), std::to_string(x.width), fmt::format("0x{:x}", x.init_val),
                      std::to_string(x.min_val), std::to_string(x.max_val), fmt::format("0x{:x}", x.mask),
                      x.mask ? "generated" : "fixed"});
    }
    print_table({"FIELD", "WIDTH", "INIT", "MIN", "MAX", "MASK", ""}, rows, "    ");
  }
  std::vector<std::vector<std::string>> rows;
  std::map<std::string, size_t> tally;
  for (size_t i = 0; i < arr.size(); ++i) {
    const bool unpop = arr[i].ev.port == 0;
    const uint64_t v = get_ev(arr[i].ev.val, bits);
    const std::string st = unpop ? "UNPOPULATED" : ev_state_text(uint32_t(arr[i].state));
    ++tally[st];
    rows.push_back({std::to_string(i), unpop ? "-" : ev_text(v, bits), bits <= 16 ? fmt::format("0x{:04x}", v) : "",
                    std::to_string(arr[i].ev.port), st});
  }
  if (bits > 16)
    for (auto& r : rows) r.erase(r.begin() + 2);
  if (bits <= 16)
    print_table({"INDEX", "EV", "HEX", "PORT", "STATE"}, rows);
  else
    print_table({"INDEX", "EV", "PORT", "STATE"}, rows);
  std::string sum;
  for (const auto& [k, n] : tally) sum += fmt::format("{}{} {}", sum.empty() ? "" : ", ", n, k);
  if (!sum.empty()) fmt::print("{}\n", sum);
  return 0;
}

int cmd_ev_state(const std::string& name, uint64_t id, const std::string& verb) {
  Device d(name);
  ev_walk(d, id, target_state(verb));
  state_done(d, "EV", id, target_state(verb));
  return 0;
}

// deny | restore | state: EV[@PORT] items; an item without a port means
// every port the profile has that value on.
int cmd_ev_evop(const std::string& name, uint64_t id, const std::string& verb, const std::vector<std::string>& list) {
  Device d(name);
  const mrc_ctl_ev_profile_attr a = query_ev_basic(d, id);
  if (a.cur_profile_state == MRC_CTL_PROFILE_INIT)
    throw Failure(fmt::format("{}: EV profile {} is not configured", name, id), ENOENT);
  const unsigned bits = query_fmt(d, a.ev_fmt_profile_id).bits();
  const auto items = parse_ev_list(list, bits);
  if (items.empty()) throw UsageError("name at least one EV (VALUE[@PORT])");
  std::vector<mrc_ctl_ev> targets;
  std::vector<mrc_ctl_ev_op_entry> arr;
  bool have_arr = false;
  for (const auto& it : items) {
    if (it.port) {
      mrc_ctl_ev e{};
      put_ev(e.val, it.value, bits);
      e.port = it.port;
      targets.push_back(e);
      continue;
    }
    if (!have_arr) {
      arr = query_ev_array(d, id, a.ev_count);
      have_arr = true;
    }
    bool found = false;
    for (const auto& x : arr)
      if (x.ev.port && get_ev(x.ev.val, bits) == it.value) {
        if (std::none_of(targets.begin(), targets.end(), [&](const mrc_ctl_ev& t) {
              return t.port == x.ev.port && std::memcmp(t.val, x.ev.val, sizeof(t.val)) == 0;
            }))
          targets.push_back(x.ev);
        found = true;
      }
    if (!found) throw Failure(fmt::format("{}: EV {} is not in profile {}", name, ev_text(it.value, bits), id), ENOENT);
  }
  std::vector<mrc_ctl_ev_op_entry> e(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    e[i] = mrc_ctl_ev_op_entry{};
    e[i].ev = targets[i];
    e[i].state = verb == "deny" ? MRC_CTL_EV_DENIED : MRC_CTL_EV_GOOD;
  }
  if (verb == "state") {
    mrc_ctl_ev_profile_attr q{};
    q.ev_op.op = MRC_CTL_EV_OP_QUERY_EV_STATE;
    q.ev_op.entries = e.data();
    q.ev_op.entry_count = int(e.size());
    if (mrc_ctl_query_ev_profile(d.mrc(), id, &q, MRC_CTL_EV_PROFILE_EV_OP) != 0)
      fail_ctl(fmt::format("{}: EV profile {}: QUERY_EV_STATE", name, id), errno, true);
  } else {
    ev_op_chunks(d, id, MRC_CTL_EV_OP_MODIFY_EV_STATE, e,
                 verb == "deny" ? "deny (MODIFY_EV_STATE)" : "restore (MODIFY_EV_STATE)");
  }
  Json out = Json::array();
  std::vector<std::vector<std::string>> rows;
  for (const auto& x : e) {
    const uint64_t v = get_ev(x.ev.val, bits);
    Json j = Json::object();
    j["ev"] = v;
    j["port"] = x.ev.port;
    j["state"] = ev_state_text(uint32_t(x.state));
    out.push(j);
    rows.push_back({ev_text(v, bits), std::to_string(x.ev.port), ev_state_text(uint32_t(x.state))});
  }
  if (g_json) {
    Json j = Json::object();
    j["device"] = name;
    j["id"] = id;
    j["evs"] = out;
    emit(j);
  } else {
    print_table({"EV", "PORT", "STATE"}, rows);
  }
  return 0;
}

// ---------------------------------------------------------------- cc

// NSCC parameters; each remembers whether it was given.
struct NsccArgs {
  mrc_ctl_cc_nscc_cfg cfg{};
  std::vector<CLI::Option*> given;
  bool disable_qa = false;
  uint32_t qa_gate = 3;
  NsccArgs() {
    // Defaults as mrc-nic's engine has them; 0 lets the device derive a
    // value (max_cwnd from the BDP, qa_threshold and target_delay from
    // base_rtt).
    cfg.adjust_bytes_threshold = 8 * 4096;
    cfg.adjust_period_threshold = 5000;
    cfg.base_rtt = 5000;
    cfg.eta = 0.15f;
    cfg.fi = 5.0f;
    cfg.fi_scale = 0.25f;
    cfg.gamma = 0.8f;
    cfg.max_md_jump = 0.5f;
    cfg.qa_gate = 3;
  }
  void add(CLI::App* s) {
    const auto opt = [&](CLI::Option* o) { given.push_back(o->capture_default_str()->group("NSCC parameters")); };
    opt(s->add_option("--base-rtt", cfg.base_rtt, "base RTT (ns)"));
    opt(s->add_option("--target-delay", cfg.target_delay,
                      "target queueing delay (ns; 0: base RTT, 0.75 x where the fabric trims)"));
    opt(s->add_option("--max-cwnd", cfg.max_cwnd, "largest window (bytes; 0: from the BDP)"));
    // NaN, inf and values beyond a float (inf once stored) passed to the
    // device, which does not check fi and fi_scale.
    const auto real = finite_range(0, std::numeric_limits<float>::max());
    opt(s->add_option("--eta", cfg.eta, "additive increase (MTUs)")->check(real));
    opt(s->add_option("--fi", cfg.fi, "fair increase (MTUs)")->check(real));
    opt(s->add_option("--fi-scale", cfg.fi_scale, "fair increase scale")->check(real));
    opt(s->add_option("--gamma", cfg.gamma, "multiplicative decrease factor")->check(finite_range(0, 1)));
    opt(s->add_option("--max-md-jump", cfg.max_md_jump, "largest multiplicative decrease")->check(finite_range(0, 1)));
    opt(s->add_option("--adjust-bytes", cfg.adjust_bytes_threshold, "bytes between window adjustments"));
    opt(s->add_option("--adjust-period", cfg.adjust_period_threshold, "ns between window adjustments"));
    opt(s->add_option("--qa-gate", qa_gate, "quick adapt gate")->check(CLI::Range(0u, 255u)));
    opt(s->add_option("--qa-threshold", cfg.qa_threshold, "quick adapt threshold (ns; 0: 4 x target delay)"));
    given.push_back(s->add_flag("--disable-qa", disable_qa, "turn quick adapt off")->group("NSCC parameters"));
  }
  bool any_given() const {
    return std::any_of(given.begin(), given.end(), [](CLI::Option* o) { return o->count() > 0; });
  }
  // Copies the given parameters over `base`.
  mrc_ctl_cc_nscc_cfg merged(mrc_ctl_cc_nscc_cfg base) const {
    for (CLI::Option* o : given) {
      if (!o->count()) continue;
      const std::string n = o->get_name();
      if (n == "--base-rtt") base.base_rtt = cfg.base_rtt;
      if (n == "--target-delay") base.target_delay = cfg.target_delay;
      if (n == "--max-cwnd") base.max_cwnd = cfg.max_cwnd;
      if (n == "--eta") base.eta = cfg.eta;
      if (n == "--fi") base.fi = cfg.fi;
      if (n == "--fi-scale") base.fi_scale = cfg.fi_scale;
      if (n == "--gamma") base.gamma = cfg.gamma;
      if (n == "--max-md-jump") base.max_md_jump = cfg.max_md_jump;
      if (n == "--adjust-bytes") base.adjust_bytes_threshold = cfg.adjust_bytes_threshold;
      if (n == "--adjust-period") base.adjust_period_threshold = cfg.adjust_period_threshold;
      if (n == "--qa-gate") base.qa_gate = uint8_t(qa_gate);
      if (n == "--qa-threshold") base.qa_threshold = cfg.qa_threshold;
      if (n == "--disable-qa") base.disable_qa = disable_qa;
    }
    return base;
  }
  mrc_ctl_cc_nscc_cfg full() const {
    mrc_ctl_cc_nscc_cfg c = cfg;
    c.qa_gate = uint8_t(qa_gate);
    c.disable_qa = disable_qa;
    return c;
  }
};

constexpr const char* kNscc = "uet-1.0-nscc";

Json nscc_json(const mrc_ctl_cc_nscc_cfg& c) {
  Json j = Json::object();
  j["base_rtt"] = c.base_rtt;
  j["target_delay"] = c.target_delay;
  j["max_cwnd"] = c.max_cwnd;
  j["eta"] = c.eta;
  j["fi"] = c.fi;
  j["fi_scale"] = c.fi_scale;
  j["gamma"] = c.gamma;
  j["max_md_jump"] = c.max_md_jump;
  j["adjust_bytes_threshold"] = c.adjust_bytes_threshold;
  j["adjust_period_threshold"] = c.adjust_period_threshold;
  j["disable_qa"] = c.disable_qa != 0;
  j["qa_gate"] = c.qa_gate;
  j["qa_threshold"] = c.qa_threshold;
  return j;
}

// The library's own spelling of an algorithm name (its pointer stays valid).
const char* find_algorithm(Device& d, const std::string& algo) {
  const auto& a = d.ctl_attr();
  std::string have;
  for (const char** p = a.cc.algorithms; p && *p; ++p) {
    if (algo == *p) return *p;
    have += (have.empty() ? "" : ", ") + std::string(*p);
  }
  throw UsageError(
      fmt::format("{} has no CC algorithm '{}' (algorithms: {})", d.name(), algo, have.empty() ? "none" : have));
}

struct CcQuery {
  mrc_ctl_cc_profile_attr attr{};
  std::string algorithm;
  bool nscc = false;
  mrc_ctl_cc_nscc_cfg cfg{};
};

CcQuery query_cc(Device& d, uint64_t id) {
  CcQuery q;
  mrc_ctl_cc_profile_attr s{};
  check(mrc_ctl_query_cc_profile(d.mrc(), id, &s, MRC_CTL_CC_PROFILE_CUR_STATE),
        fmt::format("{}: mrc_ctl_query_cc_profile({})", d.name(), id));
  q.attr.cur_profile_state = s.cur_profile_state;
  if (s.cur_profile_state == MRC_CTL_PROFILE_INIT) return q;
  // The caller lends a buffer for the configuration; a library that points
  // cc_config at its own copy instead is read from there.
  alignas(8) unsigned char buf[512] = {};
  mrc_ctl_cc_profile_attr a{};
  a.cc_config = buf;
  const int mask = MRC_CTL_CC_PROFILE_STATE | MRC_CTL_CC_PROFILE_CUR_STATE | MRC_CTL_CC_PROFILE_ALGORITHM;
  if (mrc_ctl_query_cc_profile(d.mrc(), id, &a, mask | MRC_CTL_CC_PROFILE_CONFIG) != 0) {
    a = mrc_ctl_cc_profile_attr{};
    check(mrc_ctl_query_cc_profile(d.mrc(), id, &a, mask),
          fmt::format("{}: mrc_ctl_query_cc_profile({})", d.name(), id));
    a.cc_config = nullptr;
  }
  q.attr = a;
  q.algorithm = a.algorithm ? a.algorithm : "";
  q.nscc = q.algorithm == kNscc && a.cc_config;
  if (q.nscc) std::memcpy(&q.cfg, a.cc_config, sizeof(q.cfg));
  return q;
}

struct CcAddOpts {
  std::string algo = kNscc;
  bool online = false;
  NsccArgs nscc;
};

int cmd_cc_add(const std::string& name, uint64_t id, const CcAddOpts& o) {
  Device d(name);
  const char* algo = find_algorithm(d, o.algo);
  const bool nscc = o.algo == kNscc;
  if (!nscc && o.nscc.any_given()) throw UsageError(fmt::format("NSCC parameters given for algorithm {}", o.algo));
  const mrc_ctl_cc_nscc_cfg cfg = o.nscc.full();
  mrc_ctl_cc_profile_attr a{};
  a.profile_state = MRC_CTL_PROFILE_OFFLINE;
  a.algorithm = algo;
  a.cc_config = nscc ? &cfg : nullptr;
  check(mrc_ctl_modify_cc_profile(d.mrc(), id, &a,
                                  MRC_CTL_CC_PROFILE_STATE | MRC_CTL_CC_PROFILE_ALGORITHM | MRC_CTL_CC_PROFILE_CONFIG),
        fmt::format("{}: CC profile {}: configure (-> offline)", name, id));
  if (o.online) cc_walk(d, id, MRC_CTL_PROFILE_ONLINE);
  state_done(d, "CC", id, o.online ? MRC_CTL_PROFILE_ONLINE : MRC_CTL_PROFILE_OFFLINE);
  return 0;
}

int cmd_cc_set(const std::string& name, uint64_t id, const NsccArgs& args) {
  if (!args.any_given()) throw UsageError("cc set: give at least one parameter to change");
  Device d(name);
  const CcQuery q = query_cc(d, id);
  if (q.attr.cur_profile_state == MRC_CTL_PROFILE_INIT)
    throw Failure(fmt::format("{}: CC profile {} is not configured", name, id), ENOENT);
  if (q.algorithm != kNscc) throw UsageError(fmt::format("CC profile {} runs {}, not {}", id, q.algorithm, kNscc));
  if (!q.nscc) fail_msg(fmt::format("{}: CC profile {}: the device did not return its configuration", name, id));
  if (q.attr.cur_profile_state == MRC_CTL_PROFILE_ONLINE &&
      !(d.ctl_attr().opt_attr & MRC_CTL_OPT_CAP_CC_PROFILE_MODIFY_ONLINE))
    throw Failure(fmt::format("{}: CC profile {} is ONLINE and the device cannot change a live CC profile "
                              "(no cc_profile_modify_online); take it offline first",
                              name, id),
                  EBUSY);
  const mrc_ctl_cc_nscc_cfg cfg = args.merged(q.cfg);
  mrc_ctl_cc_profile_attr a{};
  a.cc_config = &cfg;
  check(mrc_ctl_modify_cc_profile(d.mrc(), id, &a, MRC_CTL_CC_PROFILE_CONFIG),
        fmt::format("{}: CC profile {}: new configuration{}", name, id,
                    q.attr.cur_profile_state == MRC_CTL_PROFILE_ONLINE ? " (online)" : ""));
  if (g_json) {
    Json j = Json::object();
    j["device"] = name;
    j["id"] = id;
    j["config"] = nscc_json(cfg);
    emit(j);
  } else {
    fmt::print("{} CC profile {}: configuration updated\n", name, id);
  }
  return 0;
}

int cmd_cc_show(const std::string& name, uint64_t id) {
  Device d(name);
  const CcQuery q = query_cc(d, id);
  if (g_json) {
    Json j = Json::object();
    j["device"] = name;
    j["id"] = id;
    j["state"] = state_name(q.attr.cur_profile_state);
    if (q.attr.cur_profile_state != MRC_CTL_PROFILE_INIT) {
      j["algorithm"] = q.algorithm.empty() ? Json() : Json(q.algorithm);
      j["config"] = q.nscc ? nscc_json(q.cfg) : Json();
    }
    emit(j);
    return 0;
  }
  fmt::print("{} CC profile {}: {}", name, id, state_name(q.attr.cur_profile_state));
  if (q.attr.cur_profile_state == MRC_CTL_PROFILE_INIT) {
    fmt::print(" (not configured)\n");
    return 0;
  }
  fmt::print(", algorithm {}\n", q.algorithm.empty() ? "none" : q.algorithm);
  if (q.nscc) print_kv(nscc_json(q.cfg), "    ");
  return 0;
}

int cmd_cc_state(const std::string& name, uint64_t id, const std::string& verb) {
  Device d(name);
  cc_walk(d, id, target_state(verb));
  state_done(d, "CC", id, target_state(verb));
  return 0;
}

// ---------------------------------------------------------------- endpoint requests

// --dgid/--sgid: ADDR[@PORT] items, or the name of a local device whose
// plane addresses are taken port by port. Returns a GID per port.
std::map<uint8_t, ibv_gid> parse_addrs(const std::vector<std::string>& parts, const std::vector<uint8_t>& ports,
                                       const char* opt) {
  std::map<uint8_t, ibv_gid> out;
  std::optional<ibv_gid> any;
  for (const auto& part : parts)
    for (auto item : split(part, ',')) {
      if (item.empty()) continue;
      std::string addr(item);
      uint8_t port = 0;
      if (auto at = addr.rfind('@'); at != std::string::npos) {
        port = uint8_t(need_num(std::string_view(addr).substr(at + 1), std::string(opt) + " port", 32));
        addr.resize(at);
      }
      if (auto g = parse_gid(addr)) {
        if (port)
          out[port] = *g;
        else
          any = *g;
        continue;
      }
      if (devices().find(addr)) {
        Device peer(addr);
        const auto gids = peer.plane_gids();
        for (size_t i = 0; i < gids.size(); ++i)
          if (!port || port == i + 1) out.emplace(uint8_t(i + 1), gids[i]);
        continue;
      }
      throw UsageError(fmt::format("{} {}: not an IPv4/IPv6 address or a device name", opt, addr));
    }
  if (any)
    for (uint8_t p : ports) out.emplace(p, *any);
  return out;
}

ibv_gid need_addr(const std::map<uint8_t, ibv_gid>& m, uint8_t port, const char* what) {
  auto it = m.find(port);
  if (it == m.end()) throw UsageError(fmt::format("no {} for port {}", what, port));
  return it->second;
}

// Sends one batch; returns the answers (partial on ETIMEDOUT). EAGAIN is
// retried for up to the request timeout.
std::vector<mrc_ctl_ep_rsp> send_batch(Device& d, uint8_t tc, mrc_ctl_ep_op_type op, std::vector<mrc_ctl_ep_req>& reqs,
                                       uint32_t timeout_ns, bool& timed_out) {
  std::vector<mrc_ctl_ep_rsp> rsp(reqs.size());
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::nanoseconds(timeout_ns) + std::chrono::milliseconds(100);
  timed_out = false;
  while (true) {
    int n = 0;
    const int rc =
        mrc_ctl_ep_batch_send_wait(d.mrc(), tc, op, reqs.data(), int(reqs.size()), timeout_ns, rsp.data(), &n);
    if (rc == 0 || errno == ETIMEDOUT) {
      timed_out = rc != 0;
      rsp.resize(size_t(std::clamp(n, 0, int(rsp.size()))));
      return rsp;
    }
    if (errno == EAGAIN && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    fail_ctl(fmt::format("{}: mrc_ctl_ep_batch_send_wait({})", d.name(),
                         op == MRC_CTL_EP_OP_EV_PROBE ? "EV_PROBE" : "PORT_STATUS_UPDATE"));
  }
}

struct ProbeOpts {
  std::vector<std::string> dgid;
  std::vector<std::string> sgid;
  std::vector<std::string> evs;
  std::string fmt = "udp";
  uint32_t count = 1;
  uint32_t timeout_us = 200000;
  uint32_t interval_ms = 0;
  uint8_t tc = 0;
};

int cmd_probe(const std::string& name, const ProbeOpts& o) {
  Device d(name);
  if (!(d.ctl_attr().opt_attr & MRC_CTL_OPT_CAP_EP_OP_EV_PROBE))
    throw Failure(fmt::format("{}: the device does not offer EV probes", name), ENOTSUP);
  const auto ports = d.ports();
  const uint32_t fmode = o.fmt == "stev" ? MRC_CTL_EV_FMT_MODE_STEV : MRC_CTL_EV_FMT_MODE_UDP;
  const unsigned bits = default_bits(fmode);
  const auto dgids = parse_addrs(o.dgid, ports, "--dgid");
  auto sgids = parse_addrs(o.sgid, ports, "--sgid");
  const auto own = d.plane_gids();
  for (uint8_t p : ports)
    if (p <= own.size()) sgids.emplace(p, own[p - 1u]);

  struct Target {
    uint64_t ev;
    uint8_t port;
    std::vector<uint32_t> rtts;
    uint32_t sent = 0;
  };
  std::vector<Target> targets;
  for (const auto& it : parse_ev_list(o.evs, bits)) {
    if (it.port)
      targets.push_back({it.value, check_port(d, it.port), {}, 0});
    else
      for (uint8_t p : ports) targets.push_back({it.value, p, {}, 0});
  }
  if (targets.empty()) throw UsageError("--ev: name at least one EV");
  if (targets.size() > 4096) throw UsageError("--ev: at most 4096 probes per round");

  std::vector<mrc_ctl_ep_req> reqs(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    auto& r = reqs[i];
    r = mrc_ctl_ep_req{};
    r.sgid = need_addr(sgids, targets[i].port, "source address (--sgid)");
    r.dgid = need_addr(dgids, targets[i].port, "destination address (--dgid)");
    r.ev_fmt_mode = mrc_ctl_ev_fmt_mode(fmode);
    put_ev(r.req_ev.val, targets[i].ev, bits);
    r.req_ev.port = targets[i].port;
  }
  uint16_t next_id = 1;
  uint32_t rounds_timed_out = 0;
  for (uint32_t round = 0; round < o.count; ++round) {
    if (round && o.interval_ms) std::this_thread::sleep_for(std::chrono::milliseconds(o.interval_ms));
    std::map<uint16_t, size_t> by_id;
    for (size_t i = 0; i < reqs.size(); ++i) {
      reqs[i].req_id = next_id++;
      by_id[reqs[i].req_id] = i;
      ++targets[i].sent;
    }
    bool timed_out = false;
    for (const auto& r : send_batch(d, o.tc, MRC_CTL_EP_OP_EV_PROBE, reqs, o.timeout_us * 1000u, timed_out)) {
      auto it = by_id.find(r.req_id);
      if (it == by_id.end()) continue;
      targets[it->second].rtts.push_back(r.rtt);
      by_id.erase(it);
    }
    rounds_timed_out += timed_out;
  }

  Json out = Json::array();
  std::vector<std::vector<std::string>> rows;
  bool any_lost = false;
  for (const auto& t : targets) {
    uint64_t sum = 0;
    uint32_t mn = UINT32_MAX, mx = 0;
    for (auto v : t.rtts) {
      sum += v;
      mn = std::min(mn, v);
      mx = std::max(mx, v);
    }
    const size_t n = t.rtts.size();
    any_lost |= n < t.sent;
    Json j = Json::object();
    j["ev"] = t.ev;
    j["port"] = t.port;
    j["dgid"] = gid_text(need_addr(dgids, t.port, ""));
    j["sent"] = t.sent;
    j["answered"] = n;
    j["rtt_min_ns"] = n ? Json(mn) : Json();
    j["rtt_avg_ns"] = n ? Json(sum / n) : Json();
    j["rtt_max_ns"] = n ? Json(mx) : Json();
    Json all = Json::array();
    for (auto v : t.rtts) all.push(v);
    j["rtt_ns"] = all;
    out.push(j);
    const auto us = [](double ns) { return fmt::format("{:.1f}", ns / 1000.0); };
    rows.push_back({ev_text(t.ev, bits), std::to_string(t.port), gid_text(need_addr(dgids, t.port, "")),
                    fmt::format("{}/{}", n, t.sent), n ? us(mn) : "-", n ? us(double(sum) / double(n)) : "-",
                    n ? us(mx) : "-"});
  }
  if (g_json) {
    Json j = Json::object();
    j["device"] = name;
    j["rounds"] = o.count;
    j["rounds_timed_out"] = rounds_timed_out;
    j["probes"] = out;
    emit(j);
  } else {
    print_table({"EV", "PORT", "DGID", "ANSWERED", "MIN_US", "AVG_US", "MAX_US"}, rows);
  }
  return any_lost ? 1 : 0;
}

struct PortStatusOpts {
  std::vector<std::string> dgid;
  std::vector<std::string> sgid;
  std::string status;
  std::vector<uint32_t> port;
  std::string ev = "49152";
  std::string fmt = "udp";
  uint32_t timeout_us = 200000;
  uint8_t tc = 0;
};

int cmd_port_status(const std::string& name, const PortStatusOpts& o) {
  const uint64_t status = need_num(o.status, "--status", UINT32_MAX);
  Device d(name);
  const auto ports = d.ports();
  const uint32_t fmode = o.fmt == "stev" ? MRC_CTL_EV_FMT_MODE_STEV : MRC_CTL_EV_FMT_MODE_UDP;
  const unsigned bits = default_bits(fmode);
  const uint64_t ev = need_num(o.ev, "--ev", bits >= 64 ? UINT64_MAX : (uint64_t(1) << bits) - 1);
  const auto dgids = parse_addrs(o.dgid, ports, "--dgid");
  auto sgids = parse_addrs(o.sgid, ports, "--sgid");
  const auto own = d.plane_gids();
  for (uint8_t p : ports)
    if (p <= own.size()) sgids.emplace(p, own[p - 1u]);
  std::vector<uint8_t> via;
  for (auto p : o.port) via.push_back(check_port(d, p));
  if (via.empty()) {
    if (ports.empty()) fail_msg(fmt::format("{}: the device reports no ports", name));
    via.push_back(ports.front());
  }
  std::vector<mrc_ctl_ep_req> reqs(via.size());
  for (size_t i = 0; i < via.size(); ++i) {
    auto& r = reqs[i];
    r = mrc_ctl_ep_req{};
    r.req_id = uint16_t(i + 1);
    r.sgid = need_addr(sgids, via[i], "source address (--sgid)");
    r.dgid = need_addr(dgids, via[i], "destination address (--dgid)");
    r.ev_fmt_mode = mrc_ctl_ev_fmt_mode(fmode);
    put_ev(r.req_ev.val, ev, bits);
    r.req_ev.port = via[i];
    r.op.port_status_update.port_status = uint32_t(status);
  }
  bool timed_out = false;
  const auto rsp = send_batch(d, o.tc, MRC_CTL_EP_OP_PORT_STATUS_UPDATE, reqs, o.timeout_us * 1000u, timed_out);
  Json out = Json::array();
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < via.size(); ++i) {
    auto it = std::find_if(rsp.begin(), rsp.end(), [&](const mrc_ctl_ep_rsp& r) { return r.req_id == reqs[i].req_id; });
    Json j = Json::object();
    j["port"] = via[i];
    j["dgid"] = gid_text(reqs[i].dgid);
    j["answered"] = it != rsp.end();
    j["arrival_port"] = it != rsp.end() ? Json(it->port) : Json();
    j["rtt_ns"] = it != rsp.end() ? Json(it->rtt) : Json();
    out.push(j);
    rows.push_back({std::to_string(via[i]), gid_text(reqs[i].dgid), it != rsp.end() ? "yes" : "no",
                    it != rsp.end() ? std::to_string(it->port) : "-",
                    it != rsp.end() ? fmt::format("{:.1f}", it->rtt / 1000.0) : "-"});
  }
  if (g_json) {
    Json j = Json::object();
    j["device"] = name;
    j["status"] = status;
    j["requests"] = out;
    emit(j);
  } else {
    fmt::print("{}: port status 0x{:x} sent\n", name, status);
    print_table({"PORT", "DGID", "ANSWERED", "ARRIVAL_PORT", "RTT_US"}, rows);
  }
  return timed_out ? 1 : 0;
}

// ---------------------------------------------------------------- monitor

volatile std::sig_atomic_t g_stop = 0;
extern "C" void on_signal(int) { g_stop = 1; }

std::string now_text() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  tm t{};
  localtime_r(&ts.tv_sec, &t);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%H:%M:%S", &t);
  return fmt::format("{}.{:03}", buf, ts.tv_nsec / 1000000);
}

int cmd_monitor(const std::string& name, double seconds, const std::vector<uint64_t>& only) {
  Device d(name);
  if (!(d.ctl_attr().opt_attr & MRC_CTL_OPT_CAP_EV_EVENT))
    throw Failure(fmt::format("{}: the device does not offer EV events", name), ENOTSUP);
  mrc_cq* cq = mrc_ctl_create_ev_event_cq(d.mrc(), 1024, nullptr, nullptr, 0);
  if (!cq) fail_ctl(fmt::format("{}: mrc_ctl_create_ev_event_cq", name));
  struct CqGuard {
    mrc_cq* cq;
    ~CqGuard() { mrc_destroy_cq(cq); }
  } guard{cq};
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);

  // EV width per profile, looked up once.
  std::map<uint64_t, unsigned> widths;
  const auto width_of = [&](uint64_t profile) {
    auto it = widths.find(profile);
    if (it != widths.end()) return it->second;
    unsigned b = 32;
    try {
      b = query_fmt(d, query_ev_basic(d, profile).ev_fmt_profile_id).bits();
    } catch (const Failure&) {
    }
    widths[profile] = b;
    return b;
  };
  if (!g_json) {
    fmt::print("{}: following EV events{} (Ctrl-C stops)\n", name,
               seconds > 0 ? fmt::format(" for {} s", seconds) : std::string());
    std::fflush(stdout);
  }
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds > 0 ? seconds : 1e9);
  uint64_t total = 0;
  mrc_ctl_ev_event ev[64];
  while (!g_stop && std::chrono::steady_clock::now() < end) {
    const int n = mrc_ctl_poll_ev_event(cq, 64, ev);
    if (n < 0) fail_ctl(fmt::format("{}: mrc_ctl_poll_ev_event", name), -n);
    for (int i = 0; i < n; ++i) {
      const auto& e = ev[i];
      if (!only.empty() && std::find(only.begin(), only.end(), e.profile_id) == only.end()) continue;
      ++total;
      const unsigned bits = width_of(e.profile_id);
      const uint64_t v = get_ev(e.ev.val, bits);
      if (g_json) {
        Json j = Json::object();
        j["time"] = now_text();
        j["device"] = name;
        j["profile"] = e.profile_id;
        j["ev"] = v;
        j["port"] = e.ev.port;
        j["state"] = ev_state_text(uint32_t(e.state));
        j["drops"] = e.drop_count;
        fmt::print("{}\n", j.dump(-1));
      } else {
        fmt::print("{} profile {} ev {} port {} {} drops {}\n", now_text(), e.profile_id, ev_text(v, bits), e.ev.port,
                   ev_state_text(uint32_t(e.state)), e.drop_count);
      }
    }
    std::fflush(stdout);
    if (n == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (!g_json) fmt::print("{} event(s)\n", total);
  return 0;
}

// ---------------------------------------------------------------- stats

struct StatsOpts {
  std::string what;
  std::string arg;
  std::string first;
  bool nonzero = false;
};

// /mrc/devices and /mrc/planes style tables: "columns" plus one array per row.
void print_column_table(const Json& v, const std::vector<std::string>& keys, const std::string& first_col) {
  const Json* cols = v.find("columns");
  if (!cols || !cols->is_array()) {
    print_kv(v);
    return;
  }
  std::vector<std::string> head{first_col};
  for (const auto& c : cols->arr()) head.push_back(c.cell());
  std::vector<std::vector<std::string>> rows;
  for (const auto& k : keys) {
    const Json* r = v.find(k);
    if (!r || !r->is_array()) continue;
    std::vector<std::string> row{k};
    for (const auto& x : r->arr()) row.push_back(x.cell());
    rows.push_back(row);
  }
  print_table(head, rows);
}

// Many columns, few rows: one line per column, one column per row.
void print_transposed(const Json& v, const std::vector<std::string>& keys, bool nonzero) {
  const Json* cols = v.find("columns");
  if (!cols || !cols->is_array()) {
    print_kv(v);
    return;
  }
  std::vector<std::string> head{"counter"};
  for (const auto& k : keys) head.push_back(k);
  std::vector<std::vector<std::string>> rows;
  for (size_t c = 0; c < cols->arr().size(); ++c) {
    std::vector<std::string> row{cols->arr()[c].cell()};
    bool all_zero = true;
    for (const auto& k : keys) {
      const Json* r = v.find(k);
      const bool has = r && r->is_array() && c < r->arr().size();
      row.push_back(has ? r->arr()[c].cell() : "-");
      if (has && r->arr()[c].u64() != 0) all_zero = false;
    }
    if (nonzero && all_zero) continue;
    rows.push_back(row);
  }
  print_table(head, rows);
}

int stats_view(const StatsOpts& s, const TelemetryOpts& t);

int cmd_stats(const StatsOpts& s, const TelemetryOpts& t) {
  try {
    return stats_view(s, t);
  } catch (const JsonTypeError& e) {
    fail_msg(fmt::format("telemetry: unexpected reply for 'stats {}': {}", s.what, e.what()));
  }
}

int stats_view(const StatsOpts& s, const TelemetryOpts& t) {
  Telemetry tel(t.path());
  const std::string& w = s.what;
  if (w == "raw") {
    emit(tel.command(s.arg));
    return 0;
  }
  if (w == "devices") {
    Json v = tel.command("/mrc/devices");
    if (g_json) return emit(v), 0;
    std::vector<std::string> keys;
    if (const Json* d = v.find("devices"))
      for (const auto& x : d->arr()) keys.push_back(x.cell());
    print_column_table(v, keys, "device");
    return 0;
  }
  if (w == "planes") {
    // Rows are DEV_PLANE. Names may hold '_', so device a must not take a_1's
    // row a_1_0: only digits may follow the prefix.
    const auto of_dev = [](const std::string& dev, const std::string& k) {
      const std::string p = dev + "_";
      return k.size() > p.size() && k.compare(0, p.size(), p) == 0 &&
             k.find_first_not_of("0123456789", p.size()) == std::string::npos;
    };
    // Rows past the reply's 16 KB are left out ("rows_omitted"): then one
    // request per device, whose planes always fit.
    Json v = tel.command(s.arg.empty() ? "/mrc/planes" : "/mrc/planes," + s.arg);
    if (s.arg.empty() && v.find("rows_omitted")) {
      Json all = Json::object();
      if (const Json* c = v.find("columns")) all["columns"] = *c;
      const Json devs = tel.command("/mrc/devices");
      if (const Json* names = devs.find("devices"))
        for (const auto& n : names->arr()) {
          const Json one = tel.command("/mrc/planes," + n.cell());
          if (one.find("rows_omitted")) fmt::print(stderr, "mrcctl: some planes of {} are not shown\n", n.cell());
          for (const auto& [k, x] : one.obj())
            if (x.is_array() && of_dev(n.cell(), k)) all[k] = x;
        }
      v = all;
    }
    std::vector<std::string> keys;
    for (const auto& [k, x] : v.obj())
      if (k != "columns" && k != "rows_omitted" && (s.arg.empty() || of_dev(s.arg, k))) keys.push_back(k);
    if (!s.arg.empty() && keys.empty()) fail_msg(fmt::format("telemetry: no planes of device '{}'", s.arg));
    if (g_json) {
      Json o = Json::object();
      // A reply cut short (DPDK drops what passes its 16 KB) may lack columns.
      if (const Json* c = v.find("columns")) o["columns"] = *c;
      for (const auto& k : keys) o[k] = *v.find(k);
      emit(o);
      return 0;
    }
    print_transposed(v, keys, s.nonzero);
    return 0;
  }
  if (w == "plane") {
    std::string arg = s.arg;
    if (!s.first.empty()) arg += ":" + s.first;
    if (arg.find(':') == std::string::npos) throw UsageError("stats plane DEV:PLANE (planes count from 0)");
    Json v = tel.command("/mrc/plane," + arg);
    if (g_json) return emit(v), 0;
    print_kv(v, "", s.nonzero);
    return 0;
  }
  if (w == "qps") {
    // One device's QPNs come 256 a page; the whole list only as far as the
    // reply's 16 KB holds ("omitted" counts the rest).
    const auto all_of = [&](const std::string& dev) {
      Json qpns = Json::array();
      for (uint64_t first = 0;;) {
        const Json page = tel.command(fmt::format("/mrc/qps,{},{}", dev, first));
        if (const Json* q = page.find("qpns"))
          for (const auto& x : q->arr()) qpns.push(x);
        const Json* next = page.find("next");
        if (!next || next->u64() <= first) return qpns;
        first = next->u64();
      }
    };
    Json v = Json::object();
    if (!s.arg.empty()) {
      v[s.arg] = all_of(s.arg);
    } else {
      v = tel.command("/mrc/qps");
      if (v.find("omitted")) {
        // A device whose list did not fit at all has no key: ask by name.
        Json full = Json::object();
        const Json devs = tel.command("/mrc/devices");
        if (const Json* names = devs.find("devices"))
          for (const auto& n : names->arr()) full[n.cell()] = all_of(n.cell());
        v = full;
      }
    }
    if (g_json) return emit(v), 0;
    for (const auto& [dev, q] : v.obj()) {
      std::string list;
      if (q.is_array())
        for (const auto& x : q.arr()) list += " " + x.cell();
      fmt::print("{}: {} QP(s){}{}\n", dev, q.is_array() ? q.arr().size() : 0, list.empty() ? "" : ":", list);
    }
    return 0;
  }
  if (w == "qp") {
    if (s.arg.empty()) throw UsageError("stats qp N|DEV:N");
    Json v = tel.command("/mrc/qp," + s.arg);
    if (g_json) return emit(v), 0;
    print_kv(v, "", s.nonzero);
    return 0;
  }
  if (w == "evs") {
    if (s.arg.empty()) throw UsageError("stats evs N|DEV:N [FIRST]");
    // All pages unless FIRST is given.
    size_t first = s.first.empty() ? 0 : size_t(need_num(s.first, "FIRST", 1u << 30));
    Json merged;
    std::vector<std::string> keys;
    for (int page = 0; page < 4096; ++page) {
      Json v = tel.command(fmt::format("/mrc/evs,{},{}", s.arg, first));
      if (merged.is_null()) {
        merged = Json::object();
        for (const auto& [k, x] : v.obj())
          if (k != "next" && !(k[0] >= '0' && k[0] <= '9')) merged[k] = x;
      }
      for (const auto& [k, x] : v.obj())
        if (k[0] >= '0' && k[0] <= '9') {
          merged[k] = x;
          keys.push_back(k);
        }
      const Json* next = v.find("next");
      if (!s.first.empty() || !next) break;
      first = size_t(next->u64());
    }
    if (g_json) return emit(merged), 0;
    const Json* cols = merged.find("columns");
    const Json* states = merged.find("states");
    fmt::print("{} QP {}: {} EVs\n", merged.find("device") ? merged.find("device")->cell() : "?",
               merged.find("qpn") ? merged.find("qpn")->cell() : s.arg,
               merged.find("count") ? merged.find("count")->cell() : "?");
    if (!cols) return 0;
    std::vector<std::string> head{"index"};
    size_t state_col = SIZE_MAX;
    for (size_t c = 0; c < cols->arr().size(); ++c) {
      head.push_back(cols->arr()[c].cell());
      if (cols->arr()[c].cell() == "state") state_col = c;
    }
    std::vector<std::vector<std::string>> rows;
    for (const auto& k : keys) {
      const Json& r = *merged.find(k);
      std::vector<std::string> row{k};
      for (size_t c = 0; c < r.arr().size(); ++c) {
        const Json& x = r.arr()[c];
        if (c == state_col && states && x.u64() < states->arr().size())
          row.push_back(states->arr()[x.u64()].cell());
        else
          row.push_back(x.cell());
      }
      rows.push_back(row);
    }
    print_table(head, rows);
    return 0;
  }
  if (w == "counters") {
    Json v = tel.command(s.arg.empty() ? "/mrc/counters" : "/mrc/counters," + s.arg);
    if (g_json) return emit(v), 0;
    print_kv(v, "", s.nonzero);
    return 0;
  }
  if (w == "host") {
    Json v = tel.command("/mrc/host", true);
    // /mrc/host answers only where mrc-nic serves host programs.
    if (v.is_null())
      fail_msg("telemetry: this mrc-nic serves no host programs (it runs --workload, or --host false): no /mrc/host");
    if (g_json) return emit(v), 0;
    print_kv(v, "", s.nonzero);
    return 0;
  }
  throw UsageError(fmt::format("stats: unknown view '{}'", w));
}

}  // namespace

// ---------------------------------------------------------------- main

int main(int argc, char** argv) {
  CLI::App app{"mrcctl: configure and watch MRC devices through the OCP controller API (mrc_ctl.h)"};
  app.fallthrough();
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "help for every command");
  app.add_flag("-j,--json", g_json, "print JSON instead of tables");
  app.set_config("--config", "", "read options from FILE (CLI11 TOML/INI; sections name commands, e.g. [ev.add])")
      ->check(mrc::app::config_file());
  // A misspelt key or section ([ev.add] min-activ = 3) was ignored and the
  // command ran without it.
  app.allow_config_extras(CLI::config_extras_mode::error);
  TelemetryOpts tel;
  app.add_option("--prefix", tel.prefix, "mrc-nic's EAL --file-prefix, for telemetry")->capture_default_str();
  app.add_option("--telemetry-socket", tel.socket, "telemetry socket path (default: from --prefix)");
  app.footer(
      "EV lists: VALUE[-VALUE][@PORT] joined by commas, e.g. 49152-49167@1,49168@2 (decimal or 0x hex).\n"
      "Exit status: 0 success, 1 failure, 2 usage error.");

  std::string dev;
  uint64_t id = 0;

  // dev [show [DEV]]
  auto* dev_cmd = app.add_subcommand("dev", "devices and their controller attributes");
  dev_cmd->add_option("DEV", dev, "device (default: all)");
  auto* dev_show = dev_cmd->add_subcommand("show", "show one device or all");
  dev_show->add_option("DEV", dev, "device (default: all)");

  // port
  auto* port_cmd = app.add_subcommand("port", "port (plane) admin state")->require_subcommand(1);
  auto* port_show = port_cmd->add_subcommand("show", "admin state, link and address of each port");
  port_show->add_option("DEV", dev, "device")->required();
  uint64_t port_num = 0;
  std::string port_how;
  auto* port_set = port_cmd->add_subcommand("set", "enable or disable a port");
  port_set->add_option("DEV", dev, "device")->required();
  port_set->add_option("PORT", port_num, "port number (1-based)")->required()->check(not_negative());
  port_set->add_option("STATE", port_how, "up | down")->required()->check(CLI::IsMember({"up", "down"}));

  // fmt
  auto* fmt_cmd = app.add_subcommand("fmt", "EV format profiles")->require_subcommand(1);
  FmtAddOpts fmt_add_o;
  auto* fmt_add = fmt_cmd->add_subcommand("add", "configure an EV format profile");
  fmt_add->add_option("DEV", dev, "device")->required();
  fmt_add->add_option("ID", id, "profile id")->required()->check(not_negative());
  fmt_add->add_option("--mode", fmt_add_o.mode, "udp | stev")
      ->check(CLI::IsMember({"udp", "stev"}))
      ->capture_default_str();
  fmt_add->add_option("--fields", fmt_add_o.fields, "field widths in bits, e.g. 16 or 8,8")
      ->required()
      ->delimiter(',')
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  fmt_add->add_flag("--online", fmt_add_o.online, "bring it online");
  std::string verb;
  std::vector<CLI::App*> fmt_verbs;
  for (const char* v : {"show", "online", "offline", "del"}) {
    auto* s = fmt_cmd->add_subcommand(
        v, std::string(v) == "del" ? "return the profile to INIT" : std::string(v) + " an EV format profile");
    s->add_option("DEV", dev, "device")->required();
    s->add_option("ID", id, "profile id")->required()->check(not_negative());
    fmt_verbs.push_back(s);
  }

  // ev
  auto* ev_cmd = app.add_subcommand("ev", "EV profiles")->require_subcommand(1);
  EvAddOpts ev_add_o;
  auto* ev_add = ev_cmd->add_subcommand("add", "configure an explicit (exp) or generated (gen) EV profile");
  ev_add->add_option("DEV", dev, "device")->required();
  ev_add->add_option("ID", id, "profile id")->required()->check(not_negative());
  ev_add->add_option("--fmt", ev_add_o.fmt_id, "EV format profile id")->required()->check(not_negative());
  ev_add->add_option("--mode", ev_add_o.mode, "exp | gen")->required()->check(CLI::IsMember({"exp", "gen"}));
  ev_add->add_option("--count", ev_add_o.count, "EVs in the profile (default: listed or generated count)");
  ev_add->add_option("--evs", ev_add_o.evs, "explicit EVs: VALUE[-VALUE][@PORT],...; no @PORT deals ports round-robin")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  ev_add
      ->add_option("--field", ev_add_o.fields,
                   "generation rule WIDTH:INIT:MIN:MAX:MASK (WIDTH:INIT = fixed), once per field")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  ev_add->add_option("--min-active", ev_add_o.min_active, "floor on EVs not ASSUMED_BAD")->capture_default_str();
  ev_add->add_option("--events", ev_add_o.events, "states that raise events: good,bad | good | bad | none")
      ->capture_default_str();
  ev_add->add_flag("--online", ev_add_o.online, "bring it online");
  std::vector<CLI::App*> ev_verbs;
  for (const char* v : {"show", "online", "offline", "del"}) {
    auto* s = ev_cmd->add_subcommand(v, std::string(v) == "show"  ? "profile and its EV array (index, EV, port, state)"
                                        : std::string(v) == "del" ? "return the profile to INIT"
                                                                  : std::string(v) + " an EV profile");
    s->add_option("DEV", dev, "device")->required();
    s->add_option("ID", id, "profile id")->required()->check(not_negative());
    ev_verbs.push_back(s);
  }
  std::vector<std::string> ev_list;
  std::vector<CLI::App*> ev_ops;
  for (const char* v : {"deny", "restore", "state"}) {
    auto* s = ev_cmd->add_subcommand(v, std::string(v) == "deny"      ? "set EVs DENIED: no QP of the profile uses them"
                                        : std::string(v) == "restore" ? "set EVs GOOD again"
                                                                      : "query EV states");
    s->add_option("DEV", dev, "device")->required();
    s->add_option("ID", id, "profile id")->required()->check(not_negative());
    s->add_option("EV", ev_list, "EV[@PORT][,...] (no port: every port holding the value)")->required();
    ev_ops.push_back(s);
  }

  // cc
  auto* cc_cmd = app.add_subcommand("cc", "congestion control profiles")->require_subcommand(1);
  CcAddOpts cc_add_o;
  auto* cc_add = cc_cmd->add_subcommand("add", "configure a CC profile");
  cc_add->add_option("DEV", dev, "device")->required();
  cc_add->add_option("ID", id, "profile id")->required()->check(not_negative());
  cc_add->add_option("--algo", cc_add_o.algo, "algorithm (see 'mrcctl dev show')")->capture_default_str();
  cc_add->add_flag("--online", cc_add_o.online, "bring it online");
  cc_add_o.nscc.add(cc_add);
  NsccArgs cc_set_o;
  auto* cc_set = cc_cmd->add_subcommand(
      "set", "change parameters of a configured NSCC profile (online too, if the device allows)");
  cc_set->add_option("DEV", dev, "device")->required();
  cc_set->add_option("ID", id, "profile id")->required()->check(not_negative());
  cc_set_o.add(cc_set);
  std::vector<CLI::App*> cc_verbs;
  for (const char* v : {"show", "online", "offline", "del"}) {
    auto* s = cc_cmd->add_subcommand(
        v, std::string(v) == "del" ? "return the profile to INIT" : std::string(v) + " a CC profile");
    s->add_option("DEV", dev, "device")->required();
    s->add_option("ID", id, "profile id")->required()->check(not_negative());
    cc_verbs.push_back(s);
  }

  // probe
  ProbeOpts probe_o;
  auto* probe = app.add_subcommand("probe", "measure paths: EV probes toward a peer, RTT per EV");
  probe->add_option("DEV", dev, "device")->required();
  probe->add_option("--dgid", probe_o.dgid, "peer address ADDR[@PORT],... (IPv4 or IPv6), or a local peer device name")
      ->required()
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  probe->add_option("--sgid", probe_o.sgid, "source address ADDR[@PORT],... (default: the port's own)")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  probe->add_option("--ev", probe_o.evs, "EVs to probe VALUE[-VALUE][@PORT],... (no port: every port)")
      ->required()
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  probe->add_option("--fmt", probe_o.fmt, "EV format: udp | stev")
      ->check(CLI::IsMember({"udp", "stev"}))
      ->capture_default_str();
  probe->add_option("--count", probe_o.count, "rounds")->check(CLI::Range(1u, 1000000u))->capture_default_str();
  // Up to an hour: 4000000000 slept 46 days between rounds.
  probe->add_option("--interval-ms", probe_o.interval_ms, "pause between rounds")
      ->check(CLI::Range(0u, 3600000u))
      ->capture_default_str();
  probe->add_option("--timeout-us", probe_o.timeout_us, "wait per round")
      ->check(CLI::Range(1u, 4000000u))
      ->capture_default_str();
  probe->add_option("--tc", probe_o.tc, "traffic class (DSCP)")->check(CLI::Range(0, 63))->capture_default_str();

  PortStatusOpts ps_o;
  auto* ps = app.add_subcommand("port-status", "tell a peer which of our ports are up (PORT_STATUS_UPDATE)");
  ps->add_option("DEV", dev, "device")->required();
  ps->add_option("--dgid", ps_o.dgid, "peer address ADDR[@PORT],... or a local peer device name")
      ->required()
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  ps->add_option("--sgid", ps_o.sgid, "source address ADDR[@PORT],...")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  ps->add_option("--status", ps_o.status, "port bitmap, bit n = port n (e.g. 0x6)")->required();
  ps->add_option("--port", ps_o.port, "local port(s) to send from (default: the first)")
      ->delimiter(',')
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  ps->add_option("--ev", ps_o.ev, "EV the request travels on")->capture_default_str();
  ps->add_option("--fmt", ps_o.fmt, "EV format: udp | stev")
      ->check(CLI::IsMember({"udp", "stev"}))
      ->capture_default_str();
  ps->add_option("--timeout-us", ps_o.timeout_us, "wait for answers")
      ->check(CLI::Range(1u, 4000000u))
      ->capture_default_str();
  ps->add_option("--tc", ps_o.tc, "traffic class (DSCP)")->check(CLI::Range(0, 63))->capture_default_str();

  double mon_seconds = 0;
  std::vector<uint64_t> mon_profiles;
  auto* mon = app.add_subcommand("monitor", "follow EV state events (time, profile, EV, port, state, drops)");
  mon->add_option("DEV", dev, "device")->required();
  // NaN and negatives passed for 0 (until interrupted), and inf or 1e300
  // overflowed the deadline: each followed events for ever.
  mon->add_option("--seconds", mon_seconds, "stop after S seconds (0: until interrupted)")
      ->check(finite_range(0, 1e6))
      ->capture_default_str();
  mon->add_option("--profile", mon_profiles, "only these EV profiles")
      ->check(not_negative())
      ->delimiter(',')
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);

  StatsOpts st;
  auto* stats = app.add_subcommand("stats", "mrc-nic counters over DPDK telemetry")->require_subcommand(1);
  const auto stats_view = [&](const char* n, const char* help, const char* arg, bool arg_required,
                              const char* arg2 = nullptr) {
    auto* s = stats->add_subcommand(n, help);
    if (arg) {
      auto* o = s->add_option(arg, st.arg, arg);
      if (arg_required) o->required();
    }
    if (arg2) s->add_option(arg2, st.first, arg2);
    s->add_flag("--nonzero", st.nonzero, "leave out zero counters");
    return s;
  };
  std::vector<CLI::App*> stats_views = {
      stats_view("devices", "devices: planes, lcores, QPs", nullptr, false),
      stats_view("planes", "per plane: link, faults, counters, EV states", "DEV", false),
      stats_view("plane", "one plane with its addresses (DEV:PLANE, planes from 0)", "DEV:PLANE", true),
      stats_view("qps", "QP numbers per device", "DEV", false),
      stats_view("qp", "one QP's state and counters", "QPN|DEV:QPN", true),
      stats_view("evs", "a QP's EVs (all pages unless FIRST)", "QPN|DEV:QPN", true, "FIRST"),
      stats_view("counters", "device, NIC and summed QP counters", "DEV", false),
      stats_view("host", "host service counters", nullptr, false),
      stats_view("raw", "any telemetry command, printed as JSON", "CMD", true),
  };

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  try {
    int rc = 0;
    if (dev_cmd->parsed()) {
      rc = cmd_dev_show(dev);
    } else if (port_show->parsed()) {
      rc = cmd_port_show(dev, tel);
    } else if (port_set->parsed()) {
      rc = cmd_port_set(dev, port_num, port_how);
    } else if (fmt_add->parsed()) {
      rc = cmd_fmt_add(dev, id, fmt_add_o);
    } else if (ev_add->parsed()) {
      rc = cmd_ev_add(dev, id, ev_add_o);
    } else if (cc_add->parsed()) {
      rc = cmd_cc_add(dev, id, cc_add_o);
    } else if (cc_set->parsed()) {
      rc = cmd_cc_set(dev, id, cc_set_o);
    } else if (probe->parsed()) {
      rc = cmd_probe(dev, probe_o);
    } else if (ps->parsed()) {
      rc = cmd_port_status(dev, ps_o);
    } else if (mon->parsed()) {
      rc = cmd_monitor(dev, mon_seconds, mon_profiles);
    } else {
      bool done = false;
      for (auto* s : fmt_verbs)
        if (s->parsed()) {
          rc = s->get_name() == "show" ? cmd_fmt_show(dev, id) : cmd_fmt_state(dev, id, s->get_name());
          done = true;
        }
      for (auto* s : ev_verbs)
        if (s->parsed()) {
          rc = s->get_name() == "show" ? cmd_ev_show(dev, id) : cmd_ev_state(dev, id, s->get_name());
          done = true;
        }
      for (auto* s : ev_ops)
        if (s->parsed()) {
          rc = cmd_ev_evop(dev, id, s->get_name(), ev_list);
          done = true;
        }
      for (auto* s : cc_verbs)
        if (s->parsed()) {
          rc = s->get_name() == "show" ? cmd_cc_show(dev, id) : cmd_cc_state(dev, id, s->get_name());
          done = true;
        }
      for (auto* s : stats_views)
        if (s->parsed()) {
          st.what = s->get_name();
          rc = cmd_stats(st, tel);
          done = true;
        }
      if (!done) {
        fmt::print(stderr, "{}", app.help());
        return 2;
      }
    }
    return rc;
  } catch (const UsageError& e) {
    fmt::print(stderr, "mrcctl: {}\nRun with --help for usage.\n", e.what());
    return 2;
  } catch (const Failure& e) {
    fmt::print(stderr, "mrcctl: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "mrcctl: {}\n", e.what());
    return 1;
  }
}
