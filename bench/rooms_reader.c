/*
 * rooms_reader: the SSE side of bench/rooms.sh. One thread, epoll, holds COUNT user streams
 * (GET /v1/users/u<FIRST..FIRST+COUNT-1>/events with the app key) and counts what arrives, cheaply enough for
 * hundreds of thousands of frames per second on the machine the server runs on.
 *
 * build:  cc -O2 -o rooms_reader bench/rooms_reader.c      (bench/rooms.sh does this at run time)
 * usage:  rooms_reader PORT KEY FIRST COUNT MAXMSG QUERY READY_FILE PROGRESS_FILE RESULT_FILE HOLD_SECONDS
 *   QUERY         query string of the stream URL without '?' ("-" for none), e.g. "presence=false"
 *   MAXMSG        message indexes 0..MAXMSG-1 are tracked (bench/py/room_driver.py numbers its sends)
 *   READY_FILE    written once every stream was tried: "<opened> <failed> <first failure>"
 *   PROGRESS_FILE a line appended every second: "<monotonic ns> <message frames> <member frames> <open> <closed>"
 *   RESULT_FILE   written at SIGTERM/SIGINT or after HOLD_SECONDS: "key value" lines, then one line per message
 *                 index that arrived anywhere: "msg <idx> <streams that got it> <first arrival ns> <last arrival ns>"
 *
 * The response may be chunked (HTTP/1.1) or not; chunks are decoded, so a frame split across chunks or reads
 * is still one frame. Frames are read line by line: an `event: <type>` line sets the frame's type, its
 * `data:` line counts the frame; for `message.sent` the data line is searched once for the marker `rbm:<idx>:`
 * that bench/py/room_driver.py puts at the start of each message text. Each (stream, idx) is recorded once
 * (a second sighting counts as a duplicate). Arrival time = CLOCK_MONOTONIC right after the read() that
 * completed the data line (the same clock as Python's time.monotonic_ns() in the driver).
 *
 * Slow consumers (bench/rooms.sh BENCH_ROOM_STALLED): with READER_STALLED=N in the environment the last N streams
 * are stalled clients: their receive buffer is set to 4 KiB before they connect, and once open (their `retry:`
 * line) they are never read again while the load runs, so the server's queue for them grows until it cuts them.
 * Nothing they hold is counted as a delivery. At the end each is read to its end for at most 5 s: an end of stream
 * means the server cut it ("stalled_cut"), data still coming means it did not.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { S_HEAD = 0, S_BODY = 1, S_OPEN = 2, S_DEAD = 3 };           /* connection state */
enum { C_SIZE = 0, C_EXT = 1, C_DATA = 2, C_CR = 3, C_LF = 4, C_END = 5 }; /* chunked decoder state */
enum { T_NONE = 0, T_MSG, T_JOIN, T_LEFT, T_OTHER };

#define HEAD_CAP 8192
#define LINE_MAX_BYTES (4 << 20) /* a longer line is dropped (counted) */
#define WAVE 200                 /* streams being opened at once: the listen backlog never overflows */

struct conn {
    int fd, state, chunked, cstate, ev_type;
    uint64_t crem;
    char *head;
    int hlen;
    char *line;
    size_t llen, lcap;
    int oversize; /* the current line went past LINE_MAX_BYTES and is being skipped */
    uint32_t msgs, joined, left, pings;
    int stalled; /* a slow consumer: not read once open (READER_STALLED) */
};

static volatile sig_atomic_t stop_flag = 0;
static void on_signal(int sig) { (void)sig; stop_flag = 1; }

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* globals: counters and per-message tables */
static struct conn *conns;
static int nconns, maxmsg;
static uint8_t *seen;          /* nconns * maxmsg bits */
static uint32_t *msg_count;    /* streams that got idx */
static uint64_t *msg_first, *msg_last;
static uint64_t t_read;        /* time of the current read */
static int epfd;
static uint64_t total_msgs, total_join, total_left, total_other, total_pings, dups, unmarked, out_of_range,
    oversize_lines, bytes_in, reads;
static int opened, failed, closed_early, opening, nstalled;
static char first_failure[256];

