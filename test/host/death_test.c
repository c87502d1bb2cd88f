/*
 * death_test: what a program sees when its mrc-nic dies or stops under it.
 *
 *   death_test DEV NIC_PID [kill|stop]
 *
 * Sets up a context, a completion channel with an armed CQ, a QP and an MR,
 * blocks a thread in mrc_get_cq_event(), then kills the NIC (SIGKILL) and
 * checks that every call fails or reports the loss promptly instead of
 * hanging or crashing, and that every object can still be destroyed.
 *
 * With "stop" the NIC is stopped (SIGSTOP) instead: the next control call
 * fails with ETIMEDOUT after the command timeout (MRC_CMD_TIMEOUT_MS, which
 * the caller sets short), the device then counts as failed as above, and
 * once the NIC runs again (SIGCONT) a new context works.
 *
 * With "busy" nothing is killed: BUSY_CLIENTS threads each move a QP to RTR
 * towards a peer that never answers ARP, so the NIC's one control thread
 * works through seconds of lookups, and a quick call queued behind them
 * must wait them out rather than take the busy NIC for a stopped one
 * (MRC_CMD_TIMEOUT_MS, short, counts time without a sign of life).
 * Each check prints "ok - ..." or "not ok - ...".
 */
#define _GNU_SOURCE

#include <mrc.h>
#include <infiniband/verbs.h>

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"

#define WAIT_MS 5000

static struct mrc_comp_channel *chan;
static volatile int waiter_done;
static int waiter_rc, waiter_errno;

/* SIGSTOP takes effect when each thread next runs: until every thread of
 * the NIC reads stopped (T), its control thread may still answer. */
static int all_stopped(pid_t pid)
{
	char path[320], line[512];
	struct dirent *e;
	DIR *d;
	int stopped = 1, seen = 0;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		return 0;
	while ((e = readdir(d))) {
		FILE *f;
		char *close_paren;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/stat", (int)pid, e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(line, sizeof(line), f) && (close_paren = strrchr(line, ')')) && close_paren[1] == ' ') {
			seen = 1;
			if (close_paren[2] != 'T' && close_paren[2] != 't')
				stopped = 0;
		}
		fclose(f);
	}
	closedir(d);
	return seen && stopped;
}

#define BUSY_CLIENTS 6

static struct mrc_qp *small_qp(struct mrc_context *m, struct ibv_pd *pd, struct mrc_cq *cq)
{
	struct mrc_qp_init_attr qa;

	memset(&qa, 0, sizeof(qa));
	qa.send_cq = qa.recv_cq = cq;
	qa.pd = pd;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 8;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	return mrc_create_qp(m, &qa);
}

struct slow_rtr {
	struct ibv_device *dev;
	int rc, err;
};

/* A client of its own whose QP waits out an ARP lookup nobody answers. */
static void *slow_rtr(void *arg)
{
	struct slow_rtr *w = arg;
	struct ibv_context *ctx = ibv_open_device(w->dev);
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	struct mrc_context *m = pd ? mrc_create_context(ctx, NULL) : NULL;
	struct mrc_cq *cq = m ? mrc_create_cq(m, 16, NULL, NULL, 0) : NULL;
	struct mrc_qp *qp = NULL;
	struct ibv_qp_attr a;
	struct mrc_qp_attr ma;

	w->rc = -1;
	w->err = errno;
	if (cq)
		qp = small_qp(m, pd, cq);
	if (qp) {
		memset(&a, 0, sizeof(a));
		memset(&ma, 0, sizeof(ma));
		a.qp_state = IBV_QPS_INIT;
		a.port_num = 1;
		a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
		if (mrc_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, &ma,
				  0) == 0) {
			memset(&a, 0, sizeof(a));
			a.qp_state = IBV_QPS_RTR;
			a.path_mtu = IBV_MTU_1024;
			a.dest_qp_num = 0x10;
			a.ah_attr.is_global = 1;
			/* ::ffff:10.0.0.99, on plane 0's subnet, where no one answers */
			a.ah_attr.grh.dgid.raw[10] = a.ah_attr.grh.dgid.raw[11] = 0xff;
			a.ah_attr.grh.dgid.raw[12] = 10;
			a.ah_attr.grh.dgid.raw[15] = 99;
			a.ah_attr.grh.sgid_index = 3;
			a.ah_attr.grh.hop_limit = 64;
			a.ah_attr.port_num = 1;
			errno = 0;
			w->rc = mrc_modify_qp(qp, &a,
					      IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
						      IBV_QP_PATH_MTU,
					      &ma, 0);
			w->err = errno;
		}
	}
	if (qp)
		mrc_destroy_qp(qp);
	if (cq)
		mrc_destroy_cq(cq);
	if (m)
		mrc_destroy_context(m);
	if (pd)
		ibv_dealloc_pd(pd);
	if (ctx)
		ibv_close_device(ctx);
	return NULL;
}

