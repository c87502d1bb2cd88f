/*
 * ctl_test: exercises the MRC controller API (mrc_ctl.h) of lib_mrc.so
 * between two devices in one process.
 *
 *   ctl_test DEV_A DEV_B [IPV4_A IPV4_B]
 *   ctl_test --expect-eperm DEV_A DEV_B [IPV4_A IPV4_B]
 *
 * DEV_A is the requester of the QP pair and the device the controller
 * watches; both devices get the same profiles. The plane addresses come from
 * ibv_query_gid (plane n-1 = port n); IPV4_A/IPV4_B, if given, must be the
 * plane 0 addresses. Checks:
 *   (a) version and controller attributes (query_device and _ex agree, the
 *       modes, algorithms, options and ports the device promises)
 *   (b) a 16-bit UDP format profile and a GEN EV profile over it whose EV
 *       array equals this file's own implementation of the documented
 *       expansion; an EXP profile filled with REPLACE_EV
 *   (c) an NSCC CC profile goes ONLINE and reads back
 *   (d) QPs on both devices attached to those profiles carry a 1 MiB WRITE
 *   (e) a denied EV reads DENIED, and writes still complete; with
 *       MRC_TELEMETRY_PREFIX set (mrc-nic's --file-prefix, or the path of
 *       its telemetry socket), mrc-nic's per-EV counters (/mrc/evs) show
 *       that the denied EV sends nothing while the other EVs carry the
 *       writes, and that it sends again once restored
 *   (g) EV probes on every port toward DEV_B's addresses get RTTs > 0
 *   (f) an EV event CQ reports ASSUMED_BAD for an EV of a port disabled
 *       while writes stream; the port is enabled again
 * and finally the profiles go back to INIT (refused with EBUSY while QPs
 * use them).
 *
 * With --expect-eperm (run without CAP_NET_ADMIN) the attributes must still
 * be readable and every mutating controller call must fail with EPERM.
 *
 * Each check prints "ok - <what>" or "not ok - <what>: <details>"; the exit
 * status is 0 only if every check passed. Every wait is bounded.
 *
 * Plain C11 (gnu11) against mrc.h, mrc_ctl.h and libibverbs' verbs.h only.
 */
#define _GNU_SOURCE

#include <mrc.h>
#include <mrc_ctl.h>
#include <infiniband/verbs.h>

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "tap.h"

/* Profile ids used by this test (separate name spaces per kind). */
#define FMT_ID		3
#define GEN_ID		4
#define EXP_ID		5
#define CC_ID		6

#define MAX_PLANES	16
#define TIMEOUT_MS	5000
#define BUF_LEN		(2u << 20)
#define BIG_LEN		(1u << 20)
#define SQ_DEPTH	64
#define RQ_DEPTH	64
#define STREAM_CHUNK	(64u << 10)
#define STREAM_WINDOW	16
#define EVENT_WAIT_MS	15000
#define DOWN_MIN_MS	500		/* traffic kept up with a port down */
#define PROBE_TIMEOUT_NS 500000000u

/* ------------------------------------------------------------ reporting */