static void fail_conn(int i, const char *why) {
    struct conn *c = &conns[i];
    if (c->state == S_DEAD) return;
    if (c->state == S_OPEN) closed_early++;
    else {
        failed++;
        opening--;
        if (!first_failure[0]) {
            snprintf(first_failure, sizeof first_failure, "stream %d: %s", i, why);
            for (char *q = first_failure; *q; q++) if ((unsigned char)*q < 0x20) *q = ' '; /* one line */
        }
    }
    c->state = S_DEAD;
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    free(c->line);
    free(c->head);
    c->line = c->head = NULL;
    c->llen = c->lcap = 0;
}

static void record(int i, long idx) {
    struct conn *c = &conns[i];
    if (c->stalled) return; /* what a slow consumer got before it stopped reading is not a delivery */
    c->msgs++;
    total_msgs++;
    if (idx < 0 || idx >= maxmsg) { out_of_range++; return; }
    size_t bit = (size_t)i * (size_t)maxmsg + (size_t)idx;
    if (seen[bit >> 3] & (1u << (bit & 7))) { dups++; return; }
    seen[bit >> 3] |= (uint8_t)(1u << (bit & 7));
    msg_count[idx]++;
    if (!msg_first[idx]) msg_first[idx] = t_read;
    if (t_read > msg_last[idx]) msg_last[idx] = t_read;
}

static int starts(const char *p, size_t n, const char *lit, size_t litn) { return n >= litn && memcmp(p, lit, litn) == 0; }
#define STARTS(p, n, lit) starts((p), (n), (lit), sizeof(lit) - 1)

static void line_done(int i, const char *p, size_t n) {
    struct conn *c = &conns[i];
    if (n && p[n - 1] == '\r') n--;
    if (n == 0) { c->ev_type = T_NONE; return; } /* end of frame */
    if (p[0] == ':') { c->pings++; total_pings++; return; }
    if (STARTS(p, n, "event:")) {
        const char *v = p + 6;
        size_t m = n - 6;
        if (m && *v == ' ') { v++; m--; }
        if (m == 12 && memcmp(v, "message.sent", 12) == 0) c->ev_type = T_MSG;
        else if (m == 18 && memcmp(v, "room.member_joined", 18) == 0) c->ev_type = T_JOIN;
        else if (m == 16 && memcmp(v, "room.member_left", 16) == 0) c->ev_type = T_LEFT;
        else c->ev_type = T_OTHER;
        return;
    }
    if (STARTS(p, n, "data:")) {
        switch (c->ev_type) {
        case T_MSG: {
            const char *m = memmem(p, n, "rbm:", 4);
            if (!m) { unmarked++; break; }
            const char *q = m + 4, *end = p + n;
            long idx = 0;
            int digits = 0;
            while (q < end && *q >= '0' && *q <= '9' && digits < 10) { idx = idx * 10 + (*q - '0'); q++; digits++; }
            if (!digits || q >= end || *q != ':') { unmarked++; break; }
            record(i, idx);
            break;
        }
        case T_JOIN: if (!c->stalled) { c->joined++; total_join++; } break;
        case T_LEFT: if (!c->stalled) { c->left++; total_left++; } break;
        default: total_other++; break;
        }
        return;
    }
    if (STARTS(p, n, "retry:") && c->state == S_BODY) {
        c->state = S_OPEN;
        opened++;
        opening--;
        if (c->stalled) epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL); /* from now on it reads nothing */
    }
    /* "id:" lines and anything else: nothing to count */
}

/* Body bytes (chunk framing removed): complete lines are handled in place; a partial line is kept. */
static void body_bytes(int i, const char *p, size_t n) {
    struct conn *c = &conns[i];
    while (n) {
        const char *nl = memchr(p, '\n', n);
        if (!nl) {
            if (c->oversize) return;
            if (c->llen + n > LINE_MAX_BYTES) { c->oversize = 1; oversize_lines++; c->llen = 0; return; }
            if (c->llen + n > c->lcap) {
                size_t cap = c->lcap ? c->lcap : 4096;
                while (cap < c->llen + n) cap *= 2;
                c->line = realloc(c->line, cap);
                if (!c->line) { perror("realloc"); exit(2); }
                c->lcap = cap;
            }
            memcpy(c->line + c->llen, p, n);
            c->llen += n;
            return;
        }
        size_t k = (size_t)(nl - p);
        if (c->oversize) {
            c->oversize = 0;
            c->ev_type = T_NONE;
        } else if (c->llen) {
            if (c->llen + k > LINE_MAX_BYTES) { oversize_lines++; }
            else {
                if (c->llen + k > c->lcap) {
                    size_t cap = c->lcap;
                    while (cap < c->llen + k) cap *= 2;
                    c->line = realloc(c->line, cap);
                    if (!c->line) { perror("realloc"); exit(2); }
                    c->lcap = cap;
                }
                memcpy(c->line + c->llen, p, k);
                line_done(i, c->line, c->llen + k);
            }
            c->llen = 0;
        } else {
            line_done(i, p, k);
        }
        p += k + 1;
        n -= k + 1;
    }
}

