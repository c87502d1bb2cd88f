/*
 * api_test: exercises the MRC application API (mrc.h) of lib_mrc.so end to
 * end between two devices in one process.
 *
 *   api_test DEV_A DEV_B IPV4_A IPV4_B
 *
 * DEV_A is the requester and DEV_B the responder of every QP pair. Each
 * check prints "ok - <what>" or "not ok - <what>: <details>"; the exit
 * status is 0 only if every check passed. Every wait for a completion or an
 * event is bounded, so a hang shows up as a failure.
 *
 * Plain C11 (gnu11) against mrc.h, mrc_ctl.h and libibverbs' verbs.h only.
 */
#define _GNU_SOURCE

#include <mrc.h>
#include <mrc_ctl.h>
#include <infiniband/verbs.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tap.h"

#define PORT_NUM	1
#define GID_INDEX	3
#define TIMEOUT_MS	5000
#define QUIET_MS	200		/* how long "no completion" is watched */
#define SRC_LEN		(2u << 20)	/* requester's buffer */
#define DST_LEN		(2u << 20)	/* responder's buffer */
#define BIG_LEN		(1u << 20)	/* the multi-packet write */
#define SQ_DEPTH	64
#define RQ_DEPTH	64

/* ------------------------------------------------------------ reporting */

/*
 * Reports an API call by its return value. Verbs-style calls return an errno
 * value, MRC calls -1 with errno set; both are shown. Returns 0 on success.
 */
static int api(int rc, const char *what)
{
	int e = errno;

	if (rc == 0) {
		report(1, what, "%s", "");
		return 0;
	}
	report(0, what, "returned %d, errno %d (%s)", rc, e,
	       strerror(rc > 0 ? rc : e));
	return -1;
}

/* As api() for calls returning a pointer. */
static int api_ptr(const void *p, const char *what)
{
	int e = errno;

	if (p) {
		report(1, what, "%s", "");
		return 0;
	}
	report(0, what, "returned NULL, errno %d (%s)", e, strerror(e));
	return -1;
}

/* Quiet variants for repetitive setup: print only failures. */
static int step(int rc, const char *tag, const char *what)
{
	int e = errno;
	char buf[160];

	if (rc == 0)
		return 0;
	snprintf(buf, sizeof(buf), "%s: %s", tag, what);
	report(0, buf, "returned %d, errno %d (%s)", rc, e,
	       strerror(rc > 0 ? rc : e));
	return -1;
}

static int step_ptr(const void *p, const char *tag, const char *what)
{
	int e = errno;
	char buf[160];

	if (p)
		return 0;
	snprintf(buf, sizeof(buf), "%s: %s", tag, what);
	report(0, buf, "returned NULL, errno %d (%s)", e, strerror(e));
	return -1;
}

/* ------------------------------------------------------------ helpers */


/*
 * Collects up to n completions within timeout_ms. Returns how many were
 * found, or -1 if mrc_poll_cq() failed (reported under `what`).
 */
static int wait_cq(struct mrc_cq *cq, struct ibv_wc *wc, int n, int timeout_ms,
		   const char *what)
{
	double end = now_ms() + timeout_ms;
	int got = 0;

	while (got < n) {
		int r = mrc_poll_cq(cq, n - got, wc + got);

		if (r < 0) {
			int e = errno;

			report(0, what, "mrc_poll_cq returned %d, errno %d (%s)",
			       r, e, strerror(e));
			return -1;
		}
		got += r;
		if (got >= n || now_ms() > end)
			break;
		if (r == 0)
			sched_yield();
	}
	return got;
}

/* Number of completions that show up within ms (the CQ is drained). */
static int count_cq(struct mrc_cq *cq, int ms)
{
	struct ibv_wc wc[16];
	double end = now_ms() + ms;
	int total = 0;

	do {
		int r = mrc_poll_cq(cq, 16, wc);

		if (r < 0)
			return -1;
		total += r;
		if (r == 0)
			sched_yield();
	} while (now_ms() < end);
	return total;
}

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
	size_t i;

	for (i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (uint8_t)(x >> 24);
	}
}

/* Reports whether dst[0..n) equals src[0..n). */
static void check_bytes(const uint8_t *dst, const uint8_t *src, size_t n,
			const char *what)
{
	size_t i;

	__sync_synchronize();
	for (i = 0; i < n; i++)
		if (dst[i] != src[i])
			break;
	if (i == n)
		report(1, what, "%s", "");
	else
		report(0, what, "first difference at byte %zu of %zu: got 0x%02x, expected 0x%02x",
		       i, n, dst[i], src[i]);
}

static const char *wc_status(enum ibv_wc_status s)
{
	return ibv_wc_status_str(s);
}

static const char *qp_state_name(enum ibv_qp_state s)
{
	switch (s) {
	case IBV_QPS_RESET: return "RESET";
	case IBV_QPS_INIT: return "INIT";
	case IBV_QPS_RTR: return "RTR";
	case IBV_QPS_RTS: return "RTS";
	case IBV_QPS_SQD: return "SQD";
	case IBV_QPS_SQE: return "SQE";
	case IBV_QPS_ERR: return "ERR";
	default: return "?";
	}
}

static int mtu_bytes(enum ibv_mtu m)
{
	switch (m) {
	case IBV_MTU_256: return 256;
	case IBV_MTU_512: return 512;
	case IBV_MTU_1024: return 1024;
	case IBV_MTU_2048: return 2048;
	case IBV_MTU_4096: return 4096;
	default: return 0;
	}
}

static void gid_str(const union ibv_gid *g, char *buf, size_t len)
{
	if (!inet_ntop(AF_INET6, g->raw, buf, (socklen_t)len))
		snprintf(buf, len, "?");
}

/* ------------------------------------------------------------ objects */

struct side {
	const char *name;
	const char *ip;
	struct ibv_device *dev;
	struct ibv_context *ctx;
	struct mrc_context *mctx;
	struct ibv_pd *pd;
	union ibv_gid gid;
	enum ibv_mtu active_mtu;
	uint8_t *buf;
	size_t len;
	struct ibv_mr *mr;
};

struct pair {
	const char *tag;
	struct mrc_cq *cqa, *cqb;
	int own_cqs;
	struct mrc_qp *qa, *qb;
	uint32_t qpna, qpnb;
};

static struct side A, B;
static enum ibv_mtu path_mtu;

/* qp_access_flags every new QP gets at INIT (one test takes remote write away). */
static unsigned init_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

static int to_init(struct mrc_qp *qp)
{
	struct ibv_qp_attr a;
	struct mrc_qp_attr m;

	memset(&a, 0, sizeof(a));
	memset(&m, 0, sizeof(m));
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = PORT_NUM;
	a.qp_access_flags = init_access;
	return mrc_modify_qp(qp, &a,
			     IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			     IBV_QP_ACCESS_FLAGS, &m, 0);
}

static int to_rtr(struct mrc_qp *qp, uint32_t dest_qpn, uint32_t rq_psn,
		  const union ibv_gid *dgid)
{
	struct ibv_qp_attr a;
	struct mrc_qp_attr m;

	memset(&a, 0, sizeof(a));
	memset(&m, 0, sizeof(m));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = path_mtu;
	a.dest_qp_num = dest_qpn;
	a.rq_psn = rq_psn;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *dgid;
	a.ah_attr.grh.sgid_index = GID_INDEX;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = PORT_NUM;
	return mrc_modify_qp(qp, &a,
			     IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN |
			     IBV_QP_RQ_PSN | IBV_QP_PATH_MTU, &m, 0);
}

static int to_rts(struct mrc_qp *qp, uint32_t sq_psn)
{
	struct ibv_qp_attr a;
	struct mrc_qp_attr m;

	memset(&a, 0, sizeof(a));
	memset(&m, 0, sizeof(m));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = sq_psn;
	return mrc_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN, &m, 0);
}

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
	ia.sq_sig_all = 0;
	ia.pd = s->pd;
	ia.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE |
			    IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
	return mrc_create_qp(s->mctx, &ia);
}

/*
 * Brings up a QP pair A->B. `verbose` reports every step, otherwise only
 * failures and one summary line. CQs are created if none are given.
 */
static int make_pair(struct pair *p, const char *tag, struct mrc_cq *cqa,
		     struct mrc_cq *cqb, int verbose)
{
	static uint32_t psn_base = 0x1000;
	uint32_t psna = psn_base, psnb = psn_base + 0x80000;
	char what[160];

	psn_base += 0x100;
	memset(p, 0, sizeof(*p));
	p->tag = tag;
	if (!cqa) {
		p->own_cqs = 1;
		cqa = mrc_create_cq(A.mctx, 2 * SQ_DEPTH, NULL, NULL, 0);
		if (step_ptr(cqa, tag, "mrc_create_cq A"))
			return -1;
		cqb = mrc_create_cq(B.mctx, 2 * RQ_DEPTH, NULL, NULL, 0);
		p->cqa = cqa;
		if (step_ptr(cqb, tag, "mrc_create_cq B"))
			return -1;
	}
	p->cqa = cqa;
	p->cqb = cqb;

#define STEP(expr, label)						\
	do {								\
		int rc_ = (expr);					\
		snprintf(what, sizeof(what), "%s: %s", tag, label);	\
		if (verbose ? api(rc_, what) : step(rc_, tag, label))	\
			return -1;					\
	} while (0)
#define STEP_PTR(expr, label)						\
	do {								\
		const void *p_ = (expr);				\
		snprintf(what, sizeof(what), "%s: %s", tag, label);	\
		if (verbose ? api_ptr(p_, what) : step_ptr(p_, tag, label)) \
			return -1;					\
	} while (0)

	p->qa = create_qp(&A, cqa);
	STEP_PTR(p->qa, "mrc_create_qp A");
	p->qb = create_qp(&B, cqb);
	STEP_PTR(p->qb, "mrc_create_qp B");
	STEP(mrc_get_qpn(p->qa, &p->qpna), "mrc_get_qpn A");
	STEP(mrc_get_qpn(p->qb, &p->qpnb), "mrc_get_qpn B");
	if (verbose) {
		/* Two devices may hand out the same QPN; only 24 bits and non-zero are promised. */
		snprintf(what, sizeof(what), "%s: QPNs are 24-bit and non-zero", tag);
		report(p->qpna && p->qpnb &&
		       p->qpna <= 0xffffff && p->qpnb <= 0xffffff, what,
		       "A 0x%x B 0x%x", p->qpna, p->qpnb);
	}
	STEP(to_init(p->qa), "A RESET->INIT");
	STEP(to_init(p->qb), "B RESET->INIT");
	STEP(to_rtr(p->qa, p->qpnb, psnb, &B.gid), "A INIT->RTR");
	STEP(to_rtr(p->qb, p->qpna, psna, &A.gid), "B INIT->RTR");
	STEP(to_rts(p->qa, psna), "A RTR->RTS");
	STEP(to_rts(p->qb, psnb), "B RTR->RTS");
#undef STEP
#undef STEP_PTR
	if (!verbose) {
		snprintf(what, sizeof(what), "%s: fresh QP pair A 0x%x -> B 0x%x in RTS",
			 tag, p->qpna, p->qpnb);
		report(1, what, "%s", "");
	}
	return 0;
}

static void destroy_pair(struct pair *p)
{
	char what[160];

	if (p->qa) {
		snprintf(what, sizeof(what), "%s: mrc_destroy_qp A", p->tag);
		api(mrc_destroy_qp(p->qa), what);
	}
	if (p->qb) {
		snprintf(what, sizeof(what), "%s: mrc_destroy_qp B", p->tag);
		api(mrc_destroy_qp(p->qb), what);
	}
	if (p->own_cqs && p->cqa) {
		snprintf(what, sizeof(what), "%s: mrc_destroy_cq A", p->tag);
		api(mrc_destroy_cq(p->cqa), what);
	}
	if (p->own_cqs && p->cqb) {
		snprintf(what, sizeof(what), "%s: mrc_destroy_cq B", p->tag);
		api(mrc_destroy_cq(p->cqb), what);
	}
	memset(p, 0, sizeof(*p));
}

/* Posts one RDMA write (with or without immediate). Returns the post rc. */
static int post_write(struct mrc_qp *qp, uint64_t wr_id, uint64_t laddr,
		      uint32_t len, uint32_t lkey, uint64_t raddr,
		      uint32_t rkey, int signaled, int with_imm, uint32_t imm)
{
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad = NULL;

	memset(&sge, 0, sizeof(sge));
	memset(&wr, 0, sizeof(wr));
	sge.addr = laddr;
	sge.length = len;
	sge.lkey = lkey;
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
	wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
	wr.imm_data = htonl(imm);
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return mrc_post_send(qp, &wr, &bad);
}

