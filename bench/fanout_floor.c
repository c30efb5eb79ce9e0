/*
 * fanout_floor: the physical limit beside bench/rooms.sh's big-group run. A server that does nothing but fan out:
 * one thread, epoll, answers every GET with an SSE head (chunked, like Parley's streams) and a `retry:` line, then,
 * once COUNT streams are open, writes RATE messages per second for SECONDS, each one chunk of FRAME_BYTES
 * (`event: message.sent` and a data line starting with the marker "rbm:<i>:" that bench/rooms_reader.c looks for),
 * with one write() per stream per message, as Parley does. No database, no JSON, no filtering: what is left is the
 * kernel's loopback TCP and the loop over the sockets.
 *
 * build:  cc -O2 -o fanout_floor bench/fanout_floor.c      (bench/rooms.sh does this at run time)
 * usage:  fanout_floor PORT COUNT RATE SECONDS FRAME_BYTES SEND_LOG
 *   SEND_LOG  one line per message: "<i> <due ns> <due ns> <write start ns> 201" (CLOCK_MONOTONIC), the format of
 *             bench/py/room_driver.py's send log, so `room_driver.py analyze` reads it, with latency counted from the
 *             message's due time as the driver's open loop does for Parley (a floor that falls behind its schedule
 *             shows it); written at the end, then
 *             a last line on stdout: "cpu_s <user+system seconds> writes <n> short_writes <n>"
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

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static const char HEAD[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                           "Transfer-Encoding: chunked\r\n\r\n"
                           "d\r\nretry: 3000\n\n\r\n";

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s PORT COUNT RATE SECONDS FRAME_BYTES SEND_LOG\n", argv[0]);
        return 2;
    }
    int port = atoi(argv[1]), count = atoi(argv[2]), frame_bytes = atoi(argv[5]);
    double rate = atof(argv[3]), seconds = atof(argv[4]);
    const char *send_log = argv[6];
    int messages = (int)(rate * seconds + 0.5);
    if (count <= 0 || rate <= 0 || messages <= 0 || frame_bytes < 64 || frame_bytes > 60000) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    if (bind(lfd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(lfd, 4096) != 0) { perror("bind/listen"); return 2; }
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd};
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    int *streams = calloc((size_t)count, sizeof *streams);
    int open_streams = 0;
    char buf[8192];
    struct epoll_event evs[256];
    /* Accept and answer until COUNT streams are open (each GET is answered at once; its body is never read again). */
    while (open_streams < count) {
        int n = epoll_wait(ep, evs, 256, 1000);
        for (int k = 0; k < n; k++) {
            int fd = evs[k].data.fd;
            if (fd == lfd) {
                int c;
                while ((c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    struct epoll_event cev = {.events = EPOLLIN, .data.fd = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
                }
                continue;
            }
            ssize_t r = read(fd, buf, sizeof buf);
            if (r <= 0) { close(fd); continue; }
            if (memmem(buf, (size_t)r, "\r\n\r\n", 4) && open_streams < count) { /* the request head fits one read here */
                epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
                if (write(fd, HEAD, sizeof HEAD - 1) != (ssize_t)(sizeof HEAD - 1)) { close(fd); continue; }
                streams[open_streams++] = fd;
            }
        }
    }
    usleep(2000000); /* as rooms.sh: the streams settle before the clock starts */

    /* One chunk per message: "<size>\r\n" + frame + "\r\n"; the frame padded to FRAME_BYTES. */
    char *chunk = malloc((size_t)frame_bytes + 32);
    uint64_t *due = calloc((size_t)messages, sizeof *due), *begun = calloc((size_t)messages, sizeof *begun);
    uint64_t writes = 0, short_writes = 0;
    uint64_t t0 = now_ns() + 50000000ull;
    for (int i = 0; i < messages; i++) {
        due[i] = t0 + (uint64_t)((double)i * 1e9 / rate);
        uint64_t t = now_ns();
        if (due[i] > t) {
            struct timespec d = {.tv_sec = (time_t)((due[i] - t) / 1000000000ull), .tv_nsec = (long)((due[i] - t) % 1000000000ull)};
            nanosleep(&d, NULL);
        }
        char frame[70000];
        int head = snprintf(frame, sizeof frame, "event: message.sent\nid: %d\ndata: {\"body\":{\"text\":\"rbm:%d:", i + 1, i);
        int pad = frame_bytes - head - 5;
        memset(frame + head, 'x', (size_t)(pad > 0 ? pad : 0));
        int len = head + (pad > 0 ? pad : 0);
        memcpy(frame + len, "\"}}\n\n", 5);
        len += 5;
        int hl = snprintf(chunk, 32, "%x\r\n", len);
        memcpy(chunk + hl, frame, (size_t)len);
        memcpy(chunk + hl + len, "\r\n", 2);
        size_t total = (size_t)(hl + len + 2);
        begun[i] = now_ns();
        for (int s = 0; s < open_streams; s++) {
            ssize_t w = write(streams[s], chunk, total);
            writes++;
            if (w != (ssize_t)total) short_writes++; /* a reader this far behind is not the floor's concern */
        }
    }
    usleep(3000000); /* the reader takes the last ones */
    FILE *f = fopen(send_log, "w");
    if (!f) { perror(send_log); return 2; }
    for (int i = 0; i < messages; i++)
        fprintf(f, "%d %llu %llu %llu 201\n", i, (unsigned long long)due[i], (unsigned long long)due[i], (unsigned long long)begun[i]);
    fclose(f);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("cpu_s %.3f writes %llu short_writes %llu\n",
           ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6,
           (unsigned long long)writes, (unsigned long long)short_writes);
    for (int s = 0; s < open_streams; s++) close(streams[s]);
    return 0;
}
