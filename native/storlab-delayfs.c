/* storlab-delayfs: the layer that gives a device placement the latency its file declares, on hosts
 * without device-mapper's delay target. It serves one directory (the placement's loop-device mount,
 * which only root can reach) at a mount point, doing each operation on the real files and then
 * sleeping the declared time: reads and writes by direction, and the flush that fsync/fdatasync send.
 * Many requests sleep at once (one thread each), so a queue depth of 8 at 2 ms gives about 4,000 IOs a
 * second, not 500.
 *
 *   storlab-delayfs --read SPEC --write SPEC --flush SPEC --device DEVICE --allow UID[,UID…] SOURCE MOUNTPOINT
 *
 * DEVICE names the mount's source (/dev/loop3): what asks which disk a path sits on finds the device
 * behind the layer. SPEC is milliseconds: "2" (fixed) or "1/4" (p50/p99: drawn per IO from the
 * lognormal through both). Only the users named by --allow (root and the servers' user) are served;
 * anyone else is refused at once, before the layer does anything for them.
 *
 * It speaks the kernel's FUSE protocol itself (Debian's libfuse 3.14 knows neither per-node handles
 * nor passthrough): every node is an O_PATH descriptor, and every call acts on its parent's descriptor
 * and the last name only, links never followed, with the caller's filesystem uid and gid, so no name
 * a caller renames or swaps for a link can send root elsewhere. Only regular files and folders are
 * opened. Where reads and writes add nothing, a file's reads and writes go straight from the caller to
 * the device's file (FUSE passthrough): only fsync reaches the layer, so the caller's IO is its own
 * (its control group's caps, its page cache) and costs no round trip. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <linux/futex.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <grp.h>
#include <unistd.h>

/* Protocol 7.40's additions, which Debian 12's kernel headers (7.38) lack. */
#define PROTOCOL_MINOR 40
#define INIT_PASSTHROUGH (1ULL << 37)
#define OPEN_PASSTHROUGH (1 << 7)
struct backing_map {
    int32_t fd;
    uint32_t flags;
    uint64_t padding;
};
#define IOC_BACKING_OPEN _IOW(229, 1, struct backing_map)
#define IOC_BACKING_CLOSE _IOW(229, 2, uint32_t)
struct init_out {
    uint32_t major, minor, max_readahead, flags;
    uint16_t max_background, congestion_threshold;
    uint32_t max_write, time_gran;
    uint16_t max_pages, map_alignment;
    uint32_t flags2, max_stack_depth;
    uint16_t request_timeout, unused[11];
};
struct open_out {
    uint64_t fh;
    uint32_t open_flags;
    int32_t backing_id;
};

#define Z99 2.3263478740408408 /* the standard normal's 99th percentile */
#define ALIGN 4096
#define MAX_WRITE (1 << 20)
#define BUFFER (MAX_WRITE + 2 * ALIGN)
#define THREADS 64
#define MAX_ALLOWED 8
#define TIMEOUT_S 1 /* how long the kernel may trust a name or attributes: only the layer changes them */

struct delay {
    double p50_ns, sigma; /* sigma 0: fixed */
};

static struct delay read_delay, write_delay, flush_delay;
static int fuse_fd = -1, proc_fd = -1, statfs_fd = -1;
static int passthrough; /* negotiated at INIT */
static uid_t allowed[MAX_ALLOWED];
static int allowed_count;

/* -- the declared time --------------------------------------------------------------------------- */

static int parse_delay(const char *text, struct delay *d) {
    char *end;
    double p50 = strtod(text, &end), p99 = p50;
    if (*end == '/') p99 = strtod(end + 1, &end);
    if (*end || end == text || !isfinite(p50) || !isfinite(p99) || p50 < 0 || p99 < p50 || (p99 > p50 && p50 <= 0))
        return -1;
    d->p50_ns = p50 * 1e6;
    d->sigma = p99 > p50 ? log(p99 / p50) / Z99 : 0;
    return 0;
}

/* A per-thread generator: no lock between requests that sleep side by side. */
static __thread unsigned long long rng_state;

static double uniform(void) {
    if (!rng_state) rng_state = (unsigned long long)gettid() * 0x9E3779B97F4A7C15ULL ^ (unsigned long long)time(NULL);
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return ((rng_state >> 11) + 0.5) / 9007199254740992.0;
}

static double draw_ns(const struct delay *d) {
    if (d->sigma == 0) return d->p50_ns;
    double z = sqrt(-2 * log(uniform())) * cos(2 * M_PI * uniform());
    return d->p50_ns * exp(d->sigma * z);
}

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void sleep_until(long long ns) {
    struct timespec t = {ns / 1000000000LL, ns % 1000000000LL};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) == EINTR) {}
}

/* What a request's chain loses beyond the declared time: this thread wakes from its sleep late, and
 * the caller, asleep in the kernel meanwhile, wakes late from the reply (and a sleeping layer thread
 * from the request). The sleep's lateness is followed as it goes (a moving average over all threads);
 * the wake-ups, measured when the layer starts (wake_ns), are taken off each sleep too. */
static long long late_ns;  /* shared; read and written whole (relaxed atomics): a lost update only slows the average */
static long long wake_ns;

static void hold(const struct delay *d) {
    if (d->p50_ns <= 0) return;
    double want = draw_ns(d), late_now = (double)__atomic_load_n(&late_ns, __ATOMIC_RELAXED);
    double early = late_now + 2.0 * (double)wake_ns;
    if (early > want / 2) early = want / 2;
    long long target = now_ns() + (long long)(want - early);
    sleep_until(target);
    double late = (double)(now_ns() - target);
    __atomic_store_n(&late_ns, (long long)(late_now + (late - late_now) / 16), __ATOMIC_RELAXED);
}