static void __attribute__((format(printf, 1, 2))) note(const char *fmt, ...)
{
	va_list ap;

	printf("# ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

/* An MRC call returning 0 or -1/errno (verbs calls: an errno value). */
static int call_ok(int rc, const char *what)
{
	int e = errno;

	if (rc == 0) {
		report(1, what, "%s", "");
		return 0;
	}
	report(0, what, "returned %d, errno %d (%s)", rc, e, strerror(rc > 0 ? rc : e));
	return -1;
}

/* Quiet on success: only failures are reported. */
static int quiet_ok(int rc, const char *what)
{
	int e = errno;

	if (rc == 0)
		return 0;
	report(0, what, "returned %d, errno %d (%s)", rc, e, strerror(rc > 0 ? rc : e));
	return -1;
}

/* The call must fail with errno `want`. */
static void expect_errno(int rc, int want, const char *what)
{
	int e = errno;

	if (rc == 0)
		report(0, what, "succeeded, expected errno %d (%s)", want, strerror(want));
	else
		report(e == want, what, "errno %d (%s), expected %d (%s)", e, strerror(e), want,
		       strerror(want));
}


static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x2545F4914F6CDD1Dull + 7;
	size_t i;

	for (i = 0; i < n; i++) {
		x ^= x >> 12;
		x ^= x << 25;
		x ^= x >> 27;
		p[i] = (uint8_t)((x * 0x2545F4914F6CDD1Dull) >> 56);
	}
}

static const char *gid_text(const union ibv_gid *g, char *buf, size_t len)
{
	static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	if (memcmp(g->raw, v4mapped, 12) == 0)
		inet_ntop(AF_INET, &g->raw[12], buf, (socklen_t)len);
	else if (!inet_ntop(AF_INET6, g->raw, buf, (socklen_t)len))
		snprintf(buf, len, "?");
	return buf;
}

/* ------------------------------------------------------------ EV values */

/* A 16-bit UDP EV: the first two bytes, most significant first. */
static unsigned ev16(const mrc_ctl_ev_t v)
{
	return (unsigned)v[0] << 8 | v[1];
}

static void set_ev16(mrc_ctl_ev_t v, unsigned x)
{
	memset(v, 0, sizeof(mrc_ctl_ev_t));
	v[0] = (uint8_t)(x >> 8);
	v[1] = (uint8_t)x;
}

static int ev_equal(const struct mrc_ctl_ev *a, const struct mrc_ctl_ev *b)
{
	return a->port == b->port && memcmp(a->val, b->val, sizeof(mrc_ctl_ev_t)) == 0;
}

/*
 * The documented GEN expansion, written out independently:
 *  - EV number `index` is split into one generated value per masked field,
 *    the last field varying fastest: value = min_val + digit, where the
 *    digits form a mixed-radix number with radix (max_val - min_val + 1);
 *  - a field is init_val with its mask bits replaced by the generated value,
 *    whose most significant bit lands in the highest set bit of the mask,
 *    and so on downwards (the bits of init_val outside the mask remain);
 *  - field i occupies fmt_width[i] bits of the EV, right-aligned, the fields
 *    concatenated from the most significant bit of byte 0.
 */
static int popcount32(uint32_t x)
{
	int n = 0;

	for (; x; x &= x - 1)
		n++;
	return n;
}

static uint32_t spread_into_mask(uint32_t value, uint32_t mask)
{
	uint32_t out = 0;
	int left = popcount32(mask);	/* bits of value still to place */
	int bit;

	for (bit = 31; bit >= 0 && left > 0; bit--) {
		if (!(mask & (1u << bit)))
			continue;
		left--;
		if (value & (1u << left))
			out |= 1u << bit;
	}
	return out;
}

static void append_bits(mrc_ctl_ev_t out, unsigned *at, unsigned width, uint32_t v)
{
	unsigned k;

	for (k = 0; k < width; k++, (*at)++) {
		unsigned shift = width - 1 - k;
		int bit = shift < 32 ? (int)((v >> shift) & 1) : 0;

		if (bit && *at < 8 * sizeof(mrc_ctl_ev_t))
			out[*at / 8] |= (uint8_t)(0x80u >> (*at % 8));
	}
}

static void expected_gen_ev(const uint8_t *fmt_width, const struct mrc_ctl_ev_field *f, int nf,
			    uint64_t index, mrc_ctl_ev_t out)
{
	uint32_t gen[16];
	unsigned at = 0;
	int i;

	for (i = nf - 1; i >= 0; i--) {
		uint64_t radix;

		gen[i] = 0;
		if (!f[i].mask)
			continue;
		radix = (uint64_t)f[i].max_val - f[i].min_val + 1;
		gen[i] = (uint32_t)(f[i].min_val + index % radix);
		index /= radix;
	}
	memset(out, 0, sizeof(mrc_ctl_ev_t));
	for (i = 0; i < nf; i++) {
		uint32_t v = f[i].init_val;

		if (f[i].mask)
			v = (v & ~f[i].mask) | spread_into_mask(gen[i], f[i].mask);
		append_bits(out, &at, fmt_width[i], v);
	}
}

static uint64_t gen_count(const struct mrc_ctl_ev_field *f, int nf)
{
	uint64_t n = 1;
	int i;

	for (i = 0; i < nf; i++)
		if (f[i].mask)
			n *= (uint64_t)f[i].max_val - f[i].min_val + 1;
	return n;
}

/*
 * The profiles: a UDP format of 4 + 4 + 8 bits and three fields over it:
 *   0: fixed 0xC                               (the EV starts 0xC...)
 *   1: one generated bit into bit 1 of 0x0     -> 0x0 or 0x2
 *   2: 5 generated bits (3..14) into the holes of mask 0xB6, with init 0x41
 *      contributing bits 6 and 0
 * 2 x 12 = 24 EVs, 0xC0xx and 0xC2xx: UDP source ports >= 49152.
 */
static const uint8_t fmt_widths[3] = { 4, 4, 8 };
static const struct mrc_ctl_ev_field gen_fields[3] = {
	{ .width = 4, .init_val = 0xC, .min_val = 0, .max_val = 0, .mask = 0 },
	{ .width = 4, .init_val = 0x0, .min_val = 0, .max_val = 1, .mask = 0x2 },
	{ .width = 8, .init_val = 0x41, .min_val = 3, .max_val = 14, .mask = 0xB6 },
};
#define N_GEN_FIELDS	3
#define EXP_COUNT	4
#define EXP_BASE	0xC100u

static struct mrc_ctl_cc_nscc_cfg nscc_cfg(void)
{
	struct mrc_ctl_cc_nscc_cfg c;

	memset(&c, 0, sizeof(c));
	c.disable_qa = 0;
	c.adjust_bytes_threshold = 32768;
	c.adjust_period_threshold = 6000;
	c.base_rtt = 20000;
	c.eta = 0.15f;
	c.fi = 5.0f;
	c.fi_scale = 0.25f;
	c.gamma = 0.8f;
	c.max_md_jump = 0.5f;
	c.max_cwnd = 1u << 20;
	c.qa_gate = 3;
	c.qa_threshold = 60000;
	c.target_delay = 15000;
	return c;
}

/* ------------------------------------------------------------ devices */

struct side {
	const char *name;
	const char *ip;
	struct ibv_device *dev;
	struct ibv_context *ctx;
	struct mrc_context *mctx;
	struct mrc_ctl_device_attr attr;
	uint8_t ports[MAX_PLANES];
	int nports;
	union ibv_gid gid[MAX_PLANES];	/* plane n-1 = port n */
	int ngids;
	struct ibv_pd *pd;
	uint8_t *buf;
	struct ibv_mr *mr;
	struct mrc_ctl_ev_op_entry gen_evs[64];	/* the GEN profile's array */
	int ngen;
	int profiles_ok;
};

static struct side A, B;
static enum ibv_mtu path_mtu = IBV_MTU_1024;

/* Distinct non-empty, non-link-local GIDs in table order. */
static void find_plane_gids(struct side *s)
{
	struct ibv_port_attr pa;
	int i, k;

	s->ngids = 0;
	memset(&pa, 0, sizeof(pa));
	if (ibv_query_port(s->ctx, 1, &pa))
		return;
	for (i = 0; i < pa.gid_tbl_len && s->ngids < MAX_PLANES; i++) {
		union ibv_gid g;
		static const uint8_t zero[16];
		int dup = 0;

		if (ibv_query_gid(s->ctx, 1, i, &g))
			continue;
		if (!memcmp(g.raw, zero, 16) || (g.raw[0] == 0xfe && (g.raw[1] & 0xc0) == 0x80))
			continue;
		for (k = 0; k < s->ngids; k++)
			dup |= !memcmp(s->gid[k].raw, g.raw, 16);
		if (!dup)
			s->gid[s->ngids++] = g;
	}
}

static int open_side(struct side *s, struct ibv_device **list, int n, int expect_eperm)
{
	struct mrc_context_attr ca;
	struct mrc_ctl_device_attr plain;
	char what[200], g[64];
	int i, supported = 0, rc;

	for (i = 0; i < n; i++) {
		const char *nm = ibv_get_device_name(list[i]);

		if (nm && !strcmp(nm, s->name))
			s->dev = list[i];
	}
	snprintf(what, sizeof(what), "%s: listed by ibv_get_device_list", s->name);
	report(s->dev != NULL, what, "not among %d device(s)", n);
	if (!s->dev)
		return -1;
	s->ctx = ibv_open_device(s->dev);
	snprintf(what, sizeof(what), "%s: ibv_open_device", s->name);
	if (!s->ctx) {
		report(0, what, "errno %d (%s)", errno, strerror(errno));
		return -1;
	}
	memset(&ca, 0, sizeof(ca));
	ca.mrc_api_version_used = MRC_API_VER_USED;
	ca.mrc_vendor_api_version_used = MRC_VENDOR_API_VER_USED;
	s->mctx = mrc_create_context(s->ctx, &ca);
	snprintf(what, sizeof(what), "%s: mrc_create_context", s->name);
	if (!s->mctx) {
		report(0, what, "errno %d (%s)", errno, strerror(errno));
		return -1;
	}

	/* (a) attributes, readable by anyone */
	memset(&plain, 0, sizeof(plain));
	rc = mrc_ctl_query_device(s->ctx, &plain);
	snprintf(what, sizeof(what), "%s: mrc_ctl_query_device%s", s->name,
		 expect_eperm ? " (unprivileged)" : "");
	call_ok(rc, what);
	memset(&s->attr, 0, sizeof(s->attr));
	rc = mrc_ctl_query_device_ex(s->ctx, s->mctx, &s->attr, &supported);
	snprintf(what, sizeof(what), "%s: mrc_ctl_query_device_ex%s", s->name,
		 expect_eperm ? " (unprivileged)" : "");
	if (call_ok(rc, what))
		return -1;
	snprintf(what, sizeof(what), "%s: controller API supported", s->name);
	report(supported != 0, what, "supported = %d", supported);
	snprintf(what, sizeof(what), "%s: query_device and query_device_ex agree", s->name);
	report(plain.phy_port_mask == s->attr.phy_port_mask &&
	       plain.ev.ev_mode_mask == s->attr.ev.ev_mode_mask &&
	       plain.ev.ev_fmt_mode_mask == s->attr.ev.ev_fmt_mode_mask &&
	       plain.ev.ev_max_count_profile == s->attr.ev.ev_max_count_profile &&
	       plain.opt_attr == s->attr.opt_attr, what,
	       "port mask 0x%x/0x%x, ev modes 0x%x/0x%x, fmt modes 0x%x/0x%x, opt 0x%x/0x%x",
	       plain.phy_port_mask, s->attr.phy_port_mask, plain.ev.ev_mode_mask,
	       s->attr.ev.ev_mode_mask, plain.ev.ev_fmt_mode_mask, s->attr.ev.ev_fmt_mode_mask,
	       plain.opt_attr, s->attr.opt_attr);

	note("%s: ctl protocols 0x%x; ev: %u fmt profiles, %u profiles, %u EVs (%u free), %u per profile, "
	     "align %u, width %u, fmt modes 0x%x, modes 0x%x, op max %u; cc: %u profiles; ports 0x%x; opt 0x%x",
	     s->name, s->attr.mrc_ctl_protocol_version, s->attr.ev.ev_max_fmt_profiles,
	     s->attr.ev.ev_max_profiles, s->attr.ev.ev_max_count, s->attr.ev.ev_free_count,
	     s->attr.ev.ev_max_count_profile, s->attr.ev.ev_count_align, s->attr.ev.ev_max_width,
	     s->attr.ev.ev_fmt_mode_mask, s->attr.ev.ev_mode_mask, s->attr.ev.ev_op_max_entries,
	     s->attr.cc.cc_max_profiles, s->attr.phy_port_mask, s->attr.opt_attr);

	snprintf(what, sizeof(what), "%s: EV formats include UDP and STEV", s->name);
	report((s->attr.ev.ev_fmt_mode_mask & (MRC_CTL_EV_FMT_MODE_UDP | MRC_CTL_EV_FMT_MODE_STEV)) ==
	       (MRC_CTL_EV_FMT_MODE_UDP | MRC_CTL_EV_FMT_MODE_STEV), what, "mask 0x%x",
	       s->attr.ev.ev_fmt_mode_mask);
	snprintf(what, sizeof(what), "%s: EV modes include EXP and GEN", s->name);
	report((s->attr.ev.ev_mode_mask & (MRC_CTL_EV_MODE_EXP | MRC_CTL_EV_MODE_GEN)) ==
	       (MRC_CTL_EV_MODE_EXP | MRC_CTL_EV_MODE_GEN), what, "mask 0x%x", s->attr.ev.ev_mode_mask);
	snprintf(what, sizeof(what), "%s: EV limits fit this test (width >= 16, align 1, >= 24 per profile)",
		 s->name);
	report(s->attr.ev.ev_max_width >= 16 && s->attr.ev.ev_count_align == 1 &&
	       s->attr.ev.ev_max_count_profile >= 24 && s->attr.ev.ev_max_fmt_profiles >= 1 &&
	       s->attr.ev.ev_max_profiles >= 2, what,
	       "width %u, align %u, per profile %u, fmt profiles %u, profiles %u",
	       s->attr.ev.ev_max_width, s->attr.ev.ev_count_align, s->attr.ev.ev_max_count_profile,
	       s->attr.ev.ev_max_fmt_profiles, s->attr.ev.ev_max_profiles);
	{
		int have_nscc = 0;
		const char **p;

		for (p = s->attr.cc.algorithms; p && *p; p++) {
			note("%s: CC algorithm %s", s->name, *p);
			have_nscc |= !strcmp(*p, "uet-1.0-nscc");
		}
		snprintf(what, sizeof(what), "%s: CC algorithms include uet-1.0-nscc", s->name);
		report(have_nscc, what, "not listed");
	}
	snprintf(what, sizeof(what), "%s: options include EV events and EV probes", s->name);
	report((s->attr.opt_attr & (MRC_CTL_OPT_CAP_EV_EVENT | MRC_CTL_OPT_CAP_EP_OP_EV_PROBE)) ==
	       (MRC_CTL_OPT_CAP_EV_EVENT | MRC_CTL_OPT_CAP_EP_OP_EV_PROBE), what, "opt_attr 0x%x",
	       s->attr.opt_attr);

	s->nports = 0;
	for (i = 1; i < 32 && s->nports < MAX_PLANES; i++)
		if (s->attr.phy_port_mask & (1u << i))
			s->ports[s->nports++] = (uint8_t)i;
	find_plane_gids(s);
	snprintf(what, sizeof(what), "%s: phy_port_mask is ports 1..P and the GID table has P plane addresses",
		 s->name);
	report(s->nports >= 1 && !(s->attr.phy_port_mask & 1) &&
	       s->attr.phy_port_mask == (((1u << s->nports) - 1) << 1) && s->ngids == s->nports, what,
	       "mask 0x%x, %d port(s), %d address(es)", s->attr.phy_port_mask, s->nports, s->ngids);
	for (i = 0; i < s->ngids; i++)
		note("%s: port %d address %s", s->name, i + 1, gid_text(&s->gid[i], g, sizeof(g)));
	if (s->ip && s->ngids) {
		union ibv_gid want;

		memset(&want, 0, sizeof(want));
		want.raw[10] = 0xff;
		want.raw[11] = 0xff;
		inet_pton(AF_INET, s->ip, &want.raw[12]);
		snprintf(what, sizeof(what), "%s: port 1 address is %s", s->name, s->ip);
		report(!memcmp(want.raw, s->gid[0].raw, 16), what, "got %s",
		       gid_text(&s->gid[0], g, sizeof(g)));
	}
	return s->nports >= 1 ? 0 : -1;
}

/* ------------------------------------------------------------ profile helpers */

static int fmt_state(struct side *s)
{
	struct mrc_ctl_ev_fmt_profile_attr a;

	memset(&a, 0, sizeof(a));
	if (mrc_ctl_query_ev_fmt_profile(s->mctx, FMT_ID, &a, MRC_CTL_EV_FMT_PROFILE_CUR_STATE))
		return -1;
	return (int)a.cur_profile_state;
}

static int ev_state(struct side *s, uint64_t id)
{
	struct mrc_ctl_ev_profile_attr a;

	memset(&a, 0, sizeof(a));
	if (mrc_ctl_query_ev_profile(s->mctx, id, &a, MRC_CTL_EV_PROFILE_CUR_STATE))
		return -1;
	return (int)a.cur_profile_state;
}

static int cc_state(struct side *s)
{
	struct mrc_ctl_cc_profile_attr a;

	memset(&a, 0, sizeof(a));
	if (mrc_ctl_query_cc_profile(s->mctx, CC_ID, &a, MRC_CTL_CC_PROFILE_CUR_STATE))
		return -1;
	return (int)a.cur_profile_state;
}

static int set_fmt_state(struct side *s, enum mrc_ctl_profile_state st)
{
	struct mrc_ctl_ev_fmt_profile_attr a;

	memset(&a, 0, sizeof(a));
	a.profile_state = st;
	return mrc_ctl_modify_ev_fmt_profile(s->mctx, FMT_ID, &a, MRC_CTL_EV_FMT_PROFILE_STATE);
}

static int set_ev_state(struct side *s, uint64_t id, enum mrc_ctl_profile_state st)
{
	struct mrc_ctl_ev_profile_attr a;

	memset(&a, 0, sizeof(a));
	a.profile_state = st;
	return mrc_ctl_modify_ev_profile(s->mctx, id, &a, MRC_CTL_EV_PROFILE_STATE);
}

static int set_cc_state(struct side *s, enum mrc_ctl_profile_state st)
{
	struct mrc_ctl_cc_profile_attr a;

	memset(&a, 0, sizeof(a));
	a.profile_state = st;
	return mrc_ctl_modify_cc_profile(s->mctx, CC_ID, &a, MRC_CTL_CC_PROFILE_STATE);
}

/* Leftovers of an earlier run go back to INIT (EV profiles first). */
static void reset_profiles(struct side *s)
{
	uint64_t ids[2] = { GEN_ID, EXP_ID };
	int i;

	for (i = 0; i < 2; i++)
		if (ev_state(s, ids[i]) == MRC_CTL_PROFILE_ONLINE || ev_state(s, ids[i]) == MRC_CTL_PROFILE_OFFLINE) {
			note("%s: EV profile %" PRIu64 " left over (state %d); resetting", s->name, ids[i],
			     ev_state(s, ids[i]));
			if (ev_state(s, ids[i]) == MRC_CTL_PROFILE_ONLINE)
				set_ev_state(s, ids[i], MRC_CTL_PROFILE_OFFLINE);
			set_ev_state(s, ids[i], MRC_CTL_PROFILE_INIT);
		}
	if (cc_state(s) > MRC_CTL_PROFILE_INIT) {
		note("%s: CC profile left over; resetting", s->name);
		if (cc_state(s) == MRC_CTL_PROFILE_ONLINE)
			set_cc_state(s, MRC_CTL_PROFILE_OFFLINE);
		set_cc_state(s, MRC_CTL_PROFILE_INIT);
	}
	if (fmt_state(s) > MRC_CTL_PROFILE_INIT) {
		note("%s: EV format profile left over; resetting", s->name);
		if (fmt_state(s) == MRC_CTL_PROFILE_ONLINE)
			set_fmt_state(s, MRC_CTL_PROFILE_OFFLINE);
		set_fmt_state(s, MRC_CTL_PROFILE_INIT);
	}
}

static void check_state(int got, int want, const char *what)
{
	report(got == want, what, "state %d, expected %d", got, want);
}

/* QUERY_EV_ARRAY into e[max]; returns the entry count or -1. */
static int query_array(struct side *s, uint64_t id, struct mrc_ctl_ev_op_entry *e, int max,
		       const char *what)
{
	struct mrc_ctl_ev_profile_attr a;

	memset(&a, 0, sizeof(a));
	memset(e, 0, sizeof(*e) * (size_t)max);
	a.ev_op.op = MRC_CTL_EV_OP_QUERY_EV_ARRAY;
	a.ev_op.entries = e;
	a.ev_op.entry_count = max;
	if (quiet_ok(mrc_ctl_query_ev_profile(s->mctx, id, &a, MRC_CTL_EV_PROFILE_EV_OP), what))
		return -1;
	return a.ev_op.entry_count;
}

/* One EV's state through QUERY_EV_STATE, or -1. */
static int query_one_state(struct side *s, uint64_t id, const struct mrc_ctl_ev *ev)
{
	struct mrc_ctl_ev_profile_attr a;
	struct mrc_ctl_ev_op_entry e;

	memset(&a, 0, sizeof(a));
	memset(&e, 0, sizeof(e));
	e.ev = *ev;
	a.ev_op.op = MRC_CTL_EV_OP_QUERY_EV_STATE;
	a.ev_op.entries = &e;
	a.ev_op.entry_count = 1;
	if (mrc_ctl_query_ev_profile(s->mctx, id, &a, MRC_CTL_EV_PROFILE_EV_OP))
		return -1;
	return (int)e.state;
}

static int modify_one_state(struct side *s, uint64_t id, const struct mrc_ctl_ev *ev,
			    enum mrc_ctl_ev_state st)
{
	struct mrc_ctl_ev_profile_attr a;
	struct mrc_ctl_ev_op_entry e;

	memset(&a, 0, sizeof(a));
	memset(&e, 0, sizeof(e));
	e.ev = *ev;
	e.state = st;
	a.ev_op.op = MRC_CTL_EV_OP_MODIFY_EV_STATE;
	a.ev_op.entries = &e;
	a.ev_op.entry_count = 1;
	return mrc_ctl_modify_ev_profile(s->mctx, id, &a, MRC_CTL_EV_PROFILE_EV_OP);
}

/* ------------------------------------------------------------ (b) format and GEN profile */

static int setup_fmt(struct side *s)
{
	struct mrc_ctl_ev_fmt_profile_attr a;
	struct mrc_ctl_ev_fmt_field f[3], q[3];
	char what[200];
	int i, ok;

	memset(&a, 0, sizeof(a));
	for (i = 0; i < 3; i++)
		f[i].width = fmt_widths[i];
	a.profile_state = MRC_CTL_PROFILE_OFFLINE;
	a.ev_fmt_mode = MRC_CTL_EV_FMT_MODE_UDP;
	a.ev_fmt_op.op = MRC_CTL_EV_FMT_OP_MODIFY_FIELDS;
	a.ev_fmt_op.fmt_fields = f;
	a.ev_fmt_op.fmt_field_count = 3;
	snprintf(what, sizeof(what), "%s: UDP format profile (4+4+8 bits) INIT -> OFFLINE", s->name);
	if (call_ok(mrc_ctl_modify_ev_fmt_profile(s->mctx, FMT_ID, &a,
						  MRC_CTL_EV_FMT_PROFILE_STATE | MRC_CTL_EV_FMT_PROFILE_MODE |
						  MRC_CTL_EV_FMT_PROFILE_OP), what))
		return -1;

	/* A one-entry array is too short: E2BIG and the length needed. */
	memset(&a, 0, sizeof(a));
	memset(q, 0, sizeof(q));
	a.ev_fmt_op.op = MRC_CTL_EV_FMT_OP_QUERY_FIELDS;
	a.ev_fmt_op.fmt_fields = q;
	a.ev_fmt_op.fmt_field_count = 1;
	snprintf(what, sizeof(what), "%s: format QUERY_FIELDS into 1 entry fails with E2BIG, count 3", s->name);
	{
		int rc = mrc_ctl_query_ev_fmt_profile(s->mctx, FMT_ID, &a, MRC_CTL_EV_FMT_PROFILE_OP);
		int e = errno;

		report(rc == -1 && e == E2BIG && a.ev_fmt_op.fmt_field_count == 3, what,
		       "rc %d, errno %d (%s), count %d", rc, e, strerror(e), a.ev_fmt_op.fmt_field_count);
	}

	snprintf(what, sizeof(what), "%s: format profile OFFLINE -> ONLINE", s->name);
	if (call_ok(set_fmt_state(s, MRC_CTL_PROFILE_ONLINE), what))
		return -1;
	memset(&a, 0, sizeof(a));
	memset(q, 0, sizeof(q));
	a.ev_fmt_op.op = MRC_CTL_EV_FMT_OP_QUERY_FIELDS;
	a.ev_fmt_op.fmt_fields = q;
	a.ev_fmt_op.fmt_field_count = 3;
	snprintf(what, sizeof(what), "%s: format profile query", s->name);
	if (call_ok(mrc_ctl_query_ev_fmt_profile(s->mctx, FMT_ID, &a,
						 MRC_CTL_EV_FMT_PROFILE_CUR_STATE | MRC_CTL_EV_FMT_PROFILE_MODE |
						 MRC_CTL_EV_FMT_PROFILE_OP), what))
		return -1;
	ok = a.cur_profile_state == MRC_CTL_PROFILE_ONLINE && a.ev_fmt_mode == MRC_CTL_EV_FMT_MODE_UDP &&
	     a.ev_fmt_op.fmt_field_count == 3;
	for (i = 0; i < 3 && ok; i++)
		ok = q[i].width == fmt_widths[i];
	snprintf(what, sizeof(what), "%s: format profile reads back ONLINE, UDP, 4/4/8", s->name);
	report(ok, what, "state %d, mode %d, %d fields (%u/%u/%u)", a.cur_profile_state, a.ev_fmt_mode,
	       a.ev_fmt_op.fmt_field_count, q[0].width, q[1].width, q[2].width);
	return 0;
}

static int setup_gen(struct side *s)
{
	struct mrc_ctl_ev_profile_attr a;
	struct mrc_ctl_ev_field f[N_GEN_FIELDS], q[8];
	struct mrc_ctl_ev_op_entry short_arr[4];
	const uint32_t count = (uint32_t)gen_count(gen_fields, N_GEN_FIELDS);
	char what[200];
	int i, n, ok, bad;

	memcpy(f, gen_fields, sizeof(f));
	memset(&a, 0, sizeof(a));
	a.profile_state = MRC_CTL_PROFILE_OFFLINE;
	a.ev_mode = MRC_CTL_EV_MODE_GEN;
	a.ev_fmt_profile_id = FMT_ID;
	a.ev_count = count;
	a.ev_min_active = 2;
	a.ev_event_mask = MRC_CTL_EV_GOOD | MRC_CTL_EV_ASSUMED_BAD;
	a.ev_fields_op.op = MRC_CTL_EV_FIELDS_OP_MODIFY_FIELDS;
	a.ev_fields_op.fields = f;
	a.ev_fields_op.field_count = N_GEN_FIELDS;
	snprintf(what, sizeof(what), "%s: GEN EV profile (%u EVs) INIT -> OFFLINE", s->name, count);
	if (call_ok(mrc_ctl_modify_ev_profile(s->mctx, GEN_ID, &a,
					      MRC_CTL_EV_PROFILE_STATE | MRC_CTL_EV_PROFILE_MODE |
					      MRC_CTL_EV_PROFILE_FMT_ID | MRC_CTL_EV_PROFILE_COUNT |
					      MRC_CTL_EV_PROFILE_MIN_ACTIVE | MRC_CTL_EV_PROFILE_EVENT_MASK |
					      MRC_CTL_EV_PROFILE_EV_FIELDS_OP), what))
		return -1;

	/* Both operations at once are refused. */
	memset(&a, 0, sizeof(a));
	a.ev_op.op = MRC_CTL_EV_OP_QUERY_EV_ARRAY;
	a.ev_op.entries = short_arr;
	a.ev_op.entry_count = 4;
	a.ev_fields_op.op = MRC_CTL_EV_FIELDS_OP_QUERY_FIELDS;
	a.ev_fields_op.fields = q;
	a.ev_fields_op.field_count = 8;
	snprintf(what, sizeof(what), "%s: EV_OP together with EV_FIELDS_OP is EINVAL", s->name);
	expect_errno(mrc_ctl_query_ev_profile(s->mctx, GEN_ID, &a,
					      MRC_CTL_EV_PROFILE_EV_OP | MRC_CTL_EV_PROFILE_EV_FIELDS_OP),
		     EINVAL, what);

	snprintf(what, sizeof(what), "%s: GEN EV profile OFFLINE -> ONLINE", s->name);
	if (call_ok(set_ev_state(s, GEN_ID, MRC_CTL_PROFILE_ONLINE), what))
		return -1;

	memset(&a, 0, sizeof(a));
	snprintf(what, sizeof(what), "%s: GEN EV profile query", s->name);
	if (call_ok(mrc_ctl_query_ev_profile(s->mctx, GEN_ID, &a,
					     MRC_CTL_EV_PROFILE_CUR_STATE | MRC_CTL_EV_PROFILE_MODE |
					     MRC_CTL_EV_PROFILE_FMT_ID | MRC_CTL_EV_PROFILE_COUNT |
					     MRC_CTL_EV_PROFILE_MIN_ACTIVE | MRC_CTL_EV_PROFILE_EVENT_MASK),
		    what))
		return -1;
	snprintf(what, sizeof(what), "%s: GEN profile reads back ONLINE, GEN, format %d, %u EVs, min 2, events GOOD|BAD",
		 s->name, FMT_ID, count);
	report(a.cur_profile_state == MRC_CTL_PROFILE_ONLINE && a.ev_mode == MRC_CTL_EV_MODE_GEN &&
	       a.ev_fmt_profile_id == FMT_ID && a.ev_count == count && a.ev_min_active == 2 &&
	       a.ev_event_mask == (MRC_CTL_EV_GOOD | MRC_CTL_EV_ASSUMED_BAD), what,
	       "state %d, mode %d, fmt %" PRIu64 ", count %u, min %u, mask 0x%x", a.cur_profile_state,
	       a.ev_mode, a.ev_fmt_profile_id, a.ev_count, a.ev_min_active, a.ev_event_mask);

	memset(&a, 0, sizeof(a));
	memset(q, 0, sizeof(q));
	a.ev_fields_op.op = MRC_CTL_EV_FIELDS_OP_QUERY_FIELDS;
	a.ev_fields_op.fields = q;
	a.ev_fields_op.field_count = 8;
	snprintf(what, sizeof(what), "%s: GEN profile fields read back", s->name);
	if (!quiet_ok(mrc_ctl_query_ev_profile(s->mctx, GEN_ID, &a, MRC_CTL_EV_PROFILE_EV_FIELDS_OP), what)) {
		ok = a.ev_fields_op.field_count == N_GEN_FIELDS;
		for (i = 0; i < N_GEN_FIELDS && ok; i++)
			ok = !memcmp(&q[i], &gen_fields[i], sizeof(q[i]));
		report(ok, what, "%d fields; first: %u/0x%x/%u/%u/0x%x", a.ev_fields_op.field_count,
		       q[0].width, q[0].init_val, q[0].min_val, q[0].max_val, q[0].mask);
	}

	/* Too short an array: E2BIG with the length needed. */
	memset(&a, 0, sizeof(a));
	a.ev_op.op = MRC_CTL_EV_OP_QUERY_EV_ARRAY;
	a.ev_op.entries = short_arr;
	a.ev_op.entry_count = 4;
	snprintf(what, sizeof(what), "%s: QUERY_EV_ARRAY into 4 entries fails with E2BIG, count %u", s->name,
		 count);
	{
		int rc = mrc_ctl_query_ev_profile(s->mctx, GEN_ID, &a, MRC_CTL_EV_PROFILE_EV_OP);
		int e = errno;

		report(rc == -1 && e == E2BIG && a.ev_op.entry_count == (int)count, what,
		       "rc %d, errno %d (%s), count %d", rc, e, strerror(e), a.ev_op.entry_count);
	}

	n = query_array(s, GEN_ID, s->gen_evs, 64, "QUERY_EV_ARRAY of the GEN profile");
	if (n < 0)
		return -1;
	s->ngen = n;
	snprintf(what, sizeof(what), "%s: GEN array has %u entries", s->name, count);
	report(n == (int)count, what, "%d entries", n);
	bad = -1;
	for (i = 0; i < n && i < (int)count; i++) {
		struct mrc_ctl_ev want;

		memset(&want, 0, sizeof(want));
		expected_gen_ev(fmt_widths, gen_fields, N_GEN_FIELDS, (uint64_t)i, want.val);
		want.port = s->ports[i % s->nports];
		if (!ev_equal(&want, &s->gen_evs[i].ev)) {
			bad = i;
			note("%s: EV[%d] is 0x%04x@%u, expected 0x%04x@%u", s->name, i,
			     ev16(s->gen_evs[i].ev.val), s->gen_evs[i].ev.port, ev16(want.val), want.port);
			break;
		}
	}
	snprintf(what, sizeof(what), "%s: GEN EV array equals the documented expansion, ports dealt round-robin",
		 s->name);
	report(bad < 0 && n == (int)count, what, "first difference at index %d", bad);
	for (i = 0; i < n && i < 6; i++)
		note("%s: EV[%d] = %u (0x%04x) port %u state 0x%x", s->name, i, ev16(s->gen_evs[i].ev.val),
		     ev16(s->gen_evs[i].ev.val), s->gen_evs[i].ev.port, s->gen_evs[i].state);
	bad = -1;
	for (i = 0; i < n; i++)
		if (s->gen_evs[i].state != MRC_CTL_EV_GOOD) {
			bad = i;
			break;
		}
	snprintf(what, sizeof(what), "%s: every EV of the fresh ONLINE profile is GOOD", s->name);
	report(bad < 0, what, "EV[%d] state 0x%x", bad, bad < 0 ? 0 : s->gen_evs[bad].state);
	return n == (int)count ? 0 : -1;
}

/* An explicit profile: UNPOPULATED until replaced, ONLINE only when full. */
static void test_exp(struct side *s)
{
	struct mrc_ctl_ev_profile_attr a;
	struct mrc_ctl_ev_op_entry e[EXP_COUNT], got[EXP_COUNT + 4];
	char what[200];
	int i, n, ok;

	memset(&a, 0, sizeof(a));
	a.profile_state = MRC_CTL_PROFILE_OFFLINE;
	a.ev_mode = MRC_CTL_EV_MODE_EXP;
	a.ev_fmt_profile_id = FMT_ID;
	a.ev_count = EXP_COUNT;
	a.ev_min_active = 1;
	a.ev_event_mask = MRC_CTL_EV_ASSUMED_BAD;
	snprintf(what, sizeof(what), "%s: EXP EV profile (%d EVs) INIT -> OFFLINE", s->name, EXP_COUNT);
	if (call_ok(mrc_ctl_modify_ev_profile(s->mctx, EXP_ID, &a,
					      MRC_CTL_EV_PROFILE_STATE | MRC_CTL_EV_PROFILE_MODE |
					      MRC_CTL_EV_PROFILE_FMT_ID | MRC_CTL_EV_PROFILE_COUNT |
					      MRC_CTL_EV_PROFILE_MIN_ACTIVE | MRC_CTL_EV_PROFILE_EVENT_MASK),
		    what))
		return;
	n = query_array(s, EXP_ID, got, EXP_COUNT + 4, "QUERY_EV_ARRAY of the fresh EXP profile");
	ok = n == EXP_COUNT;
	for (i = 0; i < n && ok; i++) {
		struct mrc_ctl_ev unpop = MRC_CTL_EV_UNPOPULATED;

		ok = ev_equal(&got[i].ev, &unpop);
	}
	snprintf(what, sizeof(what), "%s: a fresh EXP profile holds %d UNPOPULATED entries", s->name, EXP_COUNT);
	report(ok, what, "%d entries, EV[0] 0x%04x@%u", n, n > 0 ? ev16(got[0].ev.val) : 0,
	       n > 0 ? got[0].ev.port : 0);

	snprintf(what, sizeof(what), "%s: EXP profile with unpopulated entries cannot go ONLINE", s->name);
	{
		int rc = set_ev_state(s, EXP_ID, MRC_CTL_PROFILE_ONLINE);

		report(rc != 0, what, "it went ONLINE");
		if (rc == 0)
			set_ev_state(s, EXP_ID, MRC_CTL_PROFILE_OFFLINE);
	}

	/* A QP cannot attach to a profile that is not ONLINE. */
	if (s == &A) {
		struct mrc_cq *cq = mrc_create_cq(s->mctx, 16, NULL, NULL, 0);
		struct mrc_qp_init_attr ia;
		struct mrc_qp *qp = NULL;

		memset(&ia, 0, sizeof(ia));
		ia.send_cq = cq;
		ia.recv_cq = cq;
		ia.cap.max_send_wr = 4;
		ia.cap.max_recv_wr = 4;
		ia.cap.max_send_sge = 1;
		ia.cap.max_recv_sge = 1;
		ia.pd = s->pd;
		ia.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE;
		if (cq)
			qp = mrc_create_qp(s->mctx, &ia);
		if (qp) {
			struct ibv_qp_attr va;
			struct mrc_qp_attr ma;

			memset(&va, 0, sizeof(va));
			memset(&ma, 0, sizeof(ma));
			va.qp_state = IBV_QPS_INIT;
			va.port_num = 1;
			va.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
			ma.profile.ev_profile_id = EXP_ID;
			report(mrc_modify_qp(qp, &va, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					     IBV_QP_ACCESS_FLAGS, &ma, MRC_QP_EV_PROFILE_ID) != 0,
			       "A: a QP cannot attach to an OFFLINE EV profile", "RESET->INIT succeeded");
			mrc_destroy_qp(qp);
		} else {
			report(0, "A: a QP cannot attach to an OFFLINE EV profile", "QP setup failed: %s",
			       strerror(errno));
		}
		if (cq)
			mrc_destroy_cq(cq);
	}

	memset(e, 0, sizeof(e));
	for (i = 0; i < EXP_COUNT; i++) {
		struct mrc_ctl_ev unpop = MRC_CTL_EV_UNPOPULATED;

		e[i].ev = unpop;
		set_ev16(e[i].ev_new.val, EXP_BASE + (unsigned)i);
		e[i].ev_new.port = s->ports[(i + 1) % s->nports];
		e[i].state = MRC_CTL_EV_GOOD;
	}
	memset(&a, 0, sizeof(a));
	a.ev_op.op = MRC_CTL_EV_OP_REPLACE_EV;
	a.ev_op.entries = e;
	a.ev_op.entry_count = EXP_COUNT;
	snprintf(what, sizeof(what), "%s: REPLACE_EV fills the %d unpopulated entries", s->name, EXP_COUNT);
	if (call_ok(mrc_ctl_modify_ev_profile(s->mctx, EXP_ID, &a, MRC_CTL_EV_PROFILE_EV_OP), what))
		return;
	snprintf(what, sizeof(what), "%s: full EXP profile OFFLINE -> ONLINE", s->name);
	call_ok(set_ev_state(s, EXP_ID, MRC_CTL_PROFILE_ONLINE), what);
	n = query_array(s, EXP_ID, got, EXP_COUNT + 4, "QUERY_EV_ARRAY of the EXP profile");
	ok = n == EXP_COUNT;
	for (i = 0; i < n && ok; i++)
		ok = ev_equal(&got[i].ev, &e[i].ev_new) && got[i].state == MRC_CTL_EV_GOOD;
	snprintf(what, sizeof(what), "%s: EXP array holds the replaced EVs, GOOD", s->name);
	report(ok, what, "%d entries; EV[0] 0x%04x@%u state 0x%x", n, n > 0 ? ev16(got[0].ev.val) : 0,
	       n > 0 ? got[0].ev.port : 0, n > 0 ? got[0].state : 0);

	if (s->attr.opt_attr & MRC_CTL_OPT_CAP_EV_PROFILE_MODIFY_ONLINE) {
		struct mrc_ctl_ev_op_entry r;

		memset(&r, 0, sizeof(r));
		r.ev = e[EXP_COUNT - 1].ev_new;
		set_ev16(r.ev_new.val, EXP_BASE + 0x80);
		r.ev_new.port = r.ev.port;
		r.state = MRC_CTL_EV_GOOD;
		memset(&a, 0, sizeof(a));
		a.ev_op.op = MRC_CTL_EV_OP_REPLACE_EV;
		a.ev_op.entries = &r;
		a.ev_op.entry_count = 1;
		snprintf(what, sizeof(what), "%s: REPLACE_EV on the ONLINE EXP profile", s->name);
		if (!call_ok(mrc_ctl_modify_ev_profile(s->mctx, EXP_ID, &a, MRC_CTL_EV_PROFILE_EV_OP), what)) {
			n = query_array(s, EXP_ID, got, EXP_COUNT + 4, "QUERY_EV_ARRAY after REPLACE_EV");
			snprintf(what, sizeof(what), "%s: the replaced EV shows in the array", s->name);
			report(n == EXP_COUNT && ev_equal(&got[EXP_COUNT - 1].ev, &r.ev_new), what,
			       "EV[%d] 0x%04x@%u", EXP_COUNT - 1, n == EXP_COUNT ? ev16(got[EXP_COUNT - 1].ev.val) : 0,
			       n == EXP_COUNT ? got[EXP_COUNT - 1].ev.port : 0);
		}
	}
	/* Unused: straight back to INIT. */
	snprintf(what, sizeof(what), "%s: unused EXP profile ONLINE -> OFFLINE -> INIT", s->name);
	report(set_ev_state(s, EXP_ID, MRC_CTL_PROFILE_OFFLINE) == 0 &&
	       set_ev_state(s, EXP_ID, MRC_CTL_PROFILE_INIT) == 0 && ev_state(s, EXP_ID) == MRC_CTL_PROFILE_INIT,
	       what, "errno %d (%s), state %d", errno, strerror(errno), ev_state(s, EXP_ID));
}

/* ------------------------------------------------------------ (c) CC profile */

static int setup_cc(struct side *s)
{
	struct mrc_ctl_cc_profile_attr a;
	struct mrc_ctl_cc_nscc_cfg cfg = nscc_cfg(), back;
	const struct mrc_ctl_cc_nscc_cfg *src;
	char what[200];

	memset(&a, 0, sizeof(a));
	a.profile_state = MRC_CTL_PROFILE_OFFLINE;
	a.algorithm = "uet-1.0-nscc";
	snprintf(what, sizeof(what), "%s: NSCC CC profile INIT -> OFFLINE", s->name);
	if (call_ok(mrc_ctl_modify_cc_profile(s->mctx, CC_ID, &a,
					      MRC_CTL_CC_PROFILE_STATE | MRC_CTL_CC_PROFILE_ALGORITHM), what))
		return -1;
	snprintf(what, sizeof(what), "%s: CC profile without a configuration cannot go ONLINE", s->name);
	{
		int rc = set_cc_state(s, MRC_CTL_PROFILE_ONLINE);

		report(rc != 0, what, "it went ONLINE");
		if (rc == 0)
			set_cc_state(s, MRC_CTL_PROFILE_OFFLINE);
	}
	/* Values NSCC cannot use are refused by the NIC itself, whatever the
	 * program (mrcctl checks them too). */
	for (int i = 0; i < 3; i++) {
		static const char *const bad_what[] = { "fi NaN", "fi_scale -1", "eta inf" };
		struct mrc_ctl_cc_nscc_cfg bad = nscc_cfg();

		if (i == 0)
			bad.fi = NAN;
		else if (i == 1)
			bad.fi_scale = -1;
		else
			bad.eta = INFINITY;
		memset(&a, 0, sizeof(a));
		a.cc_config = &bad;
		snprintf(what, sizeof(what), "%s: NSCC configuration with %s is refused", s->name, bad_what[i]);
		report(mrc_ctl_modify_cc_profile(s->mctx, CC_ID, &a, MRC_CTL_CC_PROFILE_CONFIG) != 0, what,
		       "it was taken");
	}
	memset(&a, 0, sizeof(a));
	a.profile_state = MRC_CTL_PROFILE_ONLINE;
	a.cc_config = &cfg;
	snprintf(what, sizeof(what), "%s: CC profile with its NSCC configuration OFFLINE -> ONLINE", s->name);
	if (call_ok(mrc_ctl_modify_cc_profile(s->mctx, CC_ID, &a,
					      MRC_CTL_CC_PROFILE_STATE | MRC_CTL_CC_PROFILE_CONFIG), what))
		return -1;

	/* The configuration is read into a buffer the caller lends (or, if
	 * the library points cc_config elsewhere, from there). */
	memset(&a, 0, sizeof(a));
	memset(&back, 0, sizeof(back));
	a.cc_config = &back;
	snprintf(what, sizeof(what), "%s: CC profile query", s->name);
	if (call_ok(mrc_ctl_query_cc_profile(s->mctx, CC_ID, &a,
					     MRC_CTL_CC_PROFILE_CUR_STATE | MRC_CTL_CC_PROFILE_ALGORITHM |
					     MRC_CTL_CC_PROFILE_CONFIG), what))
		return -1;
	src = a.cc_config ? (const struct mrc_ctl_cc_nscc_cfg *)a.cc_config : &back;
	snprintf(what, sizeof(what), "%s: CC profile reads back ONLINE, uet-1.0-nscc", s->name);
	report(a.cur_profile_state == MRC_CTL_PROFILE_ONLINE && a.algorithm &&
	       !strcmp(a.algorithm, "uet-1.0-nscc"), what, "state %d, algorithm %s", a.cur_profile_state,
	       a.algorithm ? a.algorithm : "(null)");
	snprintf(what, sizeof(what), "%s: NSCC configuration reads back", s->name);
	report(src->base_rtt == cfg.base_rtt && src->target_delay == cfg.target_delay &&
	       src->max_cwnd == cfg.max_cwnd && src->eta == cfg.eta && src->fi == cfg.fi &&
	       src->fi_scale == cfg.fi_scale && src->gamma == cfg.gamma &&
	       src->max_md_jump == cfg.max_md_jump && src->qa_gate == cfg.qa_gate &&
	       src->qa_threshold == cfg.qa_threshold && src->disable_qa == cfg.disable_qa &&
	       src->adjust_bytes_threshold == cfg.adjust_bytes_threshold &&
	       src->adjust_period_threshold == cfg.adjust_period_threshold, what,
	       "base_rtt %u (want %u), target_delay %u (want %u), max_cwnd %u (want %u), eta %g, gamma %g",
	       src->base_rtt, cfg.base_rtt, src->target_delay, cfg.target_delay, src->max_cwnd, cfg.max_cwnd,
	       (double)src->eta, (double)src->gamma);
	return 0;
}

/* ------------------------------------------------------------ the header's contract, edge by edge */

struct denier {
	struct mrc_context *mctx;
	const struct mrc_ctl_ev_op_entry *evs;
	int first, count, failed;
};

static void *deny_some(void *arg)
{
	struct denier *d = arg;
	struct side s;
	int i;

	memset(&s, 0, sizeof(s));
	s.mctx = d->mctx;
	for (i = d->first; i < d->first + d->count; i++)
		d->failed += modify_one_state(&s, GEN_ID, &d->evs[i].ev, MRC_CTL_EV_DENIED) != 0;
	return NULL;
}

/*
 * Each call's promise, where an earlier build broke it: profile 0 (the
 * device's own) cannot be made, GEN arrays cannot be replaced into,
 * formats reach OFFLINE with a mode alone, modify answers query operations,
 * event masks name only GOOD and ASSUMED_BAD, every CC profile needs CONFIG
 * for ONLINE (dcqcn's is NULL), port numbers are checked whatever the mask,
 * and two controllers denying EVs of one profile at once both land (each
 * call used to write the whole profile back: half the denials were lost).
 */
static void test_contract(struct side *s)
{
	struct mrc_ctl_ev_profile_attr ea;
	struct mrc_ctl_cc_profile_attr ca;
	struct mrc_ctl_ev_fmt_profile_attr fa;
	struct mrc_ctl_port_attr pa;
	struct mrc_ctl_ev_op_entry arr[64], rep;
	struct mrc_ctl_cc_nscc_cfg cfg = nscc_cfg();
	struct ibv_context *ctx2;
	struct mrc_context *mctx2 = NULL;
	struct mrc_context_attr cattr;
	struct denier d1, d2;
	pthread_t t1, t2;
	char what[200];
	int n, i, denied;

	memset(&ea, 0, sizeof(ea));
	ea.profile_state = MRC_CTL_PROFILE_OFFLINE;
	ea.ev_mode = MRC_CTL_EV_MODE_GEN;
	ea.ev_fmt_profile_id = FMT_ID;
	ea.ev_count = 4;
	ea.ev_fields_op.op = MRC_CTL_EV_FIELDS_OP_MODIFY_FIELDS;
	ea.ev_fields_op.fields = (struct mrc_ctl_ev_field *)gen_fields;
	ea.ev_fields_op.field_count = 3;
	snprintf(what, sizeof(what), "%s: EV profile 0 (the device's own) cannot be configured", s->name);
	expect_errno(mrc_ctl_modify_ev_profile(s->mctx, 0, &ea,
					       MRC_CTL_EV_PROFILE_STATE | MRC_CTL_EV_PROFILE_MODE |
					       MRC_CTL_EV_PROFILE_FMT_ID | MRC_CTL_EV_PROFILE_COUNT |
					       MRC_CTL_EV_PROFILE_EV_FIELDS_OP),
		     EINVAL, what);
	memset(&ca, 0, sizeof(ca));
	ca.profile_state = MRC_CTL_PROFILE_OFFLINE;
	ca.algorithm = "uet-1.0-nscc";
	ca.cc_config = &cfg;
	snprintf(what, sizeof(what), "%s: CC profile 0 cannot be configured", s->name);
	expect_errno(mrc_ctl_modify_cc_profile(s->mctx, 0, &ca, MRC_CTL_CC_PROFILE_STATE | MRC_CTL_CC_PROFILE_ALGORITHM |
								    MRC_CTL_CC_PROFILE_CONFIG),
		     EINVAL, what);

	n = query_array(s, GEN_ID, arr, 64, "GEN array");
	if (n < 16) {
		report(0, "contract: the GEN profile has 16 EVs to work with", "%d", n);
		return;
	}
	memset(&ea, 0, sizeof(ea));
	memset(&rep, 0, sizeof(rep));
	rep.ev = arr[0].ev;
	rep.ev_new = arr[0].ev;
	rep.ev_new.val[1] ^= 0x5A;
	rep.state = MRC_CTL_EV_GOOD;
	ea.ev_op.op = MRC_CTL_EV_OP_REPLACE_EV;
	ea.ev_op.entries = &rep;
	ea.ev_op.entry_count = 1;
	snprintf(what, sizeof(what), "%s: REPLACE_EV on a GEN profile is EINVAL", s->name);
	expect_errno(mrc_ctl_modify_ev_profile(s->mctx, GEN_ID, &ea, MRC_CTL_EV_PROFILE_EV_OP), EINVAL, what);

	memset(&ea, 0, sizeof(ea));
	memset(arr, 0, sizeof(arr));
	ea.ev_op.op = MRC_CTL_EV_OP_QUERY_EV_ARRAY;
	ea.ev_op.entries = arr;
	ea.ev_op.entry_count = 64;
	snprintf(what, sizeof(what), "%s: modify answers QUERY_EV_ARRAY on an ONLINE profile", s->name);
	if (!quiet_ok(mrc_ctl_modify_ev_profile(s->mctx, GEN_ID, &ea, MRC_CTL_EV_PROFILE_EV_OP), what))
		report(ea.ev_op.entry_count == n && ev_equal(&arr[0].ev, &rep.ev), what, "%d entries (want %d)",
		       ea.ev_op.entry_count, n);

	memset(&ea, 0, sizeof(ea));
	ea.ev_event_mask = MRC_CTL_EV_DENIED;
	snprintf(what, sizeof(what), "%s: an event mask naming DENIED is EINVAL", s->name);
	expect_errno(mrc_ctl_modify_ev_profile(s->mctx, EXP_ID + 10, &ea, MRC_CTL_EV_PROFILE_EVENT_MASK), EINVAL, what);

	memset(&fa, 0, sizeof(fa));
	fa.profile_state = MRC_CTL_PROFILE_OFFLINE;
	fa.ev_fmt_mode = MRC_CTL_EV_FMT_MODE_UDP;
	snprintf(what, sizeof(what), "%s: a format profile reaches OFFLINE with MODE alone", s->name);
	if (!call_ok(mrc_ctl_modify_ev_fmt_profile(s->mctx, FMT_ID + 10, &fa,
						   MRC_CTL_EV_FMT_PROFILE_STATE | MRC_CTL_EV_FMT_PROFILE_MODE),
		     what)) {
		fa.profile_state = MRC_CTL_PROFILE_ONLINE;
		snprintf(what, sizeof(what), "%s: ... and not ONLINE without its fields", s->name);
		report(mrc_ctl_modify_ev_fmt_profile(s->mctx, FMT_ID + 10, &fa, MRC_CTL_EV_FMT_PROFILE_STATE) != 0, what,
		       "it went ONLINE");
		fa.profile_state = MRC_CTL_PROFILE_INIT;
		mrc_ctl_modify_ev_fmt_profile(s->mctx, FMT_ID + 10, &fa, MRC_CTL_EV_FMT_PROFILE_STATE);
	}

	memset(&ca, 0, sizeof(ca));
	ca.profile_state = MRC_CTL_PROFILE_OFFLINE;
	ca.algorithm = "dcqcn";
	snprintf(what, sizeof(what), "%s: a dcqcn CC profile reaches OFFLINE", s->name);
	if (!call_ok(mrc_ctl_modify_cc_profile(s->mctx, CC_ID + 10, &ca,
					       MRC_CTL_CC_PROFILE_STATE | MRC_CTL_CC_PROFILE_ALGORITHM),
		     what)) {
		ca.profile_state = MRC_CTL_PROFILE_ONLINE;
		snprintf(what, sizeof(what), "%s: ... and not ONLINE without CONFIG", s->name);
		report(mrc_ctl_modify_cc_profile(s->mctx, CC_ID + 10, &ca, MRC_CTL_CC_PROFILE_STATE) != 0, what,
		       "it went ONLINE");
		snprintf(what, sizeof(what), "%s: ... but ONLINE with CONFIG and no parameter struct", s->name);
		call_ok(mrc_ctl_modify_cc_profile(s->mctx, CC_ID + 10, &ca,
						  MRC_CTL_CC_PROFILE_STATE | MRC_CTL_CC_PROFILE_CONFIG),
			what);
		ca.profile_state = MRC_CTL_PROFILE_OFFLINE;
		mrc_ctl_modify_cc_profile(s->mctx, CC_ID + 10, &ca, MRC_CTL_CC_PROFILE_STATE);
		ca.profile_state = MRC_CTL_PROFILE_INIT;
		mrc_ctl_modify_cc_profile(s->mctx, CC_ID + 10, &ca, MRC_CTL_CC_PROFILE_STATE);
	}

	memset(&pa, 0, sizeof(pa));
	snprintf(what, sizeof(what), "%s: mrc_ctl_modify_port past the last port is EINVAL, even with no mask", s->name);
	expect_errno(mrc_ctl_modify_port(s->mctx, (uint8_t)(s->nports + 1), &pa, 0), EINVAL, what);

	/* Two controllers, one profile, different EVs, at once. */
	ctx2 = ibv_open_device(s->dev);
	memset(&cattr, 0, sizeof(cattr));
	cattr.mrc_api_version_used = MRC_API_VER_USED;
	cattr.mrc_vendor_api_version_used = MRC_VENDOR_API_VER_USED;
	mctx2 = ctx2 ? mrc_create_context(ctx2, &cattr) : NULL;
	if (!mctx2) {
		report(0, "contract: a second controller context", "errno %d", errno);
		if (ctx2)
			ibv_close_device(ctx2);
		return;
	}
	d1 = (struct denier){s->mctx, arr, 0, 8, 0};
	d2 = (struct denier){mctx2, arr, 8, 8, 0};
	pthread_create(&t1, NULL, deny_some, &d1);
	pthread_create(&t2, NULL, deny_some, &d2);
	pthread_join(t1, NULL);
	pthread_join(t2, NULL);
	denied = 0;
	for (i = 0; i < 16; i++)
		denied += query_one_state(s, GEN_ID, &arr[i].ev) == MRC_CTL_EV_DENIED;
	snprintf(what, sizeof(what), "%s: two controllers deny 8 EVs each at once: all 16 DENIED", s->name);
	report(denied == 16 && !d1.failed && !d2.failed, what, "%d DENIED, %d + %d calls failed", denied, d1.failed,
	       d2.failed);
	for (i = 0; i < 16; i++)
		modify_one_state(s, GEN_ID, &arr[i].ev, MRC_CTL_EV_GOOD);
	mrc_destroy_context(mctx2);
	ibv_close_device(ctx2);
}

/* ------------------------------------------------------------ QPs */

struct pair {
	struct mrc_cq *cqa, *cqb;
	struct mrc_qp *qa, *qb;
	uint32_t qpna, qpnb;
};

static struct mrc_qp *create_qp(struct side *s, struct mrc_cq *cq)
{
	struct mrc_qp_init_attr ia;

	memset(&ia, 0, sizeof(ia));
	ia.send_cq = cq;
	ia.recv_cq = cq;
	ia.cap.max_send_wr = SQ_DEPTH;
	ia.cap.max_recv_wr = RQ_DEPTH;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	ia.pd = s->pd;
	ia.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
	return mrc_create_qp(s->mctx, &ia);
}

static int qp_init(struct mrc_qp *qp)
{
	struct ibv_qp_attr a;
	struct mrc_qp_attr m;

	memset(&a, 0, sizeof(a));
	memset(&m, 0, sizeof(m));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	m.profile.ev_profile_id = GEN_ID;
	m.profile.cc_profile_id = CC_ID;
	return mrc_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
			     &m, MRC_QP_EV_PROFILE_ID | MRC_QP_CC_PROFILE_ID);
}

