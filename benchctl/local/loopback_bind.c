/* Loopback-only bind() for the local engine's processes, and TCP_NODELAY on the mocker's handoff rendezvous
 * (LD_PRELOAD; benchctl/local/loopback.py).
 *
 * bind(): Dynamo 1.6.1 binds some listeners on the wildcard address whatever its configuration says: the
 * event plane's direct-mode ZMQ PUB sockets ("tcp://0.0.0.0:0", lib/runtime/src/transports/event_plane/mod.rs)
 * and the mocker's prefill bootstrap server ("0.0.0.0:{port}", lib/mocker/src/services/bootstrap.rs). No flag
 * or variable moves them, so a bind() to INADDR_ANY becomes INADDR_LOOPBACK and one to in6addr_any becomes
 * ::1; every other bind() is passed through unchanged (ports, families and explicit addresses as given).
 *
 * connect() / accept() / accept4(): with BENCHCTL_NODELAY_PORTS set (a comma-separated list of TCP ports: the
 * deployment's prefill bootstrap ports), a TCP socket connected to one of those ports, or accepted on one of
 * them, gets TCP_NODELAY. The 1.6.1 mocker's prefill -> decode handoff is a framed exchange over that TCP
 * connection with no TCP_NODELAY on either end (its request plane sets it, this connection does not): the
 * decode writes two frames back to back, and Nagle's algorithm holds the second until the prefill's
 * delayed ACK (Linux: at least 40 ms) arrives, about 45 ms added to every disaggregated request's first
 * token. A connection to any other port is passed through untouched.
 *
 * connect(), with BENCHCTL_REDIRECT_PORTS set (comma-separated FROM:TO pairs of TCP ports): a connection to a
 * loopback address on port FROM goes to the same address on port TO instead. The local engine sets it in the
 * frontend only, so the frontend reaches an aggregated twin worker's request plane through the twin's dispatch
 * hold (benchctl/local/hold.py), which passes every byte on after the worker's per-request dispatch time.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);
typedef int (*connect_fn)(int, const struct sockaddr *, socklen_t);
typedef int (*accept_fn)(int, struct sockaddr *, socklen_t *);
typedef int (*accept4_fn)(int, struct sockaddr *, socklen_t *, int);

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    static bind_fn real_bind;
    if (!real_bind) {
        real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");
        if (!real_bind) {
            errno = ENOSYS;
            return -1;
        }
    }
    if (addr && addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in a;
        memcpy(&a, addr, sizeof a);
        if (a.sin_addr.s_addr == htonl(INADDR_ANY)) {
            a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            return real_bind(fd, (const struct sockaddr *)&a, sizeof a);
        }
    } else if (addr && addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 a;
        memcpy(&a, addr, sizeof a);
        if (IN6_IS_ADDR_UNSPECIFIED(&a.sin6_addr)) {
            a.sin6_addr = in6addr_loopback;
            return real_bind(fd, (const struct sockaddr *)&a, sizeof a);
        }
    }
    return real_bind(fd, addr, len);
}

/* ---------------------------------------------------------------------------------- TCP_NODELAY by port */

/* Whether `port` (host order) is in BENCHCTL_NODELAY_PORTS (read at each call: a short list, rare calls). */
static int nodelay_port(unsigned port) {
    const char *p = getenv("BENCHCTL_NODELAY_PORTS");
    if (!p || port == 0)
        return 0;
    while (*p) {
        char *end;
        unsigned long v = strtoul(p, &end, 10);
        if (end == p)
            return 0; /* not a number: nothing matches */
        if (v == port)
            return 1;
        p = end;
        while (*p == ',' || *p == ' ')
            p++;
    }
    return 0;
}

static unsigned addr_port(const struct sockaddr *addr, socklen_t len) {
    if (addr && addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in))
        return ntohs(((const struct sockaddr_in *)addr)->sin_port);
    if (addr && addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6))
        return ntohs(((const struct sockaddr_in6 *)addr)->sin6_port);
    return 0;
}

/* TCP_NODELAY on `fd` when it is a TCP stream socket (errno kept: the caller's call decides what it reports). */
static void set_nodelay(int fd) {
    int saved = errno, type = 0, one = 1;
    socklen_t tlen = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) == 0 && type == SOCK_STREAM)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    errno = saved;
}

/* The TO port BENCHCTL_REDIRECT_PORTS pairs with `port` (host order), or 0 (read at each call: rare calls). */
static unsigned redirect_port(unsigned port) {
    const char *p = getenv("BENCHCTL_REDIRECT_PORTS");
    if (!p || port == 0)
        return 0;
    while (*p) {
        char *end, *end2;
        unsigned long from = strtoul(p, &end, 10);
        if (end == p || *end != ':')
            return 0; /* not FROM:TO: nothing matches */
        unsigned long to = strtoul(end + 1, &end2, 10);
        if (end2 == end + 1 || to == 0 || to > 65535)
            return 0;
        if (from == port)
            return (unsigned)to;
        p = end2;
        while (*p == ',' || *p == ' ')
            p++;
    }
    return 0;
}

int connect(int fd, const struct sockaddr *addr, socklen_t len) {
    static connect_fn real_connect;
    if (!real_connect) {
        real_connect = (connect_fn)dlsym(RTLD_NEXT, "connect");
        if (!real_connect) {
            errno = ENOSYS;
            return -1;
        }
    }
    if (nodelay_port(addr_port(addr, len)))
        set_nodelay(fd); /* before the (non-blocking) connect: the option holds for the connection */
    unsigned to = redirect_port(addr_port(addr, len));
    if (to && addr->sa_family == AF_INET) {
        struct sockaddr_in a;
        memcpy(&a, addr, sizeof a);
        if (a.sin_addr.s_addr == htonl(INADDR_LOOPBACK)) {
            a.sin_port = htons((unsigned short)to);
            return real_connect(fd, (const struct sockaddr *)&a, sizeof a);
        }
    } else if (to && addr->sa_family == AF_INET6) {
        struct sockaddr_in6 a;
        memcpy(&a, addr, sizeof a);
        if (IN6_IS_ADDR_LOOPBACK(&a.sin6_addr)) {
            a.sin6_port = htons((unsigned short)to);
            return real_connect(fd, (const struct sockaddr *)&a, sizeof a);
        }
    }
    return real_connect(fd, addr, len);
}

static void nodelay_if_accepted_on_port(int fd) {
    struct sockaddr_storage local;
    socklen_t len = sizeof local;
    int saved = errno;
    if (fd >= 0 && getsockname(fd, (struct sockaddr *)&local, &len) == 0 &&
        nodelay_port(addr_port((struct sockaddr *)&local, len)))
        set_nodelay(fd);
    errno = saved;
}

int accept(int fd, struct sockaddr *addr, socklen_t *len) {
    static accept_fn real_accept;
    if (!real_accept) {
        real_accept = (accept_fn)dlsym(RTLD_NEXT, "accept");
        if (!real_accept) {
            errno = ENOSYS;
            return -1;
        }
    }
    int conn = real_accept(fd, addr, len);
    nodelay_if_accepted_on_port(conn);
    return conn;
}

int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags) {
    static accept4_fn real_accept4;
    if (!real_accept4) {
        real_accept4 = (accept4_fn)dlsym(RTLD_NEXT, "accept4");
        if (!real_accept4) {
            errno = ENOSYS;
            return -1;
        }
    }
    int conn = real_accept4(fd, addr, len, flags);
    nodelay_if_accepted_on_port(conn);
    return conn;
}
