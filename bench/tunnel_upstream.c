/*
 * The tunnel benchmark's upstream in the guest (bench/tunnel.py compiles it
 * with gcc -static -O2 and uploads it with cp): a server whose bytes cost the
 * guest's vCPU as little as a C program can, so that what the benchmark
 * measures is the tunnel, not the server.
 *
 *     tunnel_upstream source|sink WHERE
 *
 * WHERE is a TCP port on 127.0.0.1 or, when it starts with "/", a UNIX
 * socket path.  One child process per connection.
 *   source: reads a decimal byte count and a newline, then sends that many
 *           bytes (a fixed 1 MiB block, repeated) and closes.
 *   sink:   reads a decimal byte count and a newline, then that many bytes,
 *           answers the count it received as a decimal line and closes.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

#define BLOCK (1 << 20)

static char buffer[BLOCK];

static long long read_count(int fd) {
    char line[32];
    size_t used = 0;
    while (used < sizeof line - 1) {
        ssize_t n = read(fd, line + used, 1);
        if (n <= 0)
            return -1;
        if (line[used] == '\n')
            break;
        used++;
    }
    line[used] = 0;
    return atoll(line);
}

static int write_all(int fd, const char *data, size_t size) {
    while (size) {
        ssize_t n = write(fd, data, size);
        if (n <= 0)
            return -1;
        data += n;
        size -= (size_t)n;
    }
    return 0;
}

static void serve(int fd, int source) {
    long long want = read_count(fd);
    if (want < 0)
        return;
    if (source) {
        while (want > 0) {
            size_t n = want < BLOCK ? (size_t)want : BLOCK;
            if (write_all(fd, buffer, n))
                return;
            want -= (long long)n;
        }
    } else {
        long long got = 0;
        while (got < want) {
            ssize_t n = read(fd, buffer, BLOCK);
            if (n <= 0)
                break;
            got += n;
        }
        char line[32];
        int length = snprintf(line, sizeof line, "%lld\n", got);
        write_all(fd, line, (size_t)length);
    }
}

int main(int argc, char **argv) {
    if (argc != 3 || (strcmp(argv[1], "source") && strcmp(argv[1], "sink"))) {
        fprintf(stderr, "usage: %s source|sink PORT|/PATH\n", argv[0]);
        return 2;
    }
    int source = strcmp(argv[1], "source") == 0;
    for (int i = 0; i < BLOCK; i++)
        buffer[i] = (char)(i * 31 + 7);
    int server;
    if (argv[2][0] == '/') {
        struct sockaddr_un address = {.sun_family = AF_UNIX};
        strncpy(address.sun_path, argv[2], sizeof address.sun_path - 1);
        unlink(argv[2]);
        server = socket(AF_UNIX, SOCK_STREAM, 0);
        if (server < 0 || bind(server, (struct sockaddr *)&address, sizeof address)) {
            perror("bind");
            return 1;
        }
    } else {
        struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[2]))};
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        int one = 1;
        server = socket(AF_INET, SOCK_STREAM, 0);
        setsockopt(server, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (server < 0 || bind(server, (struct sockaddr *)&address, sizeof address)) {
            perror("bind");
            return 1;
        }
    }
    if (listen(server, 64)) {
        perror("listen");
        return 1;
    }
    signal(SIGCHLD, SIG_IGN);
    for (;;) {
        int connection = accept(server, NULL, NULL);
        if (connection < 0)
            continue;
        if (fork() == 0) {
            close(server);
            serve(connection, source);
            _exit(0);
        }
        close(connection);
    }
}