static int qp_rtr(struct mrc_qp *qp, uint32_t dqpn, uint32_t rq_psn, const union ibv_gid *dgid)
{
	struct ibv_qp_attr a;
	struct mrc_qp_attr m;

	memset(&a, 0, sizeof(a));
	memset(&m, 0, sizeof(m));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = path_mtu;
	a.dest_qp_num = dqpn;
	a.rq_psn = rq_psn;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *dgid;
	a.ah_attr.grh.sgid_index = 3;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	return mrc_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			     IBV_QP_PATH_MTU, &m, 0);
}

static int qp_rts(struct mrc_qp *qp, uint32_t sq_psn)
{
	struct ibv_qp_attr a;
	struct mrc_qp_attr m;

	memset(&a, 0, sizeof(a));
	memset(&m, 0, sizeof(m));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = sq_psn;
	return mrc_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN, &m, 0);
}

static int make_pair(struct pair *p)
{
	const uint32_t psna = 0x2345, psnb = 0x6789;
	struct mrc_qp_attr m;
	struct ibv_qp_attr va;
	struct mrc_qp_init_attr ia;

	memset(p, 0, sizeof(*p));
	p->cqa = mrc_create_cq(A.mctx, 2 * SQ_DEPTH, NULL, NULL, 0);
	p->cqb = mrc_create_cq(B.mctx, 2 * RQ_DEPTH, NULL, NULL, 0);
	if (!p->cqa || !p->cqb) {
		report(0, "CQs for the QP pair", "errno %d (%s)", errno, strerror(errno));
		return -1;
	}
	p->qa = create_qp(&A, p->cqa);
	p->qb = create_qp(&B, p->cqb);
	if (!p->qa || !p->qb) {
		report(0, "QPs on A and B", "errno %d (%s)", errno, strerror(errno));
		return -1;
	}
	if (quiet_ok(mrc_get_qpn(p->qa, &p->qpna), "mrc_get_qpn A") ||
	    quiet_ok(mrc_get_qpn(p->qb, &p->qpnb), "mrc_get_qpn B"))
		return -1;
	if (call_ok(qp_init(p->qa), "A: QP RESET->INIT attached to the GEN EV and NSCC CC profiles") ||
	    call_ok(qp_init(p->qb), "B: QP RESET->INIT attached to the GEN EV and NSCC CC profiles"))
		return -1;
	if (quiet_ok(qp_rtr(p->qa, p->qpnb, psnb, &B.gid[0]), "A INIT->RTR") ||
	    quiet_ok(qp_rtr(p->qb, p->qpna, psna, &A.gid[0]), "B INIT->RTR") ||
	    quiet_ok(qp_rts(p->qa, psna), "A RTR->RTS") || quiet_ok(qp_rts(p->qb, psnb), "B RTR->RTS"))
		return -1;
	memset(&m, 0, sizeof(m));
	memset(&va, 0, sizeof(va));
	memset(&ia, 0, sizeof(ia));
	if (!quiet_ok(mrc_query_qp(p->qa, &va, IBV_QP_STATE, &m, MRC_QP_EV_PROFILE_ID | MRC_QP_CC_PROFILE_ID, &ia),
		      "mrc_query_qp A"))
		report(m.profile.ev_profile_id == GEN_ID && m.profile.cc_profile_id == CC_ID &&
		       va.qp_state == IBV_QPS_RTS, "A: mrc_query_qp reports the profiles, RTS",
		       "ev %" PRIu64 ", cc %" PRIu64 ", state %d", m.profile.ev_profile_id,
		       m.profile.cc_profile_id, va.qp_state);
	note("QP pair A 0x%x -> B 0x%x", p->qpna, p->qpnb);
	return 0;
}