static int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* Raw bytes after the response head: chunked decoding (RFC 9112 §7.1) or as they are. */
static void raw_bytes(int i, const char *p, size_t n) {
    struct conn *c = &conns[i];
    if (!c->chunked) { body_bytes(i, p, n); return; }
    while (n && c->state != S_DEAD) {
        switch (c->cstate) {
        case C_SIZE: {
            int h = hexval(*p);
            if (h >= 0) { c->crem = c->crem * 16 + (uint64_t)h; p++; n--; }
            else if (*p == ';' || *p == ' ' || *p == '\t' || *p == '\r') { c->cstate = C_EXT; }
            else if (*p == '\n') { c->cstate = C_EXT; }
            else { fail_conn(i, "bad chunk size"); return; }
            break;
        }
        case C_EXT: { /* skip to the end of the size line */
            const char *nl = memchr(p, '\n', n);
            if (!nl) return;
            n -= (size_t)(nl - p) + 1;
            p = nl + 1;
            if (c->crem == 0) { c->cstate = C_END; }
            else c->cstate = C_DATA;
            break;
        }
        case C_DATA: {
            size_t k = c->crem < n ? (size_t)c->crem : n;
            body_bytes(i, p, k);
            p += k;
            n -= k;
            c->crem -= k;
            if (!c->crem) c->cstate = C_CR;
            break;
        }
        case C_CR: /* the CRLF after the chunk data */
            if (*p == '\r') { c->cstate = C_LF; p++; n--; }
            else if (*p == '\n') { c->cstate = C_SIZE; c->crem = 0; p++; n--; }
            else { fail_conn(i, "missing CRLF after chunk"); return; }
            break;
        case C_LF:
            if (*p != '\n') { fail_conn(i, "missing LF after chunk"); return; }
            c->cstate = C_SIZE;
            c->crem = 0;
            p++;
            n--;
            break;
        case C_END: /* last chunk: the server ended the stream */
            return;
        }
    }
}

static int open_conn(int i, struct sockaddr_in *addr, const char *req, size_t reqlen, int ep) {
    struct conn *c = &conns[i];
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) { c->fd = -1; c->state = S_HEAD; opening++; fail_conn(i, strerror(errno)); return -1; }
    c->fd = fd;
    c->state = S_HEAD;
    opening++;
    if (c->stalled) { /* before connect: the window the client announces stays small */
        int small = 4096;
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    }
    if (connect(fd, (struct sockaddr *)addr, sizeof *addr) != 0) { fail_conn(i, strerror(errno)); return -1; }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    size_t off = 0;
    while (off < reqlen) {
        ssize_t w = write(fd, req + off, reqlen - off);
        if (w <= 0) { fail_conn(i, "write failed"); return -1; }
        off += (size_t)w;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) { fail_conn(i, strerror(errno)); return -1; }
    c->head = malloc(HEAD_CAP);
    c->hlen = 0;
    return 0;
}