static int busy(struct ibv_device *dev, struct ibv_context *ctx, double limit_ms)
{
	struct slow_rtr w[BUSY_CLIENTS];
	pthread_t t[BUSY_CLIENTS];
	struct ibv_pd *pd;
	double t0, took;
	int i, err, refused = 0;

	for (i = 0; i < BUSY_CLIENTS; i++) {
		w[i].dev = dev;
		if (pthread_create(&t[i], NULL, slow_rtr, &w[i])) {
			report(0, "setup: client threads", "errno %d", errno);
			return 1;
		}
	}
	usleep(300 * 1000); /* their lookups are under way */
	t0 = now_ms();
	errno = 0;
	pd = ibv_alloc_pd(ctx);
	err = errno;
	took = now_ms() - t0;
	report(pd != NULL, "ibv_alloc_pd queued behind the lookups succeeds", "errno %d after %.0f ms", err, took);
	report(took > limit_ms, "and it did wait longer than MRC_CMD_TIMEOUT_MS",
	       "took %.0f ms against %.0f: the lookups were not ahead of it", took, limit_ms);
	printf("# the queued call returned after %.0f ms\n", took);
	for (i = 0; i < BUSY_CLIENTS; i++) {
		pthread_join(t[i], NULL);
		refused += w[i].rc != 0 && w[i].err != ETIMEDOUT && w[i].err != EIO;
		printf("# client %d: rc %d, errno %d (%s)\n", i, w[i].rc, w[i].err, strerror(w[i].err));
	}
	report(refused == BUSY_CLIENTS, "every RTR towards the silent peer failed on its lookup, not a timeout",
	       "%d of %d", refused, BUSY_CLIENTS);
	if (pd)
		ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf("# %d passed, %d failed\n", n_pass, n_fail);
	return n_fail == 0 && n_pass > 0 ? 0 : 1;
}

static void *waiter(void *arg)
{
	struct mrc_cq *cq = NULL;
	void *ctx = NULL;

	(void)arg;
	waiter_rc = mrc_get_cq_event(chan, &cq, &ctx);
	waiter_errno = errno;
	__atomic_store_n(&waiter_done, 1, __ATOMIC_RELEASE);
	return NULL;
}

