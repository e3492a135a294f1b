/* storlab-delayfs: the layer that gives a device placement the latency its file declares, on hosts
 * without device-mapper's delay target. It serves one directory (the placement's loop-device mount)
 * at a mount point, doing each operation on the real files and then sleeping the declared time:
 * reads and writes by direction, and the flush that fsync/fdatasync send. Many requests sleep at once
 * (one thread each), so a queue depth of 8 at 2 ms gives about 4,000 IOs a second, not 500.
 *
 *   storlab-delayfs --read SPEC --write SPEC --flush SPEC --device DEVICE SOURCE MOUNTPOINT
 *
 * DEVICE names the mount's source (/dev/loop3): what asks which disk a path sits on finds the device
 * behind the layer. SPEC is milliseconds: "2" (fixed) or "1/4" (p50/p99: drawn per IO from the lognormal through both).
 * storlab runs it as root with allow_other and default_permissions (the kernel checks each caller's
 * rights against the files' modes); every operation is done with the caller's filesystem uid and gid,
 * so the layer never acts with more power than the process that asked, and files are created as
 * theirs. Opens resolve beneath SOURCE only (openat2 RESOLVE_BENEATH). */
#define FUSE_USE_VERSION 31
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <linux/openat2.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/fsuid.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define Z99 2.3263478740408408 /* the standard normal's 99th percentile */
#define ALIGN 4096

struct delay {
    double p50_ns, sigma; /* sigma 0: fixed */
};

static struct delay read_delay, write_delay, flush_delay;
static int source_fd = -1;

static int parse_delay(const char *text, struct delay *d) {
    char *end;
    double p50 = strtod(text, &end), p99 = p50;
    if (*end == '/') p99 = strtod(end + 1, &end);
    if (*end || end == text || p50 < 0 || p99 < p50 || (p99 > p50 && p50 <= 0)) return -1;
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

/* After the real operation: the declared time comes on top of the device's own. Timer slack is
 * lowered once per thread (a sleeping thread otherwise wakes up to 50 us late), and every thread wakes
 * early by the lateness the layer has seen (a moving average over all of them: a light load spreads
 * its requests over many threads): a VM's timer wakes a sleeper some tens of microseconds late, which
 * would otherwise be added to every IO. */
static __thread int slack_set;
static long long late_ns; /* shared; read and written whole (relaxed atomics): a lost update only slows the average */

static void hold(const struct delay *d) {
    if (d->p50_ns <= 0) return;
    if (!slack_set) {
        prctl(PR_SET_TIMERSLACK, 1UL);
        slack_set = 1;
    }
    double want = draw_ns(d), late_now = (double)__atomic_load_n(&late_ns, __ATOMIC_RELAXED);
    double early = late_now < want / 2 ? late_now : want / 2;
    struct timespec t, woke;
    clock_gettime(CLOCK_MONOTONIC, &t);
    long long ns = (long long)t.tv_nsec + (long long)(want - early);
    t.tv_sec += ns / 1000000000LL;
    t.tv_nsec = ns % 1000000000LL;
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) == EINTR) {}
    clock_gettime(CLOCK_MONOTONIC, &woke);
    double late = (double)(woke.tv_sec - t.tv_sec) * 1e9 + (double)(woke.tv_nsec - t.tv_nsec);
    __atomic_store_n(&late_ns, (long long)(late_now + (late - late_now) / 16), __ATOMIC_RELAXED);
}

/* Each operation runs with the caller's filesystem identity, restored to root's after. */
struct as_caller { uid_t uid; gid_t gid; };

static struct as_caller become_caller(void) {
    struct fuse_context *c = fuse_get_context();
    struct as_caller was = {(uid_t)setfsuid(-1), (gid_t)setfsgid(-1)};
    setfsgid(c->gid);
    setfsuid(c->uid);
    return was;
}

static void become_self(struct as_caller was) {
    setfsuid(was.uid);
    setfsgid(was.gid);
}

#define AS_CALLER(expr) ({ struct as_caller _w = become_caller(); int _r = (expr); int _e = errno; \
                           become_self(_w); errno = _e; _r; })

static const char *rel(const char *path) { return path[1] ? path + 1 : "."; }

