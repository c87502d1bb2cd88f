/*
 * death_test: what a program sees when its mrc-nic dies under it.
 *
 *   death_test DEV NIC_PID
 *
 * Sets up a context, a completion channel with an armed CQ, a QP and an MR,
 * blocks a thread in mrc_get_cq_event(), then kills the NIC (SIGKILL) and
 * checks that every call fails or reports the loss promptly instead of
 * hanging or crashing, and that every object can still be destroyed. Each check prints "ok - ..." or "not ok - ...".
 */
#define _GNU_SOURCE

#include <mrc.h>
#include <infiniband/verbs.h>

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
	struct mrc_qp_init_attr qa;
	struct mrc_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf;
	pthread_t t;
	double end;
	pid_t nic;
	int n = 0, i, rc;

	if (argc != 3) {
		fprintf(stderr, "usage: %s DEV NIC_PID\n", argv[0]);
		return 1;
	}
	nic = (pid_t)atoi(argv[2]);
	list = ibv_get_device_list(&n);
	for (i = 0; list && i < n; i++)
		if (strcmp(ibv_get_device_name(list[i]), argv[1]) == 0)
			ctx = ibv_open_device(list[i]);
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
	memset(&qa, 0, sizeof(qa));
	qa.send_cq = qa.recv_cq = cq;
	qa.pd = pd;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 8;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	qp = mrc_create_qp(m, &qa);
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

	if (kill(nic, SIGKILL)) {
		report(0, "kill the NIC", "pid %d: %s", (int)nic, strerror(errno));
		return 1;
	}
	end = now_ms() + WAIT_MS;
	while (!__atomic_load_n(&waiter_done, __ATOMIC_ACQUIRE) && now_ms() < end)
		usleep(10 * 1000);
	if (!__atomic_load_n(&waiter_done, __ATOMIC_ACQUIRE)) {
		report(0, "a blocked mrc_get_cq_event returns when the NIC dies", "still blocked after %d ms",
		       WAIT_MS);
		printf("# %d passed, %d failed\n", n_pass, n_fail);
		fflush(stdout);
		_exit(1);	/* the thread cannot be joined */
	}
	pthread_join(t, NULL);
	report(waiter_rc == -1 && waiter_errno == EIO, "a blocked mrc_get_cq_event fails with EIO when the NIC dies",
	       "returned %d, errno %d", waiter_rc, waiter_errno);

	errno = 0;
	pd2 = ibv_alloc_pd(ctx);
	report(!pd2 && errno == EIO, "ibv_alloc_pd after the NIC died fails with EIO", "pd %p, errno %d",
	       (void *)pd2, errno);
	errno = 0;
	cq2 = mrc_create_cq(m, 16, NULL, NULL, 0);
	report(!cq2 && errno == EIO, "mrc_create_cq after the NIC died fails with EIO", "cq %p, errno %d",
	       (void *)cq2, errno);
	rc = mrc_poll_cq(cq, 1, &wc);
	report(rc == 0, "mrc_poll_cq after the NIC died finds nothing", "returned %d", rc);
	memset(&ev, 0, sizeof(ev));
	rc = mrc_get_async_event(m, &ev);
	report(rc == 0 && ev.event_type == IBV_EVENT_DEVICE_FATAL,
	       "mrc_get_async_event reports IBV_EVENT_DEVICE_FATAL", "returned %d, event %d", rc,
	       (int)ev.event_type);

	/* The NIC holds nothing of ours any more: the program frees its side. */
	errno = 0;
	rc = mrc_destroy_qp(qp);
	report(rc == 0, "mrc_destroy_qp after the NIC died", "returned %d, errno %d", rc, errno);
	errno = 0;
	rc = mrc_destroy_cq(cq);
	report(rc == 0, "mrc_destroy_cq after the NIC died", "returned %d, errno %d", rc, errno);
	errno = 0;
	rc = ibv_dereg_mr(mr);
	report(rc == 0, "ibv_dereg_mr after the NIC died", "returned %d, errno %d", rc, errno);
	report(buf[0] == 0 && (buf[1] = 1) == 1, "the region's memory stays usable", "%s", "");
	errno = 0;
	rc = ibv_dealloc_pd(pd);
	report(rc == 0, "ibv_dealloc_pd after the NIC died", "returned %d, errno %d", rc, errno);
	rc = mrc_destroy_comp_channel(chan);
	report(rc == 0, "mrc_destroy_comp_channel after the NIC died", "returned %d, errno %d", rc, errno);
	rc = mrc_destroy_context(m);
	report(rc == 0, "mrc_destroy_context after the NIC died", "returned %d, errno %d", rc, errno);
	rc = ibv_close_device(ctx);
	report(rc == 0, "ibv_close_device after the NIC died", "returned %d, errno %d", rc, errno);
	ibv_free_device_list(list);
	printf("# %d passed, %d failed\n", n_pass, n_fail);
	return n_fail == 0 && n_pass > 0 ? 0 : 1;
}
