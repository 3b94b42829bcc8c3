// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * load MODULE.ko [PARAM=VALUE ...]: loads a module with one finit_module()
 * call. test_vmalloc's init returns -EAGAIN by design; busybox insmod then
 * retries through init_module(), running every test twice, so the
 * initramfs loads modules with this instead. EAGAIN counts as success.
 * It prints the wall time of the call: MMKIT load MODULE ns=N.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	char params[4096] = "";
	size_t used = 0;
	struct timespec t0, t1;
	int fd, i, err;
	long rc;

	if (argc < 2) {
		fprintf(stderr, "usage: load MODULE.ko [PARAM=VALUE ...]\n");
		return 2;
	}
	for (i = 2; i < argc; i++) {
		size_t n = strlen(argv[i]);

		if (used + n + 2 > sizeof(params)) {
			fprintf(stderr, "load: parameters too long\n");
			return 2;
		}
		if (used)
			params[used++] = ' ';
		memcpy(params + used, argv[i], n + 1);
		used += n;
	}
	fd = open(argv[1], O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "load: %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	rc = syscall(SYS_finit_module, fd, params, 0);
	err = errno;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("MMKIT load %s ns=%lld\n", argv[1],
	       (long long)(t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec));
	fflush(stdout);
	errno = err;
	if (rc != 0 && errno != EAGAIN) {
		fprintf(stderr, "load: %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	return 0;
}