static int open_beneath(const char *path, int flags, mode_t mode) {
    struct open_how how = {.flags = (unsigned long long)flags | O_CLOEXEC, .mode = (flags & O_CREAT) ? (mode & 07777) : 0,
                           .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
    return (int)syscall(SYS_openat2, source_fd, rel(path), &how, sizeof how);
}

/* An open file: `fd`, opened O_DIRECT, and a second, buffered descriptor for the requests whose offset
 * or length the device cannot take directly (FUSE passes any alignment: the end of a file, a caller's
 * own O_DIRECT IO). */
struct handle { int fd, buffered_fd; };

#define H(fi) ((struct handle *)(uintptr_t)(fi)->fh)

static int fs_getattr(const char *path, struct stat *st, struct fuse_file_info *fi) {
    int r = fi ? fstat(H(fi)->fd, st) : AS_CALLER(fstatat(source_fd, rel(path), st, AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH));
    return r < 0 ? -errno : 0;
}

static int fs_readlink(const char *path, char *buf, size_t size) {
    ssize_t n = AS_CALLER((int)readlinkat(source_fd, rel(path), buf, size - 1));
    if (n < 0) return -errno;
    buf[n] = 0;
    return 0;
}

static int fs_mkdir(const char *path, mode_t mode) { return AS_CALLER(mkdirat(source_fd, rel(path), mode)) < 0 ? -errno : 0; }
static int fs_unlink(const char *path) { return AS_CALLER(unlinkat(source_fd, rel(path), 0)) < 0 ? -errno : 0; }
static int fs_rmdir(const char *path) { return AS_CALLER(unlinkat(source_fd, rel(path), AT_REMOVEDIR)) < 0 ? -errno : 0; }
static int fs_symlink(const char *to, const char *path) { return AS_CALLER(symlinkat(to, source_fd, rel(path))) < 0 ? -errno : 0; }

static int fs_mknod(const char *path, mode_t mode, dev_t dev) {
    if (!S_ISFIFO(mode) && !S_ISSOCK(mode) && !S_ISREG(mode)) return -EPERM; /* nodev: no device files */
    return AS_CALLER(mknodat(source_fd, rel(path), mode, dev)) < 0 ? -errno : 0;
}

static int fs_rename(const char *from, const char *to, unsigned int flags) {
    return AS_CALLER((int)syscall(SYS_renameat2, source_fd, rel(from), source_fd, rel(to), flags)) < 0 ? -errno : 0;
}

static int fs_link(const char *from, const char *to) {
    return AS_CALLER(linkat(source_fd, rel(from), source_fd, rel(to), 0)) < 0 ? -errno : 0;
}

static int fs_chmod(const char *path, mode_t mode, struct fuse_file_info *fi) {
    int r = fi ? AS_CALLER(fchmod(H(fi)->fd, mode)) : AS_CALLER(fchmodat(source_fd, rel(path), mode, 0));
    return r < 0 ? -errno : 0;
}

static int fs_chown(const char *path, uid_t uid, gid_t gid, struct fuse_file_info *fi) {
    int r = fi ? AS_CALLER(fchown(H(fi)->fd, uid, gid))
               : AS_CALLER(fchownat(source_fd, rel(path), uid, gid, AT_SYMLINK_NOFOLLOW));
    return r < 0 ? -errno : 0;
}

static int fs_truncate(const char *path, off_t size, struct fuse_file_info *fi) {
    if (fi) return ftruncate(H(fi)->fd, size) < 0 ? -errno : 0;
    int fd = AS_CALLER(open_beneath(path, O_WRONLY | O_NOFOLLOW, 0));
    if (fd < 0) return -errno;
    int r = ftruncate(fd, size) < 0 ? -errno : 0;
    close(fd);
    return r;
}

static int fs_utimens(const char *path, const struct timespec tv[2], struct fuse_file_info *fi) {
    int r = fi ? AS_CALLER(futimens(H(fi)->fd, tv)) : AS_CALLER(utimensat(source_fd, rel(path), tv, AT_SYMLINK_NOFOLLOW));
    return r < 0 ? -errno : 0;
}

static int open_handle(const char *path, int flags, mode_t mode, struct fuse_file_info *fi) {
    /* The kernel's write-back cache reads around partial pages and appends itself. */
    if ((flags & O_ACCMODE) == O_WRONLY) flags = (flags & ~O_ACCMODE) | O_RDWR;
    flags &= ~O_APPEND;
    struct handle *h = malloc(sizeof *h);
    if (!h) return -ENOMEM;
    /* Every file is read and written directly on the device: the page cache above the layer (charged to
     * the caller's memory group, emptied when storlab evicts the instance's files) is the only one, and
     * a read it misses reaches the device, as it would without the layer. */
    h->fd = AS_CALLER(open_beneath(path, flags | O_DIRECT, mode));
    if (h->fd < 0 && errno == EINVAL) h->fd = AS_CALLER(open_beneath(path, flags & ~O_DIRECT, mode));
    if (h->fd < 0) {
        int e = errno;
        free(h);
        return -e;
    }
    h->buffered_fd = AS_CALLER(open_beneath(path, flags & ~(O_DIRECT | O_CREAT | O_EXCL | O_TRUNC), 0));
    if (h->buffered_fd < 0) {
        int e = errno;
        close(h->fd);
        free(h);
        return -e;
    }
    if (flags & O_DIRECT) fi->direct_io = 1; /* no page cache between the caller and the device, as it asked */
    fi->fh = (uintptr_t)h;
    return 0;
}

static int fs_open(const char *path, struct fuse_file_info *fi) { return open_handle(path, fi->flags, 0, fi); }
static int fs_create(const char *path, mode_t mode, struct fuse_file_info *fi) { return open_handle(path, fi->flags | O_CREAT, mode, fi); }

static int direct_fits(size_t size, off_t off) { return size % 512 == 0 && off % 512 == 0; }

static int fs_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi) {
    (void)path;
    struct handle *h = H(fi);
    ssize_t n;
    void *aligned = NULL;
    if (posix_memalign(&aligned, ALIGN, size ? size : 1)) return -ENOMEM;
    n = direct_fits(size, off) ? pread(h->fd, aligned, size, off) : -1;
    if (n < 0) n = pread(h->buffered_fd, aligned, size, off);
    if (n > 0) memcpy(buf, aligned, (size_t)n);
    int e = errno;
    free(aligned);
    errno = e;
    if (n < 0) return -errno;
    hold(&read_delay);
    return (int)n;
}