static int post_recv0(struct mrc_qp *qp, uint64_t wr_id)
{
	struct ibv_recv_wr wr, *bad = NULL;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.sg_list = NULL;
	wr.num_sge = 0;
	return mrc_post_recv(qp, &wr, &bad);
}

#define A_ADDR(off)	((uint64_t)(uintptr_t)(A.buf + (off)))
#define B_ADDR(off)	((uint64_t)(uintptr_t)(B.buf + (off)))

/* Waits for one requester completion and checks it. */
static int expect_send_wc(struct pair *p, uint64_t wr_id, const char *what)
{
	struct ibv_wc wc;
	int n;

	memset(&wc, 0, sizeof(wc));
	n = wait_cq(p->cqa, &wc, 1, TIMEOUT_MS, what);
	if (n < 0)
		return -1;
	if (n == 0) {
		report(0, what, "no completion within %d ms", TIMEOUT_MS);
		return -1;
	}
	report(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE &&
	       wc.wr_id == wr_id && wc.qp_num == p->qpna, what,
	       "status %s (%d), opcode %d (want %d), wr_id 0x%" PRIx64 " (want 0x%" PRIx64
	       "), qp_num 0x%x (want 0x%x)",
	       wc_status(wc.status), wc.status, wc.opcode, IBV_WC_RDMA_WRITE,
	       wc.wr_id, wr_id, wc.qp_num, p->qpna);
	return wc.status == IBV_WC_SUCCESS ? 0 : -1;
}

