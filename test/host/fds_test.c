/*
 * mrc-nic out of file descriptors (host_test.sh starts it with a low
 * RLIMIT_NOFILE). A request whose descriptors the NIC cannot take fails with
 * EMFILE, and its client keeps its connection and everything it made; a new
 * client is refused with EMFILE at once rather than left waiting; once
 * descriptors are free again, both work.
 *
 *   fds_test DEV
 */
#define _GNU_SOURCE

#include <mrc.h>
#include <infiniband/verbs.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "tap.h"

enum { kMaxCqs = 4096, kMaxLate = 16 };

int main(int argc, char **argv)
{
	static struct mrc_cq *cqs[kMaxCqs];
	struct ibv_device **list, *dev = NULL;
	struct ibv_context *ctx, *late[kMaxLate] = {0}, *again;
	struct mrc_context *mctx;
	struct mrc_comp_channel *chan = NULL;
	struct mrc_cq *cq;
	int n = 0, i, made = 0, opened = 0, e = 0;
	double t0, took_ms;

	if (argc != 2) {
		fprintf(stderr, "usage: %s DEV\n", argv[0]);
		return 1;
	}
	list = ibv_get_device_list(&n);
	for (i = 0; list && i < n; i++)
		if (strcmp(ibv_get_device_name(list[i]), argv[1]) == 0)
			dev = list[i];
	report(dev != NULL, "the device is listed", "%s not among %d", argv[1], n);
	if (!dev)
		return 1;
	ctx = ibv_open_device(dev);
	mctx = ctx ? mrc_create_context(ctx, NULL) : NULL;
	report(mctx != NULL, "a context", "errno %d", errno);
	if (!mctx || mrc_create_comp_channel(mctx, &chan) != 0) {
		report(0, "a completion channel", "errno %d", errno);
		return 1;
	}
	/* Each CQ on a channel hands the NIC a descriptor it keeps. */
	for (i = 0; i < kMaxCqs; i++) {
		cqs[i] = mrc_create_cq(mctx, 4, NULL, chan, 0);
		if (!cqs[i]) {
			e = errno;
			break;
		}
		made++;
	}
	report(made > 0 && made < kMaxCqs && e == EMFILE, "CQs until the NIC runs out of descriptors: EMFILE",
	       "%d made, then errno %d", made, e);

	/* A descriptor or two may be left: new clients take them, then are refused. */
	for (i = 0; i < kMaxLate; i++) {
		t0 = now_ms();
		late[i] = ibv_open_device(dev);
		e = errno;
		took_ms = now_ms() - t0;
		if (!late[i] || took_ms > 5000)
			break;
		opened++;
	}
	report(i < kMaxLate && !late[i] && e == EMFILE && took_ms < 5000,
	       "a new client meanwhile is refused at once with EMFILE", "%d served first, then context %p, errno %d, after %.0f ms",
	       opened, i < kMaxLate ? (void *)late[i] : NULL, e, took_ms);
	for (i = 0; i < kMaxLate; i++)
		if (late[i])
			ibv_close_device(late[i]);

	for (i = 0; i < made; i++)
		if (mrc_destroy_cq(cqs[i]) != 0)
			break;
	report(i == made, "the first client kept its connection: its CQs are destroyed", "%d of %d", i, made);
	cq = mrc_create_cq(mctx, 4, NULL, chan, 0);
	report(cq != NULL, "and it makes a CQ on its channel again", "errno %d", errno);
	if (cq)
		mrc_destroy_cq(cq);
	again = ibv_open_device(dev);
	report(again != NULL, "a new client is served again", "errno %d", errno);
	if (again)
		ibv_close_device(again);

	mrc_destroy_comp_channel(chan);
	mrc_destroy_context(mctx);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	printf("# %d passed, %d failed\n", n_pass, n_fail);
	return n_fail == 0 && n_pass > 0 ? 0 : 1;
}
