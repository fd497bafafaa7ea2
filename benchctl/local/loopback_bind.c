/* Loopback-only bind() for the local engine's processes (LD_PRELOAD; benchctl/local/loopback.py).
 *
 * Dynamo 1.6.1 binds some listeners on the wildcard address whatever its configuration says: the event
 * plane's direct-mode ZMQ PUB sockets ("tcp://0.0.0.0:0", lib/runtime/src/transports/event_plane/mod.rs)
 * and the mocker's prefill bootstrap server ("0.0.0.0:{port}", lib/llm/src/mocker). No flag or variable
 * moves them, so a bind() to INADDR_ANY becomes INADDR_LOOPBACK and one to in6addr_any becomes ::1;
 * every other bind() is passed through unchanged (ports, families and explicit addresses as given).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

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