static void on_readable(int i, char *buf, size_t cap) {
    struct conn *c = &conns[i];
    ssize_t r = read(c->fd, buf, cap);
    if (r < 0) {
        if (errno == EAGAIN || errno == EINTR) return;
        fail_conn(i, strerror(errno));
        return;
    }
    if (r == 0) { fail_conn(i, "closed by the server"); return; }
    t_read = now_ns();
    reads++;
    bytes_in += (uint64_t)r;
    if (c->state != S_HEAD) { raw_bytes(i, buf, (size_t)r); return; }
    size_t room = HEAD_CAP - 1 - (size_t)c->hlen, take = (size_t)r < room ? (size_t)r : room;
    memcpy(c->head + c->hlen, buf, take);
    c->hlen += (int)take;
    c->head[c->hlen] = 0;
    char *end = strstr(c->head, "\r\n\r\n");
    if (!end) {
        if ((size_t)c->hlen >= HEAD_CAP - 1) fail_conn(i, "response head too long");
        return;
    }
    size_t headlen = (size_t)(end - c->head) + 4;
    if (strncmp(c->head, "HTTP/1.1 200", 12) != 0 && strncmp(c->head, "HTTP/1.0 200", 12) != 0) {
        char why[200];
        char *eol = strstr(c->head, "\r\n");
        int len = eol ? (int)(eol - c->head) : 60;
        char *body = end + 4;
        snprintf(why, sizeof why, "%.*s %.100s", len < 60 ? len : 60, c->head, body);
        fail_conn(i, why);
        return;
    }
    for (char *q = c->head; q < end; q++) *q = (char)((*q >= 'A' && *q <= 'Z') ? *q + 32 : *q);
    c->chunked = strstr(c->head, "\r\ntransfer-encoding: chunked") != NULL;
    c->state = S_BODY;
    c->cstate = C_SIZE;
    c->crem = 0;
    /* the bytes of this read past the head (out of the buffer, not the head copy) */
    size_t before = (size_t)c->hlen - take; /* head bytes from earlier reads */
    size_t used = headlen - before;
    free(c->head);
    c->head = NULL;
    if ((size_t)r > used) raw_bytes(i, buf + used, (size_t)r - used);
}

static void write_progress(const char *path, uint64_t t) {
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, "%llu %llu %llu %d %d\n", (unsigned long long)t, (unsigned long long)total_msgs,
            (unsigned long long)(total_join + total_left), opened - closed_early, closed_early);
    fclose(f);
}

