/*
 * The tunnel benchmark's port relay (bench/tunnel.py, its "port relay" part):
 * what a tunnel on a dedicated raw virtio-serial port would cost the guest at
 * best.  It opens the port, connects to the upstream (a TCP port on 127.0.0.1,
 * or a UNIX socket path when it starts with "/"), and moves
 * the bytes both ways without looking at them: splice(2) through a pipe each
 * way, or read(2)/write(2) with a 1 MiB buffer where splice is refused (it
 * prints which on standard error, one line per direction, once its first
 * bytes have moved).  Either side
 * ending ends both (the tunnel's semantics: no half-close).
 *
 *     tunnel_relay /dev/vportNpM PORT|/PATH
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

#define CHUNK (1 << 20)

struct direction {
    int from, to;
    const char *name;
};

static void said(struct direction *d, const char *how) {
    if (d->name) {
        fprintf(stderr, "tunnel_relay: %s by %s\n", d->name, how);
        d->name = NULL;
    }
}

static void *move(void *argument) {
    struct direction *d = argument;
    int pipe_ends[2];
    const char *how = "splice";
    if (pipe(pipe_ends) == 0)
        fcntl(pipe_ends[1], F_SETPIPE_SZ, CHUNK);
    for (;;) {
        ssize_t n = splice(d->from, NULL, pipe_ends[1], NULL, CHUNK, SPLICE_F_MOVE);
        if (n < 0 && (errno == EINVAL || errno == ENOSYS)) {
            how = "read/write";
            break;
        }
        if (n <= 0)
            goto done;
        while (n > 0) {
            ssize_t m = splice(pipe_ends[0], NULL, d->to, NULL, (size_t)n, SPLICE_F_MOVE);
            if (m < 0 && (errno == EINVAL || errno == ENOSYS)) {
                /* The destination refuses splice: drain the pipe by hand, then copy from now on. */
                static char drain[CHUNK];
                ssize_t k = read(pipe_ends[0], drain, (size_t)n);
                for (ssize_t off = 0; off < k;) {
                    ssize_t w = write(d->to, drain + off, (size_t)(k - off));
                    if (w <= 0)
                        goto done;
                    off += w;
                }
                how = "read/write";
                goto copy;
            }
            if (m <= 0)
                goto done;
            said(d, how);
            n -= m;
        }
    }
copy:
    {
        char *buffer = malloc(CHUNK);
        for (;;) {
            ssize_t n = read(d->from, buffer, CHUNK);
            if (n <= 0)
                break;
            for (ssize_t off = 0; off < n;) {
                ssize_t w = write(d->to, buffer + off, (size_t)(n - off));
                if (w <= 0)
                    goto done;
                off += w;
            }
            said(d, how);
        }
    }
done:
    _exit(0);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s PORT_DEVICE TCP_PORT|/PATH\n", argv[0]);
        return 2;
    }
    int port = open(argv[1], O_RDWR);
    if (port < 0) {
        perror(argv[1]);
        return 1;
    }
    int upstream, connected;
    if (argv[2][0] == '/') {
        struct sockaddr_un address = {.sun_family = AF_UNIX};
        strncpy(address.sun_path, argv[2], sizeof address.sun_path - 1);
        upstream = socket(AF_UNIX, SOCK_STREAM, 0);
        connected = upstream >= 0 && connect(upstream, (struct sockaddr *)&address, sizeof address) == 0;
    } else {
        struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[2]))};
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        upstream = socket(AF_INET, SOCK_STREAM, 0);
        connected = upstream >= 0 && connect(upstream, (struct sockaddr *)&address, sizeof address) == 0;
    }
    if (!connected) {
        perror("connect");
        return 1;
    }
    struct direction in = {port, upstream, "port to socket"}, out = {upstream, port, "socket to port"};
    pthread_t thread;
    pthread_create(&thread, NULL, move, &in);
    move(&out);
    return 0;
}