static void destroy_pair(struct pair *p)
{
	if (p->qa)
		quiet_ok(mrc_destroy_qp(p->qa), "mrc_destroy_qp A");
	if (p->qb)
		quiet_ok(mrc_destroy_qp(p->qb), "mrc_destroy_qp B");
	if (p->cqa)
		quiet_ok(mrc_destroy_cq(p->cqa), "mrc_destroy_cq A");
	if (p->cqb)
		quiet_ok(mrc_destroy_cq(p->cqb), "mrc_destroy_cq B");
	memset(p, 0, sizeof(*p));
}

static int post_write(struct pair *p, uint64_t wr_id, size_t off, uint32_t len)
{
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad = NULL;

	memset(&sge, 0, sizeof(sge));
	memset(&wr, 0, sizeof(wr));
	sge.addr = (uintptr_t)(A.buf + off);
	sge.length = len;
	sge.lkey = A.mr->lkey;
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = (uintptr_t)(B.buf + off);
	wr.wr.rdma.rkey = B.mr->rkey;
	return mrc_post_send(p->qa, &wr, &bad);
}

/* One write of len bytes at off, waited for and verified. */
static int write_and_check(struct pair *p, size_t off, uint32_t len, uint64_t seed, const char *what)
{
	struct ibv_wc wc;
	double end;
	int n = 0;
	size_t i;

	fill(A.buf + off, len, seed);
	memset(B.buf + off, 0, len);
	if (post_write(p, seed, off, len)) {
		report(0, what, "mrc_post_send: errno %d (%s)", errno, strerror(errno));
		return -1;
	}
	end = now_ms() + TIMEOUT_MS;
	memset(&wc, 0, sizeof(wc));
	while (now_ms() < end && (n = mrc_poll_cq(p->cqa, 1, &wc)) == 0)
		sched_yield();
	if (n != 1) {
		report(0, what, "no completion within %d ms (poll returned %d)", TIMEOUT_MS, n);
		return -1;
	}
	if (wc.status != IBV_WC_SUCCESS || wc.wr_id != seed) {
		report(0, what, "completion status %s, wr_id 0x%" PRIx64 " (want 0x%" PRIx64 ")",
		       ibv_wc_status_str(wc.status), wc.wr_id, seed);
		return -1;
	}
	__sync_synchronize();
	for (i = 0; i < len; i++)
		if (A.buf[off + i] != B.buf[off + i])
			break;
	report(i == len, what, "first difference at byte %zu of %u", i, len);
	return i == len ? 0 : -1;
}

