/*
 * What the host test programs (api_test.c, ctl_test.c) share: one
 * "ok - ..." / "not ok - ...: why" line per check, with counts for the exit
 * status, and a monotonic clock for the bounded waits.
 */
#ifndef MRCNIC_TEST_HOST_TAP_H
#define MRCNIC_TEST_HOST_TAP_H

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

static int n_pass, n_fail;

static inline void __attribute__((format(printf, 3, 4)))
report(int pass, const char *what, const char *fmt, ...)
{
	va_list ap;

	if (pass) {
		printf("ok - %s\n", what);
		n_pass++;
	} else {
		printf("not ok - %s: ", what);
		va_start(ap, fmt);
		vprintf(fmt, ap);
		va_end(ap);
		printf("\n");
		n_fail++;
	}
	fflush(stdout);
}

#ifdef __cplusplus
#include <string>
static inline void check(bool pass, const std::string& what) { report(pass, what.c_str(), "%s", "failed"); }
#endif

static inline double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

#endif