static int fs_write(const char *path, const char *buf, size_t size, off_t off, struct fuse_file_info *fi) {
    (void)path;
    struct handle *h = H(fi);
    ssize_t n;
    void *aligned = NULL;
    if (posix_memalign(&aligned, ALIGN, size ? size : 1)) return -ENOMEM;
    memcpy(aligned, buf, size);
    n = direct_fits(size, off) ? pwrite(h->fd, aligned, size, off) : -1;
    if (n < 0) {
        /* What the device cannot take directly still reaches it before the write returns. */
        n = pwrite(h->buffered_fd, buf, size, off);
        if (n > 0 && sync_file_range(h->buffered_fd, off, n, SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                                     SYNC_FILE_RANGE_WAIT_AFTER) < 0) n = -1;
    }
    int e = errno;
    free(aligned);
    errno = e;
    if (n < 0) return -errno;
    hold(&write_delay);
    return (int)n;
}

static int fs_statfs(const char *path, struct statvfs *st) {
    (void)path;
    return fstatvfs(source_fd, st) < 0 ? -errno : 0;
}

static int fs_flush(const char *path, struct fuse_file_info *fi) {
    (void)path; (void)fi;
    return 0; /* a close, not a cache flush: the data is in the files already */
}

static int fs_release(const char *path, struct fuse_file_info *fi) {
    (void)path;
    struct handle *h = H(fi);
    close(h->fd);
    close(h->buffered_fd);
    free(h);
    return 0;
}

static int fs_fsync(const char *path, int datasync, struct fuse_file_info *fi) {
    (void)path;
    int r = datasync ? fdatasync(H(fi)->fd) : fsync(H(fi)->fd);
    if (r < 0) return -errno;
    hold(&flush_delay);
    return 0;
}

static int fs_fallocate(const char *path, int mode, off_t off, off_t len, struct fuse_file_info *fi) {
    (void)path;
    return fallocate(H(fi)->fd, mode, off, len) < 0 ? -errno : 0;
}

static int fs_opendir(const char *path, struct fuse_file_info *fi) {
    int fd = AS_CALLER(open_beneath(path, O_RDONLY | O_DIRECTORY, 0));
    if (fd < 0) return -errno;
    DIR *d = fdopendir(fd);
    if (!d) {
        int e = errno;
        close(fd);
        return -e;
    }
    fi->fh = (uintptr_t)d;
    return 0;
}

static int fs_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off, struct fuse_file_info *fi,
                      enum fuse_readdir_flags flags) {
    (void)path; (void)flags;
    DIR *d = (DIR *)(uintptr_t)fi->fh;
    seekdir(d, off);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        struct stat st = {.st_ino = e->d_ino, .st_mode = (mode_t)DTTOIF(e->d_type)};
        if (fill(buf, e->d_name, &st, telldir(d), 0)) break;
    }
    return 0;
}

