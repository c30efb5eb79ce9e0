#ifndef CPARLEY_SHIMS_H
#define CPARLEY_SHIMS_H

/* Linux system calls that Glibc's Swift overlay does not expose (epoll, eventfd, accept4, signalfd),
   and a fork/exec helper that is async-signal-safe in the child. */

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <signal.h>
#include <stdint.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

int parley_epoll_create(void);
int parley_epoll_ctl(int epfd, int op, int fd, uint32_t events, uint64_t data);
/* Waits for events; fills parallel arrays (epoll_event is packed and awkward in Swift). */
int parley_epoll_wait(int epfd, uint32_t *events, uint64_t *data, int max, int timeout_ms);
int parley_eventfd(void);
int parley_accept4(int fd);
/* Blocks SIGINT and SIGTERM in the calling thread (call before spawning threads) and returns a signalfd for them. */
int parley_signalfd_term(void);
/* Blocks SIGINT/SIGTERM in the calling thread only. */
void parley_block_term_signals(void);
void parley_ignore_sigpipe(void);

static const uint32_t PARLEY_EPOLLIN = EPOLLIN;
static const uint32_t PARLEY_EPOLLOUT = EPOLLOUT;
static const uint32_t PARLEY_EPOLLRDHUP = EPOLLRDHUP;
static const uint32_t PARLEY_EPOLLERR = EPOLLERR;
static const uint32_t PARLEY_EPOLLHUP = EPOLLHUP;
static const uint32_t PARLEY_EPOLLEXCLUSIVE = EPOLLEXCLUSIVE;
static const uint32_t PARLEY_EPOLLET = EPOLLET;
static const int PARLEY_EPOLL_CTL_ADD = EPOLL_CTL_ADD;
static const int PARLEY_EPOLL_CTL_MOD = EPOLL_CTL_MOD;
static const int PARLEY_EPOLL_CTL_DEL = EPOLL_CTL_DEL;

/* fork + exec with the child's credentials, process group, parent-death signal and stdio set up.
   uid/gid < 0 keep the current ones. stdout_fd/stderr_fd < 0 keep the parent's.
   Returns the child pid, or -1 with errno set. */
pid_t parley_spawn(const char *path, char *const argv[], char *const envp[], int uid, int gid,
                   int pdeathsig, int stdout_fd, int stderr_fd, const char *cwd);

/* Raises the soft RLIMIT_NOFILE to the hard limit; returns the new soft limit (-1: unlimited or unknown) and, when
   the pointers are not NULL, stores the soft limit before and the hard limit. */
long parley_raise_nofile_limit(long *before, long *hard);

/* The descriptors this process has open (entries of /proc/self/fd); -1 when they cannot be read. Scans a directory:
   for start-up, not per request. */
int parley_count_open_files(void);



/* Installs SIGINT/SIGTERM handlers that write the signal number as one byte to `write_fd`
   (the self-pipe trick: works whatever the threads' signal masks are). */
int parley_install_term_handler(int write_fd);
/* ParleyPostgres (postgres_shims.c): names the calling thread (15 bytes max). */
void parley_set_current_thread_name(const char *name);

#include <pthread.h>
/* Initialises an adaptive (spin-then-sleep), non-priority-inheritance mutex: under short critical sections and
   many threads it is far cheaper than the PI futex behind Synchronization.Mutex on Linux. */
int parley_mutex_init(pthread_mutex_t *mutex);
#endif