/* ------------------------------------------------------------ (f) write stream */

struct stream {
	struct pair *p;
	int outstanding;
	uint64_t posted, completed, errors;
	enum ibv_wc_status first_error;
	double last_progress;
};

/* Keeps the window full and reaps completions; -1 if it stalled. */
static int stream_pump(struct stream *s)
{
	struct ibv_wc wc[16];
	int n, i;

	while (s->outstanding < STREAM_WINDOW) {
		size_t off = (size_t)(s->posted % STREAM_WINDOW) * STREAM_CHUNK;

		if (post_write(s->p, 0x5000 + s->posted, off, STREAM_CHUNK))
			break;
		s->posted++;
		s->outstanding++;
	}
	n = mrc_poll_cq(s->p->cqa, 16, wc);
	for (i = 0; i < n; i++) {
		if (wc[i].status != IBV_WC_SUCCESS && !s->errors++)
			s->first_error = wc[i].status;
		s->completed++;
		s->outstanding--;
	}
	if (n > 0)
		s->last_progress = now_ms();
	else
		sched_yield();
	return now_ms() - s->last_progress > 2.0 * TIMEOUT_MS ? -1 : 0;
}

static int stream_drain(struct stream *s)
{
	double end = now_ms() + 2.0 * TIMEOUT_MS;
	struct ibv_wc wc[16];

	while (s->outstanding > 0 && now_ms() < end) {
		int n = mrc_poll_cq(s->p->cqa, 16, wc), i;

		for (i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS && !s->errors++)
				s->first_error = wc[i].status;
			s->completed++;
			s->outstanding--;
		}
		if (n <= 0)
			sched_yield();
	}
	return s->outstanding == 0 ? 0 : -1;
}

/* Is (ev) in A's GEN array on that port? */
static int in_gen_array(const struct mrc_ctl_ev *ev)
{
	int i;

	for (i = 0; i < A.ngen; i++)
		if (ev_equal(&A.gen_evs[i].ev, ev))
			return 1;
	return 0;
}

/* Both streams; the second may be absent (st2->p NULL). */
static int pump_both(struct stream *st, struct stream *st2)
{
	int stalled = stream_pump(st);

	if (st2->p)
		stalled |= stream_pump(st2);
	return stalled;
}

/* 1 if the event repeats the state the last event gave its EV of the GEN profile. */
static int event_repeats(const struct mrc_ctl_ev_event *e)
{
	static uint8_t last[16][65536];	/* [port][EV]: 0 none, else the state's bit */

	if (e->profile_id != GEN_ID || e->ev.port >= 16)
		return 0;
	uint8_t *l = &last[e->ev.port][ev16(e->ev.val)];
	const int repeat = *l == (uint8_t)e->state;

	*l = (uint8_t)e->state;
	return repeat;
}