int main(int argc, char **argv)
{
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	struct ibv_pd *pd, *pd2;
	struct mrc_context *m;
	struct mrc_cq *cq, *cq2;
	struct mrc_async_event ev;
	struct ibv_wc wc;
	struct mrc_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf;
	pthread_t t;
	double end;
	pid_t nic;
	int n = 0, i, rc, stop, err;
	const char *limit_env = getenv("MRC_CMD_TIMEOUT_MS");
	double t0, took, limit_ms = limit_env ? atof(limit_env) : 0;

	if (argc < 3 || argc > 4 ||
	    (argc == 4 && strcmp(argv[3], "kill") && strcmp(argv[3], "stop") && strcmp(argv[3], "busy"))) {
		fprintf(stderr, "usage: %s DEV NIC_PID [kill|stop|busy]\n", argv[0]);
		return 1;
	}
	nic = (pid_t)atoi(argv[2]);
	stop = argc == 4 && strcmp(argv[3], "stop") == 0;
	if ((stop || (argc == 4 && !strcmp(argv[3], "busy"))) && !(limit_ms > 0)) {
		fprintf(stderr, "%s: %s needs MRC_CMD_TIMEOUT_MS set\n", argv[0], argv[3]);
		return 1;
	}
	list = ibv_get_device_list(&n);
	for (i = 0; list && i < n; i++)
		if (strcmp(ibv_get_device_name(list[i]), argv[1]) == 0) {
			ctx = ibv_open_device(list[i]);
			if (ctx && argc == 4 && !strcmp(argv[3], "busy")) {
				rc = busy(list[i], ctx, limit_ms);
				ibv_free_device_list(list);
				return rc;
			}
		}
	if (!ctx) {
		report(0, "ibv_open_device", "%s not found", argv[1]);
		return 1;
	}
	pd = ibv_alloc_pd(ctx);
	m = mrc_create_context(ctx, NULL);
	if (!pd || !m || mrc_create_comp_channel(m, &chan)) {
		report(0, "setup", "errno %d", errno);
		return 1;
	}
	cq = mrc_create_cq(m, 16, NULL, chan, 0);
	if (!cq || mrc_req_notify_cq(cq, 0)) {
		report(0, "setup: CQ on the channel", "errno %d", errno);
		return 1;
	}
	buf = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	mr = buf == MAP_FAILED ? NULL : ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE);
	qp = small_qp(m, pd, cq);
	if (!mr || !qp) {
		report(0, "setup: an MR and a QP", "errno %d", errno);
		return 1;
	}
	if (pthread_create(&t, NULL, waiter, NULL)) {
		report(0, "setup: waiting thread", "errno %d", errno);
		return 1;
	}
	usleep(200 * 1000);	/* let it block */
	report(!__atomic_load_n(&waiter_done, __ATOMIC_ACQUIRE), "mrc_get_cq_event blocks while the NIC runs",
	       "returned %d, errno %d", waiter_rc, waiter_errno);

	if (kill(nic, stop ? SIGSTOP : SIGKILL)) {
		report(0, stop ? "stop the NIC" : "kill the NIC", "pid %d: %s", (int)nic, strerror(errno));
		return 1;
	}
	if (stop) {
		end = now_ms() + WAIT_MS;
		while (!all_stopped(nic) && now_ms() < end)
			usleep(1000);
		if (!all_stopped(nic)) {
			report(0, "stop the NIC", "pid %d not stopped after %d ms", (int)nic, WAIT_MS);
			kill(nic, SIGCONT);
			return 1;
		}
		/* The stopped NIC still holds its sockets: only a timeout ends a call. */
		t0 = now_ms();
		errno = 0;
		pd2 = ibv_alloc_pd(ctx);
		err = errno;
		took = now_ms() - t0;
		report(!pd2 && err == ETIMEDOUT, "ibv_alloc_pd on a stopped NIC fails with ETIMEDOUT",
		       "pd %p, errno %d", (void *)pd2, err);
		/* The limit adds the device's own ARP/ND allowance, a few seconds. */
		report(took >= limit_ms && took < limit_ms + 30000, "it fails after the command timeout",
		       "took %.0f ms against MRC_CMD_TIMEOUT_MS=%.0f", took, limit_ms);
		printf("# the call on the stopped NIC returned after %.0f ms\n", took);
	}
	end = now_ms() + WAIT_MS;
	while (!__atomic_load_n(&waiter_done, __ATOMIC_ACQUIRE) && now_ms() < end)
		usleep(10 * 1000);
	if (!__atomic_load_n(&waiter_done, __ATOMIC_ACQUIRE)) {
		report(0, "a blocked mrc_get_cq_event returns when the device fails", "still blocked after %d ms",
		       WAIT_MS);
		printf("# %d passed, %d failed\n", n_pass, n_fail);
		fflush(stdout);
		_exit(1);	/* the thread cannot be joined */
	}
	pthread_join(t, NULL);
	report(waiter_rc == -1 && waiter_errno == EIO, "a blocked mrc_get_cq_event fails with EIO when the device fails",
	       "returned %d, errno %d", waiter_rc, waiter_errno);

	errno = 0;
	pd2 = ibv_alloc_pd(ctx);
	report(!pd2 && errno == EIO, "ibv_alloc_pd after the device failed fails with EIO", "pd %p, errno %d",
	       (void *)pd2, errno);
	errno = 0;
	cq2 = mrc_create_cq(m, 16, NULL, NULL, 0);
	report(!cq2 && errno == EIO, "mrc_create_cq after the device failed fails with EIO", "cq %p, errno %d",
	       (void *)cq2, errno);
	rc = mrc_poll_cq(cq, 1, &wc);
	report(rc == 0, "mrc_poll_cq after the device failed finds nothing", "returned %d", rc);
	memset(&ev, 0, sizeof(ev));
	rc = mrc_get_async_event(m, &ev);
	report(rc == 0 && ev.event_type == IBV_EVENT_DEVICE_FATAL,
	       "mrc_get_async_event reports IBV_EVENT_DEVICE_FATAL", "returned %d, event %d", rc,
	       (int)ev.event_type);

	/* The NIC holds nothing of ours any more: the program frees its side. */
	errno = 0;
	rc = mrc_destroy_qp(qp);
	report(rc == 0, "mrc_destroy_qp after the device failed", "returned %d, errno %d", rc, errno);
	errno = 0;
	rc = mrc_destroy_cq(cq);
	report(rc == 0, "mrc_destroy_cq after the device failed", "returned %d, errno %d", rc, errno);
	errno = 0;
	rc = ibv_dereg_mr(mr);
	report(rc == 0, "ibv_dereg_mr after the device failed", "returned %d, errno %d", rc, errno);
	report(buf[0] == 0 && (buf[1] = 1) == 1, "the region's memory stays usable", "%s", "");
	errno = 0;
	rc = ibv_dealloc_pd(pd);
	report(rc == 0, "ibv_dealloc_pd after the device failed", "returned %d, errno %d", rc, errno);
	rc = mrc_destroy_comp_channel(chan);
	report(rc == 0, "mrc_destroy_comp_channel after the device failed", "returned %d, errno %d", rc, errno);
	rc = mrc_destroy_context(m);
	report(rc == 0, "mrc_destroy_context after the device failed", "returned %d, errno %d", rc, errno);
	rc = ibv_close_device(ctx);
	report(rc == 0, "ibv_close_device after the device failed", "returned %d, errno %d", rc, errno);
	if (stop) {
		/* The NIC runs again: it reclaims the failed context's objects when
		 * it reads the hang-up, and serves new ones. */
		if (kill(nic, SIGCONT))
			report(0, "resume the NIC", "pid %d: %s", (int)nic, strerror(errno));
		ctx = NULL;
		for (i = 0; list && i < n; i++)
			if (strcmp(ibv_get_device_name(list[i]), argv[1]) == 0)
				ctx = ibv_open_device(list[i]);
		pd2 = ctx ? ibv_alloc_pd(ctx) : NULL;
		m = ctx ? mrc_create_context(ctx, NULL) : NULL;
		cq2 = m ? mrc_create_cq(m, 16, NULL, NULL, 0) : NULL;
		report(ctx && pd2 && m && cq2, "a new context works once the NIC runs again",
		       "context %p, pd %p, mrc context %p, cq %p, errno %d", (void *)ctx, (void *)pd2, (void *)m,
		       (void *)cq2, errno);
		rc = (cq2 ? mrc_destroy_cq(cq2) : 0) | (m ? mrc_destroy_context(m) : 0) |
		     (pd2 ? ibv_dealloc_pd(pd2) : 0) | (ctx ? ibv_close_device(ctx) : 0);
		report(rc == 0, "and frees cleanly", "returned %d, errno %d", rc, errno);
	}
	ibv_free_device_list(list);
	printf("# %d passed, %d failed\n", n_pass, n_fail);
	return n_fail == 0 && n_pass > 0 ? 0 : 1;
}
