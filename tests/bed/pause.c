/*
 * pause: pykubelet's own pod sandbox "infra" program for the test bed.
 *
 * It holds the pod's namespaces open by doing nothing: it blocks in pause()
 * forever, exits 0 on SIGINT/SIGTERM, and (as PID 1 of a shared PID
 * namespace) reaps any zombie children on SIGCHLD.
 *
 * Build: gcc -static -Os -s -o pause pause.c
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAUSE_VERSION "pykubelet-pause 1.0"

static void on_term(int sig)
{
	(void)sig;
	_exit(0);
}

static void on_chld(int sig)
{
	int saved = errno;
	(void)sig;
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
	errno = saved;
}

static void set_handler(int sig, void (*fn)(int))
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = fn;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = (sig == SIGCHLD) ? (SA_RESTART | SA_NOCLDSTOP) : 0;
	if (sigaction(sig, &sa, NULL) < 0) {
		perror("sigaction");
		exit(1);
	}
}

int main(int argc, char **argv)
{
	int i;

	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-v") == 0) {
			printf("%s\n", PAUSE_VERSION);
			return 0;
		}
	}

	if (getpid() != 1)
		fprintf(stderr, "pause: warning: not running as PID 1\n");

	set_handler(SIGINT, on_term);
	set_handler(SIGTERM, on_term);
	set_handler(SIGCHLD, on_chld);

	for (;;)
		pause();

	/* not reached */
	return 42;
}