static void test_events(struct pair *p)
{
	struct mrc_cq *evcq;
	struct mrc_ctl_ev_event ev[32];
	struct mrc_ctl_port_attr pa;
	struct ibv_port_attr vp;
	struct stream st;
	const uint8_t fail_port = A.ports[A.nports - 1];
	int found_bad = 0, bad_fields_ok = 1, found_good = 0, stalled = 0, n, i, stale = 0;
	int n_events = 0, n_bad_failed = 0, n_bad_other = 0;
	struct ibv_context *ctx_plain = NULL;
	struct mrc_context *mctx_plain = NULL;
	struct pair pair2 = {0};
	struct stream st2;
	int repeats = 0;
	struct mrc_context_attr cattr;
	struct mrc_cq *evcq_plain = NULL;
	double end, down_at, up_at;
	uint64_t before_down, drops = 0;
	char what[200];

	if (A.nports < 2) {
		note("only one port: the plane failure test needs two");
		return;
	}
	evcq = mrc_ctl_create_ev_event_cq(A.mctx, 256, NULL, NULL, 0);
	if (!evcq) {
		report(0, "A: mrc_ctl_create_ev_event_cq", "errno %d (%s)", errno, strerror(errno));
		return;
	}
	/* A second controller that never says it is 1.0.1 (no
	 * mrc_ctl_query_device_ex) may be a 1.0.0 program with 48-byte events. */
	ctx_plain = ibv_open_device(A.dev);
	memset(&cattr, 0, sizeof(cattr));
	cattr.mrc_api_version_used = MRC_API_VER_USED;
	cattr.mrc_vendor_api_version_used = MRC_VENDOR_API_VER_USED;
	mctx_plain = ctx_plain ? mrc_create_context(ctx_plain, &cattr) : NULL;
	evcq_plain = mctx_plain ? mrc_ctl_create_ev_event_cq(mctx_plain, 256, NULL, NULL, 0) : NULL;
	report(evcq_plain != NULL, "A: an event CQ on a second context", "errno %d", errno);
	report(1, "A: mrc_ctl_create_ev_event_cq", "%s", "");
	while ((n = mrc_ctl_poll_ev_event(evcq, 32, ev)) > 0)
		stale += n;
	report(n == 0, "A: mrc_ctl_poll_ev_event on an idle device returns 0", "returned %d", n);
	if (stale)
		note("%d earlier event(s) drained", stale);

	memset(&st, 0, sizeof(st));
	st.p = p;
	st.last_progress = now_ms();
	fill(A.buf, STREAM_WINDOW * STREAM_CHUNK, 99);
	/* A second QP on the same profile: events are the profile's EVs, not each QP's. */
	memset(&st2, 0, sizeof(st2));
	if (!make_pair(&pair2))
		st2.p = &pair2;
	st2.last_progress = now_ms();

	/* Traffic first, on every plane. */
	end = now_ms() + 300;
	while (now_ms() < end && !stalled)
		stalled = pump_both(&st, &st2);
	note("stream: %" PRIu64 " writes of %u KiB completed before the failure", st.completed,
	     STREAM_CHUNK >> 10);

	memset(&pa, 0, sizeof(pa));
	pa.port_admin_state = MRC_CTL_PORT_ADMIN_DISABLED;
	snprintf(what, sizeof(what), "A: mrc_ctl_modify_port(%u, DISABLED) under load", fail_port);
	if (call_ok(mrc_ctl_modify_port(A.mctx, fail_port, &pa, MRC_CTL_PORT_ADMIN_STATE), what))
		goto out;
	memset(&pa, 0, sizeof(pa));
	snprintf(what, sizeof(what), "A: mrc_ctl_query_port(%u) reads DISABLED", fail_port);
	if (!quiet_ok(mrc_ctl_query_port(A.mctx, fail_port, &pa, MRC_CTL_PORT_ADMIN_STATE), what))
		report(pa.port_admin_state == MRC_CTL_PORT_ADMIN_DISABLED, what, "state %d", pa.port_admin_state);
	/* Verbs ports are the planes: the disabled one reads DOWN, the others ACTIVE. */
	memset(&vp, 0, sizeof(vp));
	snprintf(what, sizeof(what), "A: ibv_query_port(%u) reads DOWN while the port is disabled", fail_port);
	if (!quiet_ok(ibv_query_port(A.ctx, fail_port, &vp), what))
		report(vp.state == IBV_PORT_DOWN, what, "state %s", ibv_port_state_str(vp.state));
	memset(&vp, 0, sizeof(vp));
	snprintf(what, sizeof(what), "A: ibv_query_port(%u) stays ACTIVE", fail_port == 1 ? 2 : 1);
	if (!quiet_ok(ibv_query_port(A.ctx, fail_port == 1 ? 2 : 1, &vp), what))
		report(vp.state == IBV_PORT_ACTIVE, what, "state %s", ibv_port_state_str(vp.state));

	/* Until the event, and in any case a while of traffic on one plane. */
	down_at = now_ms();
	before_down = st.completed;
	end = down_at + EVENT_WAIT_MS;
	while ((!found_bad || now_ms() < down_at + DOWN_MIN_MS) && now_ms() < end && !stalled) {
		stalled = pump_both(&st, &st2);
		n = mrc_ctl_poll_ev_event(evcq, 32, ev);
		if (n < 0) {
			report(0, "mrc_ctl_poll_ev_event", "returned %d", n);
			break;
		}
		for (i = 0; i < n; i++) {
			repeats += event_repeats(&ev[i]);
			if (n_events++ < 12)
				note("event: profile %" PRIu64 " ev %u port %u state 0x%x drops %u", ev[i].profile_id,
				     ev16(ev[i].ev.val), ev[i].ev.port, ev[i].state, ev[i].drop_count);
			if (ev[i].ev.port == fail_port && ev[i].state == MRC_CTL_EV_ASSUMED_BAD)
				n_bad_failed++;
			else if (ev[i].state == MRC_CTL_EV_ASSUMED_BAD)
				n_bad_other++;
			drops += ev[i].drop_count;
			if (ev[i].profile_id == GEN_ID && ev[i].ev.port == fail_port &&
			    ev[i].state == MRC_CTL_EV_ASSUMED_BAD) {
				found_bad = 1;
				bad_fields_ok &= in_gen_array(&ev[i].ev);
			}
		}
	}
	note("events while port %u was down: %d (%d ASSUMED_BAD on that port, %d on others), %" PRIu64
	     " dropped", fail_port, n_events, n_bad_failed, n_bad_other, drops);
	note("stream: %" PRIu64 " writes completed in %.0f ms with port %u down", st.completed - before_down,
	     now_ms() - down_at, fail_port);
	report(st.completed > before_down, "writes keep completing while a port is down",
	       "none completed in %.0f ms", now_ms() - down_at);
	snprintf(what, sizeof(what), "A: ASSUMED_BAD event for an EV of port %u of profile %d", fail_port, GEN_ID);
	report(found_bad, what, "none within %d ms (%" PRIu64 " writes completed%s)", EVENT_WAIT_MS, st.completed,
	       stalled ? ", stream stalled" : "");
	if (found_bad)
		report(bad_fields_ok, "A: the event names an EV of the profile's array on that port",
		       "EV not in the GEN array");

	memset(&pa, 0, sizeof(pa));
	pa.port_admin_state = MRC_CTL_PORT_ADMIN_ENABLED;
	snprintf(what, sizeof(what), "A: mrc_ctl_modify_port(%u, ENABLED)", fail_port);
	call_ok(mrc_ctl_modify_port(A.mctx, fail_port, &pa, MRC_CTL_PORT_ADMIN_STATE), what);
	memset(&pa, 0, sizeof(pa));
	snprintf(what, sizeof(what), "A: mrc_ctl_query_port(%u) reads ENABLED", fail_port);
	if (!quiet_ok(mrc_ctl_query_port(A.mctx, fail_port, &pa, MRC_CTL_PORT_ADMIN_STATE), what))
		report(pa.port_admin_state == MRC_CTL_PORT_ADMIN_ENABLED, what, "state %d", pa.port_admin_state);

	/* Recovery is reported, not required. */
	up_at = now_ms();
	end = up_at + 3000;
	while ((!found_good || now_ms() < up_at + DOWN_MIN_MS) && now_ms() < end && !stalled) {
		stalled = pump_both(&st, &st2);
		n = mrc_ctl_poll_ev_event(evcq, 32, ev);
		for (i = 0; i < n; i++) {
			repeats += event_repeats(&ev[i]);
			if (ev[i].profile_id == GEN_ID && ev[i].ev.port == fail_port &&
			    ev[i].state == MRC_CTL_EV_GOOD)
				found_good = 1;
		}
	}
	report(repeats == 0 && st2.p && st2.completed > 0,
	       "with two QPs on the profile, each EV's events alternate (one per change of the profile's EV)",
	       "%d events repeated the EV's last state (second QP: %" PRIu64 " writes)", repeats, st2.completed);
	note("%s GOOD event for port %u within 3 s of enabling it", found_good ? "a" : "no", fail_port);

	report(!stalled, "write stream kept completing through the plane failure",
	       "no completion for %d ms (%" PRIu64 " posted, %" PRIu64 " completed)", 2 * TIMEOUT_MS,
	       st.posted, st.completed);
	report(stream_drain(&st) == 0 && st.errors == 0, "every streamed write completed successfully",
	       "%d outstanding, %" PRIu64 " error(s), first %s", st.outstanding, st.errors,
	       st.errors ? ibv_wc_status_str(st.first_error) : "-");
	if (st2.p)
		report(stream_drain(&st2) == 0 && st2.errors == 0, "the second QP's writes completed successfully",
		       "%d outstanding, %" PRIu64 " error(s)", st2.outstanding, st2.errors);
	note("stream: %" PRIu64 " writes completed in all", st.completed);
	{
		struct mrc_ctl_ev_op_entry arr[64];
		int k, good = 0, bad = 0, other = 0;

		n = query_array(&A, GEN_ID, arr, 64, "QUERY_EV_ARRAY after the plane failure");
		for (k = 0; k < n; k++) {
			if (arr[k].state == MRC_CTL_EV_GOOD)
				good++;
			else if (arr[k].state == MRC_CTL_EV_ASSUMED_BAD)
				bad++;
			else
				other++;
		}
		note("after recovery: %d GOOD, %d ASSUMED_BAD, %d other", good, bad, other);
	}
	write_and_check(p, 0, BIG_LEN, 0xF00D, "1 MiB WRITE after the plane came back");
	if (evcq_plain) {
		/* 4 events of 48 bytes, then a guard: one event a call, nothing past the array. */
		unsigned char buf[4 * 48 + 64];
		int m, got = 0, most = 0, guard_ok = 1, calls = 0;
		uint64_t pid = 0;

		memset(buf, 0xAA, sizeof(buf));
		while (calls++ < 100000 && (m = mrc_ctl_poll_ev_event(evcq_plain, 4, (struct mrc_ctl_ev_event *)buf)) > 0) {
			got += m;
			most = m > most ? m : most;
			memcpy(&pid, buf, sizeof(pid));
		}
		for (i = 4 * 48; i < (int)sizeof(buf); i++)
			guard_ok &= buf[i] == 0xAA;
		report(got > 0 && most == 1 && guard_ok && pid == GEN_ID,
		       "a controller that never called mrc_ctl_query_device_ex gets one event a call, within a 1.0.0 array",
		       "%d events, at most %d a call, guard %s, last profile %" PRIu64, got, most,
		       guard_ok ? "intact" : "overwritten", pid);
	}
out:
	destroy_pair(&pair2);
	if (evcq_plain)
		mrc_destroy_cq(evcq_plain);
	if (mctx_plain)
		mrc_destroy_context(mctx_plain);
	if (ctx_plain)
		ibv_close_device(ctx_plain);
	/* Never leave the plane down. */
	memset(&pa, 0, sizeof(pa));
	pa.port_admin_state = MRC_CTL_PORT_ADMIN_ENABLED;
	mrc_ctl_modify_port(A.mctx, fail_port, &pa, MRC_CTL_PORT_ADMIN_STATE);
	quiet_ok(mrc_destroy_cq(evcq), "mrc_destroy_cq (EV event CQ)");
}

/* ------------------------------------------------------------ telemetry */

/*
 * A minimal client of mrc-nic's DPDK telemetry socket (SOCK_SEQPACKET: a
 * JSON greeting on connect, then one JSON reply per command), reading the
 * per-EV counters of one QP from /mrc/evs,DEV:QPN[,FIRST]. The reply is a
 * dict with "columns" (names), "states" (state names by value), "count",
 * "next" when more pages follow, and one u64 array per EV keyed by the EV's
 * index. No JSON library: the strings are scanned.
 */
#define TEL_BUF_LEN	(64u << 10)
#define TEL_MAX_EVS	256
#define TEL_TIMEOUT_S	2

struct ev_row {
	uint64_t ev, plane, state, active, tx, rtx;
};

struct ev_table {
	int n;			/* rows read (all pages) */
	int denied;		/* value of the DENIED state, -1 if unnamed */
	struct ev_row row[TEL_MAX_EVS];
};

static const char *tel_prefix(void)
{
	const char *p = getenv("MRC_TELEMETRY_PREFIX");

	return p && *p ? p : NULL;
}