/* The wake-up of a thread asleep on a futex, as the caller is on its request: one thread sleeps to a
 * time and wakes the other, which notes how late it woke beyond the first one's own wake. */
static volatile int calibration_flag;
static long long calibration_woke;

static void *calibration_waker(void *arg) {
    long long *at = arg;
    for (int i = 0; i < 64; i++) {
        sleep_until(now_ns() + 500000);
        at[i] = now_ns();
        __atomic_store_n(&calibration_flag, i + 1, __ATOMIC_RELEASE);
        syscall(SYS_futex, &calibration_flag, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
        while (__atomic_load_n(&calibration_woke, __ATOMIC_ACQUIRE) != i + 1) sched_yield();
    }
    return NULL;
}

static int by_value(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

static void calibrate(void) {
    long long at[64], took[64];
    pthread_t waker;
    if (pthread_create(&waker, NULL, calibration_waker, at)) return;
    for (int i = 0; i < 64; i++) {
        int seen;
        while ((seen = __atomic_load_n(&calibration_flag, __ATOMIC_ACQUIRE)) != i + 1)
            syscall(SYS_futex, &calibration_flag, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
        took[i] = now_ns() - at[i];
        __atomic_store_n(&calibration_woke, i + 1, __ATOMIC_RELEASE);
    }
    pthread_join(waker, NULL);
    qsort(took, 64, sizeof took[0], by_value);
    wake_ns = took[32];
}

/* -- nodes: one O_PATH descriptor each, found again by device and inode ---------------------------- */

struct node {
    int fd;
    dev_t dev;
    ino_t ino;
    mode_t type;
    uint64_t lookups;
    int opened;     /* open handles: the backing file is the inode's while one is */
    int backing_id; /* passthrough: the kernel's name for the device's file, -1 if none */
    struct node *next;
};

#define BUCKETS 4096
static struct node *buckets[BUCKETS];
static struct node root_node;
static pthread_mutex_t nodes_lock = PTHREAD_MUTEX_INITIALIZER;
static dev_t source_dev;

static unsigned bucket_of(dev_t dev, ino_t ino) { return (unsigned)((ino * 0x9E3779B1u) ^ dev) % BUCKETS; }

static struct node *node_of(uint64_t id) { return id == FUSE_ROOT_ID ? &root_node : (struct node *)(uintptr_t)id; }
static uint64_t id_of(struct node *n) { return n == &root_node ? FUSE_ROOT_ID : (uint64_t)(uintptr_t)n; }

/* The node for `fd` (an O_PATH descriptor of a name just looked up), one more lookup counted; `fd` is
 * kept or closed. */
static struct node *remember(int fd, const struct stat *st) {
    pthread_mutex_lock(&nodes_lock);
    if (st->st_dev == root_node.dev && st->st_ino == root_node.ino) {
        pthread_mutex_unlock(&nodes_lock);
        close(fd);
        return NULL; /* the top seen again through a name: refused, a loop */
    }
    unsigned b = bucket_of(st->st_dev, st->st_ino);
    struct node *n = buckets[b];
    while (n && !(n->dev == st->st_dev && n->ino == st->st_ino)) n = n->next;
    if (n) {
        close(fd);
    } else if ((n = calloc(1, sizeof *n))) {
        *n = (struct node){.fd = fd, .dev = st->st_dev, .ino = st->st_ino, .type = st->st_mode & S_IFMT,
                           .backing_id = -1, .next = buckets[b]};
        buckets[b] = n;
    } else {
        close(fd);
    }
    if (n) n->lookups++;
    pthread_mutex_unlock(&nodes_lock);
    return n;
}

static void forget(uint64_t id, uint64_t count) {
    struct node *n = node_of(id);
    if (n == &root_node) return;
    pthread_mutex_lock(&nodes_lock);
    n->lookups = n->lookups > count ? n->lookups - count : 0;
    if (n->lookups == 0 && n->opened == 0) {
        struct node **p = &buckets[bucket_of(n->dev, n->ino)];
        while (*p != n) p = &(*p)->next;
        *p = n->next;
        close(n->fd);
        free(n);
    }
    pthread_mutex_unlock(&nodes_lock);
}

/* -- acting as the caller -------------------------------------------------------------------------- */

struct request {
    struct fuse_in_header *in;
    char *arg;
    size_t arg_len;
};

static void as_caller(const struct request *r) {
    setfsgid(r->in->gid);
    setfsuid(r->in->uid);
}

static void as_self(void) {
    setfsuid(0);
    setfsgid(0);
}

/* The node's own file, named through /proc/self/fd: the inode the descriptor holds, whatever its name
 * is now (only for regular files and folders: a link there would be followed). */
static void proc_name(const struct node *n, char *out) { snprintf(out, 24, "%d", n->fd); }

static int allowed_uid(uid_t uid) {
    for (int i = 0; i < allowed_count; i++)
        if (allowed[i] == uid) return 1;
    return 0;
}

static int name_ok(const char *name, size_t room) {
    size_t len = strnlen(name, room);
    return len > 0 && len < room && len <= 255 && !strchr(name, '/') && strcmp(name, ".") && strcmp(name, "..");
}

/* -- replies ------------------------------------------------------------------------------------- */

static void reply(const struct request *r, int error, const void *data, size_t len) {
    struct fuse_out_header out = {.len = (uint32_t)(sizeof out + (error ? 0 : len)), .error = error, .unique = r->in->unique};
    struct iovec iov[2] = {{&out, sizeof out}, {(void *)data, error ? 0 : len}};
    /* ENOENT here: the request was interrupted and is gone; nothing to do. */
    if (writev(fuse_fd, iov, 2) < 0 && errno != ENOENT) {}
}

static void reply_error(const struct request *r, int error) { reply(r, -error, NULL, 0); }

static void fill_attr(struct fuse_attr *a, const struct stat *st) {
    *a = (struct fuse_attr){.ino = st->st_ino, .size = (uint64_t)st->st_size, .blocks = (uint64_t)st->st_blocks,
                            .atime = (uint64_t)st->st_atim.tv_sec, .mtime = (uint64_t)st->st_mtim.tv_sec,
                            .ctime = (uint64_t)st->st_ctim.tv_sec, .atimensec = (uint32_t)st->st_atim.tv_nsec,
                            .mtimensec = (uint32_t)st->st_mtim.tv_nsec, .ctimensec = (uint32_t)st->st_ctim.tv_nsec,
                            .mode = st->st_mode, .nlink = (uint32_t)st->st_nlink, .uid = st->st_uid,
                            .gid = st->st_gid, .rdev = (uint32_t)st->st_rdev, .blksize = (uint32_t)st->st_blksize};
}

static void reply_attr(const struct request *r, int fd) {
    struct stat st;
    if (fstat(fd, &st) < 0) return reply_error(r, errno);
    struct fuse_attr_out out = {.attr_valid = TIMEOUT_S};
    fill_attr(&out.attr, &st);
    reply(r, 0, &out, sizeof out);
}

/* Look `name` up beneath `parent` without following it: its node, or NULL with errno. */
static struct node *look_up(struct node *parent, const char *name, struct stat *st) {
    int fd = openat(parent->fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return NULL;
    int e = fstat(fd, st) < 0 ? errno : st->st_dev != source_dev ? EXDEV : 0; /* nothing mounted inside is served */
    if (e) {
        close(fd);
        errno = e;
        return NULL;
    }
    struct node *n = remember(fd, st);
    if (!n) errno = ELOOP;
    return n;
}

static void fill_entry(struct fuse_entry_out *e, struct node *n, const struct stat *st) {
    *e = (struct fuse_entry_out){.nodeid = id_of(n), .entry_valid = TIMEOUT_S, .attr_valid = TIMEOUT_S};
    fill_attr(&e->attr, st);
}

static void reply_entry(const struct request *r, struct node *parent, const char *name) {
    struct stat st;
    struct node *n = look_up(parent, name, &st);
    if (!n) return reply_error(r, errno);
    struct fuse_entry_out e;
    fill_entry(&e, n, &st);
    reply(r, 0, &e, sizeof e);
}

/* -- the operations -------------------------------------------------------------------------------- */

static void do_lookup(const struct request *r, struct node *parent) {
    if (!name_ok(r->arg, r->arg_len)) return reply_error(r, ENOENT);
    as_caller(r); /* the caller must be able to search the folder */
    struct stat st;
    struct node *n = look_up(parent, r->arg, &st);
    int e = errno;
    as_self();
    if (!n) return reply_error(r, e);
    struct fuse_entry_out out;
    fill_entry(&out, n, &st);
    reply(r, 0, &out, sizeof out);
}

/* An open file: its descriptor on the device's file (O_DIRECT where the layer does the IO), a second,
 * buffered one for the requests whose offset or length the device cannot take directly, and its node. */
struct handle {
    int fd, buffered_fd;
    struct node *node;
};

static void do_getattr(const struct request *r, struct node *n) {
    const struct fuse_getattr_in *in = (const void *)r->arg;
    if (r->arg_len >= sizeof *in && (in->getattr_flags & FUSE_GETATTR_FH) && in->fh)
        return reply_attr(r, ((struct handle *)(uintptr_t)in->fh)->fd);
    reply_attr(r, n->fd);
}

static int opens_as_file(const struct node *n) { return n->type == S_IFREG || n->type == S_IFDIR; }

static void do_setattr(const struct request *r, struct node *n) {
    const struct fuse_setattr_in *in = (const void *)r->arg;
    if (r->arg_len < sizeof *in) return reply_error(r, EINVAL);
    int link = n->type == S_IFLNK;
    if (!opens_as_file(n) && !link) return reply_error(r, EPERM);
    char name[24];
    proc_name(n, name);
    int error = 0;
    as_caller(r);
    if ((in->valid & FATTR_MODE) && (link ? (errno = EOPNOTSUPP, -1) : fchmodat(proc_fd, name, in->mode & 07777, 0)) < 0)
        error = errno;
    /* The node's own inode, never a name: a link is changed, not followed. */
    if (!error && (in->valid & (FATTR_UID | FATTR_GID)) &&
        fchownat(n->fd, "", (in->valid & FATTR_UID) ? in->uid : (uid_t)-1, (in->valid & FATTR_GID) ? in->gid : (gid_t)-1,
                 AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
        error = errno;
    if (!error && (in->valid & FATTR_SIZE)) {
        if (n->type != S_IFREG) {
            error = EISDIR;
        } else if ((in->valid & FATTR_FH) && in->fh) {
            if (ftruncate(((struct handle *)(uintptr_t)in->fh)->fd, (off_t)in->size) < 0) error = errno;
        } else {
            int fd = openat(proc_fd, name, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
            if (fd < 0 || ftruncate(fd, (off_t)in->size) < 0) error = errno;
            if (fd >= 0) close(fd);
        }
    }
    /* A link's own times cannot be set through its descriptor (only through its name): they are left. */
    if (!error && !link && (in->valid & (FATTR_ATIME | FATTR_MTIME))) {
        struct timespec tv[2] = {{0, UTIME_OMIT}, {0, UTIME_OMIT}};
        if (in->valid & FATTR_ATIME)
            tv[0] = (in->valid & FATTR_ATIME_NOW) ? (struct timespec){0, UTIME_NOW}
                                                  : (struct timespec){(time_t)in->atime, in->atimensec};
        if (in->valid & FATTR_MTIME)
            tv[1] = (in->valid & FATTR_MTIME_NOW) ? (struct timespec){0, UTIME_NOW}
                                                  : (struct timespec){(time_t)in->mtime, in->mtimensec};
        if (utimensat(proc_fd, name, tv, 0) < 0) error = errno;
    }
    as_self();
    if (error) return reply_error(r, error);
    reply_attr(r, n->fd);
}

static void do_readlink(const struct request *r, struct node *n) {
    char target[4096];
    ssize_t len = readlinkat(n->fd, "", target, sizeof target);
    if (len < 0) return reply_error(r, errno);
    reply(r, 0, target, (size_t)len);
}

/* Make `name` in `parent` (by `make`, as the caller) and answer with its entry. */
static void made(const struct request *r, struct node *parent, const char *name, int result) {
    int e = errno;
    if (result < 0) {
        as_self();
        return reply_error(r, e);
    }
    reply_entry(r, parent, name); /* still as the caller: the new name is theirs to see */
    as_self();
}

static void do_mknod(const struct request *r, struct node *parent) {
    const struct fuse_mknod_in *in = (const void *)r->arg;
    const char *name = r->arg + sizeof *in;
    if (r->arg_len < sizeof *in || !name_ok(name, r->arg_len - sizeof *in)) return reply_error(r, EINVAL);
    if (!S_ISREG(in->mode)) return reply_error(r, EPERM); /* no FIFO, socket or device: nothing to block on */
    as_caller(r);
    made(r, parent, name, mknodat(parent->fd, name, in->mode, 0));
}

static void do_mkdir(const struct request *r, struct node *parent) {
    const struct fuse_mkdir_in *in = (const void *)r->arg;
    const char *name = r->arg + sizeof *in;
    if (r->arg_len < sizeof *in || !name_ok(name, r->arg_len - sizeof *in)) return reply_error(r, EINVAL);
    as_caller(r);
    made(r, parent, name, mkdirat(parent->fd, name, in->mode & 07777));
}

static void do_symlink(const struct request *r, struct node *parent) {
    const char *name = r->arg, *target = memchr(r->arg, 0, r->arg_len);
    if (!target || !name_ok(name, r->arg_len)) return reply_error(r, EINVAL);
    target++;
    if (strnlen(target, r->arg_len - (size_t)(target - r->arg)) >= r->arg_len - (size_t)(target - r->arg))
        return reply_error(r, EINVAL);
    as_caller(r);
    made(r, parent, name, symlinkat(target, parent->fd, name));
}

static void do_unlink(const struct request *r, struct node *parent, int flags) {
    if (!name_ok(r->arg, r->arg_len)) return reply_error(r, EINVAL);
    as_caller(r);
    int result = unlinkat(parent->fd, r->arg, flags), e = errno;
    as_self();
    reply_error(r, result < 0 ? e : 0);
}

static void do_rename(const struct request *r, struct node *parent, uint64_t newdir, unsigned flags, size_t skip) {
    const char *from = r->arg + skip, *to = memchr(from, 0, r->arg_len - skip);
    if (!to || !name_ok(from, r->arg_len - skip)) return reply_error(r, EINVAL);
    to++;
    if (!name_ok(to, r->arg_len - (size_t)(to - r->arg))) return reply_error(r, EINVAL);
    if (flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE)) return reply_error(r, EINVAL); /* a whiteout is a device */
    as_caller(r);
    int result = renameat2(parent->fd, from, node_of(newdir)->fd, to, flags), e = errno;
    as_self();
    reply_error(r, result < 0 ? e : 0);
}

static void do_link(const struct request *r, struct node *parent) {
    const struct fuse_link_in *in = (const void *)r->arg;
    const char *name = r->arg + sizeof *in;
    if (r->arg_len < sizeof *in || !name_ok(name, r->arg_len - sizeof *in)) return reply_error(r, EINVAL);
    struct node *old = node_of(in->oldnodeid);
    if (old->type != S_IFREG) return reply_error(r, EPERM);
    char from[24];
    proc_name(old, from);
    as_caller(r); /* the kernel's protected_hardlinks judges the caller */
    made(r, parent, name, linkat(proc_fd, from, parent->fd, name, AT_SYMLINK_FOLLOW));
}

/* What the caller's flags ask of the device's file: its access, and what writes must do; never a
 * creation (the node exists) nor a wait on what is at the other end of a name. */
static int file_flags(int flags) {
    /* The kernel's write-back cache reads around partial pages and appends itself. */
    int access = flags & O_ACCMODE;
    if (!passthrough && access == O_WRONLY) access = O_RDWR;
    return access | (flags & (O_SYNC | O_DSYNC)) | O_NONBLOCK | O_CLOEXEC;
}

/* The device's file behind an open: the caller's descriptor (their rights checked by the kernel as it
 * opens), and in passthrough the kernel's backing file for the node, registered once for every open of
 * it (the kernel holds one backing file per inode). */
static int start_handle(const struct request *r, struct node *n, int fd, int flags, struct open_out *out) {
    struct handle *h = calloc(1, sizeof *h);
    if (!h) return ENOMEM;
    *h = (struct handle){.fd = fd, .buffered_fd = -1, .node = n};
    if (!passthrough) {
        /* Every read and write is done directly on the device: the page cache above the layer (the
         * caller's) is the only one, and a read it misses reaches the device. */
        char name[24];
        proc_name(n, name);
        int direct = openat(proc_fd, name, file_flags(flags) | O_DIRECT);
        if (direct >= 0) *h = (struct handle){.fd = direct, .buffered_fd = fd, .node = n};
        out->open_flags = (flags & O_DIRECT) ? FOPEN_DIRECT_IO | FOPEN_PARALLEL_DIRECT_WRITES : FOPEN_KEEP_CACHE;
    }
    pthread_mutex_lock(&nodes_lock);
    if (passthrough && n->backing_id < 0) {
        as_self(); /* registering needs root; the caller's rights were checked as it opened */
        struct backing_map map = {.fd = fd};
        n->backing_id = ioctl(fuse_fd, IOC_BACKING_OPEN, &map);
        as_caller(r);
    }
    int error = passthrough && n->backing_id < 0 ? errno : 0;
    if (!error) n->opened++;
    if (passthrough && !error) {
        out->open_flags = OPEN_PASSTHROUGH;
        out->backing_id = n->backing_id;
    }
    pthread_mutex_unlock(&nodes_lock);
    if (error) {
        if (h->buffered_fd >= 0) close(h->fd); /* the caller's descriptor is the caller's to close */
        free(h);
        return error;
    }
    out->fh = (uint64_t)(uintptr_t)h;
    return 0;
}

static void end_handle(struct handle *h) {
    struct node *n = h->node;
    close(h->fd);
    if (h->buffered_fd >= 0) close(h->buffered_fd);
    free(h);
    pthread_mutex_lock(&nodes_lock);
    if (--n->opened == 0 && n->backing_id >= 0) {
        uint32_t id = (uint32_t)n->backing_id;
        ioctl(fuse_fd, IOC_BACKING_CLOSE, &id);
        n->backing_id = -1;
    }
    int gone = n->opened == 0 && n->lookups == 0;
    pthread_mutex_unlock(&nodes_lock);
    if (gone) forget(id_of(n), 0);
}

static void do_open(const struct request *r, struct node *n) {
    const struct fuse_open_in *in = (const void *)r->arg;
    if (n->type != S_IFREG) return reply_error(r, n->type == S_IFDIR ? EISDIR : EPERM);
    char name[24];
    proc_name(n, name);
    as_caller(r);
    int fd = openat(proc_fd, name, file_flags((int)in->flags));
    struct open_out out = {0};
    int error = fd < 0 ? errno : start_handle(r, n, fd, (int)in->flags, &out);
    as_self();
    if (error) {
        if (fd >= 0) close(fd);
        return reply_error(r, error);
    }
    reply(r, 0, &out, sizeof out);
}

static void do_create(const struct request *r, struct node *parent) {
    const struct fuse_create_in *in = (const void *)r->arg;
    const char *name = r->arg + sizeof *in;
    if (r->arg_len < sizeof *in || !name_ok(name, r->arg_len - sizeof *in)) return reply_error(r, EINVAL);
    as_caller(r);
    /* O_NOFOLLOW: a link there is not followed; O_NONBLOCK: a FIFO there is not waited on (and refused). */
    int fd = openat(parent->fd, name, file_flags((int)in->flags) | O_CREAT | O_NOFOLLOW | (int)(in->flags & O_EXCL),
                    in->mode & 07777);
    struct stat st;
    struct node *n = NULL;
    int error = fd < 0 ? errno : 0;
    if (!error) {
        struct stat opened;
        n = look_up(parent, name, &st);
        if (!n) error = errno;
        else if (fstat(fd, &opened) < 0 || opened.st_ino != st.st_ino || !S_ISREG(st.st_mode)) error = EPERM;
    }
    struct { struct fuse_entry_out entry; struct open_out open; } out = {0};
    if (!error) error = start_handle(r, n, fd, (int)in->flags, &out.open);
    as_self();
    if (error) {
        if (fd >= 0) close(fd);
        if (n) forget(id_of(n), 1);
        return reply_error(r, error);
    }
    fill_entry(&out.entry, n, &st);
    reply(r, 0, &out, sizeof out);
}

static int direct_fits(size_t size, uint64_t off) { return size % 512 == 0 && off % 512 == 0; }

/* Per thread: the buffer the thread reads its requests into, aligned as direct IO asks. Once a request's
 * arguments are copied out, its data goes there too: one buffer a thread, not two. */
static __thread char *data_buffer;

static void do_read(const struct request *r) {
    const struct fuse_read_in in = *(const struct fuse_read_in *)(const void *)r->arg;
    struct handle *h = (struct handle *)(uintptr_t)in.fh;
    size_t size = in.size > MAX_WRITE ? MAX_WRITE : in.size;
    ssize_t n = direct_fits(size, in.offset) ? pread(h->fd, data_buffer, size, (off_t)in.offset) : -1;
    if (n < 0) n = pread(h->buffered_fd >= 0 ? h->buffered_fd : h->fd, data_buffer, size, (off_t)in.offset);
    if (n < 0) return reply_error(r, errno);
    hold(&read_delay);
    reply(r, 0, data_buffer, (size_t)n);
}

static void do_write(const struct request *r) {
    const struct fuse_write_in in = *(const struct fuse_write_in *)(const void *)r->arg;
    struct handle *h = (struct handle *)(uintptr_t)in.fh;
    size_t size = in.size;
    if (size > r->arg_len - sizeof in) return reply_error(r, EINVAL);
    const char *data = memmove(data_buffer, r->arg + sizeof in, size); /* to the buffer's aligned start */
    ssize_t n = direct_fits(size, in.offset) ? pwrite(h->fd, data, size, (off_t)in.offset) : -1;
    if (n < 0 && h->buffered_fd >= 0) {
        /* What the device cannot take directly still reaches it before the write returns. */
        n = pwrite(h->buffered_fd, data, size, (off_t)in.offset);
        if (n > 0 && sync_file_range(h->buffered_fd, (off_t)in.offset, n, SYNC_FILE_RANGE_WAIT_BEFORE |
                                     SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER) < 0)
            n = -1;
    }
    if (n < 0) return reply_error(r, errno);
    hold(&write_delay);
    struct fuse_write_out out = {.size = (uint32_t)n};
    reply(r, 0, &out, sizeof out);
}

static void do_fsync(const struct request *r, int fd, uint32_t fsync_flags) {
    int result = (fsync_flags & FUSE_FSYNC_FDATASYNC) ? fdatasync(fd) : fsync(fd);
    if (result < 0) return reply_error(r, errno);
    hold(&flush_delay);
    reply_error(r, 0);
}

static void do_statfs(const struct request *r) {
    struct statvfs s;
    if (fstatvfs(statfs_fd, &s) < 0) return reply_error(r, errno);
    struct fuse_statfs_out out = {.st = {.blocks = s.f_blocks, .bfree = s.f_bfree, .bavail = s.f_bavail, .files = s.f_files,
                                         .ffree = s.f_ffree, .bsize = (uint32_t)s.f_bsize, .namelen = (uint32_t)s.f_namemax,
                                         .frsize = (uint32_t)s.f_frsize}};
    reply(r, 0, &out, sizeof out);
}

struct folder {
    DIR *dir;
};

static void do_opendir(const struct request *r, struct node *n) {
    if (n->type != S_IFDIR) return reply_error(r, ENOTDIR);
    char name[24];
    proc_name(n, name);
    as_caller(r);
    int fd = openat(proc_fd, name, O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_CLOEXEC), e = errno;
    as_self();
    if (fd < 0) return reply_error(r, e);
    DIR *dir = fdopendir(fd);
    if (!dir) {
        e = errno;
        close(fd);
        return reply_error(r, e);
    }
    struct open_out out = {.fh = (uint64_t)(uintptr_t)dir};
    reply(r, 0, &out, sizeof out);
}

static void do_readdir(const struct request *r) {
    const struct fuse_read_in in = *(const struct fuse_read_in *)(const void *)r->arg;
    DIR *dir = (DIR *)(uintptr_t)in.fh;
    size_t size = in.size > MAX_WRITE ? MAX_WRITE : in.size, used = 0;
    if (in.offset == 0) rewinddir(dir);
    else seekdir(dir, (long)in.offset);
    struct dirent *e;
    while ((errno = 0, e = readdir(dir)) != NULL) {
        size_t len = strlen(e->d_name), rec = FUSE_DIRENT_ALIGN(FUSE_NAME_OFFSET + len);
        if (used + rec > size) break;
        struct fuse_dirent *d = (struct fuse_dirent *)(data_buffer + used);
        *d = (struct fuse_dirent){.ino = e->d_ino, .off = (uint64_t)telldir(dir), .namelen = (uint32_t)len, .type = e->d_type};
        memcpy(d->name, e->d_name, len);
        memset(d->name + len, 0, rec - FUSE_NAME_OFFSET - len);
        used += rec;
    }
    reply(r, 0, data_buffer, used);
}

/* -- the loop ---------------------------------------------------------------------------------------- */

/* Requests no caller's identity is asked for: the kernel's own bookkeeping. */
static int kernels_own(uint32_t opcode) {
    return opcode == FUSE_FORGET || opcode == FUSE_BATCH_FORGET || opcode == FUSE_INTERRUPT || opcode == FUSE_RELEASE ||
           opcode == FUSE_RELEASEDIR || opcode == FUSE_DESTROY || opcode == FUSE_INIT;
}

static void handle(const struct request *r) {
    const struct fuse_in_header *in = r->in;
    if (!kernels_own(in->opcode) && !allowed_uid(in->uid)) return reply_error(r, EACCES);
    struct node *n = node_of(in->nodeid);
    switch (in->opcode) {
    case FUSE_LOOKUP: return do_lookup(r, n);
    case FUSE_FORGET: return forget(in->nodeid, ((const struct fuse_forget_in *)(const void *)r->arg)->nlookup);
    case FUSE_BATCH_FORGET: {
        const struct fuse_batch_forget_in *b = (const void *)r->arg;
        const struct fuse_forget_one *one = (const void *)(r->arg + sizeof *b);
        for (uint32_t i = 0; i < b->count && sizeof *b + (i + 1) * sizeof *one <= r->arg_len; i++)
            forget(one[i].nodeid, one[i].nlookup);
        return;
    }
    case FUSE_GETATTR: return do_getattr(r, n);
    case FUSE_SETATTR: return do_setattr(r, n);
    case FUSE_READLINK: return do_readlink(r, n);
    case FUSE_SYMLINK: return do_symlink(r, n);
    case FUSE_MKNOD: return do_mknod(r, n);
    case FUSE_MKDIR: return do_mkdir(r, n);
    case FUSE_UNLINK: return do_unlink(r, n, 0);
    case FUSE_RMDIR: return do_unlink(r, n, AT_REMOVEDIR);
    case FUSE_RENAME: return do_rename(r, n, ((const struct fuse_rename_in *)(const void *)r->arg)->newdir, 0,
                                       sizeof(struct fuse_rename_in));
    case FUSE_RENAME2: {
        const struct fuse_rename2_in *in2 = (const void *)r->arg;
        return do_rename(r, n, in2->newdir, in2->flags, sizeof *in2);
    }
    case FUSE_LINK: return do_link(r, n);
    case FUSE_OPEN: return do_open(r, n);
    case FUSE_CREATE: return do_create(r, n);
    case FUSE_READ: return do_read(r);
    case FUSE_WRITE: return do_write(r);
    case FUSE_STATFS: return do_statfs(r);
    case FUSE_FLUSH: return reply_error(r, 0); /* a close, not a cache flush: the data is in the files already */
    case FUSE_RELEASE:
        end_handle((struct handle *)(uintptr_t)((const struct fuse_release_in *)(const void *)r->arg)->fh);
        return reply_error(r, 0);
    case FUSE_FSYNC: {
        const struct fuse_fsync_in *f = (const void *)r->arg;
        return do_fsync(r, ((struct handle *)(uintptr_t)f->fh)->fd, f->fsync_flags);
    }
    case FUSE_OPENDIR: return do_opendir(r, n);
    case FUSE_READDIR: return do_readdir(r);
    case FUSE_RELEASEDIR:
        closedir((DIR *)(uintptr_t)((const struct fuse_release_in *)(const void *)r->arg)->fh);
        return reply_error(r, 0);
    case FUSE_FSYNCDIR: {
        const struct fuse_fsync_in *f = (const void *)r->arg;
        return do_fsync(r, dirfd((DIR *)(uintptr_t)f->fh), f->fsync_flags);
    }
    case FUSE_FALLOCATE: {
        const struct fuse_fallocate_in *f = (const void *)r->arg;
        int result = fallocate(((struct handle *)(uintptr_t)f->fh)->fd, (int)f->mode, (off_t)f->offset, (off_t)f->length);
        return reply_error(r, result < 0 ? errno : 0);
    }
    case FUSE_LSEEK: {
        const struct fuse_lseek_in *l = (const void *)r->arg;
        off_t at = lseek(((struct handle *)(uintptr_t)l->fh)->fd, (off_t)l->offset, (int)l->whence);
        if (at < 0) return reply_error(r, errno);
        struct fuse_lseek_out out = {.offset = (uint64_t)at};
        return reply(r, 0, &out, sizeof out);
    }
    case FUSE_INTERRUPT: return; /* every operation here ends on its own */
    case FUSE_DESTROY: reply_error(r, 0); exit(0);
    default: return reply_error(r, ENOSYS); /* xattrs, locks, ioctls, tmpfiles: refused */
    }
}

static void *serve(void *unused) {
    (void)unused;
    prctl(PR_SET_TIMERSLACK, 1UL); /* a sleeping thread otherwise wakes up to 50 us late */
    char *buffer = NULL;
    if (posix_memalign((void **)&buffer, ALIGN, BUFFER)) {
        fprintf(stderr, "storlab-delayfs: out of memory\n");
        exit(1);
    }
    data_buffer = buffer;
    for (;;) {
        ssize_t got = read(fuse_fd, buffer, BUFFER);
        if (got < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == ENOENT) continue;
            if (errno == ENODEV) exit(0); /* unmounted */
            perror("storlab-delayfs: /dev/fuse");
            exit(1);
        }
        if ((size_t)got < sizeof(struct fuse_in_header)) continue;
        struct fuse_in_header header; /* its own copy: a read's data goes over the buffer */
        memcpy(&header, buffer, sizeof header);
        struct request r = {&header, buffer + sizeof header, (size_t)got - sizeof header};
        handle(&r);
    }
    return NULL;
}

/* The first request: what the kernel and the layer agree on. Passthrough where reads and writes add
 * nothing and the kernel offers it; else the kernel's write-back cache (buffered writes reach the layer,
 * and its write latency, when written back or at fsync, as they reach a device). */
static void init(void) {
    char *buffer = malloc(BUFFER);
    ssize_t got;
    while ((got = read(fuse_fd, buffer, BUFFER)) < 0 && (errno == EINTR || errno == EAGAIN)) {}
    const struct fuse_in_header *h = (const void *)buffer;
    const struct fuse_init_in *in = (const void *)(buffer + sizeof *h);
    if (got < (ssize_t)(sizeof *h + 16) || h->opcode != FUSE_INIT || in->major != 7 || in->minor < 31) {
        fprintf(stderr, "storlab-delayfs: the kernel's FUSE protocol is too old (7.31 needed)\n");
        exit(1);
    }
    uint64_t offered = in->flags | ((in->minor >= 36 && (in->flags & FUSE_INIT_EXT)) ? (uint64_t)in->flags2 << 32 : 0);
    uint64_t want = FUSE_ASYNC_READ | FUSE_BIG_WRITES | FUSE_PARALLEL_DIROPS | FUSE_MAX_PAGES | FUSE_ASYNC_DIO | FUSE_INIT_EXT;
    int delays_io = read_delay.p50_ns > 0 || write_delay.p50_ns > 0;
    if (!delays_io && (offered & INIT_PASSTHROUGH)) want |= INIT_PASSTHROUGH;
    else want |= FUSE_WRITEBACK_CACHE;
    want &= offered;
    passthrough = (want & INIT_PASSTHROUGH) != 0;
    struct init_out out = {.major = 7, .minor = PROTOCOL_MINOR, .max_readahead = in->max_readahead,
                           .flags = (uint32_t)want, .flags2 = (uint32_t)(want >> 32), .max_background = THREADS,
                           .congestion_threshold = THREADS * 3 / 4, .max_write = MAX_WRITE, .time_gran = 1,
                           .max_pages = MAX_WRITE / 4096, .max_stack_depth = passthrough ? 1 : 0};
    struct request r = {(struct fuse_in_header *)(void *)buffer, NULL, 0};
    reply(&r, 0, &out, sizeof out);
    free(buffer);
    printf("ready %s %lld\n", passthrough ? "passthrough" : "cached", wake_ns); /* the wake-up it measured, ns */
    fflush(stdout);
}

/* The layer ends with the storlab that started it. The kernel's parent-death signal would do it, but
 * the kernel clears it at every change of the filesystem uid, which each call here makes: a thread
 * waits on the parent's pidfd instead. */
static void *watch_parent(void *arg) {
    struct pollfd parent = {.fd = (int)(intptr_t)arg, .events = POLLIN};
    while (poll(&parent, 1, -1) < 0 && errno == EINTR) {}
    _exit(1);
    return NULL;
}

static void end_with_parent(void) {
    int fd = (int)syscall(SYS_pidfd_open, getppid(), 0);
    pthread_t t;
    if (getppid() == 1 || fd < 0 || pthread_create(&t, NULL, watch_parent, (void *)(intptr_t)fd)) {
        fprintf(stderr, "storlab-delayfs: cannot watch the process that started it\n");
        exit(1);
    }
}

static int usage(void) {
    fprintf(stderr, "usage: storlab-delayfs --read MS[/P99] --write MS[/P99] --flush MS[/P99] --device DEVICE "
                    "--allow UID[,UID...] SOURCE MOUNTPOINT\n");
    return 2;
}

static int parse_allowed(const char *text) {
    char *end;
    for (;;) {
        errno = 0;
        long uid = strtol(text, &end, 10);
        if (end == text || errno || uid < 0 || allowed_count == MAX_ALLOWED) return -1;
        allowed[allowed_count++] = (uid_t)uid;
        if (*end == 0) return 0;
        if (*end != ',') return -1;
        text = end + 1;
    }
}

int main(int argc, char **argv) {
    const char *keys[] = {"--read", "--write", "--flush"};
    struct delay *delays[] = {&read_delay, &write_delay, &flush_delay};
    if (argc != 13) return usage();
    for (int i = 0; i < 3; i++) {
        if (strcmp(argv[1 + 2 * i], keys[i]) || parse_delay(argv[2 + 2 * i], delays[i])) return usage();
    }
    const char *device = argv[8];
    if (strcmp(argv[7], "--device") || strncmp(device, "/dev/", 5) || strpbrk(device, ",\\ ")) return usage();
    if (strcmp(argv[9], "--allow") || parse_allowed(argv[10])) return usage();
    const char *source = argv[11], *point = argv[12];
    /* Only the caller's own identity counts: none of root's supplementary groups lends it a right. */
    if (setgroups(0, NULL) < 0) {
        perror("storlab-delayfs: setgroups");
        return 1;
    }
    root_node.fd = open(source, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    statfs_fd = open(source, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    proc_fd = open("/proc/self/fd", O_PATH | O_DIRECTORY | O_CLOEXEC);
    struct stat st;
    if (root_node.fd < 0 || statfs_fd < 0 || proc_fd < 0 || fstat(root_node.fd, &st) < 0) {
        perror(source);
        return 1;
    }
    root_node = (struct node){.fd = root_node.fd, .dev = st.st_dev, .ino = st.st_ino, .type = S_IFDIR, .lookups = 1,
                              .backing_id = -1};
    source_dev = st.st_dev;
    struct rlimit files; /* two descriptors for each file a server holds open */
    if (getrlimit(RLIMIT_NOFILE, &files) == 0) {
        files.rlim_cur = files.rlim_max;
        setrlimit(RLIMIT_NOFILE, &files);
    }
    prctl(PR_SET_TIMERSLACK, 1UL);
    end_with_parent();
    calibrate();
    fuse_fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
    if (fuse_fd < 0) {
        perror("/dev/fuse");
        return 1;
    }
    char options[160];
    snprintf(options, sizeof options, "fd=%d,rootmode=%o,user_id=0,group_id=0,allow_other,default_permissions,max_read=%d",
             fuse_fd, S_IFDIR, MAX_WRITE);
    if (mount(device, point, "fuse.delayfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options) < 0) {
        perror(point);
        return 1;
    }
    init();
    umask(0);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    for (int i = 1; i < THREADS; i++) {
        pthread_t t;
        if (pthread_create(&t, &attr, serve, NULL)) break;
    }
    serve(NULL);
    return 0;
}