int main(int argc, char **argv) {
    if (argc != 11) {
        fprintf(stderr, "usage: %s PORT KEY FIRST COUNT MAXMSG QUERY READY_FILE PROGRESS_FILE RESULT_FILE HOLD_SECONDS\n", argv[0]);
        return 2;
    }
    int port = atoi(argv[1]), first = atoi(argv[3]);
    const char *key = argv[2], *query = argv[6], *ready_file = argv[7], *progress_file = argv[8], *result_file = argv[9];
    nconns = atoi(argv[4]);
    maxmsg = atoi(argv[5]);
    double hold = atof(argv[10]);
    if (nconns <= 0 || maxmsg <= 0) { fprintf(stderr, "COUNT and MAXMSG must be positive\n"); return 2; }

    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    conns = calloc((size_t)nconns, sizeof *conns);
    seen = calloc(((size_t)nconns * (size_t)maxmsg + 7) / 8, 1);
    msg_count = calloc((size_t)maxmsg, sizeof *msg_count);
    msg_first = calloc((size_t)maxmsg, sizeof *msg_first);
    msg_last = calloc((size_t)maxmsg, sizeof *msg_last);
    if (!conns || !seen || !msg_count || !msg_first || !msg_last) { perror("calloc"); return 2; }
    const char *stalled_env = getenv("READER_STALLED");
    nstalled = stalled_env ? atoi(stalled_env) : 0;
    if (nstalled < 0 || nstalled >= nconns) { fprintf(stderr, "READER_STALLED must be below COUNT\n"); return 2; }
    for (int i = 0; i < nconns; i++) {
        conns[i].fd = -1;
        conns[i].stalled = i >= nconns - nstalled;
    }

    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    int ep = epoll_create1(0);
    if (ep < 0) { perror("epoll_create1"); return 2; }
    epfd = ep;

    size_t bufcap = 256 * 1024;
    char *buf = malloc(bufcap);
    struct epoll_event *evs = calloc(1024, sizeof *evs);
    char req[2048];
    int next = 0, ready_written = 0;
    uint64_t started = now_ns(), last_progress = 0;
    uint64_t deadline = started + (uint64_t)(hold * 1e9);
    truncate(progress_file, 0);

    while (!stop_flag && now_ns() < deadline) {
        while (next < nconns && opening < WAVE) {
            int len = snprintf(req, sizeof req,
                               "GET /v1/users/u%d/events%s%s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAuthorization: Bearer %s\r\n"
                               "Accept: text/event-stream\r\n\r\n",
                               first + next, strcmp(query, "-") ? "?" : "", strcmp(query, "-") ? query : "", port, key);
            open_conn(next, &addr, req, (size_t)len, ep);
            next++;
        }
        if (!ready_written && next == nconns && opening == 0) {
            FILE *f = fopen(ready_file, "w");
            if (f) { fprintf(f, "%d %d %s\n", opened, failed, first_failure[0] ? first_failure : "-"); fclose(f); }
            ready_written = 1;
        }
        int n = epoll_wait(ep, evs, 1024, 100);
        if (n < 0 && errno != EINTR) { perror("epoll_wait"); break; }
        for (int k = 0; k < n; k++) {
            int i = (int)evs[k].data.u32;
            if (conns[i].state == S_DEAD) continue;
            if (evs[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(i, buf, bufcap);
        }
        uint64_t t = now_ns();
        if (t - last_progress >= 1000000000ull) { write_progress(progress_file, t); last_progress = t; }
    }
    write_progress(progress_file, now_ns());

    /* The slow consumers, read to their end: an end of stream within 5 s means the server had cut them. */
    int stalled_cut = 0, stalled_open = 0;
    uint64_t stalled_bytes = 0;
    for (int i = nconns - nstalled; i < nconns; i++) {
        struct conn *c = &conns[i];
        if (c->state != S_OPEN) continue; /* never opened, or failed: counted as such */
        uint64_t until = now_ns() + 5000000000ull;
        int ended = 0;
        while (!ended && now_ns() < until) {
            ssize_t r = read(c->fd, buf, bufcap);
            if (r > 0) { stalled_bytes += (uint64_t)r; continue; }
            if (r == 0 || (errno != EAGAIN && errno != EINTR)) { ended = 1; break; }
            usleep(1000);
        }
        if (ended) stalled_cut++;
        else stalled_open++;
    }

    /* results */
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", result_file);
    FILE *f = fopen(tmp, "w");
    if (!f) { perror(tmp); return 2; }
    uint32_t min_msgs = UINT32_MAX, max_msgs = 0, min_member = UINT32_MAX, max_member = 0;
    uint32_t pings_min = UINT32_MAX;
    int open_now = 0;
    for (int i = 0; i < nconns; i++) {
        struct conn *c = &conns[i];
        if (c->stalled || (c->state != S_OPEN && !(c->state == S_DEAD && (c->msgs || c->joined || c->left)))) continue;
        if (c->state == S_OPEN) open_now++;
        if (c->msgs < min_msgs) min_msgs = c->msgs;
        if (c->msgs > max_msgs) max_msgs = c->msgs;
        uint32_t m = c->joined + c->left;
        if (m < min_member) min_member = m;
        if (m > max_member) max_member = m;
        if (c->pings < pings_min) pings_min = c->pings;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    fprintf(f, "streams %d\nopened %d\nfailed %d\nclosed_early %d\nopen_at_end %d\n", nconns, opened, failed, closed_early, open_now);
    fprintf(f, "first_failure %s\n", first_failure[0] ? first_failure : "-");
    fprintf(f, "stalled %d\nstalled_cut %d\nstalled_still_open %d\nstalled_bytes_at_end %llu\n", nstalled, stalled_cut, stalled_open,
            (unsigned long long)stalled_bytes);
    fprintf(f, "message_frames %llu\njoined_frames %llu\nleft_frames %llu\nother_frames %llu\npings %llu\n",
            (unsigned long long)total_msgs, (unsigned long long)total_join, (unsigned long long)total_left,
            (unsigned long long)total_other, (unsigned long long)total_pings);
    fprintf(f, "duplicates %llu\nunmarked %llu\nout_of_range %llu\noversize_lines %llu\nbytes %llu\nreads %llu\n",
            (unsigned long long)dups, (unsigned long long)unmarked, (unsigned long long)out_of_range,
            (unsigned long long)oversize_lines, (unsigned long long)bytes_in, (unsigned long long)reads);
    fprintf(f, "per_stream_messages_min %u\nper_stream_messages_max %u\nper_stream_member_min %u\nper_stream_member_max %u\n",
            min_msgs == UINT32_MAX ? 0 : min_msgs, max_msgs, min_member == UINT32_MAX ? 0 : min_member, max_member);
    fprintf(f, "per_stream_pings_min %u\n", pings_min == UINT32_MAX ? 0 : pings_min);
    fprintf(f, "cpu_user_s %.3f\ncpu_sys_s %.3f\nelapsed_s %.3f\n", ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6,
            ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6, (now_ns() - started) / 1e9);
    for (int idx = 0; idx < maxmsg; idx++) {
        if (msg_count[idx])
            fprintf(f, "msg %d %u %llu %llu\n", idx, msg_count[idx], (unsigned long long)msg_first[idx], (unsigned long long)msg_last[idx]);
    }
    fclose(f);
    rename(tmp, result_file);
    return 0;
}