static int fs_releasedir(const char *path, struct fuse_file_info *fi) {
    (void)path;
    closedir((DIR *)(uintptr_t)fi->fh);
    return 0;
}

static int fs_fsyncdir(const char *path, int datasync, struct fuse_file_info *fi) {
    (void)path; (void)datasync;
    if (fsync(dirfd((DIR *)(uintptr_t)fi->fh)) < 0) return -errno;
    hold(&flush_delay);
    return 0;
}

static int fs_access(const char *path, int mask) {
    return AS_CALLER(faccessat(source_fd, rel(path), mask, AT_SYMLINK_NOFOLLOW)) < 0 ? -errno : 0;
}

static off_t fs_lseek(const char *path, off_t off, int whence, struct fuse_file_info *fi) {
    (void)path;
    off_t r = lseek(H(fi)->fd, off, whence);
    return r < 0 ? -errno : r;
}

static void *fs_init(struct fuse_conn_info *conn, struct fuse_config *cfg) {
    /* Buffered writes wait in the kernel's page cache and reach the layer at write-back or fsync, as
     * they reach a device: a write() is not an IO. */
    if (conn->capable & FUSE_CAP_WRITEBACK_CACHE) conn->want |= FUSE_CAP_WRITEBACK_CACHE;
    if (conn->capable & FUSE_CAP_ASYNC_DIO) conn->want |= FUSE_CAP_ASYNC_DIO;
    if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
    conn->max_write = 1 << 20;
    cfg->use_ino = 1;
    cfg->hard_remove = 1; /* an unlinked file still open stays readable without a hidden name */
    cfg->nullpath_ok = 1;
    return NULL;
}

static const struct fuse_operations ops = {
    .init = fs_init, .getattr = fs_getattr, .readlink = fs_readlink, .mknod = fs_mknod, .mkdir = fs_mkdir,
    .unlink = fs_unlink, .rmdir = fs_rmdir, .symlink = fs_symlink, .rename = fs_rename, .link = fs_link,
    .chmod = fs_chmod, .chown = fs_chown, .truncate = fs_truncate, .utimens = fs_utimens, .open = fs_open,
    .create = fs_create, .read = fs_read, .write = fs_write, .statfs = fs_statfs, .flush = fs_flush,
    .release = fs_release, .fsync = fs_fsync, .fallocate = fs_fallocate, .opendir = fs_opendir,
    .readdir = fs_readdir, .releasedir = fs_releasedir, .fsyncdir = fs_fsyncdir, .access = fs_access,
    .lseek = fs_lseek,
};

static int usage(void) {
    fprintf(stderr, "usage: storlab-delayfs --read MS[/P99] --write MS[/P99] --flush MS[/P99] --device DEVICE "
                    "SOURCE MOUNTPOINT\n");
    return 2;
}

int main(int argc, char **argv) {
    const char *keys[] = {"--read", "--write", "--flush"};
    struct delay *delays[] = {&read_delay, &write_delay, &flush_delay};
    if (argc != 11) return usage();
    for (int i = 0; i < 3; i++) {
        if (strcmp(argv[1 + 2 * i], keys[i]) || parse_delay(argv[2 + 2 * i], delays[i])) return usage();
    }
    const char *device = argv[8];
    if (strcmp(argv[7], "--device") || strncmp(device, "/dev/", 5) || strpbrk(device, ",\\ ")) return usage();
    source_fd = open(argv[9], O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (source_fd < 0) {
        perror(argv[9]);
        return 1;
    }
    prctl(PR_SET_TIMERSLACK, 1UL); /* inherited by the threads that serve requests */
    struct rlimit files; /* two descriptors for each file a server holds open */
    if (getrlimit(RLIMIT_NOFILE, &files) == 0) {
        files.rlim_cur = files.rlim_max;
        setrlimit(RLIMIT_NOFILE, &files);
    }
    char options[256];
    snprintf(options, sizeof options, "allow_other,default_permissions,fsname=%s,subtype=delayfs,max_threads=64,"
             "nosuid,nodev,noexec", device);
    char *fuse_argv[] = {argv[0], "-f", "-o", options, argv[10], NULL};
    umask(0);
    return fuse_main(5, fuse_argv, &ops, NULL);
}