/* Fresh anonymous pages no registration has touched; NULL (reported) if none. */
static uint8_t* fresh_pages(size_t len, int prot, const char* tag) {
  uint8_t* p = mmap(NULL, len, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

  if (p != MAP_FAILED) return p;
  report(0, tag, "mmap of %zu bytes failed", len);
  return NULL;
}

/* One signaled WRITE on the pair and its completion, reported under `what`. */
static void write_and_wait(struct pair *p, uint64_t wr_id, uint64_t laddr, uint32_t len, uint32_t lkey,
			   uint64_t raddr, uint32_t rkey, const char *what)
{
	if (!api(post_write(p->qa, wr_id, laddr, len, lkey, raddr, rkey, 1, 0, 0), what))
		expect_send_wc(p, wr_id, what);
}

static void expect_state(struct mrc_qp *qp, enum ibv_qp_state want,
			 const char *what)
{
	struct ibv_qp_attr a;
	struct mrc_qp_attr m;
	struct mrc_qp_init_attr ia;
	int rc, e;

	memset(&a, 0, sizeof(a));
	memset(&m, 0, sizeof(m));
	memset(&ia, 0, sizeof(ia));
	rc = mrc_query_qp(qp, &a, IBV_QP_STATE, &m, 0, &ia);
	e = errno;
	if (rc) {
		report(0, what, "mrc_query_qp returned %d, errno %d (%s)", rc, e,
		       strerror(rc > 0 ? rc : e));
		return;
	}
	report(a.qp_state == want, what, "state %s, expected %s",
	       qp_state_name(a.qp_state), qp_state_name(want));
}

/* ------------------------------------------------------------ tests */

static void test_write(struct pair *p)
{
	const uint32_t len = 4096;
	int rc, n;

	fill(A.buf, len, 1);
	memset(B.buf, 0, len);
	/* A receive posted now must survive the plain write and be consumed
	 * by the write with immediate of the next test. */
	api(post_recv0(p->qb, 0x2001), "mrc_post_recv (0 SGEs) on B");
	rc = post_write(p->qa, 0x1001, A_ADDR(0), len, A.mr->lkey, B_ADDR(0),
			B.mr->rkey, 1, 0, 0);
	if (api(rc, "mrc_post_send RDMA_WRITE 4096 B signaled"))
		return;
	if (expect_send_wc(p, 0x1001, "RDMA_WRITE requester completion (status, opcode, wr_id, qp_num)"))
		return;
	check_bytes(B.buf, A.buf, len, "RDMA_WRITE data placed at the destination");
	n = count_cq(p->cqb, QUIET_MS);
	report(n == 0, "RDMA_WRITE without immediate consumes no receive (responder CQ empty)",
	       "%d completion(s) on the responder CQ", n);
}

static void test_write_imm(struct pair *p)
{
	const uint32_t len = 1000, off = 8192, imm = 0xA1B2C3D4u;
	struct ibv_wc wc;
	int rc, n;

	fill(A.buf + off, len, 2);
	memset(B.buf + off, 0, len + 64);
	rc = post_write(p->qa, 0x1002, A_ADDR(off), len, A.mr->lkey,
			B_ADDR(off), B.mr->rkey, 1, 1, imm);
	if (api(rc, "mrc_post_send RDMA_WRITE_WITH_IMM 1000 B"))
		return;
	expect_send_wc(p, 0x1002, "RDMA_WRITE_WITH_IMM requester completion");
	memset(&wc, 0, sizeof(wc));
	n = wait_cq(p->cqb, &wc, 1, TIMEOUT_MS, "WRITE_WITH_IMM responder completion");
	if (n == 0)
		report(0, "WRITE_WITH_IMM responder completion", "none within %d ms", TIMEOUT_MS);
	if (n != 1)
		return;
	report(wc.status == IBV_WC_SUCCESS, "responder completion status SUCCESS",
	       "%s (%d)", wc_status(wc.status), wc.status);
	report(wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM,
	       "responder completion opcode IBV_WC_RECV_RDMA_WITH_IMM",
	       "opcode %d", wc.opcode);
	report(wc.wc_flags & IBV_WC_WITH_IMM, "responder completion has IBV_WC_WITH_IMM",
	       "wc_flags 0x%x", wc.wc_flags);
	report(ntohl(wc.imm_data) == imm, "responder completion imm_data as sent",
	       "0x%08x, expected 0x%08x", ntohl(wc.imm_data), imm);
	report(wc.byte_len == len, "responder completion byte_len = write length",
	       "%u, expected %u", wc.byte_len, len);
	report(wc.qp_num == p->qpnb, "responder completion qp_num = B's QPN",
	       "0x%x, expected 0x%x", wc.qp_num, p->qpnb);
	report(wc.wr_id == 0x2001, "responder completion wr_id = the receive's",
	       "0x%" PRIx64 ", expected 0x2001", wc.wr_id);
	check_bytes(B.buf + off, A.buf + off, len, "WRITE_WITH_IMM data placed");
	{
		static const uint8_t zero[64];

		check_bytes(B.buf + off + len, zero, 64,
			    "nothing placed past the end of the write");
	}
}

static void test_unsignaled(struct pair *p)
{
	const uint32_t len = 512, off1 = 16384, off2 = 20480;
	int rc, n;

	fill(A.buf + off1, len, 3);
	fill(A.buf + off2, len, 4);
	memset(B.buf + off1, 0, len);
	memset(B.buf + off2, 0, len);
	rc = post_write(p->qa, 0x1003, A_ADDR(off1), len, A.mr->lkey,
			B_ADDR(off1), B.mr->rkey, 0, 0, 0);
	if (api(rc, "mrc_post_send unsignaled RDMA_WRITE"))
		return;
	rc = post_write(p->qa, 0x1004, A_ADDR(off2), len, A.mr->lkey,
			B_ADDR(off2), B.mr->rkey, 1, 0, 0);
	if (api(rc, "mrc_post_send signaled RDMA_WRITE after it"))
		return;
	expect_send_wc(p, 0x1004, "only the signaled WR completes (wr_id of the second)");
	n = count_cq(p->cqa, QUIET_MS);
	report(n == 0, "no completion for the unsignaled WR", "%d extra completion(s)", n);
	check_bytes(B.buf + off1, A.buf + off1, len, "unsignaled write placed");
	check_bytes(B.buf + off2, A.buf + off2, len, "signaled write placed");
}

static void test_post_list(struct pair *p)
{
	struct ibv_sge sge[4];
	struct ibv_send_wr wr[4], *bad = NULL;
	struct ibv_wc wc[4];
	const uint32_t len = 256, off = 24576;
	int i, n, in_order = 1;

	memset(sge, 0, sizeof(sge));
	memset(wr, 0, sizeof(wr));
	fill(A.buf + off, 4 * len, 5);
	memset(B.buf + off, 0, 4 * len);
	for (i = 0; i < 4; i++) {
		sge[i].addr = A_ADDR(off + i * len);
		sge[i].length = len;
		sge[i].lkey = A.mr->lkey;
		wr[i].wr_id = 0x1100 + (uint64_t)i;
		wr[i].sg_list = &sge[i];
		wr[i].num_sge = 1;
		wr[i].opcode = IBV_WR_RDMA_WRITE;
		wr[i].send_flags = IBV_SEND_SIGNALED;
		wr[i].wr.rdma.remote_addr = B_ADDR(off + i * len);
		wr[i].wr.rdma.rkey = B.mr->rkey;
		wr[i].next = i < 3 ? &wr[i + 1] : NULL;
	}
	if (api(mrc_post_send(p->qa, wr, &bad), "mrc_post_send list of 4 WRs"))
		return;
	memset(wc, 0, sizeof(wc));
	n = wait_cq(p->cqa, wc, 4, TIMEOUT_MS, "list of 4 WRs completes");
	if (n < 0)
		return;
	for (i = 0; i < n; i++)
		if (wc[i].status != IBV_WC_SUCCESS || wc[i].wr_id != 0x1100 + (uint64_t)i)
			in_order = 0;
	report(n == 4 && in_order, "list of 4 WRs: 4 successful completions in posting order",
	       "%d completion(s)%s", n, in_order ? "" : ", wrong status or order");
	check_bytes(B.buf + off, A.buf + off, 4 * len, "list of 4 WRs placed");
}

static void test_blocking(struct pair *p, struct mrc_comp_channel *ch,
			  void *cq_ctx)
{
	struct mrc_cq *ev_cq = NULL;
	void *ev_ctx = NULL;
	struct pollfd pfd;
	const uint32_t len = 2048, off = 32768;
	int fd = -1, pr, rc;

	if (api(mrc_get_comp_channel_fd(ch, &fd), "mrc_get_comp_channel_fd"))
		return;
	report(fd >= 0, "completion channel fd is valid", "fd %d", fd);
	if (api(mrc_req_notify_cq(p->cqa, 0), "mrc_req_notify_cq on the channel CQ"))
		return;
	fill(A.buf + off, len, 6);
	rc = post_write(p->qa, 0x1005, A_ADDR(off), len, A.mr->lkey,
			B_ADDR(off), B.mr->rkey, 1, 0, 0);
	if (api(rc, "mrc_post_send signaled RDMA_WRITE (blocking wait)"))
		return;
	pfd.fd = fd;
	pfd.events = POLLIN;
	pfd.revents = 0;
	pr = poll(&pfd, 1, TIMEOUT_MS);
	report(pr == 1 && (pfd.revents & POLLIN), "completion channel fd becomes readable",
	       "poll returned %d (revents 0x%x) within %d ms", pr, pfd.revents, TIMEOUT_MS);
	if (pr != 1)
		return;	/* mrc_get_cq_event() would block */
	rc = mrc_get_cq_event(ch, &ev_cq, &ev_ctx);
	if (api(rc, "mrc_get_cq_event"))
		return;
	report(ev_cq == p->cqa && ev_ctx == cq_ctx,
	       "event names the channel CQ and its cq_context",
	       "cq %p (want %p), cq_context %p (want %p)", (void *)ev_cq,
	       (void *)p->cqa, ev_ctx, cq_ctx);
	mrc_ack_cq_events(p->cqa, 1);
	report(1, "mrc_ack_cq_events", "%s", "");
	expect_send_wc(p, 0x1005, "completion behind the event");
	check_bytes(B.buf + off, A.buf + off, len, "write behind the event placed");
}

/* Bad arguments to mrc_poll_cq() fail with -1 and errno EINVAL (mrc.h). */
static void test_poll_cq_args(struct mrc_cq *cq)
{
	struct ibv_wc wc;
	int rc;

	errno = 0;
	rc = mrc_poll_cq(cq, -1, &wc);
	report(rc == -1 && errno == EINVAL, "mrc_poll_cq with a negative count fails with EINVAL",
	       "returned %d, errno %d", rc, errno);
	errno = 0;
	rc = mrc_poll_cq(cq, 1, NULL);
	report(rc == -1 && errno == EINVAL, "mrc_poll_cq without an array fails with EINVAL",
	       "returned %d, errno %d", rc, errno);
	errno = 0;
	rc = mrc_poll_cq(NULL, 1, &wc);
	report(rc == -1 && errno == EINVAL, "mrc_poll_cq of a NULL CQ fails with EINVAL",
	       "returned %d, errno %d", rc, errno);
}

static struct mrc_cq *late_ack_cq;
static volatile int late_acked;

static void *ack_late(void *arg)
{
	(void)arg;
	usleep(300 * 1000);
	__atomic_store_n(&late_acked, 1, __ATOMIC_RELEASE);
	mrc_ack_cq_events(late_ack_cq, 1);
	return NULL;
}

/*
 * mrc_destroy_cq() waits for the event it handed out to be acked, here by
 * another thread, before it frees the CQ.
 */
static void test_destroy_waits_for_ack(void)
{
	struct mrc_comp_channel *ch = NULL;
	struct mrc_cq *cqa = NULL, *cqb = NULL, *ev_cq = NULL;
	struct pollfd pfd;
	struct pair p;
	pthread_t t;
	void *ev_ctx;
	int fd = -1, rc;

	memset(&p, 0, sizeof(p));
	if (step(mrc_create_comp_channel(A.mctx, &ch), "ack wait", "mrc_create_comp_channel"))
		return;
	cqa = mrc_create_cq(A.mctx, 2 * SQ_DEPTH, NULL, ch, 0);
	cqb = mrc_create_cq(B.mctx, 2 * RQ_DEPTH, NULL, NULL, 0);
	if (step_ptr(cqa, "ack wait", "mrc_create_cq A") || step_ptr(cqb, "ack wait", "mrc_create_cq B") ||
	    make_pair(&p, "ack wait", cqa, cqb, 0))
		goto out;
	mrc_get_comp_channel_fd(ch, &fd);
	if (step(mrc_req_notify_cq(cqa, 0), "ack wait", "mrc_req_notify_cq") ||
	    step(post_write(p.qa, 0x1A01, A_ADDR(0), 64, A.mr->lkey, B_ADDR(0), B.mr->rkey, 1, 0, 0),
		 "ack wait", "mrc_post_send"))
		goto out;
	pfd.fd = fd;
	pfd.events = POLLIN;
	if (poll(&pfd, 1, TIMEOUT_MS) != 1 || mrc_get_cq_event(ch, &ev_cq, &ev_ctx) || ev_cq != cqa) {
		report(0, "ack wait: an event on the channel", "errno %d", errno);
		goto out;
	}
	expect_send_wc(&p, 0x1A01, "ack wait: the completion behind the event");
	destroy_pair(&p);
	late_ack_cq = cqa;
	if (pthread_create(&t, NULL, ack_late, NULL)) {
		mrc_ack_cq_events(cqa, 1);
		goto out;
	}
	rc = mrc_destroy_cq(cqa);
	report(rc == 0 && __atomic_load_n(&late_acked, __ATOMIC_ACQUIRE),
	       "mrc_destroy_cq waits for an outstanding event to be acked",
	       "returned %d %s the ack", rc, late_acked ? "after" : "before");
	cqa = NULL;
	pthread_join(t, NULL);
out:
	destroy_pair(&p);
	if (cqa)
		mrc_destroy_cq(cqa);
	if (cqb)
		mrc_destroy_cq(cqb);
	if (ch)
		mrc_destroy_comp_channel(ch);
}

static void test_query(struct pair *p)
{
	struct ibv_qp_attr a;
	struct mrc_qp_attr m;
	struct mrc_qp_init_attr ia;
	int rc, e;

	memset(&a, 0, sizeof(a));
	memset(&m, 0, sizeof(m));
	memset(&ia, 0, sizeof(ia));
	rc = mrc_query_qp(p->qa, &a, IBV_QP_STATE | IBV_QP_DEST_QPN | IBV_QP_PATH_MTU,
			  &m, 0, &ia);
	e = errno;
	if (rc) {
		report(0, "mrc_query_qp A", "returned %d, errno %d (%s)", rc, e,
		       strerror(rc > 0 ? rc : e));
		return;
	}
	report(1, "mrc_query_qp A", "%s", "");
	report(a.qp_state == IBV_QPS_RTS, "A state is RTS", "%s", qp_state_name(a.qp_state));
	report(a.dest_qp_num == p->qpnb, "A dest_qp_num is B's QPN", "0x%x, expected 0x%x",
	       a.dest_qp_num, p->qpnb);
	report(a.path_mtu == path_mtu, "A path_mtu as set", "%d, expected %d",
	       mtu_bytes(a.path_mtu), mtu_bytes(path_mtu));

	memset(&a, 0, sizeof(a));
	rc = mrc_query_qp(p->qb, &a, IBV_QP_STATE | IBV_QP_DEST_QPN, &m, 0, &ia);
	e = errno;
	if (rc) {
		report(0, "mrc_query_qp B", "returned %d, errno %d (%s)", rc, e,
		       strerror(rc > 0 ? rc : e));
		return;
	}
	report(a.qp_state == IBV_QPS_RTS, "B state is RTS", "%s", qp_state_name(a.qp_state));
	report(a.dest_qp_num == p->qpna, "B dest_qp_num is A's QPN", "0x%x, expected 0x%x",
	       a.dest_qp_num, p->qpna);
}

static void test_big(struct pair *p)
{
	const uint32_t off = BIG_LEN;	/* destination offset */
	int rc;

	fill(A.buf, BIG_LEN, 7);
	memset(B.buf + off, 0, BIG_LEN);
	rc = post_write(p->qa, 0x1006, A_ADDR(0), BIG_LEN, A.mr->lkey,
			B_ADDR(off), B.mr->rkey, 1, 0, 0);
	if (api(rc, "mrc_post_send 1 MiB RDMA_WRITE (multi-packet)"))
		return;
	if (expect_send_wc(p, 0x1006, "1 MiB RDMA_WRITE completes"))
		return;
	check_bytes(B.buf + off, A.buf, BIG_LEN, "1 MiB RDMA_WRITE placed byte for byte");
}

/* A key that none of our registrations uses. */
static uint32_t bogus_key(uint32_t k)
{
	uint32_t b = k ^ 0x00A5A500u;

	while (b == A.mr->lkey || b == A.mr->rkey || b == B.mr->lkey || b == B.mr->rkey)
		b += 0x01000000u;
	return b;
}

/*
 * One negative case on a fresh pair: post the WR, expect an error
 * completion (`want`, or any error if want is IBV_WC_GENERAL_ERR and
 * any_error is set), then the QP in ERR and a later WR flushed.
 */
static void negative(const char *tag, uint64_t laddr, uint32_t len, uint32_t lkey,
		     uint64_t raddr, uint32_t rkey, enum ibv_wc_status want,
		     int any_error, const uint8_t *guard, size_t guard_len)
{
	struct pair p;
	struct ibv_wc wc;
	uint8_t before[64];
	char what[200];
	int n, rc;

	if (make_pair(&p, tag, NULL, NULL, 0)) {
		destroy_pair(&p);
		return;
	}
	if (guard)
		memcpy(before, guard, guard_len);
	rc = post_write(p.qa, 0xE001, laddr, len, lkey, raddr, rkey, 1, 0, 0);
	snprintf(what, sizeof(what), "%s: WR completes with %s", tag,
		 any_error ? "an error status" : wc_status(want));
	if (rc) {
		int e = errno;

		report(0, what, "mrc_post_send rejected it: returned %d, errno %d (%s)",
		       rc, e, strerror(rc > 0 ? rc : e));
		destroy_pair(&p);
		return;
	}
	memset(&wc, 0, sizeof(wc));
	n = wait_cq(p.cqa, &wc, 1, TIMEOUT_MS, what);
	if (n == 0)
		report(0, what, "no completion within %d ms", TIMEOUT_MS);
	if (n == 1) {
		if (any_error)
			report(wc.status != IBV_WC_SUCCESS && wc.wr_id == 0xE001, what,
			       "status %s (%d), wr_id 0x%" PRIx64, wc_status(wc.status),
			       wc.status, wc.wr_id);
		else
			report(wc.status == want && wc.wr_id == 0xE001, what,
			       "status %s (%d), wr_id 0x%" PRIx64, wc_status(wc.status),
			       wc.status, wc.wr_id);
		if (any_error && wc.status != IBV_WC_SUCCESS)
			printf("# %s: completion status was %s\n", tag, wc_status(wc.status));
	}
	if (guard) {
		__sync_synchronize();
		snprintf(what, sizeof(what), "%s: no bytes placed at the target", tag);
		report(memcmp(before, guard, guard_len) == 0, what, "destination bytes changed");
	}
	snprintf(what, sizeof(what), "%s: mrc_query_qp reports IBV_QPS_ERR", tag);
	expect_state(p.qa, IBV_QPS_ERR, what);

	/* A valid WR on the errored QP is flushed. */
	rc = post_write(p.qa, 0xE002, A_ADDR(0), 64, A.mr->lkey, B_ADDR(0),
			B.mr->rkey, 1, 0, 0);
	snprintf(what, sizeof(what), "%s: a later WR completes IBV_WC_WR_FLUSH_ERR", tag);
	if (rc) {
		int e = errno;

		report(0, what, "mrc_post_send returned %d, errno %d (%s)", rc, e,
		       strerror(rc > 0 ? rc : e));
	} else {
		memset(&wc, 0, sizeof(wc));
		n = wait_cq(p.cqa, &wc, 1, TIMEOUT_MS, what);
		if (n == 0)
			report(0, what, "no completion within %d ms", TIMEOUT_MS);
		else if (n == 1)
			report(wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == 0xE002, what,
			       "status %s (%d), wr_id 0x%" PRIx64, wc_status(wc.status),
			       wc.status, wc.wr_id);
	}
	destroy_pair(&p);
}

/*
 * Memory from ordinary allocators, and keys that must not reach across
 * access rights, protection domains or clients.
 */
static void test_allocators_and_isolation(void)
{
	const size_t len = 1 << 20;
	uint8_t *src = malloc(len);
	uint8_t *dst = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint8_t *ro = malloc(len);
	uint8_t *other = malloc(len);
	struct ibv_mr *msrc = NULL, *mdst = NULL, *mro = NULL, *mother = NULL, *mforeign = NULL;
	struct ibv_pd *pd2 = NULL, *fpd = NULL;
	struct ibv_context *fctx = NULL;
	uint8_t *foreign = NULL;
	struct pair p;
	struct ibv_wc wc;

	if (!src || dst == MAP_FAILED || !ro || !other) {
		report(0, "allocators: buffers", "out of memory");
		goto out;
	}
	fill(src, len, 77);
	memset(dst, 0, len);
	msrc = ibv_reg_mr(A.pd, src, len, IBV_ACCESS_LOCAL_WRITE);
	report(msrc != NULL, "allocators: ibv_reg_mr of a malloc'd buffer", "errno %d", errno);
	mdst = ibv_reg_mr(B.pd, dst, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	report(mdst != NULL, "allocators: ibv_reg_mr of an mmap'd buffer", "errno %d", errno);
	if (!msrc || !mdst || make_pair(&p, "allocators", NULL, NULL, 0))
		goto out;
	if (post_write(p.qa, 0xA1, (uintptr_t)src, (uint32_t)len, msrc->lkey, (uintptr_t)dst,
		       mdst->rkey, 1, 0, 0) == 0 && wait_cq(p.cqa, &wc, 1, TIMEOUT_MS, "allocators") == 1) {
		report(wc.status == IBV_WC_SUCCESS, "allocators: 1 MiB WRITE from malloc'd to mmap'd memory",
		       "status %s", wc_status(wc.status));
		__sync_synchronize();
		check_bytes(dst, src, len, "allocators: bytes placed in the mmap'd buffer");
	} else {
		report(0, "allocators: 1 MiB WRITE from malloc'd to mmap'd memory", "no completion");
	}
	destroy_pair(&p);

	/* A region registered without remote write refuses remote writes. */
	memset(ro, 0x5c, 64);
	mro = ibv_reg_mr(B.pd, ro, len, IBV_ACCESS_LOCAL_WRITE);
	if (report(mro != NULL, "isolation: ibv_reg_mr without remote write", "errno %d", errno), mro)
		negative("rkey of a region without remote write", A_ADDR(0), 64, A.mr->lkey, (uintptr_t)ro,
			 mro->rkey, IBV_WC_REM_ACCESS_ERR, 0, ro, 64);

	/* An lkey from another protection domain of the same client. */
	pd2 = ibv_alloc_pd(A.ctx);
	if (pd2)
		mother = ibv_reg_mr(pd2, other, len, IBV_ACCESS_LOCAL_WRITE);
	if (report(mother != NULL, "isolation: a region in a second PD", "errno %d", errno), mother)
		negative("lkey of another PD", (uintptr_t)other, 64, mother->lkey, B_ADDR(0), B.mr->rkey,
			 IBV_WC_LOC_PROT_ERR, 0, NULL, 0);

	/* Another client's region on the responder's device, rkey and all. */
	fctx = ibv_open_device(B.dev);
	if (fctx)
		fpd = ibv_alloc_pd(fctx);
	foreign = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (fpd && foreign != MAP_FAILED) {
		memset(foreign, 0x5c, 64);
		mforeign = ibv_reg_mr(fpd, foreign, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	}
	if (report(mforeign != NULL, "isolation: a second client registers a region on the responder's device",
		   "errno %d", errno), mforeign)
		negative("another client's rkey", A_ADDR(0), 64, A.mr->lkey, (uintptr_t)foreign, mforeign->rkey,
			 IBV_WC_REM_ACCESS_ERR, 0, foreign, 64);
out:
	if (mforeign)
		api(ibv_dereg_mr(mforeign), "isolation: ibv_dereg_mr (second client)");
	if (fpd)
		api(ibv_dealloc_pd(fpd), "isolation: ibv_dealloc_pd (second client)");
	if (fctx)
		api(ibv_close_device(fctx), "isolation: ibv_close_device (second client)");
	if (mother)
		api(ibv_dereg_mr(mother), "isolation: ibv_dereg_mr (second PD)");
	if (pd2)
		api(ibv_dealloc_pd(pd2), "isolation: ibv_dealloc_pd (second PD)");
	if (mro)
		api(ibv_dereg_mr(mro), "isolation: ibv_dereg_mr (no remote write)");
	if (msrc)
		api(ibv_dereg_mr(msrc), "allocators: ibv_dereg_mr (malloc)");
	if (mdst)
		api(ibv_dereg_mr(mdst), "allocators: ibv_dereg_mr (mmap)");
	free(src);
	free(ro);
	free(other);
	if (dst != MAP_FAILED)
		munmap(dst, len);
	if (foreign && foreign != MAP_FAILED)
		munmap(foreign, len);
}

/*
 * Verbs semantics of the SQ: a slot is free only once a completion at or
 * after it has been polled, so posting without polling stops at the SQ's
 * depth (ENOMEM) and a CQ as deep as the SQ never overruns.
 */
static void test_sq_accounting(void)
{
	struct pair p;
	struct ibv_wc wc[SQ_DEPTH];
	int posted = 0, rc = 0, got = 0;
	double t0;

	if (make_pair(&p, "SQ accounting", NULL, NULL, 0)) {
		destroy_pair(&p);
		return;
	}
	while (posted < 4 * SQ_DEPTH) {
		rc = post_write(p.qa, 0x5000 + posted, A_ADDR(0), 64, A.mr->lkey, B_ADDR(0), B.mr->rkey, 1, 0, 0);
		if (rc)
			break;
		posted++;
	}
	report(rc == ENOMEM && posted == SQ_DEPTH, "SQ accounting: posting without polling stops at the SQ depth with ENOMEM",
	       "%d posted, then rc %d", posted, rc);
	/* Let every completion land, then poll them all: the CQ held them. */
	t0 = now_ms();
	while (got < posted && now_ms() - t0 < TIMEOUT_MS) {
		int n = mrc_poll_cq(p.cqa, SQ_DEPTH, wc);
		if (n < 0)
			break;
		for (int i = 0; i < n; ++i)
			if (wc[i].status != IBV_WC_SUCCESS || wc[i].wr_id != (uint64_t)(0x5000 + got + i))
				n = -1;
		if (n < 0)
			break;
		got += n;
	}
	report(got == posted, "SQ accounting: every completion polled, in order, none lost", "%d of %d", got, posted);
	rc = post_write(p.qa, 0x6000, A_ADDR(0), 64, A.mr->lkey, B_ADDR(0), B.mr->rkey, 1, 0, 0);
	report(rc == 0, "SQ accounting: polling freed the slots (posting works again)", "rc %d", rc);
	if (rc == 0)
		wait_cq(p.cqa, wc, 1, TIMEOUT_MS, "SQ accounting");
	destroy_pair(&p);
}

/*
 * A zero-length WRITE touches no memory, so its R_Key and address need not
 * be valid (IBTA C9-88, as Linux rxe does): it completes, and with an
 * immediate it still delivers the immediate.
 */
static void test_zero_length_any_key(void)
{
	struct pair p;
	struct ibv_wc wc;
	int n;

	if (make_pair(&p, "zero length", NULL, NULL, 0)) {
		destroy_pair(&p);
		return;
	}
	write_and_wait(&p, 0x7301, A_ADDR(0), 0, A.mr->lkey, 0xdead0000beef0000ull, bogus_key(B.mr->rkey),
		       "zero length: WRITE with a bogus R_Key and address completes");
	api(post_recv0(p.qb, 0x7302), "zero length: a receive posted");
	if (!api(post_write(p.qa, 0x7303, A_ADDR(0), 0, A.mr->lkey, 0, 0, 1, 1, 0x5a5a), "zero length: WRITE_IMM, key 0"))
		expect_send_wc(&p, 0x7303, "zero length: WRITE_IMM with R_Key 0 completes");
	n = wait_cq(p.cqb, &wc, 1, TIMEOUT_MS, "zero length: the responder's completion");
	report(n == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 0x7302 && (wc.wc_flags & IBV_WC_WITH_IMM) &&
		       ntohl(wc.imm_data) == 0x5a5a && wc.byte_len == 0,
	       "zero length: the immediate arrives, 0 bytes", "%d completion(s), status %d, imm 0x%x", n,
	       n == 1 ? (int)wc.status : -1, n == 1 ? ntohl(wc.imm_data) : 0);
	destroy_pair(&p);
}

static long shmem_kb(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[128];
	long kb = -1;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "Shmem: %ld kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb;
}

/* Keeps WRITEs flowing on a pair until told to stop (test_dereg_while_streaming). */
struct streamer {
	struct pair *p;
	volatile int stop;
	int posted, completed, errors;
};

static void *stream_writes(void *arg)
{
	struct streamer *s = arg;
	struct ibv_wc wc[16];
	double give_up = now_ms() + 30000;
	int inflight = 0, i, n;

	while ((!s->stop || inflight) && now_ms() < give_up) {
		while (!s->stop && inflight < SQ_DEPTH / 2 &&
		       post_write(s->p->qa, 0x7600, A_ADDR(0), 1 << 20, A.mr->lkey, B_ADDR(0), B.mr->rkey, 1, 0, 0) == 0) {
			inflight++;
			s->posted++;
		}
		n = mrc_poll_cq(s->p->cqa, 16, wc);
		if (n < 0) {
			s->errors++;
			break;
		}
		for (i = 0; i < n; i++)
			s->errors += wc[i].status != IBV_WC_SUCCESS;
		inflight -= n;
		s->completed += n;
	}
	s->errors += inflight;
	return NULL;
}

/*
 * Memory deregistered while another QP of the client streams is given back
 * once the WRs posted before the deregistration complete: it was held until
 * every QP of the client was idle at the moment of some later call, that is
 * for as long as the stream went on.
 */
static void test_dereg_while_streaming(struct pair *p)
{
	enum { kRounds = 6 };
	const size_t big = (size_t)64 << 20;
	struct streamer s = {p, 0, 0, 0, 0};
	pthread_t t;
	long before = shmem_kb(), after;
	int round, bad = 0;

	if (pthread_create(&t, NULL, stream_writes, &s) != 0) {
		report(0, "dereg while streaming: a streaming thread", "errno %d", errno);
		return;
	}
	usleep(50 * 1000);
	for (round = 0; round < kRounds; round++) {
		uint8_t *mem = malloc(big);
		struct ibv_mr *mr = NULL;

		if (mem) {
			memset(mem, round, big);
			mr = ibv_reg_mr(A.pd, mem, big, IBV_ACCESS_LOCAL_WRITE); /* the streaming QP's client */
		}
		bad |= !mr;
		if (mr)
			ibv_dereg_mr(mr);
		free(mem);
	}
	usleep(300 * 1000); /* still streaming; the NIC looks again every 10 ms while it holds any */
	after = shmem_kb();
	s.stop = 1;
	pthread_join(t, NULL);
	printf("# dereg while streaming: %d WRITEs, shared memory %ld -> %ld kB\n", s.completed, before, after);
	report(!bad && s.errors == 0 && s.completed == s.posted && s.posted > 0,
	       "dereg while streaming: every WRITE and registration went through", "%d of %d completed, %d errors",
	       s.completed, s.posted, s.errors);
	report(before >= 0 && after - before < (long)(big >> 10), "dereg while streaming: the NIC gave the memory back",
	       "shared memory grew by %ld MiB over %d deregistrations of %zu MiB", (after - before) >> 10, kRounds,
	       big >> 20);
}

/* A region whose I/O addresses end exactly at 2^64 registers, and its last bytes take a WRITE. */
static void test_region_at_top(struct pair *p)
{
	const size_t len = 65536;
	uint8_t *mem = fresh_pages(len, PROT_READ | PROT_WRITE, "region at 2^64: fresh pages");
	struct ibv_mr *mr;

	if (!mem)
		return;
	mr = ibv_reg_mr_iova(B.pd, mem, len, (uint64_t)0 - len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!api_ptr(mr, "region at 2^64: ibv_reg_mr_iova ending at 2^64")) {
		fill(A.buf, 64, 41);
		write_and_wait(p, 0x7401, A_ADDR(0), 64, A.mr->lkey, (uint64_t)0 - 64, mr->rkey,
			       "region at 2^64: WRITE to its last 64 bytes");
		check_bytes(mem + len - 64, A.buf, 64, "region at 2^64: the bytes are at the region's end");
		api(ibv_dereg_mr(mr), "region at 2^64: ibv_dereg_mr");
	}
	munmap(mem, len);
}

/*
 * The device holds as many memory regions as ibv_query_device says (its
 * table is the device's, for all clients), refuses the next with ENOMEM,
 * and takes regions again once some are freed.
 */
static void test_mr_limit(void)
{
	struct ibv_device_attr attr;
	struct ibv_mr **mrs;
	int i, n = 0, max, e = 0;

	if (api(ibv_query_device(A.ctx, &attr), "MR limit: ibv_query_device"))
		return;
	max = attr.max_mr;
	mrs = calloc((size_t)max + 1, sizeof(*mrs));
	if (!mrs || max <= 0 || max > (1 << 20)) {
		report(0, "MR limit: max_mr is usable", "max_mr %d", max);
		free(mrs);
		return;
	}
	for (i = 0; i <= max; i++) {
		mrs[i] = ibv_reg_mr(A.pd, A.buf, 4096, IBV_ACCESS_LOCAL_WRITE);
		if (!mrs[i]) {
			e = errno;
			break;
		}
		n++;
	}
	/* A.mr is one of the device's regions already. */
	report(n == max - 1 && e == ENOMEM, "MR limit: max_mr regions in all, then ENOMEM",
	       "%d more after A's own, of max_mr %d; errno %d", n, max, e);
	for (i = 0; i < n; i++)
		ibv_dereg_mr(mrs[i]);
	mrs[0] = ibv_reg_mr(A.pd, A.buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	report(mrs[0] != NULL, "MR limit: freed regions register again", "errno %d", errno);
	if (mrs[0])
		ibv_dereg_mr(mrs[0]);
	free(mrs);
}

/*
 * RESET empties a QP's queues, as in verbs: WRs outstanding at the move never
 * complete, and back in RTS the whole SQ is free again (the slots the NIC
 * dropped used to stay taken: ENOMEM for good).
 */
static void test_reset_empties_queues(void)
{
	struct pair p;
	struct ibv_wc wc[SQ_DEPTH];
	struct ibv_qp_attr reset;
	int posted = 0, rc = 0, n, good = 0, i;

	if (make_pair(&p, "RESET", NULL, NULL, 0)) {
		destroy_pair(&p);
		return;
	}
	/* Without the peer's QP nothing posted now is acknowledged before the move. */
	api(mrc_destroy_qp(p.qb), "RESET: the peer's QP destroyed");
	p.qb = NULL;
	while (posted < SQ_DEPTH &&
	       !(rc = post_write(p.qa, 0x7000 + posted, A_ADDR(0), 64, A.mr->lkey, B_ADDR(0), B.mr->rkey, 1, 0, 0)))
		posted++;
	report(posted == SQ_DEPTH, "RESET: a full SQ posted", "%d posted, then rc %d", posted, rc);
	memset(&reset, 0, sizeof(reset));
	reset.qp_state = IBV_QPS_RESET;
	api(mrc_modify_qp(p.qa, &reset, IBV_QP_STATE, NULL, 0), "RESET: RTS->RESET with the SQ full");
	n = count_cq(p.cqa, QUIET_MS);
	report(n == 0, "RESET: the WRs outstanding at the move never complete", "%d completion(s)", n);
	p.qb = create_qp(&B, p.cqb);
	if (api_ptr(p.qb, "RESET: a new peer QP") || api(mrc_get_qpn(p.qb, &p.qpnb), "RESET: its QPN") ||
	    api(to_init(p.qa), "RESET: RESET->INIT") || api(to_init(p.qb), "RESET: peer RESET->INIT") ||
	    api(to_rtr(p.qa, p.qpnb, 0x3000, &B.gid), "RESET: INIT->RTR") ||
	    api(to_rtr(p.qb, p.qpna, 0x2000, &A.gid), "RESET: peer INIT->RTR") || api(to_rts(p.qa, 0x2000), "RESET: RTR->RTS") ||
	    api(to_rts(p.qb, 0x3000), "RESET: peer RTR->RTS")) {
		destroy_pair(&p);
		return;
	}
	posted = 0;
	while (posted < SQ_DEPTH &&
	       !(rc = post_write(p.qa, 0x7100 + posted, A_ADDR(0), 64, A.mr->lkey, B_ADDR(0), B.mr->rkey, 1, 0, 0)))
		posted++;
	report(posted == SQ_DEPTH, "RESET: back in RTS, every SQ slot is free", "%d posted, then rc %d", posted, rc);
	n = wait_cq(p.cqa, wc, posted, TIMEOUT_MS, "RESET: completions after RTS");
	for (i = 0; i < n; i++)
		good += wc[i].status == IBV_WC_SUCCESS && wc[i].wr_id == (uint64_t)(0x7100 + i);
	report(good == posted, "RESET: those WRs complete, in order", "%d of %d", good, posted);
	destroy_pair(&p);
}

/* Waits for an async event of `type` on `element` (a QP or CQ), skipping others. */
static int wait_async(struct side *s, enum ibv_event_type type, const void *element, int timeout_ms)
{
	struct pollfd pf = {.fd = s->ctx->async_fd, .events = POLLIN};
	struct mrc_async_event ev;
	int found = 0;

	while (!found && poll(&pf, 1, timeout_ms) == 1) {
		if (mrc_get_async_event(s->mctx, &ev))
			break;
		found = ev.event_type == type &&
			(type == IBV_EVENT_CQ_ERR ? (const void *)ev.element.cq : (const void *)ev.element.qp) == element;
		mrc_ack_async_event(&ev);
	}
	return found;
}

/*
 * A CQ overrun fails the CQ and, as in verbs, takes the QPs that complete to
 * it to ERROR: left in RTS they kept sending while the slots whose
 * completions were lost stayed taken.
 */
static void test_cq_overflow(void)
{
	struct pair p = {0};
	struct mrc_cq *small = mrc_create_cq(A.mctx, 4, NULL, NULL, 0);
	struct mrc_cq *cqb = mrc_create_cq(B.mctx, 2 * RQ_DEPTH, NULL, NULL, 0);
	struct ibv_wc wc;
	int posted = 0, rc;

	if (api_ptr(small, "CQ overrun: a CQ of 4") || api_ptr(cqb, "CQ overrun: the peer's CQ") ||
	    make_pair(&p, "CQ overrun", small, cqb, 0))
		goto out;
	while (posted < 8 && !post_write(p.qa, 0x8000 + posted, A_ADDR(0), 64, A.mr->lkey, B_ADDR(0), B.mr->rkey, 1, 0, 0))
		posted++;
	report(posted == 8, "CQ overrun: 8 signaled WRs posted to a QP whose CQ holds 4", "%d posted", posted);
	report(wait_async(&A, IBV_EVENT_CQ_ERR, small, TIMEOUT_MS), "CQ overrun: IBV_EVENT_CQ_ERR for the CQ",
	       "no such event within %d ms", TIMEOUT_MS);
	report(wait_async(&A, IBV_EVENT_QP_FATAL, p.qa, TIMEOUT_MS), "CQ overrun: IBV_EVENT_QP_FATAL for its QP",
	       "no such event within %d ms", TIMEOUT_MS);
	expect_state(p.qa, IBV_QPS_ERR, "CQ overrun: mrc_query_qp reports IBV_QPS_ERR");
	while ((rc = mrc_poll_cq(small, 1, &wc)) > 0)
		;
	report(rc < 0 && errno == EOVERFLOW, "CQ overrun: mrc_poll_cq fails with EOVERFLOW once drained",
	       "returned %d, errno %d", rc, errno);
out:
	destroy_pair(&p);
	if (small)
		mrc_destroy_cq(small);
	if (cqb)
		mrc_destroy_cq(cqb);
}

/*
 * RTS->RTS may change the access flags alone, as in verbs, and the change
 * holds: remote writes stop once the responder takes them away (with the
 * state in the mask and without). Attributes the QP took on its way to RTS
 * are refused there, not reported by query and never used.
 */
static void test_access_in_rts(void)
{
	static const char *forms[2] = {"RTS->RTS", "modify without a state"};
	struct pair p;
	struct ibv_qp_attr a, q;
	struct mrc_qp_attr m;
	struct mrc_qp_init_attr init;
	struct ibv_wc wc;
	char what[160];
	int form, n, rc;

	for (form = 0; form < 2; form++) {
		if (make_pair(&p, forms[form], NULL, NULL, 0)) {
			destroy_pair(&p);
			return;
		}
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_RTS;
		a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
		snprintf(what, sizeof(what), "%s: the responder's remote write taken away", forms[form]);
		api(mrc_modify_qp(p.qb, &a, (form == 0 ? IBV_QP_STATE : 0) | IBV_QP_ACCESS_FLAGS, NULL, 0), what);
		memset(&q, 0, sizeof(q));
		rc = mrc_query_qp(p.qb, &q, IBV_QP_ACCESS_FLAGS, NULL, 0, &init);
		snprintf(what, sizeof(what), "%s: query reports the new access flags", forms[form]);
		report(rc == 0 && q.qp_access_flags == IBV_ACCESS_LOCAL_WRITE, what, "rc %d, flags 0x%x", rc,
		       q.qp_access_flags);
		memset(B.buf + 12288, 0x5c, 64);
		rc = post_write(p.qa, 0x7201, A_ADDR(0), 64, A.mr->lkey, B_ADDR(12288), B.mr->rkey, 1, 0, 0);
		n = rc ? 0 : wait_cq(p.cqa, &wc, 1, TIMEOUT_MS, what);
		snprintf(what, sizeof(what), "%s: a WRITE to it fails with a remote access error", forms[form]);
		report(n == 1 && wc.status == IBV_WC_REM_ACCESS_ERR, what, "rc %d, %d completion(s), status %d", rc, n,
		       n == 1 ? (int)wc.status : -1);
		snprintf(what, sizeof(what), "%s: and leaves the responder's bytes alone", forms[form]);
		report(B.buf[12288] == 0x5c && B.buf[12288 + 63] == 0x5c, what, "byte 0x%02x", B.buf[12288]);
		destroy_pair(&p);
	}

	if (make_pair(&p, "attributes past their move", NULL, NULL, 0)) {
		destroy_pair(&p);
		return;
	}
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.path_mtu = IBV_MTU_256;
	errno = 0;
	rc = mrc_modify_qp(p.qa, &a, IBV_QP_STATE | IBV_QP_PATH_MTU, NULL, 0);
	report(rc == EINVAL, "RTS->RTS with a path MTU is refused (EINVAL)", "rc %d", rc);
	memset(&m, 0, sizeof(m));
	m.timeout = 3;
	rc = mrc_modify_qp(p.qa, &a, IBV_QP_STATE, &m, MRC_QP_TIMEOUT);
	report(rc == EINVAL, "RTS->RTS with MRC_QP_TIMEOUT is refused (EINVAL)", "rc %d", rc);
	memset(&q, 0, sizeof(q));
	memset(&m, 0, sizeof(m));
	rc = mrc_query_qp(p.qa, &q, IBV_QP_PATH_MTU, &m, MRC_QP_TIMEOUT, &init);
	report(rc == 0 && q.path_mtu == path_mtu && m.timeout != 3, "query still reports the attributes in use",
	       "rc %d, path MTU %d, timeout %u", rc, mtu_bytes(q.path_mtu), m.timeout);
	write_and_wait(&p, 0x7202, A_ADDR(0), 64, A.mr->lkey, B_ADDR(12288), B.mr->rkey,
		       "attributes past their move: the QP still works");
	destroy_pair(&p);
}

/*
 * One buffer registered through several contexts, as a multi-rail program
 * registers it on each NIC: every registration keeps placing into, and
 * sending from, the program's own bytes, also after the others are gone.
 */
static void test_shared_registrations(struct pair *p)
{
	const uint32_t len = 4096, at = 65536;
	struct ibv_context *ctx2 = ibv_open_device(B.dev);
	struct ibv_pd *pd2 = ctx2 ? ibv_alloc_pd(ctx2) : NULL;
	struct ibv_mr *dst_again, *dst_on_a, *src_on_b;

	if (api_ptr(pd2, "shared registrations: a second context and PD on B's device"))
		goto out;
	dst_again = ibv_reg_mr(pd2, B.buf, DST_LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	api_ptr(dst_again, "shared registrations: B's buffer registered again through the second context");
	dst_on_a = ibv_reg_mr(A.pd, B.buf, DST_LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	api_ptr(dst_on_a, "shared registrations: B's buffer registered on A's device too");
	B.buf[at - 1] = 0x11; /* the program's own store, after the registrations */
	fill(A.buf, len, 21);
	memset(B.buf + at, 0, len);
	write_and_wait(p, 0x6001, A_ADDR(0), len, A.mr->lkey, B_ADDR(at), B.mr->rkey,
		       "shared registrations: WRITE through B's first registration");
	check_bytes(B.buf + at, A.buf, len, "shared registrations: the WRITE is in the program's buffer");
	report(B.buf[at - 1] == 0x11, "shared registrations: the program's store stays", "byte 0x%02x", B.buf[at - 1]);

	src_on_b = ibv_reg_mr(B.pd, A.buf, SRC_LEN, IBV_ACCESS_LOCAL_WRITE);
	api_ptr(src_on_b, "shared registrations: A's buffer registered on B's device too");
	fill(A.buf, len, 22); /* new bytes, written after that registration */
	write_and_wait(p, 0x6002, A_ADDR(0), len, A.mr->lkey, B_ADDR(at + len), B.mr->rkey,
		       "shared registrations: WRITE from A's first registration");
	check_bytes(B.buf + at + len, A.buf, len, "shared registrations: the WRITE sends the program's new bytes");

	if (dst_again)
		api(ibv_dereg_mr(dst_again), "shared registrations: ibv_dereg_mr of the second context's");
	if (dst_on_a)
		api(ibv_dereg_mr(dst_on_a), "shared registrations: ibv_dereg_mr of the one on A's device");
	if (src_on_b)
		api(ibv_dereg_mr(src_on_b), "shared registrations: ibv_dereg_mr of A's buffer on B's device");
	fill(A.buf, len, 23);
	memset(B.buf + at, 0, len);
	write_and_wait(p, 0x6003, A_ADDR(0), len, A.mr->lkey, B_ADDR(at), B.mr->rkey,
		       "shared registrations: WRITE after the others are deregistered");
	check_bytes(B.buf + at, A.buf, len, "shared registrations: first registrations still place and send the program's bytes");
out:
	if (pd2)
		ibv_dealloc_pd(pd2);
	if (ctx2)
		ibv_close_device(ctx2);
}

static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n - 3; /* ".", ".." and the directory's own descriptor */
}

/*
 * The library keeps a descriptor per registered stretch, to share it with
 * the next context, only up to a quarter of RLIMIT_NOFILE: past that, one
 * context's registrations still work, and registering the same pages
 * through another context is refused with EMFILE rather than lost.
 */
static void test_shared_registration_limit(void)
{
	enum { kMaxBufs = 64 };
	struct rlimit saved, low;
	uint8_t *bufs[kMaxBufs];
	struct ibv_mr *mrs[kMaxBufs], *mr;
	int n, i, open_now = open_fds(), registered = 0;

	if (open_now < 0 || getrlimit(RLIMIT_NOFILE, &saved) != 0) {
		report(0, "shared registration limit: descriptors counted", "errno %d", errno);
		return;
	}
	low = saved;
	low.rlim_cur = (rlim_t)open_now + 40;
	n = (int)(low.rlim_cur / 4) + 4; /* more stretches than the library may keep descriptors for */
	if (n > kMaxBufs || low.rlim_cur > saved.rlim_max || setrlimit(RLIMIT_NOFILE, &low) != 0) {
		report(0, "shared registration limit: a lower descriptor limit", "%d open, errno %d", open_now, errno);
		return;
	}
	for (i = 0; i < n; i++) {
		bufs[i] = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		mrs[i] = bufs[i] == MAP_FAILED ? NULL : ibv_reg_mr(A.pd, bufs[i], 4096, IBV_ACCESS_LOCAL_WRITE);
		registered += mrs[i] != NULL;
	}
	report(registered == n, "shared registration limit: one context registers every buffer",
	       "%d of %d (limit %llu)", registered, n, (unsigned long long)low.rlim_cur);
	errno = 0;
	mr = registered == n ? ibv_reg_mr(B.pd, bufs[n - 1], 4096, IBV_ACCESS_LOCAL_WRITE) : NULL;
	report(!mr && errno == EMFILE, "shared registration limit: the last one through another context is refused (EMFILE)",
	       "mr %p, errno %d", (void *)mr, errno);
	if (mr)
		ibv_dereg_mr(mr);
	mr = registered == n ? ibv_reg_mr(B.pd, bufs[0], 4096, IBV_ACCESS_LOCAL_WRITE) : NULL;
	report(mr != NULL, "shared registration limit: the first one, whose descriptor was kept, registers there",
	       "errno %d", errno);
	if (mr)
		ibv_dereg_mr(mr);
	for (i = 0; i < n; i++) {
		if (mrs[i])
			ibv_dereg_mr(mrs[i]);
		if (bufs[i] != MAP_FAILED)
			munmap(bufs[i], 4096);
	}
	setrlimit(RLIMIT_NOFILE, &saved);
}

/*
 * Memory unmapped under an MR that is kept, then mapped again at the same
 * address and registered: the new MR is the new memory (verbs would keep
 * the old pages for the old MR), and stays so when the old MR goes.
 */
static void test_registration_after_unmap(struct pair *p)
{
	const size_t len = 65536;
	uint8_t *old = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), *now;
	struct ibv_mr *kept, *mr;

	if (old == MAP_FAILED) {
		report(0, "registration after unmap: fresh pages", "mmap failed (errno %d)", errno);
		return;
	}
	kept = ibv_reg_mr(B.pd, old, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (api_ptr(kept, "registration after unmap: the first registration"))
		return;
	munmap(old, len);
	now = mmap(old, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (now != old) {
		report(0, "registration after unmap: new memory at the old address", "got %p for %p", (void *)now,
		       (void *)old);
		if (now != MAP_FAILED)
			munmap(now, len);
		ibv_dereg_mr(kept);
		return;
	}
	memset(now, 0, len);
	mr = ibv_reg_mr(B.pd, now, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!api_ptr(mr, "registration after unmap: the new memory registers")) {
		fill(A.buf, 4096, 31);
		write_and_wait(p, 0x6101, A_ADDR(0), 4096, A.mr->lkey, (uintptr_t)now, mr->rkey,
			       "registration after unmap: WRITE to the new MR");
		check_bytes(now, A.buf, 4096, "registration after unmap: the WRITE is in the new memory");
	}
	api(ibv_dereg_mr(kept), "registration after unmap: ibv_dereg_mr of the old MR");
	if (mr) {
		fill(A.buf, 4096, 32);
		write_and_wait(p, 0x6102, A_ADDR(0), 4096, A.mr->lkey, (uintptr_t)now + 4096, mr->rkey,
			       "registration after unmap: WRITE to the new MR after the old one went");
		check_bytes(now + 4096, A.buf, 4096, "registration after unmap: still in the new memory");
		api(ibv_dereg_mr(mr), "registration after unmap: ibv_dereg_mr of the new MR");
	}
	munmap(now, len);
}

/*
 * Registrations the device can never hold are refused with EINVAL before
 * the library sizes anything by them.
 */
static void test_reg_mr_sizes(void)
{
	/* A page no registration has touched: the size checks come first. */
        uint8_t* p = fresh_pages(4096, PROT_READ | PROT_WRITE, "reg_mr sizes: a fresh page");
        struct ibv_mr *mr;

        if (!p) return;
        errno = 0;
	mr = ibv_reg_mr(A.pd, p, (size_t)1 << 60, IBV_ACCESS_LOCAL_WRITE);
	report(!mr && errno == EINVAL, "ibv_reg_mr of 2^60 bytes is refused (EINVAL)",
	       "mr %p, errno %d", (void *)mr, errno);
	if (mr)
		ibv_dereg_mr(mr);
	errno = 0;
	mr = ibv_reg_mr(A.pd, p + 100, SIZE_MAX - 50, IBV_ACCESS_LOCAL_WRITE);
	report(!mr && errno == EINVAL, "ibv_reg_mr of a range wrapping the address space is refused (EINVAL)",
	       "mr %p, errno %d", (void *)mr, errno);
	if (mr)
		ibv_dereg_mr(mr);
	munmap(p, 4096);
}

/*
 * As verbs' page pinning: memory the program cannot read, or cannot write
 * when writes are asked for, is refused with EFAULT; read-only memory
 * registered for reads only keeps its contents and stays read-only.
 */
static void test_reg_mr_protections(void)
{
  uint8_t* none = fresh_pages(8192, PROT_NONE, "reg_mr protections: a PROT_NONE buffer");
  uint8_t* ro = fresh_pages(8192, PROT_READ | PROT_WRITE, "reg_mr protections: a buffer to make read-only");
  struct ibv_mr* mr;
  char line[512];
  unsigned long lo, hi;
  char perms[5] = "";
  FILE* f;

  if (!none || !ro) return;
  errno = 0;
  mr = ibv_reg_mr(A.pd, none, 8192, IBV_ACCESS_LOCAL_WRITE);
  report(!mr && errno == EFAULT, "ibv_reg_mr of PROT_NONE memory is refused (EFAULT)", "mr %p, errno %d", (void*)mr,
         errno);
  if (mr) ibv_dereg_mr(mr);

  memset(ro, 0x3c, 8192);
  mprotect(ro, 8192, PROT_READ);
  errno = 0;
  mr = ibv_reg_mr(A.pd, ro, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  report(!mr && errno == EFAULT, "ibv_reg_mr of read-only memory for writes is refused (EFAULT)", "mr %p, errno %d",
         (void*)mr, errno);
  if (mr) ibv_dereg_mr(mr);

  mr = ibv_reg_mr(A.pd, ro, 8192, 0);
  report(mr != NULL, "ibv_reg_mr of read-only memory for reads only", "errno %d", errno);
  report(ro[0] == 0x3c && ro[8191] == 0x3c, "read-only memory keeps its contents when registered",
         "bytes 0x%02x 0x%02x", ro[0], ro[8191]);
  f = fopen("/proc/self/maps", "r");
  while (f && fgets(line, sizeof(line), f))
    if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) == 3 && lo <= (uintptr_t)ro && (uintptr_t)ro < hi) break;
  if (f) fclose(f);
  report(perms[0] == 'r' && perms[1] == '-', "read-only memory stays read-only when registered", "mapping is %s",
         perms);
  if (mr) ibv_dereg_mr(mr);
  munmap(none, 8192);
  munmap(ro, 8192);
}

/*
 * QP hint counts: a negative one is refused (EINVAL) at creation exactly as
 * at modify, so no hint ever holds one.
 */
static void test_hint_counts(void)
{
	struct mrc_qp_hint_init_attr hia;
	struct mrc_qp_hint_attr ha;
	struct mrc_qp_hint *h;
	int rc;

	memset(&hia, 0, sizeof(hia));
	hia.attr.num_send_peers = -1;
	errno = 0;
	h = mrc_create_qp_hint(A.mctx, &hia);
	report(!h && errno == EINVAL, "mrc_create_qp_hint with num_send_peers = -1 is refused (EINVAL)",
	       "returned %p, errno %d", (void *)h, errno);
	if (h)
		mrc_destroy_qp_hint(h);

	hia.attr.num_send_peers = 4;
	hia.attr.num_qps_per_peer = 2;
	h = mrc_create_qp_hint(A.mctx, &hia);
	if (api_ptr(h, "mrc_create_qp_hint with non-negative counts"))
		return;
	memset(&ha, 0, sizeof(ha));
	ha.num_remote_recv_peers = -3;
	errno = 0;
	rc = mrc_modify_qp_hint(h, &ha, MRC_QP_HINT_NUM_REMOTE_RECV_PEERS);
	report(rc == -1 && errno == EINVAL, "mrc_modify_qp_hint with num_remote_recv_peers = -3 is refused (EINVAL)",
	       "rc %d, errno %d", rc, errno);
	memset(&ha, 0, sizeof(ha));
	mrc_query_qp_hint(h, &ha, MRC_QP_HINT_NUM_SEND_PEERS | MRC_QP_HINT_NUM_REMOTE_RECV_PEERS);
	report(ha.num_send_peers == 4 && ha.num_remote_recv_peers == 0, "QP hint: a refused modify changes nothing",
	       "num_send_peers %d, num_remote_recv_peers %d", ha.num_send_peers, ha.num_remote_recv_peers);
	api(mrc_destroy_qp_hint(h), "mrc_destroy_qp_hint");
}

/* Destroying m with `what` alive must fail with EBUSY; false if it did not (m is gone). */
static int destroy_refused(struct mrc_context *m, const char *what)
{
	char msg[128];
	int rc;

	errno = 0;
	rc = mrc_destroy_context(m);
	snprintf(msg, sizeof(msg), "mrc_destroy_context with a live %s is refused (EBUSY)", what);
	report(rc == -1 && errno == EBUSY, msg, "rc %d, errno %d", rc, errno);
	return rc != 0;
}

/*
 * A context outlives what was created through it: destroying it first is
 * refused (EBUSY), and the objects stay usable.
 */
static void test_context_in_use(void)
{
	struct mrc_context *m = mrc_create_context(A.ctx, NULL);
	struct mrc_comp_channel *ch = NULL;
	struct mrc_qp_hint_init_attr hia;
	struct mrc_qp_hint *h;
	struct mrc_cq *cq;

	if (api_ptr(m, "context in use: a second mrc_context"))
		return;
	cq = mrc_create_cq(m, 8, NULL, NULL, 0);
	if (step_ptr(cq, "context in use", "mrc_create_cq")) {
		mrc_destroy_context(m);
		return;
	}
	if (!destroy_refused(m, "CQ"))
		return;	/* the CQ now points at freed memory */
	api(mrc_destroy_cq(cq), "context in use: mrc_destroy_cq after the refusal");

	memset(&hia, 0, sizeof(hia));
	h = mrc_create_qp_hint(m, &hia);
	if (h) {
		if (!destroy_refused(m, "QP hint"))
			return;
		mrc_destroy_qp_hint(h);
	}
	if (mrc_create_comp_channel(m, &ch) == 0) {
		if (!destroy_refused(m, "channel"))
			return;
		mrc_destroy_comp_channel(ch);
	}
	api(mrc_destroy_context(m), "context in use: mrc_destroy_context once its objects are gone");
}

/*
 * Once deregistered, memory is the program's own again: a forked child
 * can read and write it (and its writes stay in the child).
 */
static void fork_and_touch(uint8_t *b, const char *what)
{
	char msg[200];
	pid_t child;
	int st = 0;

	fflush(stdout);
	child = fork();
	if (child == 0) {
		int ok = b[0] == 0x42 && b[8191] == 0x42;

		b[0] = 0x17;
		_exit(ok ? 0 : 3);
	}
	if (child > 0)
		waitpid(child, &st, 0);
	snprintf(msg, sizeof(msg), "a forked child reads and writes %s", what);
	report(child > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, msg,
	       "child %s %d", WIFSIGNALED(st) ? "killed by signal" : "exited", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	snprintf(msg, sizeof(msg), "the child's write to %s stays in the child", what);
	report(b[0] == 0x42, msg, "parent sees 0x%02x", b[0]);
}

static void test_fork_after_dereg(void)
{
  uint8_t* b = fresh_pages(8192, PROT_READ | PROT_WRITE, "fork after dereg: buffer");
  struct ibv_mr* mr;

  if (!b) return;
  memset(b, 0x42, 8192);
  mr = ibv_reg_mr(A.pd, b, 8192, IBV_ACCESS_LOCAL_WRITE);
  if (step_ptr(mr, "fork after dereg", "ibv_reg_mr") || step(ibv_dereg_mr(mr), "fork after dereg", "ibv_dereg_mr")) {
    munmap(b, 8192);
    return;
	}
	fork_and_touch(b, "a deregistered region");
	/* The device refuses remote write without local write. */
	mr = ibv_reg_mr(A.pd, b, 8192, IBV_ACCESS_REMOTE_WRITE);
	report(mr == NULL, "ibv_reg_mr with remote but not local write is refused", "mr %p", (void *)mr);
	if (mr)
		ibv_dereg_mr(mr);
	fork_and_touch(b, "memory whose registration was refused");
	munmap(b, 8192);
}

/*
 * Closing a device context while its PDs and MRC contexts remain succeeds,
 * as in verbs, and they stay usable until freed: the last of them frees the
 * context.
 */
static void test_close_device_in_use(void)
{
	struct ibv_context *ctx = ibv_open_device(A.dev);
	struct mrc_context *m = NULL;
	struct ibv_pd *pd = NULL;
        struct ibv_mr* mr;
        struct mrc_cq* cq;
        static char buf[4096];
        int rc;

	if (api_ptr(ctx, "device in use: a second ibv_context"))
		return;
        pd = ibv_alloc_pd(ctx);
        m = mrc_create_context(ctx, NULL);
        if (step_ptr(pd, "device in use", "ibv_alloc_pd") || step_ptr(m, "device in use", "mrc_create_context")) {
          if (pd) ibv_dealloc_pd(pd);
          if (m) mrc_destroy_context(m);
          api(ibv_close_device(ctx), "device in use: ibv_close_device");
          return;
        }
        errno = 0;
	rc = ibv_close_device(ctx);
        report(rc == 0, "ibv_close_device with a live PD and mrc_context succeeds, as in verbs",
               "returned %d, errno %d", rc, errno);
        mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
        report(mr != NULL, "a PD of a closed context still registers memory", "errno %d", errno);
        if (mr) api(ibv_dereg_mr(mr), "device in use: ibv_dereg_mr after the close");
        cq = mrc_create_cq(m, 16, NULL, NULL, 0);
        report(cq != NULL, "an mrc_context of a closed context still creates a CQ", "errno %d", errno);
        if (cq) api(mrc_destroy_cq(cq), "device in use: mrc_destroy_cq after the close");
        api(ibv_dealloc_pd(pd), "device in use: ibv_dealloc_pd after the close");
        api(mrc_destroy_context(m), "device in use: the last user, mrc_destroy_context, frees the context");
}

/*
 * protocol_version names exactly one wire version (or 0): a QP asking for
 * several at once is refused (EINVAL); one supported bit, or 0, is granted.
 */
static void test_protocol_version(void)
{
	struct mrc_qp_init_attr ia;
	struct mrc_cq *cq;
	struct mrc_qp *qp;

	cq = mrc_create_cq(A.mctx, 16, NULL, NULL, 0);
	if (step_ptr(cq, "protocol version", "mrc_create_cq"))
		return;
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = ia.recv_cq = cq;
	ia.pd = A.pd;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	ia.protocol_version = (enum mrc_protocol_version)(MRC_PROTOCOL_VERSION_1 | (1u << 1));
	errno = 0;
	qp = mrc_create_qp(A.mctx, &ia);
	report(!qp && errno == EINVAL, "mrc_create_qp with two protocol version bits is refused (EINVAL)",
	       "qp %p, errno %d", (void *)qp, errno);
	if (qp)
		mrc_destroy_qp(qp);
	ia.protocol_version = MRC_PROTOCOL_VERSION_1;
	qp = mrc_create_qp(A.mctx, &ia);
	report(qp != NULL, "mrc_create_qp with MRC_PROTOCOL_VERSION_1 is granted", "errno %d", errno);
	if (qp)
		mrc_destroy_qp(qp);
	mrc_destroy_cq(cq);
}

/* A QP as deep as ibv_query_device() says the device allows is granted. */
static void test_max_qp_wr(void)
{
	struct ibv_device_attr da;
	struct mrc_qp_init_attr ia;
	struct mrc_cq *cq;
	struct mrc_qp *qp;

	if (step(ibv_query_device(A.ctx, &da), "max_qp_wr", "ibv_query_device"))
		return;
	cq = mrc_create_cq(A.mctx, da.max_cqe, NULL, NULL, 0);
	report(cq != NULL, "a CQ of max_cqe entries is granted", "max_cqe %d, errno %d", da.max_cqe, errno);
	if (!cq)
		return;
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = ia.recv_cq = cq;
	ia.pd = A.pd;
	ia.cap.max_send_wr = (uint32_t)da.max_qp_wr;
	ia.cap.max_recv_wr = 1;
	ia.cap.max_send_sge = 1;
	qp = mrc_create_qp(A.mctx, &ia);
	report(qp && ia.cap.max_send_wr >= (uint32_t)da.max_qp_wr, "a QP of max_qp_wr send WRs is granted",
	       "max_qp_wr %d: qp %p, errno %d, granted %u", da.max_qp_wr, (void *)qp, errno, ia.cap.max_send_wr);
	if (qp)
		mrc_destroy_qp(qp);
	mrc_destroy_cq(cq);
}

/*
 * A QP destroyed with completions still in its CQ hands its QPN to the next
 * QP; polling those completions must not free that QP's SQ slots.
 */
static void test_qpn_reuse(void)
{
	struct mrc_cq *cqa = mrc_create_cq(A.mctx, 2 * SQ_DEPTH, NULL, NULL, 0);
	struct mrc_cq *cqb = mrc_create_cq(B.mctx, 2 * RQ_DEPTH, NULL, NULL, 0);
	struct ibv_wc wc[8];
	struct pair p;
	uint32_t old_qpn;
	int i, n = 0, rc;

	memset(&p, 0, sizeof(p));
	if (step_ptr(cqa, "QPN reuse", "mrc_create_cq A") || step_ptr(cqb, "QPN reuse", "mrc_create_cq B") ||
	    make_pair(&p, "QPN reuse: first pair", cqa, cqb, 0))
		goto out;
	for (i = 0; i < 5; i++)
		if (step(post_write(p.qa, 0x7000 + i, A_ADDR(0), 64, A.mr->lkey, B_ADDR(0), B.mr->rkey, 1, 0, 0),
			 "QPN reuse", "mrc_post_send"))
			goto out;
	usleep(QUIET_MS * 1000);	/* the completions land, unpolled */
	old_qpn = p.qpna;
	destroy_pair(&p);
	if (make_pair(&p, "QPN reuse: second pair", cqa, cqb, 0))
		goto out;
	if (p.qpna != old_qpn)
		printf("# QPN reuse: the new QP got 0x%x, not 0x%x (check is weaker)\n", p.qpna, old_qpn);
	n = wait_cq(cqa, wc, 5, TIMEOUT_MS, "QPN reuse: the first QP's completions");
	report(n == 5, "QPN reuse: the destroyed QP's completions are still polled", "%d of 5", n);
	rc = post_write(p.qa, 0x7100, A_ADDR(0), 64, A.mr->lkey, B_ADDR(0), B.mr->rkey, 1, 0, 0);
	report(rc == 0, "QPN reuse: the new QP can post after the old completions are polled", "rc %d (%s)", rc,
	       strerror(rc));
	if (rc == 0)
		expect_send_wc(&p, 0x7100, "QPN reuse: the new QP's write completes");
out:
	destroy_pair(&p);
	if (cqa)
		mrc_destroy_cq(cqa);
	if (cqb)
		mrc_destroy_cq(cqb);
}

/* A malformed WR must be rejected at post time or complete in error. */
static void unsupported(const char *tag, enum ibv_wr_opcode op, int num_sge)
{
	struct pair p;
	struct ibv_sge sge[2];
	struct ibv_send_wr wr, *bad = NULL;
	struct ibv_wc wc;
	char what[200];
	int rc, n, i;

	if (make_pair(&p, tag, NULL, NULL, 0)) {
		destroy_pair(&p);
		return;
	}
	memset(sge, 0, sizeof(sge));
	memset(&wr, 0, sizeof(wr));
	for (i = 0; i < 2; i++) {
		sge[i].addr = A_ADDR(4096u * (unsigned)i);
		sge[i].length = 64;
		sge[i].lkey = A.mr->lkey;
	}
	wr.wr_id = 0xF001;
	wr.sg_list = sge;
	wr.num_sge = num_sge;
	wr.opcode = op;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = B_ADDR(0);
	wr.wr.rdma.rkey = B.mr->rkey;
	rc = mrc_post_send(p.qa, &wr, &bad);
	snprintf(what, sizeof(what), "%s: rejected or completed with an error", tag);
	if (rc) {
		int e = errno;

		report(bad == &wr, what, "mrc_post_send returned %d but bad_wr is %p, not %p",
		       rc, (void *)bad, (void *)&wr);
		printf("# %s: rejected by mrc_post_send: returned %d, errno %d (%s)\n",
		       tag, rc, e, strerror(rc > 0 ? rc : e));
	} else {
		memset(&wc, 0, sizeof(wc));
		n = wait_cq(p.cqa, &wc, 1, TIMEOUT_MS, what);
		if (n == 0)
			report(0, what, "accepted, but no completion within %d ms", TIMEOUT_MS);
		else if (n == 1) {
			report(wc.status != IBV_WC_SUCCESS, what,
			       "accepted and completed SUCCESSFULLY (wr_id 0x%" PRIx64 ")",
			       wc.wr_id);
			printf("# %s: accepted, completed with %s\n", tag, wc_status(wc.status));
		}
	}
	destroy_pair(&p);
}

/* ------------------------------------------------------------ main */

static int open_side(struct side *s, struct ibv_device **list, int n)
{
	struct mrc_device_attr attr;
	struct mrc_context_attr cattr;
	struct ibv_port_attr pa;
	union ibv_gid want;
	char what[160], g1[64], g2[64];
	int i, supported, rc;

	for (i = 0; i < n; i++) {
		const char *nm = ibv_get_device_name(list[i]);

		if (nm && strcmp(nm, s->name) == 0) {
			s->dev = list[i];
			break;
		}
	}
	snprintf(what, sizeof(what), "%s: found by ibv_get_device_name", s->name);
	report(s->dev != NULL, what, "not among the %d device(s) listed", n);
	if (!s->dev)
		return -1;

	s->ctx = ibv_open_device(s->dev);
	snprintf(what, sizeof(what), "%s: ibv_open_device", s->name);
	if (api_ptr(s->ctx, what))
		return -1;

	memset(&attr, 0, sizeof(attr));
	supported = 0;
	rc = mrc_query_device(s->ctx, &attr, &supported);
	snprintf(what, sizeof(what), "%s: mrc_query_device", s->name);
	if (api(rc, what) == 0) {
		snprintf(what, sizeof(what), "%s: mrc_query_device reports MRC supported", s->name);
		report(supported != 0, what, "supported = %d", supported);
		printf("# %s: protocol versions 0x%x max_wimm %u/%u max_mpr %u res %u max_qp_hint %u cap 0x%x\n",
		       s->name, attr.mrc_protocol_version, attr.wimm_attr.max_wimm,
		       attr.wimm_attr.max_wimm_dest, attr.mpr_attr.max_mpr,
		       attr.mpr_attr.mpr_resolution, attr.qp_attr.max_qp_hint, attr.cap);
	}

	memset(&pa, 0, sizeof(pa));
	rc = ibv_query_port(s->ctx, PORT_NUM, &pa);
	snprintf(what, sizeof(what), "%s: ibv_query_port", s->name);
	if (api(rc, what) == 0) {
		snprintf(what, sizeof(what), "%s: port 1 is ACTIVE", s->name);
		report(pa.state == IBV_PORT_ACTIVE, what, "state %s (%d)",
		       ibv_port_state_str(pa.state), pa.state);
		snprintf(what, sizeof(what), "%s: port 1 active_mtu is valid", s->name);
		report(mtu_bytes(pa.active_mtu) != 0, what, "active_mtu %d", pa.active_mtu);
		s->active_mtu = pa.active_mtu;
	}

	/* A port per plane, as the control API numbers them; one past is refused. */
	{
		struct ibv_device_attr da;
		struct mrc_ctl_device_attr ca;
		int port, active = 0;

		memset(&da, 0, sizeof(da));
		memset(&ca, 0, sizeof(ca));
		if (!ibv_query_device(s->ctx, &da) && !mrc_ctl_query_device(s->ctx, &ca)) {
			snprintf(what, sizeof(what), "%s: phys_port_cnt matches the control API's port mask", s->name);
			report(ca.phy_port_mask == ((1u << (da.phys_port_cnt + 1)) - 2u), what,
			       "phys_port_cnt %u, phy_port_mask 0x%x", da.phys_port_cnt, ca.phy_port_mask);
			for (port = 1; port <= da.phys_port_cnt; port++)
				active += !ibv_query_port(s->ctx, port, &pa) && pa.state == IBV_PORT_ACTIVE;
			snprintf(what, sizeof(what), "%s: every port is ACTIVE", s->name);
			report(active == da.phys_port_cnt, what, "%d of %u", active, da.phys_port_cnt);
			errno = 0;
			rc = ibv_query_port(s->ctx, da.phys_port_cnt + 1, &pa);
			snprintf(what, sizeof(what), "%s: ibv_query_port past the last port is EINVAL", s->name);
			report(rc != 0, what, "returned %d", rc);
		}
	}

	rc = ibv_query_gid(s->ctx, PORT_NUM, GID_INDEX, &s->gid);
	snprintf(what, sizeof(what), "%s: ibv_query_gid(port 1, index 3)", s->name);
	if (api(rc, what) == 0) {
		memset(&want, 0, sizeof(want));
		want.raw[10] = 0xff;
		want.raw[11] = 0xff;
		inet_pton(AF_INET, s->ip, &want.raw[12]);
		gid_str(&s->gid, g1, sizeof(g1));
		gid_str(&want, g2, sizeof(g2));
		snprintf(what, sizeof(what), "%s: GID[3] is ::ffff:%s", s->name, s->ip);
		report(memcmp(s->gid.raw, want.raw, 16) == 0, what, "got %s, expected %s", g1, g2);
	}

	memset(&cattr, 0, sizeof(cattr));
	cattr.mrc_api_version_used = MRC_API_VER_USED;
#ifdef MRC_VENDOR_API_VER_USED
	cattr.mrc_vendor_api_version_used = MRC_VENDOR_API_VER_USED;
#endif
	s->mctx = mrc_create_context(s->ctx, &cattr);
	snprintf(what, sizeof(what), "%s: mrc_create_context", s->name);
	if (api_ptr(s->mctx, what))
		return -1;

#if MRC_API_VER_USED >= MRC_API_VER(1, 0, 1)
	memset(&attr, 0, sizeof(attr));
	supported = 0;
	rc = mrc_query_device_ex(s->ctx, s->mctx, &attr, &supported);
	snprintf(what, sizeof(what), "%s: mrc_query_device_ex", s->name);
	if (api(rc, what) == 0) {
		snprintf(what, sizeof(what), "%s: mrc_query_device_ex reports MRC supported", s->name);
		report(supported != 0, what, "supported = %d", supported);
	}
#endif

	s->pd = ibv_alloc_pd(s->ctx);
	snprintf(what, sizeof(what), "%s: ibv_alloc_pd", s->name);
	if (api_ptr(s->pd, what))
		return -1;
	return 0;
}

static int alloc_buffer(struct side *s, size_t len)
{
	char what[160];

	s->len = len;
	s->buf = memalign(4096, len);
	snprintf(what, sizeof(what), "%s: memalign(4096, %zu)", s->name, len);
	if (api_ptr(s->buf, what))
		return -1;
	memset(s->buf, 0, len);
	return 0;
}

/* Checks the MR the caller just registered for s->buf. */
static int check_mr(struct side *s, const char *how)
{
	char what[160];

	snprintf(what, sizeof(what), "%s: ibv_reg_mr %s", s->name, how);
	if (api_ptr(s->mr, what))
		return -1;
	snprintf(what, sizeof(what), "%s: MR fields (addr, length, pd, context)", s->name);
	report(s->mr->addr == s->buf && s->mr->length == s->len && s->mr->pd == s->pd &&
	       s->mr->context == s->ctx, what,
	       "addr %p (want %p), length %zu (want %zu), pd %p (want %p), context %p (want %p)",
	       s->mr->addr, (void *)s->buf, s->mr->length, s->len, (void *)s->mr->pd,
	       (void *)s->pd, (void *)s->mr->context, (void *)s->ctx);
	return 0;
}

/* Tears down both sides, one kind of object at a time. */
static void close_sides(void)
{
	struct side *sides[2] = { &A, &B };
	char what[160];
	int i;

	for (i = 0; i < 2; i++) {
		if (!sides[i]->mr)
			continue;
		snprintf(what, sizeof(what), "%s: ibv_dereg_mr", sides[i]->name);
		api(ibv_dereg_mr(sides[i]->mr), what);
	}
	for (i = 0; i < 2; i++)
		free(sides[i]->buf);
	for (i = 0; i < 2; i++) {
		if (!sides[i]->pd)
			continue;
		snprintf(what, sizeof(what), "%s: ibv_dealloc_pd", sides[i]->name);
		api(ibv_dealloc_pd(sides[i]->pd), what);
	}
	for (i = 0; i < 2; i++) {
		if (!sides[i]->mctx)
			continue;
		snprintf(what, sizeof(what), "%s: mrc_destroy_context", sides[i]->name);
		api(mrc_destroy_context(sides[i]->mctx), what);
	}
	for (i = 0; i < 2; i++) {
		if (!sides[i]->ctx)
			continue;
		snprintf(what, sizeof(what), "%s: ibv_close_device", sides[i]->name);
		api(ibv_close_device(sides[i]->ctx), what);
	}
}

int main(int argc, char **argv)
{
	struct ibv_device **list = NULL;
	struct mrc_comp_channel *chan = NULL;
	struct mrc_cq *cqa = NULL, *cqb = NULL;
	struct pair main_pair;
	static int cq_tag;	/* its address is the channel CQ's cq_context */
	uint32_t cur = 0, last = 0, vcur = 0, vlast = 0;
	struct in_addr probe;
	int n = 0, i;

	if (argc != 5) {
		fprintf(stderr, "usage: %s DEV_A DEV_B IPV4_A IPV4_B\n", argv[0]);
		return 1;
	}
	A.name = argv[1];
	B.name = argv[2];
	A.ip = argv[3];
	B.ip = argv[4];
	for (i = 3; i <= 4; i++)
		if (inet_pton(AF_INET, argv[i], &probe) != 1) {
			fprintf(stderr, "%s: '%s' is not an IPv4 address\n", argv[0], argv[i]);
			return 1;
		}
	memset(&main_pair, 0, sizeof(main_pair));

	mrc_query_version(&cur, &last, &vcur, &vlast);
	printf("# library API %u.%u.%u (oldest %u.%u.%u), vendor API %u.%u.%u (oldest %u.%u.%u); built for %u.%u.%u\n",
	       cur >> 24, (cur >> 16) & 0xff, cur & 0xffff,
	       last >> 24, (last >> 16) & 0xff, last & 0xffff,
	       vcur >> 24, (vcur >> 16) & 0xff, vcur & 0xffff,
	       vlast >> 24, (vlast >> 16) & 0xff, vlast & 0xffff,
	       MRC_API_VER_USED >> 24, (MRC_API_VER_USED >> 16) & 0xff,
	       MRC_API_VER_USED & 0xffff);
	report(cur != 0 && last <= cur && last <= (uint32_t)MRC_API_VER_USED &&
	       (uint32_t)MRC_API_VER_USED <= cur,
	       "mrc_query_version: this program's API version is in the supported range",
	       "current 0x%x, oldest 0x%x, used 0x%x", cur, last,
	       (uint32_t)MRC_API_VER_USED);
	report(vcur != 0 && vlast <= vcur, "mrc_query_version: vendor versions are sane",
	       "current 0x%x, oldest 0x%x", vcur, vlast);

	list = ibv_get_device_list(&n);
	if (api_ptr(list, "ibv_get_device_list"))
		goto out;
	report(n >= 2, "ibv_get_device_list lists at least two devices", "%d device(s)", n);
	if (open_side(&A, list, n) || open_side(&B, list, n))
		goto out;
	path_mtu = A.active_mtu < B.active_mtu ? A.active_mtu : B.active_mtu;
	if (!mtu_bytes(path_mtu))
		path_mtu = IBV_MTU_1024;
	printf("# path MTU %d\n", mtu_bytes(path_mtu));

	/*
	 * verbs.h turns ibv_reg_mr() into a call of the ibv_reg_mr symbol only
	 * when the access flags are a compile-time constant without optional
	 * bits; otherwise it calls ibv_reg_mr_iova2(). So the flags are
	 * literals here: the requester's buffer takes the first path, the
	 * responder's (IBV_ACCESS_RELAXED_ORDERING) the second.
	 */
	if (alloc_buffer(&A, SRC_LEN) || alloc_buffer(&B, DST_LEN))
		goto out;
	A.mr = ibv_reg_mr(A.pd, A.buf, SRC_LEN, IBV_ACCESS_LOCAL_WRITE);
	if (check_mr(&A, "(plain access flags: ibv_reg_mr)"))
		goto out;
	B.mr = ibv_reg_mr(B.pd, B.buf, DST_LEN,
			  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			  IBV_ACCESS_RELAXED_ORDERING);
	if (check_mr(&B, "(IBV_ACCESS_RELAXED_ORDERING: ibv_reg_mr_iova2)"))
		goto out;

	if (api(mrc_create_comp_channel(A.mctx, &chan), "mrc_create_comp_channel"))
		goto out;
	report(chan != NULL, "mrc_create_comp_channel returns a channel", "NULL");
	cqa = mrc_create_cq(A.mctx, 2 * SQ_DEPTH, &cq_tag, chan, 0);
	if (api_ptr(cqa, "mrc_create_cq A (with completion channel)"))
		goto out;
	cqb = mrc_create_cq(B.mctx, 2 * RQ_DEPTH, NULL, NULL, 0);
	if (api_ptr(cqb, "mrc_create_cq B"))
		goto out;

	if (make_pair(&main_pair, "main pair", cqa, cqb, 1))
		goto out;
	expect_state(main_pair.qa, IBV_QPS_RTS, "main pair: A is RTS after the transitions");

	test_write(&main_pair);
	test_write_imm(&main_pair);
	test_unsignaled(&main_pair);
	test_post_list(&main_pair);
	test_blocking(&main_pair, chan, &cq_tag);
	test_query(&main_pair);
	test_big(&main_pair);
	test_shared_registrations(&main_pair);
	test_registration_after_unmap(&main_pair);
	test_region_at_top(&main_pair);
	test_dereg_while_streaming(&main_pair);
	test_shared_registration_limit();

	/* Negative cases, each on a fresh pair. */
	negative("bad lkey", A_ADDR(0), 64, bogus_key(A.mr->lkey), B_ADDR(0),
		 B.mr->rkey, IBV_WC_LOC_PROT_ERR, 0, NULL, 0);
	memset(B.buf + 40960, 0x5c, 64);
	negative("bad rkey", A_ADDR(0), 64, A.mr->lkey, B_ADDR(40960),
		 bogus_key(B.mr->rkey), IBV_WC_REM_ACCESS_ERR, 0, B.buf + 40960, 64);
	negative("remote address beyond the region", A_ADDR(0), 64, A.mr->lkey,
		 B_ADDR(DST_LEN), B.mr->rkey, IBV_WC_REM_ACCESS_ERR, 0, NULL, 0);
	memset(B.buf + DST_LEN - 32, 0x5c, 32);
	negative("remote range crossing the region's end", A_ADDR(0), 64, A.mr->lkey,
		 B_ADDR(DST_LEN - 32), B.mr->rkey, IBV_WC_REM_ACCESS_ERR, 0,
		 B.buf + DST_LEN - 32, 32);
	negative("local length past the region", A_ADDR(SRC_LEN - 32), 64, A.mr->lkey,
		 B_ADDR(0), B.mr->rkey, IBV_WC_LOC_PROT_ERR, 1, NULL, 0);

	test_poll_cq_args(cqb);
	test_destroy_waits_for_ack();
	test_close_device_in_use();
	test_max_qp_wr();
	test_protocol_version();
	test_qpn_reuse();
	test_reg_mr_sizes();
	test_fork_after_dereg();
	test_context_in_use();
	test_hint_counts();
	test_reg_mr_protections();
	test_allocators_and_isolation();
	test_sq_accounting();
	test_reset_empties_queues();
	test_cq_overflow();
	test_mr_limit();
	test_zero_length_any_key();
	test_access_in_rts();
	/* The responder's QP refuses remote writes when its access flags lack them. */
	init_access = IBV_ACCESS_LOCAL_WRITE;
	memset(B.buf + 8192, 0x5c, 64);
	negative("QP without IBV_ACCESS_REMOTE_WRITE", A_ADDR(0), 64, A.mr->lkey, B_ADDR(8192), B.mr->rkey,
		 IBV_WC_REM_ACCESS_ERR, 0, B.buf + 8192, 64);
	init_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

	unsupported("num_sge = 2", IBV_WR_RDMA_WRITE, 2);
	unsupported("opcode IBV_WR_SEND", IBV_WR_SEND, 1);
	unsupported("opcode IBV_WR_RDMA_READ", IBV_WR_RDMA_READ, 1);

out:
	destroy_pair(&main_pair);
	if (cqa)
		api(mrc_destroy_cq(cqa), "mrc_destroy_cq A (channel CQ)");
	if (cqb)
		api(mrc_destroy_cq(cqb), "mrc_destroy_cq B");
	if (chan)
		api(mrc_destroy_comp_channel(chan), "mrc_destroy_comp_channel");
	close_sides();
	if (list)
		ibv_free_device_list(list);
	printf("# %d passed, %d failed\n", n_pass, n_fail);
	return n_fail == 0 && n_pass > 0 ? 0 : 1;
}
