#include "CParleyShims.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>
#include <pthread.h>

int parley_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }

int parley_epoll_ctl(int epfd, int op, int fd, uint32_t events, uint64_t data) {
    struct epoll_event ev;
    memset(&ev, 0, sizeof(ev));
    ev.events = events;
    ev.data.u64 = data;
    return epoll_ctl(epfd, op, fd, &ev);
}

int parley_epoll_wait(int epfd, uint32_t *events, uint64_t *data, int max, int timeout_ms) {
    struct epoll_event evs[256];
    if (max > 256) max = 256;
    int n = epoll_wait(epfd, evs, max, timeout_ms);
    for (int i = 0; i < n; i++) {
        events[i] = evs[i].events;
        data[i] = evs[i].data.u64;
    }
    return n;
}

int parley_eventfd(void) { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }

int parley_accept4(int fd) { return accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC); }

void parley_block_term_signals(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
}

int parley_signalfd_term(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    return signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
}

void parley_ignore_sigpipe(void) { signal(SIGPIPE, SIG_IGN); }

pid_t parley_spawn(const char *path, char *const argv[], char *const envp[], int uid, int gid,
                   int pdeathsig, int stdout_fd, int stderr_fd, const char *cwd) {
    pid_t pid = fork();
    if (pid != 0) return pid; /* parent, or -1 */
    /* Child: only async-signal-safe calls from here on. */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    setpgid(0, 0); /* a terminal's Ctrl-C reaches Parley, which stops the child in order */
    if (gid >= 0) {
        if (setgroups(0, NULL) != 0 && errno != EPERM) _exit(126);
        if (setgid((gid_t)gid) != 0) _exit(126);
    }
    if (uid >= 0 && setuid((uid_t)uid) != 0) _exit(126);
    /* After the credential change: the parent-death signal is cleared by setuid. */
    if (pdeathsig > 0) {
        prctl(PR_SET_PDEATHSIG, pdeathsig);
        if (getppid() == 1) _exit(125); /* the parent is already gone */
    }
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) dup2(devnull, 0);
    if (stdout_fd >= 0) dup2(stdout_fd, 1);
    if (stderr_fd >= 0) dup2(stderr_fd, 2);
    if (cwd != NULL && chdir(cwd) != 0) _exit(126);
    execve(path, argv, envp);
    _exit(127);
}

long parley_raise_nofile_limit(long *before, long *hard) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return -1;
    if (before != NULL) *before = rl.rlim_cur == RLIM_INFINITY ? -1 : (long)rl.rlim_cur;
    if (hard != NULL) *hard = rl.rlim_max == RLIM_INFINITY ? -1 : (long)rl.rlim_max;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    return rl.rlim_cur == RLIM_INFINITY ? -1 : (long)rl.rlim_cur;
}

int parley_count_open_files(void) {
    DIR *dir = opendir("/proc/self/fd");
    if (dir == NULL) return -1;
    int count = 0;
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        if (entry->d_name[0] != '.') count++;
    }
    closedir(dir);
    return count - 1; /* the directory's own descriptor */
}

static volatile int parley_term_fd = -1;

static void parley_term_handler(int sig) {
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    if (parley_term_fd >= 0) { ssize_t r = write(parley_term_fd, &b, 1); (void)r; }
    errno = saved;
}

int parley_install_term_handler(int write_fd) {
    parley_term_fd = write_fd;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = parley_term_handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (sigaction(SIGINT, &sa, NULL) != 0) return -1;
    if (sigaction(SIGTERM, &sa, NULL) != 0) return -1;
    /* The calling (waiting) thread takes them: a process started with SIGTERM blocked (the mask is inherited across
       exec, from whatever thread of the parent spawned it) would otherwise hold the signal pending for ever. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    return 0;
}

int parley_mutex_init(pthread_mutex_t *mutex) {
    pthread_mutexattr_t attributes;
    pthread_mutexattr_init(&attributes);
    pthread_mutexattr_settype(&attributes, PTHREAD_MUTEX_ADAPTIVE_NP);
    int rc = pthread_mutex_init(mutex, &attributes);
    pthread_mutexattr_destroy(&attributes);
    return rc;
}