/* Connected to the socket of MRC_TELEMETRY_PREFIX, greeting consumed. */
static int tel_connect(char *buf, size_t len, char *err, size_t errlen)
{
	const char *prefix = tel_prefix(), *xdg = getenv("XDG_RUNTIME_DIR");
	struct timeval tv = { TEL_TIMEOUT_S, 0 };
	char paths[3][sizeof(((struct sockaddr_un *)0)->sun_path)];
	int npaths = 0, i, fd = -1, e = 0;
	ssize_t n;

	/* DPDK's runtime directory: /var/run/dpdk for root, else
	 * $XDG_RUNTIME_DIR/dpdk or /tmp/dpdk. */
	if (strchr(prefix, '/')) {
		snprintf(paths[npaths++], sizeof(paths[0]), "%s", prefix);
	} else {
		snprintf(paths[npaths++], sizeof(paths[0]), "/var/run/dpdk/%s/dpdk_telemetry.v2", prefix);
		if (xdg && *xdg)
			snprintf(paths[npaths++], sizeof(paths[0]), "%s/dpdk/%s/dpdk_telemetry.v2", xdg, prefix);
		snprintf(paths[npaths++], sizeof(paths[0]), "/tmp/dpdk/%s/dpdk_telemetry.v2", prefix);
	}
	for (i = 0; i < npaths; i++) {
		struct sockaddr_un sa;

		memset(&sa, 0, sizeof(sa));
		sa.sun_family = AF_UNIX;
		memcpy(sa.sun_path, paths[i], sizeof(sa.sun_path));
		fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
		if (fd < 0) {
			snprintf(err, errlen, "socket: %s", strerror(errno));
			return -1;
		}
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			break;
		e = errno;
		close(fd);
		fd = -1;
	}
	if (fd < 0) {
		snprintf(err, errlen, "connect %s: %s", paths[0], strerror(e));
		return -1;
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	n = recv(fd, buf, len - 1, 0);
	if (n <= 0) {
		snprintf(err, errlen, "no greeting: %s", n < 0 ? strerror(errno) : "closed");
		close(fd);
		return -1;
	}
	buf[n] = 0;
	{
		const char *m = strstr(buf, "\"max_output_len\":");

		if (m && strtoull(m + 17, NULL, 10) >= len) {
			snprintf(err, errlen, "max_output_len %s exceeds this reader's %zu bytes", m + 17, len);
			close(fd);
			return -1;
		}
	}
	return fd;
}

/* One command, its reply (NUL-terminated) in buf. */
static int tel_command(int fd, const char *cmd, char *buf, size_t len, char *err, size_t errlen)
{
	ssize_t n;

	if (send(fd, cmd, strlen(cmd), 0) < 0) {
		snprintf(err, errlen, "send %s: %s", cmd, strerror(errno));
		return -1;
	}
	n = recv(fd, buf, len - 1, 0);
	if (n <= 0) {
		snprintf(err, errlen, "%s: no reply (%s)", cmd, n < 0 ? strerror(errno) : "closed");
		return -1;
	}
	buf[n] = 0;
	return 0;
}

/* The start of the array under `key` (just past its '['), or NULL. */
static const char *json_array(const char *json, const char *key)
{
	char pat[80];

	snprintf(pat, sizeof(pat), "\"%s\":[", key);
	json = strstr(json, pat);
	return json ? json + strlen(pat) : NULL;
}

/* Position of the string `name` (any case) in a string array, or -1. */
static int json_string_index(const char *arr, const char *name)
{
	size_t len = strlen(name);
	int i = 0;

	while (arr && *arr && *arr != ']') {
		if (*arr == '"') {
			const char *end = strchr(arr + 1, '"');

			if (!end)
				return -1;
			if ((size_t)(end - arr - 1) == len && !strncasecmp(arr + 1, name, len))
				return i;
			i++;
			arr = end + 1;
		} else {
			arr++;
		}
	}
	return -1;
}

/* Up to max numbers of a u64 array; the count read. */
static int json_u64s(const char *arr, uint64_t *v, int max)
{
	int n = 0;

	while (arr && n < max) {
		char *end;

		while (*arr == ' ' || *arr == ',')
			arr++;
		if (*arr < '0' || *arr > '9')
			break;
		v[n++] = strtoull(arr, &end, 10);
		arr = end;
	}
	return n;
}

/* A u64 value under `key`, or -1 if absent. */
static int64_t json_u64(const char *json, const char *key)
{
	char pat[80];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(json, pat);
	if (!p || p[strlen(pat)] < '0' || p[strlen(pat)] > '9')
		return -1;
	return (int64_t)strtoull(p + strlen(pat), NULL, 10);
}

/* Every EV of QP qpn on device dev, all pages. */
static int tel_read_evs(const char *dev, uint32_t qpn, struct ev_table *t, char *err, size_t errlen)
{
	static const char *const want[6] = { "ev", "plane", "state", "active", "tx_pkts", "rtx_pkts" };
	static char buf[TEL_BUF_LEN];
	int64_t count = -1, first = 0;
	int fd, rc = -1;

	memset(t, 0, sizeof(*t));
	t->denied = -1;
	fd = tel_connect(buf, sizeof(buf), err, errlen);
	if (fd < 0)
		return -1;
	for (;;) {
		char cmd[128], key[24];
		const char *cols, *arr;
		int col[6], ncols = 0, i, k;

		snprintf(cmd, sizeof(cmd), "/mrc/evs,%s:%u,%" PRId64, dev, qpn, first);
		if (tel_command(fd, cmd, buf, sizeof(buf), err, errlen))
			goto out;
		cols = json_array(buf, "columns");
		if (!cols) {
			snprintf(err, errlen, "%s: no \"columns\" in %.200s", cmd, buf);
			goto out;
		}
		for (arr = cols; *arr && *arr != ']'; arr++)
			ncols += *arr == '"';
		ncols /= 2;
		for (k = 0; k < 6; k++) {
			col[k] = json_string_index(cols, want[k]);
			if (col[k] < 0) {
				snprintf(err, errlen, "%s: no column \"%s\"", cmd, want[k]);
				goto out;
			}
		}
		t->denied = json_string_index(json_array(buf, "states"), "DENIED");
		count = json_u64(buf, "count");
		if (count < 0 || count > TEL_MAX_EVS) {
			snprintf(err, errlen, "%s: count %" PRId64 " (0..%d)", cmd, count, TEL_MAX_EVS);
			goto out;
		}
		for (i = (int)first; i < count; i++) {
			uint64_t v[64];
			struct ev_row *r = &t->row[i];

			snprintf(key, sizeof(key), "%d", i);
			arr = json_array(buf, key);
			if (!arr)
				break;	/* on a later page */
			if (json_u64s(arr, v, 64) != ncols) {
				snprintf(err, errlen, "%s: row %d has not %d values", cmd, i, ncols);
				goto out;
			}
			r->ev = v[col[0]];
			r->plane = v[col[1]];
			r->state = v[col[2]];
			r->active = v[col[3]];
			r->tx = v[col[4]];
			r->rtx = v[col[5]];
			t->n = i + 1;
		}
		first = json_u64(buf, "next");
		if (first < 0)
			break;
		if (first != t->n) {
			snprintf(err, errlen, "%s: next %" PRId64 " after %d rows", cmd, first, t->n);
			goto out;
		}
	}
	if (t->n != count) {
		snprintf(err, errlen, "%d of %" PRId64 " rows", t->n, count);
		goto out;
	}
	rc = 0;
out:
	close(fd);
	return rc;
}

/* The row of `ev`: the QP's EVs are the profile's, in order; checked. */
static int tel_row_of(const struct ev_table *t, int idx, const struct mrc_ctl_ev *ev)
{
	int i;

	if (idx < t->n && t->row[idx].ev == ev16(ev->val) && t->row[idx].plane + 1 == ev->port)
		return idx;
	for (i = 0; i < t->n; i++)
		if (t->row[i].ev == ev16(ev->val) && t->row[i].plane + 1 == ev->port)
			return i;
	return -1;
}

static uint64_t tel_tx_others(const struct ev_table *t, int row)
{
	uint64_t sum = 0;
	int i;

	for (i = 0; i < t->n; i++)
		if (i != row)
			sum += t->row[i].tx;
	return sum;
}

/* A's EV table for the requester QP, reported only on failure. */
static int tel_read_a(const struct pair *p, struct ev_table *t, const char *when)
{
	char err[300], what[200];

	if (tel_read_evs(A.name, p->qpna, t, err, sizeof(err)) == 0)
		return 0;
	snprintf(what, sizeof(what), "telemetry: /mrc/evs of A's QP %s", when);
	report(0, what, "%s", err);
	return -1;
}

/* ------------------------------------------------------------ (e) deny */

static void test_deny(struct pair *p)
{
	const int idx = 5 % A.ngen;
	const uint64_t min_pkts = 8ull * BIG_LEN / (128u << path_mtu);	/* payload <= path MTU */
	struct mrc_ctl_ev target = A.gen_evs[idx].ev, absent;
	struct mrc_ctl_ev_op_entry arr[64];
	static struct ev_table t0, t1;
	char what[200];
	int st, n, k, row = -1, tel = tel_prefix() != NULL, writes_ok = 1;

	snprintf(what, sizeof(what), "A: deny EV %u on port %u (MODIFY_EV_STATE DENIED)", ev16(target.val),
		 target.port);
	if (call_ok(modify_one_state(&A, GEN_ID, &target, MRC_CTL_EV_DENIED), what))
		return;
	st = query_one_state(&A, GEN_ID, &target);
	report(st == MRC_CTL_EV_DENIED, "A: QUERY_EV_STATE reads DENIED", "state %d (errno %s)", st,
	       st < 0 ? strerror(errno) : "-");
	n = query_array(&A, GEN_ID, arr, 64, "QUERY_EV_ARRAY after deny");
	report(n > idx && arr[idx].state == MRC_CTL_EV_DENIED && ev_equal(&arr[idx].ev, &target),
	       "A: QUERY_EV_ARRAY shows the EV DENIED in place", "entry %d state 0x%x", idx,
	       n > idx ? arr[idx].state : 0);

	/* The per-EV counters of A's QP before the traffic. */
	if (!tel) {
		note("skip: per-EV counters of the denied EV not checked (set MRC_TELEMETRY_PREFIX)");
	} else if (tel_read_a(p, &t0, "before the writes")) {
		tel = 0;
	} else {
		row = tel_row_of(&t0, idx, &target);
		snprintf(what, sizeof(what), "telemetry: A's QP 0x%x lists EV %u of plane %u, DENIED", p->qpna,
			 ev16(target.val), target.port - 1);
		report(row >= 0 && t0.denied >= 0 && t0.row[row].state == (uint64_t)t0.denied, what,
		       row < 0 ? "not among %d EVs" : "%d EVs, state %" PRIu64 " (denied is %d)", t0.n,
		       row < 0 ? 0 : t0.row[row].state, t0.denied);
		if (row < 0)
			tel = 0;
		else if (row != idx)
			note("telemetry lists the EV at index %d, the profile at %d", row, idx);
	}

	for (k = 0; k < 8; k++) {
		snprintf(what, sizeof(what), "1 MiB WRITE #%d with one EV denied", k + 1);
		if (write_and_check(p, 0, BIG_LEN, 0xD00 + (uint64_t)k, what)) {
			writes_ok = 0;
			break;
		}
	}
	st = query_one_state(&A, GEN_ID, &target);
	report(st == MRC_CTL_EV_DENIED, "A: the EV is still DENIED after traffic", "state %d", st);

	if (tel && !tel_read_a(p, &t1, "after the writes")) {
		const struct ev_row *b0 = &t0.row[row], *b1 = &t1.row[row];
		const uint64_t o0 = tel_tx_others(&t0, row), o1 = tel_tx_others(&t1, row);

		note("telemetry: denied EV tx_pkts %" PRIu64 " -> %" PRIu64 ", rtx_pkts %" PRIu64 " -> %" PRIu64
		     "; the other %d EVs tx_pkts %" PRIu64 " -> %" PRIu64, b0->tx, b1->tx, b0->rtx, b1->rtx,
		     t1.n - 1, o0, o1);
		report(t1.n == t0.n && b1->ev == b0->ev && b1->plane == b0->plane && b1->tx == b0->tx &&
		       b1->rtx == b0->rtx, "telemetry: the denied EV sent no packet during the 8 MiB of WRITEs",
		       "tx_pkts %" PRIu64 " -> %" PRIu64 ", rtx_pkts %" PRIu64 " -> %" PRIu64, b0->tx, b1->tx,
		       b0->rtx, b1->rtx);
		report(writes_ok ? o1 >= o0 + min_pkts : o1 > o0,
		       "telemetry: the other EVs carried the WRITEs (their tx_pkts grew)",
		       "sum %" PRIu64 " -> %" PRIu64 ", expected growth >= %" PRIu64, o0, o1,
		       writes_ok ? min_pkts : 1);
	} else if (tel) {
		tel = 0;
	}

	memset(&absent, 0, sizeof(absent));
	set_ev16(absent.val, 0x1234);
	absent.port = A.ports[0];
	expect_errno(modify_one_state(&A, GEN_ID, &absent, MRC_CTL_EV_DENIED), ENOENT,
		     "A: MODIFY_EV_STATE of an EV not in the profile is ENOENT");
	expect_errno(query_one_state(&A, GEN_ID, &absent), ENOENT,
		     "A: QUERY_EV_STATE of an EV not in the profile is ENOENT");

	call_ok(modify_one_state(&A, GEN_ID, &target, MRC_CTL_EV_GOOD), "A: restore the EV (MODIFY_EV_STATE GOOD)");
	st = query_one_state(&A, GEN_ID, &target);
	report(st == MRC_CTL_EV_GOOD, "A: QUERY_EV_STATE reads GOOD after the restore", "state %d", st);
	if (tel && tel_read_a(p, &t0, "after the restore"))
		tel = 0;
	if (write_and_check(p, 0, BIG_LEN, 0xE00, "1 MiB WRITE after the restore") || !tel)
		return;

	/* Back in the spray set: the EV must send again within a few writes. */
	for (k = 1;; k++) {
		if (tel_read_a(p, &t1, "after the restore's writes"))
			return;
		if (t1.row[row].tx > t0.row[row].tx || k >= 8)
			break;
		snprintf(what, sizeof(what), "1 MiB WRITE #%d after the restore", k + 1);
		if (write_and_check(p, 0, BIG_LEN, 0xE00 + (uint64_t)k, what))
			return;
	}
	snprintf(what, sizeof(what), "telemetry: the restored EV sends again (%d MiB written)", k);
	report(t1.row[row].tx > t0.row[row].tx, what, "tx_pkts %" PRIu64 " -> %" PRIu64 ", state %" PRIu64
	       ", active %" PRIu64, t0.row[row].tx, t1.row[row].tx, t1.row[row].state, t1.row[row].active);
	if (t1.row[row].tx > t0.row[row].tx)
		note("telemetry: restored EV tx_pkts %" PRIu64 " -> %" PRIu64 " after %d MiB", t0.row[row].tx,
		     t1.row[row].tx, k);
}

/* ------------------------------------------------------------ (g) probes */

static void test_probes(void)
{
	struct mrc_ctl_ep_req req[MAX_PLANES * 3];
	struct mrc_ctl_ep_rsp rsp[MAX_PLANES * 3];
	int nreq = 0, nrsp = 0, rc, e, i, k, tries;
	int per_port[MAX_PLANES + 1];
	char what[200], g1[64], g2[64];

	memset(req, 0, sizeof(req));
	memset(per_port, 0, sizeof(per_port));
	for (i = 0; i < A.ngen; i++) {
		uint8_t port = A.gen_evs[i].ev.port;

		if (port == 0 || port > MAX_PLANES || per_port[port] >= 3 || port > A.ngids || port > B.ngids)
			continue;
		per_port[port]++;
		req[nreq].req_id = (uint16_t)(100 + nreq);
		req[nreq].sgid = A.gid[port - 1];
		req[nreq].dgid = B.gid[port - 1];
		req[nreq].ev_fmt_mode = MRC_CTL_EV_FMT_MODE_UDP;
		req[nreq].req_ev = A.gen_evs[i].ev;
		nreq++;
	}
	for (i = 0; i < A.nports; i++)
		note("probing %d EV(s) of port %u: %s -> %s", per_port[A.ports[i]], A.ports[i],
		     gid_text(&A.gid[A.ports[i] - 1], g1, sizeof(g1)), gid_text(&B.gid[A.ports[i] - 1], g2, sizeof(g2)));
	for (tries = 0;; tries++) {
		memset(rsp, 0, sizeof(rsp));
		nrsp = 0;
		rc = mrc_ctl_ep_batch_send_wait(A.mctx, 0, MRC_CTL_EP_OP_EV_PROBE, req, nreq, PROBE_TIMEOUT_NS,
						rsp, &nrsp);
		e = errno;
		if (rc == 0 || e != EAGAIN || tries >= 20)
			break;
		sleep_ms(50);
	}
	snprintf(what, sizeof(what), "A: mrc_ctl_ep_batch_send_wait EV_PROBE (%d probes over %d ports)", nreq,
		 A.nports);
	report(rc == 0, what, "returned %d, errno %d (%s), %d answer(s)", rc, e, strerror(e), nrsp);
	report(nrsp == nreq, "every probe answered", "%d of %d", nrsp, nreq);
	{
		int ok = 1, seen[MAX_PLANES * 3];

		memset(seen, 0, sizeof(seen));
		for (k = 0; k < nrsp && k < nreq; k++) {
			int r = rsp[k].req_id - 100;

			note("probe %u: port %u rtt %u ns adj_svc_time %u", rsp[k].req_id, rsp[k].port, rsp[k].rtt,
			     rsp[k].adj_svc_time);
			if (r < 0 || r >= nreq || seen[r]++) {
				ok = 0;
				continue;
			}
			ok &= rsp[k].rtt > 0 && rsp[k].port == req[r].req_ev.port;
		}
		report(ok && nrsp > 0, "probe answers match requests, arrive on the probed port, RTT > 0",
		       "a mismatched, duplicate or zero-RTT answer");
	}

	/* Port status to the peer: sent; an answer is optional. */
	memset(&req[0], 0, sizeof(req[0]));
	req[0].req_id = 7;
	req[0].sgid = A.gid[0];
	req[0].dgid = B.gid[0];
	req[0].ev_fmt_mode = MRC_CTL_EV_FMT_MODE_UDP;
	req[0].req_ev = A.gen_evs[0].ev;
	req[0].op.port_status_update.port_status = A.attr.phy_port_mask;
	nrsp = 0;
	rc = mrc_ctl_ep_batch_send_wait(A.mctx, 0, MRC_CTL_EP_OP_PORT_STATUS_UPDATE, req, 1, PROBE_TIMEOUT_NS, rsp,
					&nrsp);
	e = errno;
	report(rc == 0 || e == ETIMEDOUT, "A: PORT_STATUS_UPDATE to B is sent", "returned %d, errno %d (%s)", rc, e,
	       strerror(e));
	note("PORT_STATUS_UPDATE: rc %d, %d answer(s)", rc, nrsp);
}

/* ------------------------------------------------------------ teardown */

static void delete_profiles(struct side *s)
{
	char what[200];

	snprintf(what, sizeof(what), "%s: GEN EV profile ONLINE -> OFFLINE -> INIT once its QPs are gone", s->name);
	report(set_ev_state(s, GEN_ID, MRC_CTL_PROFILE_OFFLINE) == 0 &&
	       set_ev_state(s, GEN_ID, MRC_CTL_PROFILE_INIT) == 0 && ev_state(s, GEN_ID) == MRC_CTL_PROFILE_INIT,
	       what, "errno %d (%s), state %d", errno, strerror(errno), ev_state(s, GEN_ID));
	snprintf(what, sizeof(what), "%s: CC profile ONLINE -> OFFLINE -> INIT", s->name);
	report(set_cc_state(s, MRC_CTL_PROFILE_OFFLINE) == 0 && set_cc_state(s, MRC_CTL_PROFILE_INIT) == 0 &&
	       cc_state(s) == MRC_CTL_PROFILE_INIT, what, "errno %d (%s), state %d", errno, strerror(errno),
	       cc_state(s));
	snprintf(what, sizeof(what), "%s: format profile ONLINE -> OFFLINE -> INIT", s->name);
	report(set_fmt_state(s, MRC_CTL_PROFILE_OFFLINE) == 0 && set_fmt_state(s, MRC_CTL_PROFILE_INIT) == 0 &&
	       fmt_state(s) == MRC_CTL_PROFILE_INIT, what, "errno %d (%s), state %d", errno, strerror(errno),
	       fmt_state(s));
}

/* ------------------------------------------------------------ (h) unprivileged */

static void test_eperm(void)
{
	struct mrc_ctl_ev_fmt_profile_attr fa;
	struct mrc_ctl_ev_fmt_field ff = { .width = 16 };
	struct mrc_ctl_ev_profile_attr ea;
	struct mrc_ctl_ev_field ef[N_GEN_FIELDS];
	struct mrc_ctl_cc_profile_attr ca;
	struct mrc_ctl_cc_nscc_cfg cfg = nscc_cfg();
	struct mrc_ctl_port_attr pa;
	struct mrc_ctl_ep_req req;
	struct mrc_ctl_ep_rsp rsp;
	struct mrc_ctl_ev_op_entry entry;
	struct mrc_cq *cq;
	struct ibv_port_attr vp;
	const uint8_t port = A.ports[A.nports - 1];
	int nrsp = 0, rc, e;

	memset(&fa, 0, sizeof(fa));
	fa.profile_state = MRC_CTL_PROFILE_OFFLINE;
	fa.ev_fmt_mode = MRC_CTL_EV_FMT_MODE_UDP;
	fa.ev_fmt_op.op = MRC_CTL_EV_FMT_OP_MODIFY_FIELDS;
	fa.ev_fmt_op.fmt_fields = &ff;
	fa.ev_fmt_op.fmt_field_count = 1;
	expect_errno(mrc_ctl_modify_ev_fmt_profile(A.mctx, FMT_ID, &fa, MRC_CTL_EV_FMT_PROFILE_STATE |
						   MRC_CTL_EV_FMT_PROFILE_MODE | MRC_CTL_EV_FMT_PROFILE_OP),
		     EPERM, "unprivileged mrc_ctl_modify_ev_fmt_profile is EPERM");

	memcpy(ef, gen_fields, sizeof(ef));
	memset(&ea, 0, sizeof(ea));
	ea.profile_state = MRC_CTL_PROFILE_OFFLINE;
	ea.ev_mode = MRC_CTL_EV_MODE_GEN;
	ea.ev_fmt_profile_id = FMT_ID;
	ea.ev_count = 24;
	ea.ev_min_active = 1;
	ea.ev_fields_op.op = MRC_CTL_EV_FIELDS_OP_MODIFY_FIELDS;
	ea.ev_fields_op.fields = ef;
	ea.ev_fields_op.field_count = N_GEN_FIELDS;
	expect_errno(mrc_ctl_modify_ev_profile(A.mctx, GEN_ID, &ea, MRC_CTL_EV_PROFILE_STATE |
					       MRC_CTL_EV_PROFILE_MODE | MRC_CTL_EV_PROFILE_FMT_ID |
					       MRC_CTL_EV_PROFILE_COUNT | MRC_CTL_EV_PROFILE_MIN_ACTIVE |
					       MRC_CTL_EV_PROFILE_EV_FIELDS_OP),
		     EPERM, "unprivileged mrc_ctl_modify_ev_profile (configure) is EPERM");
	memset(&ea, 0, sizeof(ea));
	ea.ev_event_mask = MRC_CTL_EV_GOOD;
	expect_errno(mrc_ctl_modify_ev_profile(A.mctx, GEN_ID, &ea, MRC_CTL_EV_PROFILE_EVENT_MASK), EPERM,
		     "unprivileged mrc_ctl_modify_ev_profile (event mask) is EPERM");
	memset(&ea, 0, sizeof(ea));
	memset(&entry, 0, sizeof(entry));
	set_ev16(entry.ev.val, 0xC000);
	entry.ev.port = A.ports[0];
	entry.state = MRC_CTL_EV_DENIED;
	ea.ev_op.op = MRC_CTL_EV_OP_MODIFY_EV_STATE;
	ea.ev_op.entries = &entry;
	ea.ev_op.entry_count = 1;
	expect_errno(mrc_ctl_modify_ev_profile(A.mctx, GEN_ID, &ea, MRC_CTL_EV_PROFILE_EV_OP), EPERM,
		     "unprivileged MODIFY_EV_STATE is EPERM");

	memset(&ca, 0, sizeof(ca));
	ca.profile_state = MRC_CTL_PROFILE_OFFLINE;
	ca.algorithm = "uet-1.0-nscc";
	ca.cc_config = &cfg;
	expect_errno(mrc_ctl_modify_cc_profile(A.mctx, CC_ID, &ca, MRC_CTL_CC_PROFILE_STATE |
					       MRC_CTL_CC_PROFILE_ALGORITHM | MRC_CTL_CC_PROFILE_CONFIG),
		     EPERM, "unprivileged mrc_ctl_modify_cc_profile is EPERM");

	memset(&pa, 0, sizeof(pa));
	pa.port_admin_state = MRC_CTL_PORT_ADMIN_DISABLED;
	rc = mrc_ctl_modify_port(A.mctx, port, &pa, MRC_CTL_PORT_ADMIN_STATE);
	expect_errno(rc, EPERM, "unprivileged mrc_ctl_modify_port(DISABLED) is EPERM");
	if (rc == 0) {
		pa.port_admin_state = MRC_CTL_PORT_ADMIN_ENABLED;
		mrc_ctl_modify_port(A.mctx, port, &pa, MRC_CTL_PORT_ADMIN_STATE);
	}
	memset(&vp, 0, sizeof(vp));
	if (!quiet_ok(ibv_query_port(A.ctx, port, &vp), "ibv_query_port A"))
		report(vp.state == IBV_PORT_ACTIVE, "the port the refused call named is still ACTIVE", "state %s",
		       ibv_port_state_str(vp.state));

	cq = mrc_ctl_create_ev_event_cq(A.mctx, 16, NULL, NULL, 0);
	e = errno;
	report(!cq && e == EPERM, "unprivileged mrc_ctl_create_ev_event_cq is NULL/EPERM",
	       cq ? "created a CQ" : "errno %d (%s)", e, strerror(e));
	if (cq)
		mrc_destroy_cq(cq);

	memset(&req, 0, sizeof(req));
	req.req_id = 1;
	req.sgid = A.gid[0];
	req.dgid = B.ngids ? B.gid[0] : A.gid[0];
	req.ev_fmt_mode = MRC_CTL_EV_FMT_MODE_UDP;
	set_ev16(req.req_ev.val, 0xC000);
	req.req_ev.port = A.ports[0];
	expect_errno(mrc_ctl_ep_batch_send_wait(A.mctx, 0, MRC_CTL_EP_OP_EV_PROBE, &req, 1, 100000000u, &rsp, &nrsp),
		     EPERM, "unprivileged EV_PROBE is EPERM");
	req.op.port_status_update.port_status = A.attr.phy_port_mask;
	expect_errno(mrc_ctl_ep_batch_send_wait(A.mctx, 0, MRC_CTL_EP_OP_PORT_STATUS_UPDATE, &req, 1, 100000000u,
						&rsp, &nrsp),
		     EPERM, "unprivileged PORT_STATUS_UPDATE is EPERM");

	/* Reads are controller calls too; what they do is only noted. */
	memset(&pa, 0, sizeof(pa));
	rc = mrc_ctl_query_port(A.mctx, port, &pa, MRC_CTL_PORT_ADMIN_STATE);
	note("unprivileged mrc_ctl_query_port: rc %d (%s)", rc, rc ? strerror(errno) : "ok");
	memset(&ea, 0, sizeof(ea));
	rc = mrc_ctl_query_ev_profile(A.mctx, GEN_ID, &ea, MRC_CTL_EV_PROFILE_CUR_STATE);
	note("unprivileged mrc_ctl_query_ev_profile: rc %d (%s)", rc, rc ? strerror(errno) : "ok");
}

/* ------------------------------------------------------------ main */

static void close_side(struct side *s)
{
	if (s->mr)
		ibv_dereg_mr(s->mr);
	free(s->buf);
	if (s->pd)
		ibv_dealloc_pd(s->pd);
	if (s->mctx)
		mrc_destroy_context(s->mctx);
	if (s->ctx)
		ibv_close_device(s->ctx);
}

static int alloc_mem(struct side *s)
{
	char what[200];

	s->pd = ibv_alloc_pd(s->ctx);
	s->buf = memalign(4096, BUF_LEN);
	if (!s->pd || !s->buf) {
		snprintf(what, sizeof(what), "%s: PD and buffer", s->name);
		report(0, what, "errno %d (%s)", errno, strerror(errno));
		return -1;
	}
	memset(s->buf, 0, BUF_LEN);
	s->mr = ibv_reg_mr(s->pd, s->buf, BUF_LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!s->mr) {
		snprintf(what, sizeof(what), "%s: ibv_reg_mr", s->name);
		report(0, what, "errno %d (%s)", errno, strerror(errno));
		return -1;
	}
	return 0;
}

static void usage(const char *prog)
{
	fprintf(stderr, "usage: %s [--expect-eperm] DEV_A DEV_B [IPV4_A IPV4_B]\n", prog);
}

int main(int argc, char **argv)
{
	struct ibv_device **list = NULL;
	const char *pos[4];
	struct pair pair;
	struct ibv_port_attr pa;
	uint32_t cur = 0, last = 0, vcur = 0, vlast = 0;
	int expect_eperm = 0, npos = 0, n = 0, i;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--expect-eperm"))
			expect_eperm = 1;
		else if (npos < 4)
			pos[npos++] = argv[i];
		else {
			usage(argv[0]);
			return 2;
		}
	}
	if (npos != 2 && npos != 4) {
		usage(argv[0]);
		return 2;
	}
	memset(&pair, 0, sizeof(pair));
	A.name = pos[0];
	B.name = pos[1];
	if (npos == 4) {
		struct in_addr probe;

		A.ip = pos[2];
		B.ip = pos[3];
		if (inet_pton(AF_INET, A.ip, &probe) != 1 || inet_pton(AF_INET, B.ip, &probe) != 1) {
			fprintf(stderr, "%s: IPV4_A and IPV4_B must be IPv4 addresses\n", argv[0]);
			return 2;
		}
	}

	/* (a) versions */
	mrc_ctl_query_version(&cur, &last, &vcur, &vlast);
	note("controller API %u.%u.%u (oldest %u.%u.%u), vendor %u.%u.%u (oldest %u.%u.%u); built for %u.%u.%u",
	     cur >> 24, (cur >> 16) & 0xff, cur & 0xffff, last >> 24, (last >> 16) & 0xff, last & 0xffff,
	     vcur >> 24, (vcur >> 16) & 0xff, vcur & 0xffff, vlast >> 24, (vlast >> 16) & 0xff, vlast & 0xffff,
	     MRC_CTL_API_VER_USED >> 24, (MRC_CTL_API_VER_USED >> 16) & 0xff, MRC_CTL_API_VER_USED & 0xffff);
	report(cur != 0 && last <= cur && last <= (uint32_t)MRC_CTL_API_VER_USED &&
	       (uint32_t)MRC_CTL_API_VER_USED <= cur,
	       "mrc_ctl_query_version: this program's controller API version is supported",
	       "current 0x%x, oldest 0x%x, used 0x%x", cur, last, (uint32_t)MRC_CTL_API_VER_USED);
	report(vcur != 0 && vlast <= vcur, "mrc_ctl_query_version: vendor versions are sane",
	       "current 0x%x, oldest 0x%x", vcur, vlast);

	list = ibv_get_device_list(&n);
	if (!list) {
		report(0, "ibv_get_device_list", "errno %d (%s)", errno, strerror(errno));
		goto out;
	}
	if (open_side(&A, list, n, expect_eperm) || open_side(&B, list, n, expect_eperm))
		goto out;
	if (alloc_mem(&A) || alloc_mem(&B))
		goto out;

	if (expect_eperm) {
		test_eperm();
		goto out;
	}

	memset(&pa, 0, sizeof(pa));
	if (!ibv_query_port(A.ctx, 1, &pa) && pa.active_mtu >= IBV_MTU_256 && pa.active_mtu <= IBV_MTU_4096)
		path_mtu = pa.active_mtu;
	memset(&pa, 0, sizeof(pa));
	if (!ibv_query_port(B.ctx, 1, &pa) && pa.active_mtu >= IBV_MTU_256 && pa.active_mtu < path_mtu)
		path_mtu = pa.active_mtu;

	for (i = 0; i < A.nports; i++) {
		struct mrc_ctl_port_attr p;
		char what[120];

		memset(&p, 0, sizeof(p));
		snprintf(what, sizeof(what), "A: mrc_ctl_query_port(%u) reads ENABLED", A.ports[i]);
		if (!quiet_ok(mrc_ctl_query_port(A.mctx, A.ports[i], &p, MRC_CTL_PORT_ADMIN_STATE), what))
			report(p.port_admin_state == MRC_CTL_PORT_ADMIN_ENABLED, what, "state %d", p.port_admin_state);
	}

	reset_profiles(&A);
	reset_profiles(&B);

	/* (b), (c) on both devices */
	A.profiles_ok = !setup_fmt(&A) && !setup_gen(&A);
	if (A.profiles_ok)
		test_exp(&A);
	A.profiles_ok = A.profiles_ok && !setup_cc(&A);
	B.profiles_ok = !setup_fmt(&B) && !setup_gen(&B) && !setup_cc(&B);
	if (!A.profiles_ok || !B.profiles_ok) {
		note("profiles incomplete: no traffic tests");
		goto cleanup;
	}

	test_contract(&A);

	/* (d) */
	if (make_pair(&pair))
		goto cleanup;
	if (write_and_check(&pair, 0, BIG_LEN, 0xB16, "1 MiB WRITE over the controller's profiles"))
		goto cleanup;
	expect_errno(set_ev_state(&A, GEN_ID, MRC_CTL_PROFILE_OFFLINE), EBUSY,
		     "A: the GEN EV profile refuses OFFLINE while a QP uses it (EBUSY)");
	check_state(ev_state(&A, GEN_ID), MRC_CTL_PROFILE_ONLINE, "A: the GEN EV profile is still ONLINE");
	expect_errno(set_cc_state(&A, MRC_CTL_PROFILE_OFFLINE), EBUSY,
		     "A: the CC profile refuses OFFLINE while a QP uses it (EBUSY)");

	/* (e), (g), (f) */
	test_deny(&pair);
	test_probes();
	test_events(&pair);

cleanup:
	destroy_pair(&pair);
	if (A.profiles_ok)
		delete_profiles(&A);
	else
		reset_profiles(&A);
	if (B.profiles_ok)
		delete_profiles(&B);
	else
		reset_profiles(&B);
out:
	close_side(&A);
	close_side(&B);
	if (list)
		ibv_free_device_list(list);
	printf("# %d passed, %d failed\n", n_pass, n_fail);
	return n_fail == 0 && n_pass > 0 ? 0 : 1;
}
