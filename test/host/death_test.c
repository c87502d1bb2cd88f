/*
 * death_test: what a program sees when its mrc-nic dies under it.
 *
 *   death_test DEV NIC_PID
 *
 * Sets up a context, a completion channel with an armed CQ, a QP and an MR,
 * blocks a thread in mrc_get_cq_event(), then kills the NIC (SIGKILL) and
 * checks that every call fails or reports the loss promptly instead of
 * hanging or crashing. Each check prints "ok - ..." or "not ok - ...".
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
	printf("# %d passed, %d failed\n", n_pass, n_fail);
	return n_fail == 0 && n_pass > 0 ? 0 : 1;
}
